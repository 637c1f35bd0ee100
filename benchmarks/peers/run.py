"""toolloop next to its peers: the loop benchmark's workload, run in one go in each framework.

The workload is ``bench_loop.py``'s: three model turns (four tool calls, four more, then a
final answer) over the same four typed async tools, each turn's calls concurrent, at most
four at once. The sides:

- ``toolloop``: ``async_plan_and_execute`` with a ``ScriptedPlanner`` (as in bench_loop.py);
- ``baseline``: bench_loop.py's minimal hand-written anyio loop;
- ``langgraph``: LangChain's ``create_agent`` (LangGraph) over a scripted ``BaseChatModel``;
- ``pydantic-ai``: an ``Agent`` over a ``FunctionModel`` that plays the script;
- ``openai-agents``: the OpenAI Agents SDK's ``Runner.run`` over a scripted ``Model``;
- ``llamaindex``: the loop as a LlamaIndex workflow (plan step, fan-out, collect);
- ``agently``: Agently's agent action loop (on TriggerFlow) with a scripted planning handler;
- ``triggerflow``: the loop written directly on Agently's TriggerFlow.

A peer that is not installed is skipped with a one-line message (``python3 dev.py peers``
installs them all in ``.venv-peers/``). Every run of every side is checked (the eight tool
results, exactly as the tools return them), so nothing is measured empty. Each side runs in a
process of its own (it imports only its own framework), on asyncio (the peers need it):

- W1, overhead: 0-ms tools, runs in a row after a warm-up; ms per run, median of the
  repetitions (up to 2,000 runs a repetition, fewer for a slow side: about 1.5 s each).
- W2, latency: one run with 100-ms tools; wall time over the ideal 2 x 100 ms; median.
- W3, scale: N = 1,000 and 10,000 runs at once (each in its own task), 10-ms tools; runs/s
  (median of up to 3 passes) and KiB per run (tracemalloc's peak over the memory before, / N,
  in a pass of its own). A side gets 300 s per N (100 s with ``--quick``) for its passes: a
  slow side gets fewer timing passes, its memory measured with fewer runs at once (or not at
  10,000), or the 10,000 skipped; the table marks those with ``*`` and says why.

A full run takes about 30 minutes on 2 cores, most of it the peers' 10,000-run passes;
``--quick`` about 10.

It prints a table of the medians with each side's ratio to toolloop, and writes it into
``docs/benchmarks.md`` between ``<!-- peers:start -->`` and ``<!-- peers:end -->``.

    python3 dev.py peers [--quick] [--only NAME] [--no-write]
    .venv-peers/bin/python benchmarks/peers/run.py --quick --only langgraph --no-write

``--quick``: fewer repetitions, N = 1,000 only. ``--only NAME`` (repeatable): those sides and
toolloop, the reference; the table is then printed, not written.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
ROOT = BENCHMARKS.parent
DOCS_PAGE = ROOT / "docs" / "benchmarks.md"
START_MARKER = "<!-- peers:start -->"
END_MARKER = "<!-- peers:end -->"
RESULT_PREFIX = "@@peers-result "
TIMES = "\u00d7"  # the multiplication sign of the ratios

# A script: its package (peers) and bench_loop live in benchmarks/; the script's own folder
# goes, so that a module of ours can never shadow a framework's top-level module.
sys.path[:] = [str(BENCHMARKS), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import anyio  # noqa: E402

from peers.common import (  # noqa: E402
    COMMANDS_PER_RUN,
    CONCURRENCY,
    EXECUTING_ROUNDS,
    W2_TOOL_SECONDS,
    W3_TOOL_SECONDS,
    Builder,
    RunFn,
)


@dataclass(frozen=True)
class Side:
    name: str
    title: str
    module: str
    builder: str = "build"
    distributions: tuple[str, ...] = ()


SIDES: list[Side] = [
    Side("toolloop", "toolloop", "peers.reference", "build_toolloop", ("toolloop",)),
    Side("baseline", "hand-written anyio loop", "peers.reference", "build_baseline"),
    Side(
        "langgraph",
        "LangGraph `create_agent`",
        "peers.langgraph_agent",
        distributions=("langchain", "langchain-core", "langgraph"),
    ),
    Side(
        "pydantic-ai",
        "pydantic-ai `Agent`",
        "peers.pydantic_ai_agent",
        distributions=("pydantic-ai-slim",),
    ),
    Side(
        "openai-agents",
        "OpenAI Agents SDK",
        "peers.openai_agents_sdk",
        distributions=("openai-agents",),
    ),
    Side(
        "llamaindex",
        "LlamaIndex workflow",
        "peers.llamaindex_workflow",
        distributions=("llama-index-workflows",),
    ),
    Side(
        "agently",
        "Agently agent action loop",
        "peers.agently_agent",
        distributions=("agently",),
    ),
    Side(
        "triggerflow",
        "Agently TriggerFlow, loop by hand",
        "peers.agently_triggerflow",
        distributions=("agently",),
    ),
]
BY_NAME = {side.name: side for side in SIDES}
REFERENCE = "toolloop"
COMMON_DISTRIBUTIONS = ("anyio", "pydantic", "openai")

NOTES = """\
What each side does for the same work (a turn's four calls always run at once; toolloop, the
baseline, LangGraph (`max_concurrency=4`), LlamaIndex (`num_workers=4`), Agently and
TriggerFlow (`concurrency=4`) also set the limit of 4, which this workload never reaches):

