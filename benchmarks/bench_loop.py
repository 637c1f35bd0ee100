"""What the plan/execute loop costs over a hand-written anyio loop doing the same work.

The workload, the same for both sides: three planner rounds from one ``ScriptedPlanner``
(round 0: four tool commands, round 1: four more, round 2: ``{"next_action": "answered"}``)
over four typed async tools; per round the commands run concurrently, at most four at once.

- ``toolloop``: ``await async_plan_and_execute(...)`` with a ``ToolRegistry`` built once
  (``max_turns=5, concurrency=4``). It does everything it promises: normalizes the plan,
  checks each command's arguments against the tool's JSON schema, builds pydantic records,
  runs the flow engine, folds the records into ``LoopResult.prompt``/``extra``.
- ``baseline``: the minimal honest hand-written loop: a ``for`` loop over rounds that calls
  the same planner, reads ``next_action`` and ``execution_commands``, runs the round's calls
  in an anyio task group under a ``CapacityLimiter(4)``, collects one result dict per call
  in order, and builds ``{purpose: result}`` at the end. No schema check, no models.

Every run is checked (toolloop: 8 successful records, ``stop_reason == "answered"``, 2
rounds, 8 action results; baseline: 8 successful results), so nothing is measured that did
not really happen. The workloads:

- W1, overhead: tools that return at once (no await), 2,000 runs in a row after a warm-up;
  milliseconds per run, median of 5 repetitions (the two sides interleaved). Target:
  toolloop <= 3x the baseline.
- W2, latency: one run with 100 ms tools and an instant planner; wall time / ideal, where
  ideal is 2 rounds x 100 ms = 200 ms; median of 5. Target: toolloop <= 1.02.
- W3, scale: N = 1,000 and 10,000 runs at once (each in its own task of one task group),
  10 ms tools; runs/s (median of 3 timing passes) and KiB per run (peak traced memory during
  the concurrent phase, over the memory before it, / N, in a separate pass under
  ``tracemalloc``; each run's result is checked and dropped as it ends). Targets: toolloop
  >= 1,000 runs/s and <= 30 KiB per run. For context, one more timing pass runs with the
  cyclic garbage collector off (at 10,000 live runs its full collections cost about half
  the throughput, of both sides).

An informational W1 row also times toolloop given the tools as plain functions, which makes
it build a ``ToolRegistry`` (JSON schemas by pydantic) on every call.

The limit (the ``L`` rows): the same workload as a plain loop of the backend's own
primitives, ``await planner.plan(...)`` then ``await asyncio.gather(*calls)`` (on trio: a
nursery), dict results, nothing else: the physical limit of this workload. Every ``L``
ratio is toolloop over that loop, measured in the same run (the anyio task-group loop above
is shown against it too). Targets: W1 <= 2.5x, 10,000 concurrent runs >= 0.5x its runs/s,
<= 25 KiB per in-flight run, < 120 GC-tracked objects per in-flight run (counted with
``gc.get_objects()`` while N runs are parked at a gate inside their first round's tools).

Awaiting tools (the ``A`` rows): W1's tools return at once, without awaiting anything,
which no real async tool does. The ``A`` rows run the same workload with tools that
``await anyio.sleep(0)`` before they answer, on all three sides, measured in the same run:
W1 (runs in a row, ms per run: the median of 25 interleaved passes of 400 runs, 15 with
``--quick``), N = 10,000 runs at once (runs/s, median of 3 passes, also with ``--quick``)
and memory and GC-tracked objects per in-flight run (N runs parked at a gate inside their
first round's tools, as in the ``L`` rows). Each is printed against the anyio task-group
loop and against the plain loop. Targets, against the anyio loop: W1 <= 1.15x its time,
runs/s >= 1.0x, KiB per in-flight run <= 1.0x.

Run it with::

    .venv/bin/python benchmarks/bench_loop.py                  # asyncio and trio
    .venv/bin/python benchmarks/bench_loop.py --backend trio   # one backend
    .venv/bin/python benchmarks/bench_loop.py --quick          # N=1,000 only (the A rows: 10,000)
    .venv/bin/python benchmarks/bench_loop.py --profile        # + where toolloop's W1 time goes
    .venv/bin/python benchmarks/bench_loop.py --only A         # only these rows (repeatable)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import inspect
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import anyio
import sniffio

from toolloop.loop import LoopResult, async_plan_and_execute
from toolloop.planners import PlannerContext
from toolloop.testing import ScriptedPlanner
from toolloop.tools import Tool, ToolRegistry

USER_INPUT = "Plan a weekend in Lisbon: weather, trains, a hotel and the budget."
MAX_ROUNDS = 5
CONCURRENCY = 4
COMMANDS_PER_RUN = 8
EXECUTING_ROUNDS = 2

W1_TARGET_RATIO = 3.0
W2_TARGET_RATIO = 1.02
W3_TARGET_RUNS_PER_S = 1_000.0
W3_TARGET_KIB_PER_RUN = 30.0

W2_TOOL_SECONDS = 0.1
W3_TOOL_SECONDS = 0.01

LIMIT_W1_RATIO = 2.5
LIMIT_RATE_RATIO = 0.5
LIMIT_KIB_PER_RUN = 25.0
LIMIT_GC_OBJECTS = 120.0

AWAIT_W1_RATIO = 1.15  # the A rows: toolloop over the anyio task-group loop
AWAIT_RATE_RATIO = 1.0
AWAIT_KIB_RATIO = 1.0

ToolFunction = Callable[..., Awaitable[dict[str, Any]]]


# -- the workload ---------------------------------------------------------------------------


def make_tools(delay: float, *, awaits: bool = False) -> list[ToolFunction]:
    """Four typed async tools that take ``delay`` seconds (0: return at once, no await;
    ``awaits``: ``await anyio.sleep(delay)`` even at 0, as every real async tool awaits)."""
    awaits = awaits or bool(delay)

    async def get_weather(city: str, days: int = 3) -> dict[str, Any]:
        """The forecast for a city.

        Args:
            city: the city's name.
            days: how many days ahead.
        """
        if awaits:
            await anyio.sleep(delay)
        return {"city": city, "days": days, "max_c": 24, "sky": "sunny"}

    async def find_fare(origin: str, destination: str) -> dict[str, Any]:
        """The cheapest train fare between two cities, in EUR.

        Args:
            origin: where the trip starts.
            destination: where it ends.
        """
        if awaits:
            await anyio.sleep(delay)
        return {"from": origin, "to": destination, "eur": 89.0}

    async def find_hotel(city: str, nights: int, max_eur: float = 150.0) -> dict[str, Any]:
        """The best hotel in a city under a price per night.

        Args:
            city: where.
            nights: how many nights.
            max_eur: the most to pay per night, in EUR.
        """
        if awaits:
            await anyio.sleep(delay)
        return {"city": city, "nights": nights, "hotel": "Casa Azul", "eur": min(max_eur, 95.0)}

    async def convert_currency(amount: float, to: str) -> dict[str, Any]:
        """Convert an amount in EUR to another currency.

        Args:
            amount: the amount in EUR.
            to: the ISO code of the target currency.
        """
        if awaits:
            await anyio.sleep(delay)
        return {"amount": round(amount * 1.08, 2), "currency": to}

    return [get_weather, find_fare, find_hotel, convert_currency]


def _command(purpose: str, tool_name: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "purpose": purpose,
        "tool_name": tool_name,
        "tool_kwargs": kwargs,
        "todo_suggestion": "compare, then answer",
    }


PLANNER_OUTPUTS: list[dict[str, Any]] = [
    {
        "next_action": "execute",
        "execution_commands": [
            _command("weather in Lisbon", "get_weather", city="Lisbon"),
            _command("weather in Porto", "get_weather", city="Porto", days=2),
            _command("fare to Lisbon", "find_fare", origin="Madrid", destination="Lisbon"),
            _command("fare to Porto", "find_fare", origin="Madrid", destination="Porto"),
        ],
    },
    {
        "next_action": "execute",
        "execution_commands": [
            _command("hotel in Lisbon", "find_hotel", city="Lisbon", nights=2),
            _command("hotel in Porto", "find_hotel", city="Porto", nights=2, max_eur=120.0),
            _command("budget in USD", "convert_currency", amount=450.0, to="USD"),
            _command("budget in GBP", "convert_currency", amount=450.0, to="GBP"),
        ],
    },
    {"next_action": "answered"},
]


def make_planner() -> ScriptedPlanner:
    """The planner both sides call; it keeps no contexts (``record=False``)."""
    return ScriptedPlanner(PLANNER_OUTPUTS, record=False)


@dataclass
class Workload:
    """What one side needs for runs with tools of one delay."""

    delay: float
    awaits: bool = False
    functions: list[ToolFunction] = field(init=False)
    registry: ToolRegistry = field(init=False)
    by_name: dict[str, ToolFunction] = field(init=False)
    specs: list[dict[str, Any]] = field(init=False)
    planner: ScriptedPlanner = field(init=False)

    def __post_init__(self) -> None:
        self.functions = make_tools(self.delay, awaits=self.awaits)
        self.registry = ToolRegistry(Tool.from_function(fn) for fn in self.functions)
        self.by_name = {fn.__name__: fn for fn in self.functions}
        self.specs = self.registry.specs()
        self.planner = make_planner()


# -- the two sides --------------------------------------------------------------------------


class CheckFailed(RuntimeError):
    """A run did not do the work the benchmark measures."""


def check_toolloop(result: LoopResult) -> None:
    records = result.done_plans
    if (
        len(records) != COMMANDS_PER_RUN
        or result.stop_reason != "answered"
        or result.rounds != EXECUTING_ROUNDS
        or not all(r.success for r in records)
        or len(result.action_results or ()) != COMMANDS_PER_RUN
    ):
        raise CheckFailed(
            f"toolloop run: {len(records)} records, stop_reason={result.stop_reason!r}, "
            f"rounds={result.rounds}, errors={[r.error for r in records if not r.success]}"
        )


def check_baseline(result: dict[str, Any]) -> None:
    results: list[dict[str, Any]] = result["results"]
    if (
        len(results) != COMMANDS_PER_RUN
        or result["rounds"] != EXECUTING_ROUNDS
        or not all(r["success"] for r in results)
        or len(result["action_results"]) != COMMANDS_PER_RUN
    ):
        raise CheckFailed(f"baseline run: {result!r}")


async def toolloop_run(work: Workload) -> LoopResult:
    return await async_plan_and_execute(
        USER_INPUT,
        tools=work.registry,
        planner=work.planner,
        max_turns=MAX_ROUNDS,
        concurrency=CONCURRENCY,
    )


async def baseline_run(work: Workload) -> dict[str, Any]:
    """The hand-written loop: plan, run the round's calls concurrently, repeat."""
    limiter = anyio.CapacityLimiter(CONCURRENCY)
    tools = work.by_name
    done: list[dict[str, Any]] = []
    last: list[dict[str, Any]] = []
    rounds = 0

    async def call(results: list[dict[str, Any]], i: int, command: dict[str, Any]) -> None:
        async with limiter:
            purpose, name = command["purpose"], command["tool_name"]
            try:
                value = await tools[name](**command["tool_kwargs"])
            except Exception as exc:
                results[i] = {"purpose": purpose, "success": False, "error": repr(exc)}
            else:
                results[i] = {"purpose": purpose, "success": True, "result": value}

    for round_index in range(MAX_ROUNDS):
        seen: dict[str, Any] = {  # the planner gets the history in the baseline's own shape
            "user_input": USER_INPUT,
            "user_extra_requirement": None,
            "available_tools": work.specs,
            "done_plans": done,
            "last_round_result": last,
            "round_index": round_index,
            "max_rounds": MAX_ROUNDS,
        }
        plan = await work.planner.plan(PlannerContext.model_construct(**seen))
        commands: list[dict[str, Any]] = plan.get("execution_commands") or []
        if plan.get("next_action") != "execute" or not commands:
            break
        results: list[dict[str, Any]] = [{}] * len(commands)
        async with anyio.create_task_group() as tg:
            for i, command in enumerate(commands):
                tg.start_soon(call, results, i, command)
        done.extend(results)
        last = results
        rounds += 1
    action_results = {r["purpose"]: r.get("result", r.get("error")) for r in done}
    return {"results": done, "rounds": rounds, "action_results": action_results}


