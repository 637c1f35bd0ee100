"""The three products hand back results of one family (:class:`toolloop.kernel.RunResult`)."""

from __future__ import annotations

import pytest

from toolloop import StatusAgent, async_plan_and_execute, create_agent
from toolloop.kernel import RunResult
from toolloop.testing import ScriptedChatModel, ScriptedPlanner

pytestmark = pytest.mark.anyio


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    return text


async def test_every_product_returns_a_run_result_with_its_records() -> None:
    loop = await async_plan_and_execute(
        "echo",
        tools=[echo],
        planner=ScriptedPlanner(
            [
                {
                    "next_action": "execute",
                    "execution_commands": [{"tool_name": "echo", "tool_kwargs": {"text": "a"}}],
                }
            ]
        ),
    )
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "echo", "arguments": '{"text": "a"}'}])
    model.add_reply("done")
    agent = await create_agent(model, [echo]).run("echo")
    decisions = iter(
        [
            {
                "action": "call_tools",
                "tool_calls": [{"tool_name": "echo", "arguments": {"text": "a"}}],
            },
            {"action": "finish", "answer": "done"},
        ]
    )
    status = await StatusAgent(
        tools=[echo],
        analyze=lambda view: "echo",
        plan=lambda view: ["echo"],
        decide=lambda view: next(decisions),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "hi",
    ).run("echo")
    for result in (loop, agent, status):
        assert isinstance(result, RunResult)
        assert result.status == "completed" and not result.paused
        assert result.run_id
        assert result.stop_reason
        assert [(r.tool_name, r.kwargs, r.success, r.result) for r in result.records] == [
            ("echo", {"text": "a"}, True, "a")
        ]
    assert (loop.stop_reason, agent.stop_reason, status.stop_reason) == (
        "answered",
        "answered",
        "answered",
    )