- **toolloop** normalizes each plan, checks each call's arguments against the tool's JSON
  schema, makes a pydantic record per call, and folds the records into the final prompt.
  The planner gets the records so far; there is no message history.
- **baseline**: plain dicts, no schema check, no models: the floor.
- **LangGraph**, **pydantic-ai**, **OpenAI Agents SDK**: a chat model with native tool calls.
  Each run keeps a growing message history (the request, 3 model messages, 8 tool messages)
  handed back to the model every turn; each call's arguments are validated (a pydantic model
  of the signature in LangChain and pydantic-ai, pydantic against a strict JSON schema in the
  Agents SDK). LangGraph runs each call as a task of its graph. The Agents SDK runs a clone
  of the agent per run: with one shared `Agent`, each turn checks the agent's tools against
  every other run in progress on it, which is quadratic (9 runs/s at 10,000 runs at once,
  52 at 1,000); its tracing is off (it would export to OpenAI).
- **LlamaIndex workflow** and **TriggerFlow, by hand**: the engines alone, with the loop
  written in them like the baseline (no schema check); events are pydantic models in
  LlamaIndex, state goes through TriggerFlow's state store.
- **Agently agent**: the full action loop of Agently's agent (the same plan/execute shape as
  toolloop's), with the scripted plans handed in through its planning handler, so its prompt
  building and output parsing do not run (a lower bound of its cost).
- No side talks to a model: each fake answers from the script at once. Each side runs in its
  own process and imports only its framework."""


# -- measuring (in a side's own process) -----------------------------------------------------


@dataclass
class Config:
    quick: bool = False
    w1_max_runs: int = 2_000
    w1_rep_seconds: float = 1.5
    w1_reps: int = 5
    w1_warmup_seconds: float = 1.0
    w1_warmup_runs: int = 300
    w2_reps: int = 5
    w3_sizes: tuple[int, ...] = (1_000, 10_000)
    w3_reps: int = 3
    w3_budget_seconds: float = 300.0  # per side and N: the timing passes and the memory pass

    @classmethod
    def make(cls, quick: bool) -> Config:
        if not quick:
            return cls()
        return cls(
            quick=True,
            w1_rep_seconds=0.75,
            w1_reps=3,
            w1_warmup_seconds=0.5,
            w2_reps=3,
            w3_sizes=(1_000,),
            w3_reps=1,
            w3_budget_seconds=100.0,
        )


# How much slower a run is at thousands of live runs (the cyclic GC walks them all) and under
# tracemalloc, as seen on the peers: only to plan the W3 passes within the budget.
TRACEMALLOC_SLOWDOWN = 5.0  # a concurrent pass under tracemalloc, over the same without
CONCURRENT_SLOWDOWN = 2.5  # a run among 1,000 at once, over a run alone (W1)
LARGER_N_SLOWDOWN = 1.25  # a run among 10,000 at once, over one among 1,000
MIN_MEMORY_N = 100


@dataclass
class W3Figures:
    n: int
    runs_per_s: float | None = None
    passes: int = 0
    kib_per_run: float | None = None
    memory_n: int | None = None
    note: str = ""


@dataclass
class SideFigures:
    name: str
    versions: dict[str, str] = field(default_factory=dict)
    skipped: str = ""
    w1_ms: float = 0.0
    w1_runs: int = 0
    w1_reps: int = 0
    w2_ratio: float = 0.0
    w2_ms: float = 0.0
    w3: list[W3Figures] = field(default_factory=list)
    seconds: float = 0.0


def say(*parts: object) -> None:
    """Progress, on stderr (the parent reads the figures from stdout)."""
    print("   ", *parts, file=sys.stderr, flush=True)


async def in_a_row(run: RunFn, runs: int) -> float:
    """Seconds per run over ``runs`` runs one after another."""
    gc.collect()
    started = time.perf_counter()
    for _ in range(runs):
        await run()
    return (time.perf_counter() - started) / runs


async def concurrently(run: RunFn, n: int) -> float:
    """Seconds for ``n`` runs at once, each in its own task of one task group."""
    gc.collect()
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(run)
    return time.perf_counter() - started


async def concurrent_memory(run: RunFn, n: int) -> float:
    """Bytes per run: traced peak while ``n`` runs go at once, over the memory before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - before) / n


