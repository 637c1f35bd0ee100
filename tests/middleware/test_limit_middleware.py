"""Model-call and tool-call limits: per run and per thread, ending gracefully or raising."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolloop.agents import (
    AssistantMessage,
    ModelCallLimitError,
    ToolCallLimitError,
    ToolMessage,
    create_agent,
)
from toolloop.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio

ran: list[str] = []


def search(query: str) -> str:
    """Search."""
    ran.append(query)
    return "found"


def fetch(url: str) -> str:
    """Fetch."""
    ran.append(url)
    return "page"


def searching(n: int = 1) -> ScriptedChatReply:
    calls = tuple(FakeToolCall("search", json.dumps({"query": f"q{i}"})) for i in range(n))
    return ScriptedChatReply(tool_calls=calls)


def endless() -> ScriptedChatModel:
    """A model that always searches once more."""
    return ScriptedChatModel(responder=lambda request: searching())


def answers(result: Any) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


async def test_model_call_limit_per_run_ends_gracefully() -> None:
    model = endless()
    limit = ModelCallLimitMiddleware(run_limit=3)
    agent = create_agent(model, [search], middleware=[limit])
    result = await agent.run("go")
    assert len(model.requests) == 3
    assert result.status == "completed"
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.content == "I stopped here: this run has made 3 model calls, its limit."
    assert result.state.values[limit.run_key] == 3
    # a new run of the same thread starts its run count again
    again = await agent.run("more", state=result.state)
    assert len(model.requests) == 6
    assert again.state.values[limit.thread_key] == 6


async def test_model_call_limit_per_thread_counts_across_runs() -> None:
    model = ScriptedChatModel(["one", "two", "three"])
    agent = create_agent(model, middleware=[ModelCallLimitMiddleware(thread_limit=2)])
    first = await agent.run("a")
    second = await agent.run("b", state=first.state)
    third = await agent.run("c", state=second.state)
    assert len(model.requests) == 2
    assert third.text == "I stopped here: the thread has made 2 model calls, its limit."
    fresh = await agent.run("d")  # another thread
    assert fresh.text == "three"


async def test_model_call_limit_can_raise() -> None:
    agent = create_agent(
        endless(),
        [search],
        middleware=[ModelCallLimitMiddleware(run_limit=2, exit_behavior="error")],
    )
    with pytest.raises(ModelCallLimitError, match="this run has made 2 model calls") as info:
        await agent.run("go")
    assert len([m for m in info.value.state.messages if isinstance(m, AssistantMessage)]) == 2


async def test_tool_call_limit_continue_blocks_the_calls_over_it() -> None:
    ran.clear()
    model = ScriptedChatModel([searching(3), searching(2), "done"])
    limit = ToolCallLimitMiddleware(run_limit=4)
    result = await create_agent(model, [search], middleware=[limit]).run("go")
    assert sorted(ran) == ["q0", "q0", "q1", "q2"]
    blocked = [m for m in answers(result) if m.status == "error"]
    assert len(blocked) == 1
    assert "the run limit of 4 tool calls is reached; this call did not run" in blocked[0].content
    assert result.text == "done"
    assert result.state.values[limit.run_key] == 4


async def test_tool_call_limit_per_tool_and_per_thread() -> None:
    ran.clear()
    reply = ScriptedChatReply(
        tool_calls=(
            FakeToolCall("search", '{"query": "a"}'),
            FakeToolCall("fetch", '{"url": "u"}'),
            FakeToolCall("search", '{"query": "b"}'),
        )
    )
    model = ScriptedChatModel([reply, "done", searching(), "done again"])
    limits = [
        ToolCallLimitMiddleware(tool_name="search", thread_limit=1),
        ToolCallLimitMiddleware(tool_name="fetch", run_limit=5),
    ]
    assert [m.name for m in limits] == [
        "ToolCallLimitMiddleware[search]",
        "ToolCallLimitMiddleware[fetch]",
    ]
    agent = create_agent(model, [search, fetch], middleware=limits)
    first = await agent.run("go")
    assert sorted(ran) == ["a", "u"]  # the calls run concurrently: any order
    second = await agent.run("again", state=first.state)
    assert sorted(ran) == ["a", "u"]  # the thread's one search was used
    assert "the thread limit of 1 calls of 'search'" in answers(second)[-1].content


async def test_tool_call_limit_end_runs_none_of_the_calls_and_ends() -> None:
    ran.clear()
    model = ScriptedChatModel([searching(1), searching(2), "never"])
    limit = ToolCallLimitMiddleware(run_limit=2, exit_behavior="end")
    result = await create_agent(model, [search], middleware=[limit]).run("go")
    assert ran == ["q0"]
    assert len(model.requests) == 2
    assert [m.status for m in answers(result)] == ["success", "error", "error"]
    assert result.text == "I stopped here: the run limit of 2 tool calls is reached."


async def test_tool_call_limit_can_raise() -> None:
    model = ScriptedChatModel([searching(2)])
    limit = ToolCallLimitMiddleware(run_limit=1, exit_behavior="error")
    with pytest.raises(ToolCallLimitError, match="asked for 2 more"):
        await create_agent(model, [search], middleware=[limit]).run("go")


def test_limits_need_a_limit() -> None:
    with pytest.raises(ValueError, match="thread_limit, a run_limit"):
        ModelCallLimitMiddleware()
    with pytest.raises(ValueError, match="thread_limit, a run_limit"):
        ToolCallLimitMiddleware()
    with pytest.raises(ValueError, match="exit_behavior"):
        ToolCallLimitMiddleware(run_limit=1, exit_behavior="stop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="run_limit must be an int"):
        ModelCallLimitMiddleware(run_limit=-1)