async def plain_run(work: Workload) -> dict[str, Any]:
    """The limit: plan, then the round's calls with the backend's own primitives."""
    tools = work.by_name
    done: list[dict[str, Any]] = []
    last: list[dict[str, Any]] = []
    rounds = 0

    async def call(command: dict[str, Any]) -> dict[str, Any]:
        try:
            value = await tools[command["tool_name"]](**command["tool_kwargs"])
        except Exception as exc:
            return {"purpose": command["purpose"], "success": False, "error": repr(exc)}
        return {"purpose": command["purpose"], "success": True, "result": value}

    gather = _gather()
    for round_index in range(MAX_ROUNDS):
        seen: dict[str, Any] = {
            "user_input": USER_INPUT,
            "user_extra_requirement": None,
            "available_tools": work.specs,
            "done_plans": done,
            "last_round_result": last,
            "round_index": round_index,
            "max_rounds": MAX_ROUNDS,
        }
        plan = await work.planner.plan(PlannerContext.model_construct(**seen))
        commands: list[dict[str, Any]] = plan.get("execution_commands") or []
        if plan.get("next_action") != "execute" or not commands:
            break
        results = await gather([call(c) for c in commands])
        done.extend(results)
        last = results
        rounds += 1
    action_results = {r["purpose"]: r.get("result", r.get("error")) for r in done}
    return {"results": done, "rounds": rounds, "action_results": action_results}


