"""Shared results: 100 runs at once asking the same search, with and without sharing.

Each run is the loop (``async_plan_and_execute``, a scripted planner: one round of one
search, then the answer); the search tool takes ``--latency`` seconds (an API's round
trip). Three rows, measured on the same machine:

- ``no sharing``: every run calls the tool;
- ``shared``: ``shared_results={"search": SharedResults()}``, one object for every run:
  the identical calls in flight at once run the tool once;
- ``shared + cache``: ``SharedResults(ttl=60)``, a second wave of runs after the first:
  the cached result serves it.

Each row says how many times the tool's body ran and the wall time of the wave(s).

Run it with::

    .venv/bin/python benchmarks/bench_shared_results.py                 # asyncio
    .venv/bin/python benchmarks/bench_shared_results.py --backend trio  # or both
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from toolloop import async_plan_and_execute
from toolloop.runner import SharedResults
from toolloop.testing import ScriptedPlanner

PLAN = {
    "next_action": "execute",
    "execution_commands": [{"tool_name": "search", "tool_kwargs": {"q": "rates"}}],
}


async def wave(runs: int, latency: float, shared: SharedResults | None, ran: list[str]) -> None:
    async def search(q: str) -> str:
        """Search.

        Args:
            q: what to look for.
        """
        ran.append(q)
        await anyio.sleep(latency)
        return f"results for {q}"

    options: dict[str, Any] = {} if shared is None else {"shared_results": {"search": shared}}

    async def one() -> None:
        planner = ScriptedPlanner([PLAN, {"next_action": "response"}])
        result = await async_plan_and_execute("rates?", planner=planner, tools=[search], **options)
        assert result.done_plans[0].success

    async with anyio.create_task_group() as tg:
        for _ in range(runs):
            tg.start_soon(one)


async def measure(runs: int, latency: float) -> list[tuple[str, int, float]]:
    rows: list[tuple[str, int, float]] = []
    for name, shared, waves in (
        ("no sharing", None, 1),
        ("shared", SharedResults(), 1),
        ("shared + cache (2 waves)", SharedResults(ttl=60), 2),
    ):
        ran: list[str] = []
        started = time.perf_counter()
        for _ in range(waves):
            await wave(runs, latency, shared, ran)
        rows.append((name, len(ran), time.perf_counter() - started))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="asyncio")
    args = parser.parse_args()
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    print(f"{args.runs} runs at once, the same search each, {args.latency * 1000:g} ms a call")
    print("| sharing | backend | tool bodies run | seconds |\n|---|---|---:|---:|")
    for backend in backends:
        rows = anyio.run(measure, args.runs, args.latency, backend=backend)
        for name, ran, seconds in rows:
            print(f"| {name} | {backend} | {ran} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
