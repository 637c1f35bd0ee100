"""What durability costs per round: the loop with a checkpoint store against the same loop
without one, for the memory, SQLite and PostgreSQL stores.

The workload: 100 runs at once (one task group), each of 5 rounds of one tool call (a tool
that returns at once) and a final planner answer, planned by a scripted planner (no model).
A durable round writes: the planner's output to the journal (intent and outcome), the
round-state checkpoint, the tool call's intent and outcome; plus the first and the last
checkpoint of each run.

- ``plain``: ``async_plan_and_execute`` without a store (the baseline, measured in the same
  run).
- ``memory``: :class:`~toolloop.checkpoints.MemoryCheckpointStore`.
- ``sqlite`` / ``sqlite (durable=False)``: one file, ``synchronous=FULL`` / ``NORMAL``, with
  group commit (the default: the writes of concurrent runs committed together).
- ``postgres``: :class:`~toolloop.checkpoints.PostgresCheckpointStore` with a pool of 10,
  against ``TOOLLOOP_POSTGRES_URL`` if set, else a throwaway local cluster (unix socket,
  ``fsync=off`` as the tests run it: set the URL to measure a real server's disk).
- ``... (group_commit=False)``: the same store with one transaction per write.

Printed: wall time, rounds per second over all runs, and the overhead per round
(``(t_store - t_plain) / rounds``, in µs). The median of the repetitions.

Run it with::

    .venv/bin/python benchmarks/bench_checkpoints.py                 # asyncio
    .venv/bin/python benchmarks/bench_checkpoints.py --backend trio
    .venv/bin/python benchmarks/bench_checkpoints.py --quick         # fewer repetitions
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from toolloop.checkpoints import (
    CheckpointStore,
    MemoryCheckpointStore,
    PostgresCheckpointStore,
    SQLiteCheckpointStore,
)
from toolloop.loop import async_plan_and_execute
from toolloop.testing import ScriptedPlanner

RUNS = 100
ROUNDS = 5


def script() -> list[dict[str, Any]]:
    round_ = {
        "next_action": "execute",
        "execution_commands": [{"purpose": "p", "tool_name": "echo", "tool_kwargs": {"x": 1}}],
    }
    return [round_] * ROUNDS + [{"next_action": "response"}]


def echo(x: int) -> int:
    """Give ``x`` back.

    Args:
        x: a number.
    """
    return x


async def batch(store: CheckpointStore | None) -> float:
    planner = ScriptedPlanner(script(), record=False)

    async def one() -> None:
        result = await async_plan_and_execute(
            "go",
            tools=[echo],
            planner=planner,
            max_turns=ROUNDS,
            store=store,
            run_id=None if store is None else uuid.uuid4().hex,
        )
        assert result.rounds == ROUNDS and all(r.success for r in result.done_plans)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(RUNS):
            tg.start_soon(one)
    return time.perf_counter() - started


def postgres_url() -> tuple[str, Callable[[], None]]:
    given = os.environ.get("TOOLLOOP_POSTGRES_URL")
    if given:
        return given, lambda: None
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from postgres_cluster import start_cluster, wait_ready

    cluster = start_cluster()
    wait_ready(cluster.url)
    return cluster.url, cluster.stop


async def main(repeat: int, pg_url: str | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="toolloop-bench-"))
    sides: dict[str, Callable[[], Any]] = {
        "plain": lambda: None,
        "memory": MemoryCheckpointStore,
        "sqlite": lambda: SQLiteCheckpointStore(folder / f"{uuid.uuid4().hex}.db", timeout=60),
        "sqlite (durable=False)": lambda: SQLiteCheckpointStore(
            folder / f"{uuid.uuid4().hex}.db", timeout=60, durable=False
        ),
        "sqlite (group_commit=False)": lambda: SQLiteCheckpointStore(
            folder / f"{uuid.uuid4().hex}.db", timeout=60, group_commit=False
        ),
    }
    if pg_url is not None:
        sides["postgres"] = lambda: PostgresCheckpointStore(
            pg_url, schema=f"b_{uuid.uuid4().hex[:12]}", max_size=10
        )
        sides["postgres (group_commit=False)"] = lambda: PostgresCheckpointStore(
            pg_url, schema=f"b_{uuid.uuid4().hex[:12]}", max_size=10, group_commit=False
        )
    times: dict[str, list[float]] = {name: [] for name in sides}
    await batch(None)  # warm-up
    for _ in range(repeat):
        for name, make in sides.items():
            store = make()
            try:
                times[name].append(await batch(store))
            finally:
                if store is not None:
                    await store.aclose()
    rounds = RUNS * ROUNDS
    plain = statistics.median(times["plain"])
    print(f"{RUNS} runs at once x {ROUNDS} rounds (one tool call each); median of {repeat}")
    print(f"{'store':<32}{'wall s':>9}{'rounds/s':>11}{'overhead µs/round':>20}")
    for name, values in times.items():
        wall = statistics.median(values)
        over = "" if name == "plain" else f"{(wall - plain) / rounds * 1e6:,.0f}"
        print(f"{name:<32}{wall:>9.3f}{rounds / wall:>11,.0f}{over:>20}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    stop: Callable[[], None] = lambda: None  # noqa: E731
    url: str | None = None
    if not args.no_postgres:
        try:
            url, stop = postgres_url()
        except FileNotFoundError as exc:
            print(f"postgres: skipped ({exc})")
    try:
        anyio.run(main, 1 if args.quick else 5, url, backend=args.backend)
    finally:
        stop()
