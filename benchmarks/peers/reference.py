"""The two reference sides, exactly as ``bench_loop.py`` runs them: toolloop and the baseline.

- ``toolloop``: ``await async_plan_and_execute(...)`` with a ``ToolRegistry`` built once and
  a ``ScriptedPlanner`` (``max_turns=5, concurrency=4``).
- ``baseline``: the minimal honest hand-written anyio loop (a ``for`` loop over rounds, each
  round's calls in a task group under a ``CapacityLimiter(4)``, no schema check, no models).
"""

from __future__ import annotations

from bench_loop import Workload, baseline_run, check_baseline, check_toolloop, toolloop_run

from .common import RunFn, check_results


def build_toolloop(delay: float) -> RunFn:
    work = Workload(delay)

    async def run() -> None:
        result = await toolloop_run(work)
        check_toolloop(result)
        check_results("toolloop", [r.result for r in result.done_plans])

    return run


def build_baseline(delay: float) -> RunFn:
    work = Workload(delay)

    async def run() -> None:
        result = await baseline_run(work)
        check_baseline(result)
        check_results("baseline", [r["result"] for r in result["results"]])

    return run