def _gather() -> Callable[[list[Coroutine[Any, Any, dict[str, Any]]]], Awaitable[list[Any]]]:
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        async def gather_asyncio(coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
            return list(await asyncio.gather(*coros))

        return gather_asyncio
    import trio

    async def gather_trio(coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
        out: list[Any] = [None] * len(coros)

        async def one(i: int, coro: Coroutine[Any, Any, Any]) -> None:
            out[i] = await coro

        async with trio.open_nursery() as nursery:
            for i, coro in enumerate(coros):
                nursery.start_soon(one, i, coro)
        return out

    return gather_trio


async def checked_plain(work: Workload) -> None:
    check_baseline(await plain_run(work))


async def checked_toolloop(work: Workload) -> None:
    check_toolloop(await toolloop_run(work))


async def checked_toolloop_functions(work: Workload) -> None:
    """toolloop given plain functions: a ``ToolRegistry`` is built on every call."""
    result = await async_plan_and_execute(
        USER_INPUT,
        tools=work.functions,
        planner=work.planner,
        max_turns=MAX_ROUNDS,
        concurrency=CONCURRENCY,
    )
    check_toolloop(result)


async def checked_baseline(work: Workload) -> None:
    check_baseline(await baseline_run(work))


Side = Callable[[Workload], Coroutine[Any, Any, None]]


# -- measuring ------------------------------------------------------------------------------


async def in_a_row(side: Side, work: Workload, runs: int) -> float:
    """Seconds per run over ``runs`` runs one after another."""
    gc.collect()
    started = time.perf_counter()
    for _ in range(runs):
        await side(work)
    return (time.perf_counter() - started) / runs


async def concurrently(side: Side, work: Workload, n: int) -> float:
    """Seconds for ``n`` runs at once, each in its own task of one task group."""
    gc.collect()
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(side, work)
    return time.perf_counter() - started


async def concurrent_memory(side: Side, work: Workload, n: int) -> float:
    """Bytes per run: traced peak while ``n`` runs go at once, over the memory before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(side, work)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - before) / n


@dataclass
class Config:
    w1_runs: int = 2_000
    w1_warmup: int = 300
    w1_reps: int = 5
    w2_reps: int = 5
    w3_sizes: tuple[int, ...] = (1_000, 10_000)
    w3_reps: int = 3
    awaiting_size: int = 10_000
    awaiting_reps: int = 3
    profile_runs: int = 200
    profile: bool = False
    only: tuple[str, ...] = ("W1", "W2", "W3", "L", "A")

    @classmethod
    def quick(cls) -> Config:
        # the A rows keep N = 10,000 and three passes: their targets are about that N
        return cls(w1_reps=3, w2_reps=3, w3_sizes=(1_000,), w3_reps=1)


@dataclass
class Row:
    """One line of a table: a measured value for the baseline and for toolloop."""

    workload: str
    unit: str
    baseline: float | None
    toolloop: float
    target: str = ""
    met: bool | None = None
    decimals: int = 3


@dataclass
class Report:
    backend: str
    rows: dict[str, list[Row]] = field(default_factory=dict)
    profiles: list[tuple[str, list[list[str]]]] = field(default_factory=list)


async def bench_w1(cfg: Config, report: Report) -> None:
    work = Workload(0.0)
    for side in (checked_baseline, checked_toolloop, checked_toolloop_functions):
        await in_a_row(side, work, cfg.w1_warmup)
    base: list[float] = []
    loop: list[float] = []
    funcs: list[float] = []
    for _ in range(cfg.w1_reps):
        base.append(await in_a_row(checked_baseline, work, cfg.w1_runs))
        loop.append(await in_a_row(checked_toolloop, work, cfg.w1_runs))
        funcs.append(await in_a_row(checked_toolloop_functions, work, cfg.w1_runs // 10))
    b = statistics.median(base) * 1e3
    t = statistics.median(loop) * 1e3
    f = statistics.median(funcs) * 1e3
    report.rows["W1"] = [
        Row(
            f"W1 0-ms tools, {cfg.w1_runs:,} runs in a row",
            "ms/run",
            b,
            t,
            f"toolloop <= {W1_TARGET_RATIO:g}x",
            t <= W1_TARGET_RATIO * b,
        ),
        Row("   (toolloop, tools as plain functions)", "ms/run", b, f),
    ]


async def bench_w2(cfg: Config, report: Report) -> None:
    work = Workload(W2_TOOL_SECONDS)
    ideal = EXECUTING_ROUNDS * W2_TOOL_SECONDS
    await in_a_row(checked_toolloop, work, 1)  # warm-up
    await in_a_row(checked_baseline, work, 1)
    base: list[float] = []
    loop: list[float] = []
    for _ in range(cfg.w2_reps):
        base.append(await in_a_row(checked_baseline, work, 1))
        loop.append(await in_a_row(checked_toolloop, work, 1))
    b = statistics.median(base) / ideal
    t = statistics.median(loop) / ideal
    report.rows["W2"] = [
        Row(
            "W2 100-ms tools, wall / ideal (200 ms)",
            "x ideal",
            b,
            t,
            f"toolloop <= {W2_TARGET_RATIO:g}",
            t <= W2_TARGET_RATIO,
            4,
        ),
        Row(
            "   wall time of one run",
            "ms",
            statistics.median(base) * 1e3,
            statistics.median(loop) * 1e3,
            decimals=2,
        ),
    ]


async def bench_w3(cfg: Config, report: Report) -> None:
    work = Workload(W3_TOOL_SECONDS)
    await concurrently(checked_baseline, work, 200)  # warm-up
    await concurrently(checked_toolloop, work, 200)
    rows: list[Row] = []
    for n in cfg.w3_sizes:
        base: list[float] = []
        loop: list[float] = []
        for _ in range(cfg.w3_reps):
            base.append(await concurrently(checked_baseline, work, n))
            loop.append(await concurrently(checked_toolloop, work, n))
        b_rate = n / statistics.median(base)
        t_rate = n / statistics.median(loop)
        gc.disable()  # for context: what the cyclic GC costs at this many live objects
        try:
            b_nogc = n / await concurrently(checked_baseline, work, n)
            t_nogc = n / await concurrently(checked_toolloop, work, n)
        finally:
            gc.enable()
        b_mem = await concurrent_memory(checked_baseline, work, n) / 1024
        t_mem = await concurrent_memory(checked_toolloop, work, n) / 1024
        rows.append(
            Row(
                f"W3 {n:,} runs at once, 10-ms tools",
                "runs/s",
                b_rate,
                t_rate,
                f"toolloop >= {W3_TARGET_RUNS_PER_S:,.0f}",
                t_rate >= W3_TARGET_RUNS_PER_S,
                0,
            )
        )
        rows.append(Row("   (same, cyclic GC off: one pass)", "runs/s", b_nogc, t_nogc, decimals=0))
        rows.append(
            Row(
                f"W3 {n:,} runs at once, memory",
                "KiB/run",
                b_mem,
                t_mem,
                f"toolloop <= {W3_TARGET_KIB_PER_RUN:g}",
                t_mem <= W3_TARGET_KIB_PER_RUN,
                1,
            )
        )
    report.rows["W3"] = rows


_PACKAGES = (
    ("toolloop", ("/toolloop/",)),
    ("pydantic", ("pydantic",)),
    ("anyio", ("/anyio/",)),
    ("asyncio", ("/asyncio/", "_asyncio.", "of '_asyncio.", "'_contextvars")),
    ("trio", ("/trio/", "/outcome/", "/sniffio/")),
    ("benchmark", ("bench_loop.py",)),
)


def _where(code: CodeType | str) -> tuple[str, str]:
    """A profiler entry's function and its package (a C function: by the words it names)."""
    if isinstance(code, str):
        text = code
        name = code
    else:
        text = code.co_filename
        name = f"{code.co_name}  ({_short_path(code.co_filename)}:{code.co_firstlineno})"
    for package, markers in _PACKAGES:
        if any(marker in text for marker in markers):
            return name, package
    return name, "builtins/other" if isinstance(code, str) else "stdlib/other"


def _short_path(path: str) -> str:
    for marker, keep in (("site-packages/", False), ("/toolloop/", True), ("/lib/python", False)):
        i = path.find(marker)
        if i >= 0:
            return path[i + 1 :] if keep else path[i + len(marker) :]
    return path


async def profile_w1(cfg: Config, report: Report, *, awaits: bool = False) -> None:
    """cProfile toolloop's W1 runs: the top functions by own time, and own time by package."""
    work = Workload(0.0, awaits=awaits)
    await in_a_row(checked_toolloop, work, cfg.w1_warmup)
    plain = await in_a_row(checked_toolloop, work, cfg.w1_runs // 4)
    profiler = cProfile.Profile()
    gc.collect()
    runs = cfg.profile_runs
    started = time.perf_counter()
    profiler.enable()
    for _ in range(runs):
        await checked_toolloop(work)
    profiler.disable()
    elapsed = time.perf_counter() - started
    entries = profiler.getstats()
    total = sum(e.inlinetime for e in entries)
    by_package: dict[str, float] = {}
    for entry in entries:
        package = _where(entry.code)[1]
        by_package[package] = by_package.get(package, 0.0) + entry.inlinetime
    shares = sorted(by_package.items(), key=lambda kv: kv[1], reverse=True)
    header = (
        f"cProfile of {runs} toolloop W1 runs, {'awaiting' if awaits else 'instant'} tools, "
        f"on {report.backend}: {elapsed / runs * 1e3:.3f} ms/run under the profiler (vs "
        f"{plain * 1e3:.3f} without); own time by package: "
        + ", ".join(f"{package} {t / total:.0%}" for package, t in shares if t / total >= 0.005)
    )
    lines: list[list[str]] = []
    for entry in sorted(entries, key=lambda e: e.inlinetime, reverse=True)[:12]:
        name, package = _where(entry.code)
        lines.append(
            [
                f"{entry.inlinetime / runs * 1e6:.1f}",
                f"{entry.inlinetime / total:.1%}",
                f"{entry.totaltime / runs * 1e6:.1f}",
                f"{entry.callcount / runs:g}",
                package,
                name,
            ]
        )
    report.profiles.append((header, lines))


class Gate:
    """Holds every run's first-round tools until N runs are parked in them."""

    def __init__(self, parked: int) -> None:
        self.expected = parked
        self.arrived = 0
        self.all_parked = anyio.Event()
        self.open = anyio.Event()

    async def wait(self) -> None:
        if self.open.is_set():
            return
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_parked.set()
        await self.open.wait()


def gated_workload(gate: Gate) -> Workload:
    work = Workload(0.0)

    def wrap(fn: ToolFunction) -> ToolFunction:
        async def gated(**kwargs: Any) -> dict[str, Any]:
            await gate.wait()
            return await fn(**kwargs)

        gated.__name__ = fn.__name__
        gated.__doc__ = fn.__doc__
        gated.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
        return gated

    work.functions = [wrap(fn) for fn in work.functions]
    work.registry = ToolRegistry(Tool.from_function(fn) for fn in work.functions)
    work.by_name = {fn.__name__: fn for fn in work.functions}
    return work


async def in_flight(side: Side, n: int) -> tuple[float, float]:
    """GC-tracked objects and traced KiB per run while ``n`` runs are parked mid-run."""
    gate = Gate(n * (COMMANDS_PER_RUN // EXECUTING_ROUNDS))
    work = gated_workload(gate)
    gc.collect()
    objects_before = len(gc.get_objects())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(side, work)
            await gate.all_parked.wait()
            objects = len(gc.get_objects()) - objects_before
            memory = tracemalloc.get_traced_memory()[0] - before
            gate.open.set()
    finally:
        tracemalloc.stop()
    return objects / n, memory / n / 1024


async def bench_limit(cfg: Config, report: Report) -> None:
    """toolloop against the plain loop of the backend's own primitives (see the docs)."""
    work = Workload(0.0)
    for side in (checked_plain, checked_toolloop, checked_baseline):
        await in_a_row(side, work, cfg.w1_warmup)
    plain: list[float] = []
    loop: list[float] = []
    group: list[float] = []
    for _ in range(cfg.w1_reps):
        plain.append(await in_a_row(checked_plain, work, cfg.w1_runs))
        loop.append(await in_a_row(checked_toolloop, work, cfg.w1_runs))
        group.append(await in_a_row(checked_baseline, work, cfg.w1_runs))
    p = statistics.median(plain) * 1e3
    t = statistics.median(loop) * 1e3
    g = statistics.median(group) * 1e3
    rows = [
        Row(
            "L  W1 vs the plain loop", "ms/run", p, t,
            f"toolloop <= {LIMIT_W1_RATIO:g}x", t <= LIMIT_W1_RATIO * p,
        ),
        Row("   (the anyio task-group loop)", "ms/run", p, g),
    ]  # fmt: skip
    slow = Workload(W3_TOOL_SECONDS)
    for n in cfg.w3_sizes:
        await concurrently(checked_plain, slow, 200)
        await concurrently(checked_toolloop, slow, 200)
        await concurrently(checked_baseline, slow, 200)
        plain_rates: list[float] = []
        loop_rates: list[float] = []
        group_rates: list[float] = []
        for _ in range(cfg.w3_reps):  # the three sides interleaved, so that load hits all
            plain_rates.append(n / await concurrently(checked_plain, slow, n))
            loop_rates.append(n / await concurrently(checked_toolloop, slow, n))
            group_rates.append(n / await concurrently(checked_baseline, slow, n))
        pr, tr = statistics.median(plain_rates), statistics.median(loop_rates)
        gr = statistics.median(group_rates)
        p_objects, p_kib = await in_flight(checked_plain, n)
        t_objects, t_kib = await in_flight(checked_toolloop, n)
        g_objects, g_kib = await in_flight(checked_baseline, n)
        rows += [
            Row(
                f"L  {n:,} runs at once (GC on)", "runs/s", pr, tr,
                f"toolloop >= {LIMIT_RATE_RATIO:g}x", tr >= LIMIT_RATE_RATIO * pr, 0,
            ),
            Row("   (the anyio task-group loop)", "runs/s", pr, gr, decimals=0),
            Row(
                f"L  {n:,} runs in flight, memory", "KiB/run", p_kib, t_kib,
                f"toolloop <= {LIMIT_KIB_PER_RUN:g}", t_kib <= LIMIT_KIB_PER_RUN, 1,
            ),
            Row("   (the anyio task-group loop)", "KiB/run", p_kib, g_kib, decimals=1),
            Row(
                f"L  {n:,} runs in flight, GC objects", "obj/run", p_objects, t_objects,
                f"toolloop < {LIMIT_GC_OBJECTS:g}", t_objects < LIMIT_GC_OBJECTS, 0,
            ),
            Row("   (the anyio task-group loop)", "obj/run", p_objects, g_objects, decimals=0),
        ]  # fmt: skip
    report.rows["L"] = rows


async def bench_awaiting(cfg: Config, report: Report) -> None:
    """The A rows: tools that await (``await anyio.sleep(0)``, as every real async tool
    does), toolloop against the anyio task-group loop and the plain loop, all three
    measured here, interleaved."""
    work = Workload(0.0, awaits=True)
    sides = (checked_baseline, checked_toolloop, checked_plain)
    for side in sides:
        await in_a_row(side, work, cfg.w1_warmup)
    times: dict[Side, list[float]] = {side: [] for side in sides}
    for _ in range(cfg.w1_reps * 5):  # short passes, interleaved: a busy spell hits all sides
        for side in sides:
            times[side].append(await in_a_row(side, work, cfg.w1_runs // 5))
    g, t, p = (statistics.median(times[side]) * 1e3 for side in sides)
    n = cfg.awaiting_size
    for side in sides:
        await concurrently(side, work, 200)
    rates: dict[Side, list[float]] = {side: [] for side in sides}
    for _ in range(cfg.awaiting_reps):
        for side in sides:
            rates[side].append(n / await concurrently(side, work, n))
    gr, tr, pr = (statistics.median(rates[side]) for side in sides)
    (go, gm), (to, tm), (po, pm) = [await in_flight(side, n) for side in sides]
    report.rows["A"] = [
        Row(
            "A  W1 awaiting tools, vs the anyio loop", "ms/run", g, t,
            f"toolloop <= {AWAIT_W1_RATIO:g}x", t <= AWAIT_W1_RATIO * g,
        ),
        Row("   (vs the plain loop)", "ms/run", p, t),
        Row(
            f"A  {n:,} runs at once, vs the anyio loop", "runs/s", gr, tr,
            f"toolloop >= {AWAIT_RATE_RATIO:g}x", tr >= AWAIT_RATE_RATIO * gr, 0,
        ),
        Row("   (vs the plain loop)", "runs/s", pr, tr, decimals=0),
        Row(
            f"A  {n:,} runs in flight, memory, vs the anyio loop", "KiB/run", gm, tm,
            f"toolloop <= {AWAIT_KIB_RATIO:g}x", tm <= AWAIT_KIB_RATIO * gm, 1,
        ),
        Row("   (vs the plain loop)", "KiB/run", pm, tm, decimals=1),
        Row(f"A  {n:,} runs in flight, GC objects", "obj/run", go, to, decimals=0),
        Row("   (vs the plain loop)", "obj/run", po, to, decimals=0),
    ]  # fmt: skip


async def bench_backend(cfg: Config, report: Report) -> None:
    if "W1" in cfg.only:
        await bench_w1(cfg, report)
    if "W2" in cfg.only:
        await bench_w2(cfg, report)
    if "W3" in cfg.only:
        await bench_w3(cfg, report)
    if "L" in cfg.only:
        await bench_limit(cfg, report)
    if "A" in cfg.only:
        await bench_awaiting(cfg, report)
    if cfg.profile:
        await profile_w1(cfg, report)
        await profile_w1(cfg, report, awaits=True)


# -- printing -------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Aligned text; ``align`` has one letter per column: ``l`` flush left, ``r`` right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(w) if a == "l" else cell.rjust(w)
            for cell, w, a in zip(cells, widths, align, strict=True)
        ]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def print_report(report: Report) -> None:
    # the W rows' baseline is the anyio task-group loop; the L rows' is the plain loop
    header = ["workload", "unit", "baseline", "toolloop", "toolloop/base", "target", "met"]
    rows: list[list[str]] = []
    for group in report.rows.values():
        for row in group:
            d = row.decimals
            base = "-" if row.baseline is None else f"{row.baseline:,.{d}f}"
            ratio = "-" if not row.baseline else f"{row.toolloop / row.baseline:.2f}x"
            met = "" if row.met is None else ("yes" if row.met else "MISSED")
            rows.append(
                [row.workload, row.unit, base, f"{row.toolloop:,.{d}f}", ratio, row.target, met]
            )
    print(f"\n== backend: {report.backend} ==")
    print(table(header, rows, align="llrrrlr"))
    for title, lines in report.profiles:
        print(f"\n{title}")
        print(
            table(
                ["own us/run", "share", "cum us/run", "calls/run", "package", "function"],
                lines,
                align="rrrrll",
            )
        )
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="N=1,000 only, fewer repetitions")
    parser.add_argument("--profile", action="store_true", help="cProfile toolloop's W1 runs")
    parser.add_argument(
        "--only",
        action="append",
        choices=("W1", "W2", "W3", "L", "A"),
        help="only these groups of rows (repeatable); all by default",
    )
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config()
    cfg.profile = args.profile
    if args.only:
        cfg.only = tuple(args.only)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    print(
        f"toolloop vs a hand-written anyio loop: {EXECUTING_ROUNDS} executing rounds of "
        f"{COMMANDS_PER_RUN // EXECUTING_ROUNDS} tool calls + a final planner call, "
        f"concurrency {CONCURRENCY}; Python {sys.version.split()[0]}"
        + (" (quick)" if args.quick else "")
    )
    reports: list[Report] = []
    for backend in backends:
        report = Report(backend)
        anyio.run(bench_backend, cfg, report, backend=backend)
        print_report(report)
        reports.append(report)
    missed = [
        f"{r.backend}: {row.workload.strip()}"
        for r in reports
        for group in r.rows.values()
        for row in group
        if row.met is False
    ]
    print("\nall targets met" if not missed else "\ntargets missed:\n  " + "\n  ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
