"""A round runs through the runner alone when nobody observes it and nothing is journaled
(the loop's fast path), and with its events and journal otherwise: the records, the
answer and the stop reason are the same whichever path ran the round."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.checkpoints import MemoryCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.loop import async_plan_and_execute
from toolloop.runner import ToolCallFinished
from toolloop.testing import ScriptedPlanner

pytestmark = pytest.mark.anyio


def cmd(tool: str, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": f"call {tool}", "tool_name": tool, "tool_kwargs": kwargs}


SCRIPT = [
    {
        "next_action": "execute",
        "execution_commands": [
            cmd("echo", text="a"),
            cmd("broken", why="on purpose"),
            cmd("echo", text=7),  # fails the schema: never runs
            cmd("nothing"),  # no such tool
            cmd("slow"),  # outlives the tool timeout
            cmd("echo", text="b"),
        ],
    },
    {"next_action": "execute", "execution_commands": [cmd("echo", text="c")]},
    {"next_action": "response"},
]


async def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    await anyio.lowlevel.checkpoint()
    return text.upper()


async def broken(why: str) -> str:
    """Fail.

    Args:
        why: the reason.
    """
    await anyio.lowlevel.checkpoint()
    raise ConnectionError(f"refused: {why}")


async def slow() -> str:
    """Never answer in time."""
    await anyio.sleep_forever()
    return "late"  # pragma: no cover


async def run(**options: Any) -> Any:
    planner = ScriptedPlanner(SCRIPT)
    result = await async_plan_and_execute(
        "go",
        tools=[echo, broken, slow],
        planner=planner,
        tool_timeout=0.2,
        **options,
    )
    return result, planner


def records(result: Any) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in result.done_plans]


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_round_comes_to_the_same_observed_journaled_or_not(concurrency: int) -> None:
    plain, planner = await run(concurrency=concurrency)
    assert [r["success"] for r in records(plain)] == [True, False, False, False, False, True, True]
    assert [r["result"] for r in records(plain) if r["success"]] == ["A", "B", "C"]
    assert records(plain)[1]["error_type"] == "ConnectionError"
    events: list[FlowEvent] = []
    observed, _ = await run(concurrency=concurrency, on_event=events.append)
    durable, _ = await run(concurrency=concurrency, store=MemoryCheckpointStore())
    for other in (observed, durable):
        assert records(other) == records(plain)
        assert (other.stop_reason, other.status, other.text) == (
            plain.stop_reason,
            plain.status,
            plain.text,
        )
    told = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(told) == len(plain.done_plans)  # one event per record, calls that never ran too
    assert [c.round_index for c in planner.calls] == [0, 1, 2]
