"""What Ray gives and costs: many runs over actors, CPU-heavy tools over workers, the
per-call price of a Ray tool. Every figure is a ratio against a baseline measured in the
same run, on the same machine.

- R1, many runs: ``--runs`` runs (10,000 by default) of the plan/execute loop, each one round
  of two 10 ms async tools then the answer (a scripted planner), at most ``--in-flight``
  runs at once per process. ``one process``: every run in this process, in a task group.
  ``ray, 1 actor`` / ``ray, 2 actors``: the same runs through :class:`RayRunPool`
  (each actor hosts up to ``--in-flight`` runs on its own loop). Figures: wall time, runs
  a second, ratio to one process, and the driver's CPU per run (what the driver spends to
  feed the actors and read their outcomes: the figure that bounds one driver).
- R2, CPU-heavy tools: ``--cpu-calls`` calls of a tool doing 50 ms of pure-Python work.
  ``threads``: a sync tool in worker threads, two at once (the GIL lets one run);
  ``ray, 1 worker``: the same as a Ray tool, one call at a time; ``ray, 2 workers``: two
  at a time, on two workers. Figure: wall time and speed-up over threads.
- R3, per call: one trivial tool call after another through the runner: in-process
  (``thread=False``) vs as a Ray task, median microseconds a call, asyncio and trio.

The cluster is local (``ray.init(num_cpus=2)``): on a 2-core machine the driver, the actors
and Ray's own processes share the two cores, so R1's actors cannot beat one process there;
its figures are for the per-run cost, from which the docs reason about a real cluster.

Run it with::

    .venv/bin/python benchmarks/bench_ray.py            # 10,000 runs (~minutes on 2 cores)
    .venv/bin/python benchmarks/bench_ray.py --quick    # 2,000 runs, fewer calls
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import anyio
import ray

from toolloop import async_plan_and_execute
from toolloop.ray import LoopJob, RayRunPool, ray_tool
from toolloop.runner import Executor, ToolCommand
from toolloop.testing import ScriptedPlanner
from toolloop.tools import tool

TOOL_SECONDS = 0.01
BURN_MS = 50


async def wait_a_bit(topic: str) -> dict[str, str]:
    """A 10 ms I/O-bound tool.

    Args:
        topic: anything.
    """
    await anyio.sleep(TOOL_SECONDS)
    return {"topic": topic}


PLAN = [
    {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": "a", "tool_name": "wait_a_bit", "tool_kwargs": {"topic": "a"}},
            {"purpose": "b", "tool_name": "wait_a_bit", "tool_kwargs": {"topic": "b"}},
        ],
    }
]


def make_planner(item: Any) -> ScriptedPlanner:
    """The run's planner, made where the run runs (in the actor for Ray)."""
    del item
    return ScriptedPlanner(PLAN, record=False)


def burn(ms: int) -> int:
    """Pure-Python work for ``ms`` milliseconds of one CPU.

    Args:
        ms: milliseconds.
    """
    end = time.thread_time() + ms / 1000
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def nothing(x: int) -> int:
    """Returns x.

    Args:
        x: a number.
    """
    return x


def check(results: list[Any], runs: int) -> None:
    assert len(results) == runs
    for result in results:
        assert [r.success for r in result.done_plans] == [True, True], result


# --- R1 -------------------------------------------------------------------------------------


async def r1_one_process(runs: int, in_flight: int) -> tuple[float, float, list[Any]]:
    limit = anyio.CapacityLimiter(in_flight)
    tools = [wait_a_bit]
    results: list[Any] = []

    async def one(i: int) -> None:
        async with limit:
            results.append(
                await async_plan_and_execute(f"run {i}", tools=tools, planner=make_planner(i))
            )

    cpu, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as group:
        for i in range(runs):
            group.start_soon(one, i)
    return time.perf_counter() - start, time.process_time() - cpu, results