async def warm_up(run: RunFn, seconds: float, most: int) -> float:
    """Run until ``seconds`` or ``most`` runs have passed; the seconds a run took."""
    started = time.perf_counter()
    runs = 0
    while runs < most and (runs < 3 or time.perf_counter() - started < seconds):
        await run()
        runs += 1
    return (time.perf_counter() - started) / runs


async def bench_w1(build: Builder, cfg: Config, out: SideFigures) -> float:
    run = build(0.0)
    per_run = await warm_up(run, cfg.w1_warmup_seconds, cfg.w1_warmup_runs)
    runs = max(10, min(cfg.w1_max_runs, int(cfg.w1_rep_seconds / per_run)))
    times = [await in_a_row(run, runs) for _ in range(cfg.w1_reps)]
    out.w1_ms = statistics.median(times) * 1e3
    out.w1_runs, out.w1_reps = runs, cfg.w1_reps
    say(f"W1 {out.w1_ms:.3f} ms/run ({cfg.w1_reps} x {runs} runs)")
    return statistics.median(times)


async def bench_w2(build: Builder, cfg: Config, out: SideFigures) -> None:
    run = build(W2_TOOL_SECONDS)
    await in_a_row(run, 1)
    walls = [await in_a_row(run, 1) for _ in range(cfg.w2_reps)]
    out.w2_ms = statistics.median(walls) * 1e3
    out.w2_ratio = statistics.median(walls) / (EXECUTING_ROUNDS * W2_TOOL_SECONDS)
    say(f"W2 {out.w2_ratio:.4f} x ideal ({out.w2_ms:.1f} ms)")


