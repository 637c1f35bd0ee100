"""A run leaves no cyclic garbage: whatever it made is freed by reference counting when it
ends. Garbage in cycles waits for the collector's passes and, with thousands of runs in
flight, makes each full pass walk more (an executor that referenced itself through bound
methods did so on every run)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.loop import async_plan_and_execute
from toolloop.testing import ScriptedPlanner

pytestmark = pytest.mark.anyio


def cmd(tool: str, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": f"{tool} {kwargs}", "tool_name": tool, "tool_kwargs": kwargs}


PLANS: list[dict[str, Any]] = [
    {"next_action": "execute", "execution_commands": [cmd("now", n=i) for i in range(4)]},
    {"next_action": "execute", "execution_commands": [cmd("later", n=i) for i in range(4)]},
    {"next_action": "response"},
]


async def now(n: int) -> int:
    """Return at once.

    Args:
        n: a number.
    """
    return n


async def later(n: int) -> int:
    """Return after a checkpoint (so the round spreads over worker tasks).

    Args:
        n: a number.
    """
    await anyio.lowlevel.checkpoint()
    return n


@pytest.fixture
def saved_garbage() -> Iterator[list[Any]]:
    """The cyclic garbage made while the test runs (the collector off, then one pass that
    keeps what it finds instead of freeing it)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
    finally:
        gc.collect()
        found.extend(gc.garbage)
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


async def test_runs_leave_no_cyclic_garbage(saved_garbage: list[Any]) -> None:
    for _ in range(20):
        result = await async_plan_and_execute(
            "go", tools=[now, later], planner=ScriptedPlanner(PLANS), concurrency=4
        )
        assert len(result.done_plans) == 8 and all(r.success for r in result.done_plans)
    gc.collect()
    ours = [o for o in gc.garbage if type(o).__module__.startswith("toolloop")]
    assert ours == []