async def r1_ray(runs: int, in_flight: int, actors: int) -> tuple[float, float, list[Any]]:
    job = LoopJob(planner=make_planner, tools=[wait_a_bit])
    async with RayRunPool(
        job, actors=actors, runs_per_actor=in_flight, chunk=64, actor_options={"num_cpus": 1}
    ) as pool:
        await pool.run_all(range(actors * 64))  # warm-up: actors up, code imported
        cpu, start = time.process_time(), time.perf_counter()
        outcomes = [o async for o in pool.map(f"run {i}" for i in range(runs))]
        wall, used = time.perf_counter() - start, time.process_time() - cpu
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok][:3]
    return wall, used, [o.result for o in outcomes]


# --- R2 -------------------------------------------------------------------------------------


async def r2(calls: int, executor: Executor, name: str) -> float:
    commands = [
        ToolCommand(purpose=str(i), tool_name=name, tool_kwargs={"ms": BURN_MS})
        for i in range(calls)
    ]
    start = time.perf_counter()
    records = await executor.run(commands)
    wall = time.perf_counter() - start
    assert all(r.success for r in records), records[0].error
    return wall


# --- R3 -------------------------------------------------------------------------------------


async def r3(executor: Executor, name: str, calls: int) -> float:
    command = ToolCommand(purpose="p", tool_name=name, tool_kwargs={"x": 1})
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        record = await executor.call(command)
        times.append(time.perf_counter() - start)
        assert record.success, record.error
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 runs, fewer calls")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--cpu-calls", type=int, default=None)
    args = parser.parse_args()
    runs = args.runs or (2000 if args.quick else 10_000)
    cpu_calls = args.cpu_calls or (12 if args.quick else 40)
    r3_calls = 100 if args.quick else 300

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local cluster
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        print(f"ray {ray.__version__}, {os.cpu_count()} cores, local cluster num_cpus=2\n")
        print(
            f"R1: {runs} runs, each 2 x {TOOL_SECONDS * 1000:.0f} ms tools, "
            f"{args.in_flight} in flight per process"
        )
        base_wall, base_cpu, results = anyio.run(r1_one_process, runs, args.in_flight)
        check(results, runs)
        rows = [("one process", base_wall, base_cpu)]
        for actors in (1, 2):
            wall, cpu, results = anyio.run(r1_ray, runs, args.in_flight, actors)
            check(results, runs)
            rows.append((f"ray, {actors} actor{'s' if actors > 1 else ''}", wall, cpu))
        print(f"  {'side':<14} {'wall s':>8} {'runs/s':>8} {'x one':>7} {'driver CPU/run':>15}")
        for label, wall, cpu in rows:
            print(
                f"  {label:<14} {wall:8.2f} {runs / wall:8.0f} {wall / base_wall:7.2f} "
                f"{cpu / runs * 1e6:12.0f} us"
            )

        print(f"\nR2: {cpu_calls} calls of {BURN_MS} ms pure-Python work")
        threads = Executor([tool(thread=True)(burn)], concurrency=2)
        ray_burn = ray_tool(num_cpus=1)(burn)
        anyio.run(r2, 2, Executor([ray_burn], concurrency=2), "burn")  # warm two workers
        base = anyio.run(r2, cpu_calls, threads, "burn")
        one = anyio.run(r2, cpu_calls, Executor([ray_burn], concurrency=1), "burn")
        two = anyio.run(r2, cpu_calls, Executor([ray_burn], concurrency=2), "burn")
        ideal = cpu_calls * BURN_MS / 1000
        print(f"  {'side':<16} {'wall s':>8} {'x ideal 1 CPU':>14} {'speed-up':>9}")
        for label, wall in (
            ("threads (GIL)", base),
            ("ray, 1 worker", one),
            ("ray, 2 workers", two),
        ):
            print(f"  {label:<16} {wall:8.2f} {wall / ideal:14.2f} {base / wall:9.2f}")

        print(f"\nR3: one trivial call at a time, {r3_calls} calls, median")
        local = Executor([tool(thread=False)(nothing)])
        remote = Executor([ray_tool(nothing)])
        for backend in ("asyncio", "trio"):
            anyio.run(r3, remote, "nothing", 5, backend=backend)  # warm-up
            a = anyio.run(r3, local, "nothing", r3_calls, backend=backend)
            b = anyio.run(r3, remote, "nothing", r3_calls, backend=backend)
            print(f"  {backend:<8} in-process {a:8.0f} us   ray task {b:8.0f} us   x{b / a:,.0f}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
