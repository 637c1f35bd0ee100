"""The agent's usage: summed on its result and events, kept in its state so that
``usage_limits`` hold across pauses and resumes (a JSON snapshot too); model settings."""

from __future__ import annotations

import json

import pytest

from toolloop.agents import (
    AgentMiddleware,
    AgentState,
    Pause,
    Runtime,
    create_agent,
)
from toolloop.errors import UsageLimitError
from toolloop.flow import FlowEvent
from toolloop.kernel import ModelCallFinished, RunFinished
from toolloop.models import UsageLimits
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio

TEN = {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    return text


def chatty(calls: int) -> ScriptedChatModel:
    model = ScriptedChatModel()
    for _ in range(calls):
        model.add_reply(tool_calls=[{"name": "echo", "arguments": '{"text": "x"}'}], usage=TEN)
    model.add_reply("done", usage=TEN)
    return model


class PauseAfterEachModelCall(AgentMiddleware):
    def after_model(self, state: AgentState, runtime: Runtime) -> Pause:
        return Pause({"calls": state.model_calls})


async def test_the_result_and_the_events_carry_the_usage() -> None:
    events: list[FlowEvent] = []
    agent = create_agent(chatty(2), [echo])
    result = await agent.run("go", on_event=events.append)
    assert result.text == "done"
    assert (result.usage.requests, result.usage.total_tokens) == (3, 30)
    calls = [e.usage for e in events if isinstance(e, ModelCallFinished)]
    assert [u.total_tokens if u else None for u in calls] == [10, 10, 10]
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert finished[0].usage == result.usage


async def test_a_model_that_reports_nothing_is_unknown_not_zero() -> None:
    model = ScriptedChatModel()
    model.add_reply("hi")
    result = await create_agent(model).run("hello")
    assert (result.usage.requests, result.usage.unreported_requests) == (1, 1)
    assert result.usage.total_tokens is None


async def test_usage_limits_raise_with_the_conversation_kept() -> None:
    model = chatty(5)
    agent = create_agent(model, [echo], usage_limits=UsageLimits(max_total_tokens=25))
    with pytest.raises(UsageLimitError, match="max_total_tokens=25") as info:
        await agent.run("go")
    assert len(model.requests) == 3  # 30 tokens after three calls: the fourth is refused
    state = info.value.state
    assert isinstance(state, AgentState)
    assert state.usage.total_tokens == 30
    assert len(state.messages) > 1


@pytest.mark.parametrize("via_json", [False, True])
async def test_the_budget_holds_across_pauses_and_resumes(via_json: bool) -> None:
    model = chatty(5)
    agent = create_agent(
        model,
        [echo],
        middleware=[PauseAfterEachModelCall()],
        usage_limits=UsageLimits(max_requests=3),
    )
    result = await agent.run("go")
    for _ in range(2):
        assert result.paused and result.snapshot is not None
        snapshot = result.snapshot
        paused = json.dumps(snapshot.model_dump(mode="json")) if via_json else snapshot
        result = await agent.resume(paused, "go on")
    assert result.paused and result.snapshot is not None
    assert result.usage.requests == 3
    last = result.snapshot.model_dump(mode="json") if via_json else result.snapshot
    with pytest.raises(UsageLimitError, match="max_requests=3"):
        await agent.resume(last, "go on")  # the budget is in the snapshot's state
    assert len(model.requests) == 3


async def test_a_new_run_on_an_old_state_starts_its_usage_afresh() -> None:
    agent = create_agent(chatty(0), usage_limits=UsageLimits(max_requests=1))
    first = await agent.run("hi")
    second_model = ScriptedChatModel()
    second_model.add_reply("again", usage=TEN)
    again = create_agent(second_model, usage_limits=UsageLimits(max_requests=1))
    result = await again.run("more", state=first.state)
    assert result.usage.requests == 1


async def test_the_agent_passes_its_model_settings() -> None:
    model = ScriptedChatModel()
    model.add_reply("ok")
    await create_agent(model, settings={"seed": 5, "top_p": 0.3}).run("hi")
    assert model.requests[0].settings == {"seed": 5, "top_p": 0.3}
    with pytest.raises(ValueError, match="create_agent: unknown model settings"):
        create_agent(model, settings={"sed": 5})  # type: ignore[arg-type]


async def test_usage_limits_can_finish_the_run_with_what_it_has() -> None:
    model = chatty(5)
    agent = create_agent(
        model, [echo], usage_limits=UsageLimits(max_requests=2), on_usage_limit="finish"
    )
    result = await agent.run("go")
    assert len(model.requests) == 2
    assert (result.status, result.stop_reason) == ("completed", "usage_limit")
    assert result.state.usage_limit == "max_requests"
    assert [r.success for r in result.records] == [True, True]  # both calls answered
    again = await agent.run("more", state=result.state)  # a new run: a new budget
    assert again.usage.requests == 2 and again.stop_reason == "usage_limit"


def test_on_usage_limit_must_be_raise_or_finish() -> None:
    with pytest.raises(ValueError, match="on_usage_limit must be 'raise' or 'finish'"):
        create_agent(ScriptedChatModel(), on_usage_limit="stop")  # type: ignore[arg-type]


async def test_a_tool_s_model_call_past_the_budget_finishes_the_run_with_its_calls_answered() -> (
    None
):
    """The budget found spent inside a tool (its own model call) ends the run there, the
    kernel's way: stop reason ``usage_limit``, the call cut off answered and recorded."""
    from toolloop.models import ChatRequest, stream_chat

    helper = ScriptedChatModel()
    helper.add_reply("short", usage={"total_tokens": 7})

    async def summarize(text: str) -> str:
        """Summarize a text with a model.

        Args:
            text: the text.
        """
        request = ChatRequest(messages=[{"role": "user", "content": text}])
        async with stream_chat(helper, request) as deltas:
            return "".join([delta.content async for delta in deltas])

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "summarize", "arguments": '{"text": "x"}'}], usage=TEN)
    events: list[FlowEvent] = []
    agent = create_agent(
        model, [summarize], usage_limits=UsageLimits(max_requests=1), on_usage_limit="finish"
    )
    result = await agent.run("summarize x", on_event=events.append)
    assert (result.status, result.stop_reason) == ("completed", "usage_limit")
    assert helper.requests == []  # the tool's call was refused before it was made
    (record,) = result.records
    assert not record.success and "budget" in str(record.error)
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["usage_limit"]


async def test_the_model_calls_of_a_tool_that_ends_the_run_are_in_its_usage() -> None:
    from toolloop.models import ChatRequest, stream_chat
    from toolloop.tools import tool

    helper = ScriptedChatModel()
    helper.add_reply("short", usage={"total_tokens": 7})

    @tool(return_direct=True)
    async def summarize(text: str) -> str:
        """Summarize a text with a model.

        Args:
            text: the text.
        """
        request = ChatRequest(messages=[{"role": "user", "content": text}])
        async with stream_chat(helper, request) as deltas:
            return "".join([delta.content async for delta in deltas])

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "summarize", "arguments": '{"text": "x"}'}], usage=TEN)
    result = await create_agent(model, [summarize]).run("summarize x")
    assert result.stop_reason == "tools"
    assert (result.usage.requests, result.usage.total_tokens) == (2, 17)