def _memory_sizes(n: int, first: bool) -> list[int]:
    """The sizes a memory pass may use: the first N may fall back to a much smaller one."""
    sizes = (n, n // 2, n // 5, n // 10, n // 20, n // 50) if first else (n, n // 2)
    return [m for m in sizes if m >= MIN_MEMORY_N]


async def bench_w3(build: Builder, cfg: Config, out: SideFigures, per_run: float) -> None:
    run = build(W3_TOOL_SECONDS)
    await concurrently(run, max(10, min(200, int(3.0 / per_run))))  # warm-up
    budget = cfg.w3_budget_seconds
    rate: float | None = None  # runs/s at the previous N
    for i, n in enumerate(cfg.w3_sizes):
        figures = W3Figures(n)
        out.w3.append(figures)
        one_pass = n / rate * LARGER_N_SLOWDOWN if rate else n * per_run * CONCURRENT_SLOWDOWN
        if i > 0 and one_pass > budget:  # the first N is always run, once at least
            figures.note = (
                f"N={n:,} not run: one pass would take ~{one_pass:.0f} s, over the "
                f"{budget:.0f} s budget"
            )
            say(figures.note)
            continue
        walls: list[float] = []
        while len(walls) < cfg.w3_reps:
            walls.append(await concurrently(run, n))
            if sum(walls) + walls[-1] > 0.6 * budget:
                break
        rate = n / statistics.median(walls)
        figures.runs_per_s, figures.passes = rate, len(walls)
        allowance = max(budget - sum(walls), 0.4 * budget)
        memory_n = next(
            (
                m
                for m in _memory_sizes(n, first=i == 0)
                if m / rate * TRACEMALLOC_SLOWDOWN <= allowance
            ),
            None,
        )
        if memory_n is not None:
            figures.kib_per_run = await concurrent_memory(run, memory_n) / 1024
            figures.memory_n = memory_n
        notes = []
        if len(walls) < cfg.w3_reps:
            notes.append(f"{len(walls)} timing pass{'es' if len(walls) > 1 else ''}")
        if memory_n is None:
            notes.append(
                f"memory not measured (a pass under tracemalloc would take "
                f"~{n / rate * TRACEMALLOC_SLOWDOWN:.0f} s)"
            )
        elif memory_n != n:
            notes.append(f"memory measured with {memory_n:,} runs at once")
        if notes:
            figures.note = f"N={n:,}: " + ", ".join(notes) + f", to fit the {budget:.0f} s budget"
        say(
            f"W3 N={n:,}: {rate:,.0f} runs/s ({len(walls)} x {n:,} runs, {sum(walls):.0f} s), "
            + (
                f"{figures.kib_per_run:,.1f} KiB/run at N={memory_n:,}"
                if figures.kib_per_run is not None and memory_n is not None
                else "memory not measured"
            )
        )


def versions(side: Side) -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in (*side.distributions, *COMMON_DISTRIBUTIONS):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


async def bench_side(side: Side, cfg: Config) -> SideFigures:
    out = SideFigures(side.name)
    started = time.perf_counter()
    try:
        build: Builder = getattr(importlib.import_module(side.module), side.builder)
        run = build(0.0)
    except ImportError as exc:
        out.skipped = f"not installed ({exc})"
        return out
    out.versions = versions(side)
    await run()  # one checked run before anything is timed
    per_run = await bench_w1(build, cfg, out)
    await bench_w2(build, cfg, out)
    await bench_w3(build, cfg, out, per_run)
    out.seconds = time.perf_counter() - started
    return out


def side_main(name: str, quick: bool) -> int:
    cfg = Config.make(quick)
    figures = anyio.run(bench_side, BY_NAME[name], cfg, backend="asyncio")
    print(RESULT_PREFIX + json.dumps(asdict(figures)), flush=True)
    return 0


# -- the table (in the parent) --------------------------------------------------------------


def run_side(side: Side, quick: bool) -> SideFigures | str:
    """The side's figures from a process of its own, or why there are none."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side.name]
    if quick:
        cmd.append("--quick")
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            raw = json.loads(line[len(RESULT_PREFIX) :])
            raw["w3"] = [W3Figures(**w) for w in raw["w3"]]
            return SideFigures(**raw)
    tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
    return f"failed (exit {done.returncode}): {tail[0]}"


def _ratio(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return ""
    ratio = value / reference
    decimals = 2 if ratio < 10 else 1 if ratio < 100 else 0
    return f" ({ratio:.{decimals}f}{TIMES})"


def _cell(value: float | None, decimals: int, reference: float | None, mark: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{decimals}f}{mark}{_ratio(value, reference)}"


def table_rows(
    results: Sequence[SideFigures], sizes: Sequence[int], reps: int
) -> tuple[list[str], list[list[str]]]:
    """The header and one row per measured side; ``*``: fewer passes or a smaller N."""
    header = ["side", "W1 ms/run", "W2 wall/ideal"]
    for n in sizes:
        header += [f"W3 {n:,}: runs/s", f"W3 {n:,}: KiB/run"]
    reference = next((r for r in results if r.name == REFERENCE and not r.skipped), None)
    rows: list[list[str]] = []
    for r in results:
        if r.skipped:
            continue
        ref = None if reference is None or r is reference else reference
        row = [
            BY_NAME[r.name].title,
            _cell(r.w1_ms, 3, ref.w1_ms if ref else None),
            _cell(r.w2_ratio, 3, ref.w2_ratio if ref else None),
        ]
        for n in sizes:
            w3 = next((w for w in r.w3 if w.n == n), None)
            ref_w3 = next((w for w in ref.w3 if w.n == n), None) if ref else None
            if w3 is None:
                row += ["-", "-"]
                continue
            few = "*" if w3.runs_per_s is not None and w3.passes < reps else ""
            small = "*" if w3.memory_n not in (None, n) else ""
            row.append(_cell(w3.runs_per_s, 0, ref_w3.runs_per_s if ref_w3 else None, few))
            row.append(_cell(w3.kib_per_run, 1, ref_w3.kib_per_run if ref_w3 else None, small))
        rows.append(row)
    return header, rows


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def remarks(results: Sequence[SideFigures]) -> list[str]:
    """What could not be measured, and why: one line each."""
    lines: list[str] = []
    for r in results:
        title = BY_NAME[r.name].title
        if r.skipped:
            lines.append(f"{title}: skipped, {r.skipped}")
        for w in r.w3:
            if w.note:
                lines.append(f"{title}: {w.note}")
    return lines


def versions_line(results: Sequence[SideFigures]) -> str:
    merged: dict[str, str] = {}
    for r in results:
        merged.update(r.versions)
    return ", ".join(f"{dist} {version}" for dist, version in merged.items())


def machine_line(quick: bool) -> str:
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}, asyncio"
        + ("; `--quick`: fewer repetitions, N = 1,000 only" if quick else "")
    )


def write_docs(block: str) -> None:
    text = DOCS_PAGE.read_text()
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start < 0 or end < start:
        raise SystemExit(f"{DOCS_PAGE}: the markers {START_MARKER} / {END_MARKER} are missing")
    new = text[: start + len(START_MARKER)] + "\n" + block + "\n" + text[end:]
    DOCS_PAGE.write_text(new)
    print(f"\nwritten into {DOCS_PAGE.relative_to(ROOT)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, N=1,000 only")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s.name for s in SIDES],
        metavar="NAME",
        help="run this side (and toolloop); repeatable; the table is then not written. "
        f"Names: {', '.join(s.name for s in SIDES)}",
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--side", choices=[s.name for s in SIDES], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        return side_main(args.side, args.quick)

    cfg = Config.make(args.quick)
    chosen = [s for s in SIDES if not args.only or s.name in args.only or s.name == REFERENCE]
    print(
        f"toolloop and its peers: {EXECUTING_ROUNDS} executing turns of "
        f"{COMMANDS_PER_RUN // EXECUTING_ROUNDS} tool calls + a final answer, concurrency "
        f"{CONCURRENCY}; {machine_line(args.quick)}",
        flush=True,
    )
    results: list[SideFigures] = []
    failed: list[str] = []
    for side in chosen:
        print(f"\n-- {side.name}", flush=True)
        outcome = run_side(side, args.quick)
        if isinstance(outcome, str):
            print(f"   {side.name}: {outcome}", flush=True)
            failed.append(f"{side.name}: {outcome}")
            continue
        if outcome.skipped:
            print(f"   skipped {side.name}: {outcome.skipped}", flush=True)
        else:
            print(f"   done in {outcome.seconds:.0f} s", flush=True)
        results.append(outcome)

    header, rows = table_rows(results, cfg.w3_sizes, cfg.w3_reps)
    notes = remarks(results)
    print(
        f"\nMedians; (r{TIMES}): the side's figure over toolloop's; *: see below. W1: 0-ms "
        f"tools, ms per run in a row. W2: 100-ms tools, wall time / "
        f"{EXECUTING_ROUNDS * W2_TOOL_SECONDS * 1e3:.0f} ms. W3: 10-ms tools, N runs at once.\n"
    )
    print(text_table(header, rows))
    print(f"\nversions: {versions_line(results)}")
    if notes:
        print("reduced or not measured:\n  " + "\n  ".join(notes))
    print("\n" + NOTES)
    if failed:
        print("\nFAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    if args.no_write or args.only:
        if args.only:
            print("\n(--only: the table is not written into the docs)")
        return 0
    block = [
        f"Measured by `python3 dev.py peers`{' --quick' if args.quick else ''} on "
        f"{machine_line(args.quick)}. Medians; in brackets, the figure over toolloop's.",
        "",
        markdown_table(header, rows),
        "",
        f"Versions: {versions_line(results)}.",
    ]
    if notes:
        block += ["", "Reduced or not measured (`*` in the table):", "", *(f"- {n}" for n in notes)]
    block += ["", NOTES]
    write_docs("\n".join(block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
