"""What the flow engine costs, against the same work written by hand with anyio.

Measures, on each backend, in one run:

a. **Step dispatch**: one execution of 20,000 trivial async steps, two ways: a chain of
   20,000 distinct steps, and a loop (one step and an ``if_`` router, round after round).
   The baseline awaits the same functions in a plain ``for`` loop and keeps the same
   bookkeeping (a trace record with start and end times per step). Reported in µs per step.
b. **Many executions at once**: 10,000 concurrent executions of a 2-step flow, each step
   awaiting ``anyio.sleep(0)`` so that they all overlap, against 10,000 plain tasks doing
   the same two awaits: wall time and executions per second. Memory per execution is the
   ``tracemalloc`` peak over N, measured in a separate pass where every execution waits at a
   gate inside its first step until all N are alive.

Every figure is the median of a few repetitions. Targets: a step ≤ ~25 µs; an execution
under 30 KiB while 10,000 run at once.

Run it with::

    .venv/bin/python benchmarks/bench_flow.py                    # asyncio and trio
    .venv/bin/python benchmarks/bench_flow.py --backend trio --reps 3
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import tracemalloc
from collections.abc import Awaitable, Callable, Coroutine
from importlib import metadata
from pathlib import Path
from time import perf_counter
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio.lowlevel

from toolloop.flow import Context, Flow, Step

STEP_TARGET_US = 25.0
MEMORY_TARGET_KIB = 30.0


# -- the work: trivial steps ------------------------------------------------------------


async def bump(value: int, ctx: Context[dict[str, Any]]) -> int:
    return value + 1


async def nap(value: int, ctx: Context[dict[str, Any]]) -> int:
    await anyio.lowlevel.checkpoint()
    return value + 1


def chain_flow(steps: int) -> Flow[dict[str, Any]]:
    flow: Flow[dict[str, Any]] = Flow("chain")
    point = flow.start
    for i in range(steps):
        point = point.to(Step(bump, name=f"bump {i}"))
    point.end()
    flow.validate()
    return flow


def loop_flow(rounds: int) -> Flow[dict[str, Any]]:
    def done(value: int) -> int:
        return value

    flow: Flow[dict[str, Any]] = Flow("loop")
    flow.start.to(bump).if_(lambda v: v < rounds, "bump").else_(done)
    flow.step(done).end()
    flow.validate()
    return flow


def two_step_flow() -> Flow[dict[str, Any]]:
    flow: Flow[dict[str, Any]] = Flow("two steps")
    flow.start.to(Step(nap, name="first")).to(Step(nap, name="second")).end()
    flow.validate()
    return flow


class BareContext:
    """What the hand-written baseline hands its steps: state and a name, nothing else."""

    __slots__ = ("state", "step")

    def __init__(self, state: dict[str, Any], step: str) -> None:
        self.state = state
        self.step = step


async def by_hand(
    fns: list[tuple[str, Callable[[int, Any], Awaitable[int]]]], value: int
) -> tuple[int, list[tuple[str, float, float]]]:
    """The baseline: await each function in turn, with a trace record per step."""
    state: dict[str, Any] = {}
    trace: list[tuple[str, float, float]] = []
    for name, fn in fns:
        started = perf_counter()
        value = await fn(value, BareContext(state, name))
        trace.append((name, started, perf_counter()))
    return value, trace


# -- measuring ----------------------------------------------------------------------------


async def time_once(make: Callable[[], Awaitable[Any]]) -> float:
    gc.collect()
    t0 = perf_counter()
    await make()
    return perf_counter() - t0


async def median_time(make: Callable[[], Awaitable[Any]], reps: int) -> float:
    await make()  # warm up
    return statistics.median([await time_once(make) for _ in range(reps)])


async def bench_dispatch(steps: int, reps: int) -> list[tuple[str, float, float]]:
    chain = chain_flow(steps)
    loop = loop_flow(steps)
    fns: list[tuple[str, Callable[[int, Any], Awaitable[int]]]] = [
        (f"bump {i}", bump) for i in range(steps)
    ]

    async def run_chain() -> None:
        assert (await chain.run(0)).value == steps

    async def run_loop() -> None:
        assert (await loop.run(0)).value == steps

    async def run_by_hand() -> None:
        assert (await by_hand(fns, 0))[0] == steps

    base = await median_time(run_by_hand, reps) / steps * 1e6
    rows = []
    for label, run in (("chain", run_chain), ("loop (step + if_)", run_loop)):
        per_step = await median_time(run, reps) / steps * 1e6
        rows.append((label, per_step, base))
    return rows


async def many_at_once(n: int, one: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)


async def bench_concurrent(n: int, reps: int) -> dict[str, tuple[float, float]]:
    """Wall seconds and tracemalloc bytes per execution, for the engine and by hand."""
    flow = two_step_flow()
    done = 0

    async def engine_one(i: int) -> None:
        nonlocal done
        result = await flow.run(i)
        done += result.value == i + 2

    async def hand_one(i: int) -> None:
        nonlocal done
        value, _ = await by_hand([("first", nap), ("second", nap)], i)
        done += value == i + 2

    timings = {}
    for label, one in (("engine", engine_one), ("by hand", hand_one)):
        done = 0
        wall = await median_time(functools.partial(many_at_once, n, one), reps)
        assert done == n * (reps + 1), f"{label}: {done} of {n * (reps + 1)} ended right"
        timings[label] = wall

    # memory: every execution waits at a gate in its first step until all N are alive
    gate = anyio.Event()
    alive = 0

    async def wait_at_gate(value: int, ctx: Context[dict[str, Any]]) -> int:
        nonlocal alive
        alive += 1
        if alive == n:
            gate.set()
        await gate.wait()
        return value + 1

    gated: Flow[dict[str, Any]] = Flow("gated")
    gated.start.to(wait_at_gate).to(Step(nap, name="second")).end()
    gated.validate()

    async def gated_engine(i: int) -> None:
        await gated.run(i)

    async def gated_hand(i: int) -> None:
        await by_hand([("first", wait_at_gate), ("second", nap)], i)

    memory = {}
    for label, one in (("engine", gated_engine), ("by hand", gated_hand)):
        peaks = []
        for _ in range(reps):
            gate, alive = anyio.Event(), 0
            gc.collect()
            tracemalloc.start()
            await many_at_once(n, one)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        memory[label] = statistics.median(peaks) / n
    return {label: (timings[label], memory[label]) for label in timings}


# -- reporting ----------------------------------------------------------------------------


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def main(backend: str, steps: int, executions: int, reps: int) -> bool:
    ok = True
    dispatch = await bench_dispatch(steps, reps)
    rows = [["a. step dispatch", "engine µs/step", "by hand µs/step", "ratio", "target"]]
    for label, per_step, base in dispatch:
        meets = per_step <= STEP_TARGET_US
        ok &= meets
        rows.append(
            [
                f"{label}, {steps:,} steps",
                f"{per_step:.2f}",
                f"{base:.2f}",
                f"{per_step / base:.1f}x",
                f"≤ {STEP_TARGET_US:g} µs {'ok' if meets else 'MISSED'}",
            ]
        )
    print(table(rows))
    print()

    conc = await bench_concurrent(executions, reps)
    (engine_wall, engine_mem), (hand_wall, hand_mem) = conc["engine"], conc["by hand"]
    meets = engine_mem / 1024 <= MEMORY_TARGET_KIB
    ok &= meets
    rows = [
        [f"b. {executions:,} at once, 2 steps", "wall ms", "executions/s", "KiB/execution"],
        [
            "engine",
            f"{engine_wall * 1e3:.1f}",
            f"{executions / engine_wall:,.0f}",
            f"{engine_mem / 1024:.2f}",
        ],
        [
            "by hand (plain tasks)",
            f"{hand_wall * 1e3:.1f}",
            f"{executions / hand_wall:,.0f}",
            f"{hand_mem / 1024:.2f}",
        ],
        [
            "ratio",
            f"{engine_wall / hand_wall:.1f}x",
            "",
            f"{engine_mem / hand_mem:.1f}x",
        ],
    ]
    print(table(rows))
    print(
        f"memory target: < {MEMORY_TARGET_KIB:g} KiB per execution: {'ok' if meets else 'MISSED'}"
    )
    return ok


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backend", choices=["asyncio", "trio"], action="append")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--executions", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    ok = True
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("anyio", "trio"))
    print(f"python {sys.version.split()[0]}, {versions}")
    for backend in args.backend or ["asyncio", "trio"]:
        print(f"\n== {backend} (median of {args.reps}) ==\n")
        ok &= anyio.run(main, backend, args.steps, args.executions, args.reps, backend=backend)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(cli())
