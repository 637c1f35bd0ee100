"""Running an agent: results, threads, events, errors, timeouts, the sync twin, the picture."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from toolloop import ExecutionTimeoutError, ModelCallError
from toolloop.agents import (
    AgentDefinitionError,
    AgentMiddleware,
    AgentModelError,
    AgentResult,
    AgentState,
    agent_flow,
    create_agent,
)
from toolloop.flow import FlowEvent
from toolloop.kernel import ModelCallFinished, ModelCallStarted, RunFinished, RunResult
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args or {})}


def echo(text: str) -> str:
    """Echo the text."""
    return text


async def test_a_result_holds_the_final_state() -> None:
    model = ScriptedChatModel(["Hi there."])
    result = await create_agent(model, system_prompt="Be kind.").run(
        [{"role": "system", "content": "Context: a test."}, "hello"]
    )
    assert isinstance(result, AgentResult) and isinstance(result, RunResult)
    assert result.status == "completed" and result.stop_reason == "answered"
    assert not result.paused
    assert result.snapshot is None
    assert result.pause_request is None
    assert result.text == "Hi there."
    assert result.todos == []
    assert result.structured_response is None
    assert "status='completed'" in repr(result)
    assert model.requests[0].messages == [
        {"role": "system", "content": "Be kind."},
        {"role": "system", "content": "Context: a test."},
        {"role": "user", "content": "hello"},
    ]
    assert model.requests[0].tools is None  # no tools, none sent


async def test_a_thread_goes_on_from_a_previous_state_which_stays_unchanged() -> None:
    model = ScriptedChatModel(["first answer", "second answer"])
    agent = create_agent(model)
    first = await agent.run("one")
    second = await agent.run("two", state=first.state)
    assert [m.role for m in second.messages] == ["user", "assistant", "user", "assistant"]
    assert len(first.messages) == 2  # copied, not changed
    assert len(model.requests[1].messages) == 3


async def test_runs_publish_typed_events() -> None:
    events: list[FlowEvent] = []
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "x"})])
    model.add_reply("done")
    await create_agent(model, [echo]).run("go", on_event=events.append)
    kinds = [e.kind for e in events]
    agent_kinds = [k for k in kinds if not k.startswith(("step_", "execution_", "event_"))]
    assert agent_kinds == [
        "model_call_started",
        "model_call_finished",
        "tool_call_started",
        "tool_call_finished",
        "model_call_started",
        "model_call_finished",
        "run_finished",
    ]
    started = [e for e in events if isinstance(e, ModelCallStarted)]
    assert [e.call_index for e in started] == [0, 1]
    finished = [e for e in events if isinstance(e, ModelCallFinished)]
    assert [c["name"] for c in finished[0].tool_calls] == ["echo"]
    assert (finished[1].text, finished[1].finish_reason) == ("done", "stop")
    tool_started = next(e for e in events if isinstance(e, ToolCallStarted))
    assert tool_started.command.tool_name == "echo"
    assert tool_started.command.tool_kwargs == {"text": "x"}
    assert tool_started.round_index == 0  # asked for by the first model turn
    tool_done = next(e for e in events if isinstance(e, ToolCallFinished))
    assert tool_done.call_id == tool_started.call_id
    assert tool_done.record.success
    assert tool_done.record.result == "x"
    end = next(e for e in events if isinstance(e, RunFinished))
    assert (end.stop_reason, end.turns, end.records) == ("answered", 2, 1)
    assert end.usage is not None and end.usage.requests == 2


async def test_a_model_error_is_a_clear_exception_with_the_state() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "x"})])
    model.add_error(ModelCallError("the server answered HTTP 503"))
    with pytest.raises(AgentModelError, match="model call 1 failed: ModelCallError") as info:
        await create_agent(model, [echo]).run("go")
    assert isinstance(info.value.__cause__, ModelCallError)
    assert [m.role for m in info.value.state.messages] == ["user", "assistant", "tool"]

    cut = ScriptedChatModel(
        [ScriptedChatReply(content="partial answer", chunk_size=2, error_after=2)]
    )
    with pytest.raises(AgentModelError, match="cut after 2 deltas"):
        await create_agent(cut).run("go")


async def test_a_model_that_hangs_times_out() -> None:
    model = ScriptedChatModel([ScriptedChatReply(content="slow", first_delay=5)])
    with anyio.fail_after(2):
        with pytest.raises(AgentModelError, match=r"answer did not finish within 0\.05 s"):
            await create_agent(model, model_timeout=0.05).run("go")


async def test_a_run_timeout_cancels_everything() -> None:
    async def slow() -> str:
        """Slow."""
        await anyio.sleep(5)
        return "late"  # pragma: no cover

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("slow")])
    with anyio.fail_after(2):
        with pytest.raises(ExecutionTimeoutError) as info:
            await create_agent(model, [slow]).run("go", timeout=0.05)
    assert [m.role for m in info.value.state.messages] == ["user", "assistant"]


async def test_max_turns_ends_an_endless_loop_with_its_stop_reason() -> None:
    again = ScriptedChatReply(tool_calls=(FakeToolCall("echo", '{"text": "again"}'),))
    model = ScriptedChatModel(responder=lambda request: again)
    events: list[FlowEvent] = []
    result = await create_agent(model, [echo], max_turns=3).run("go", on_event=events.append)
    assert (result.status, result.stop_reason) == ("completed", "max_turns")
    assert len(model.requests) == 3 and result.state.model_calls == 3
    assert [r.result for r in result.records] == ["again"] * 3  # every call was answered
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert (end.stop_reason, end.turns) == ("max_turns", 3)
    override = await create_agent(model, [echo], max_turns=3).run("go", max_turns=1)
    assert override.stop_reason == "max_turns" and len(model.requests) == 4
    none = await create_agent(model, [echo]).run("go", max_turns=0)  # not even one call
    assert none.stop_reason == "max_turns" and len(model.requests) == 4


def test_bad_definitions_are_refused() -> None:
    model = ScriptedChatModel()

    class Named(AgentMiddleware):
        pass

    with pytest.raises(AgentDefinitionError, match="two middleware are named 'Named'"):
        create_agent(model, middleware=[Named(), Named()])
    with pytest.raises(AgentDefinitionError, match="a class\\? instantiate it"):
        create_agent(model, middleware=[Named])  # type: ignore[list-item]
    with pytest.raises(AgentDefinitionError, match="model must be a ChatModel"):
        create_agent("gpt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        create_agent(model, concurrency=0)
    with pytest.raises(ValueError, match="model_timeout must be a number of seconds"):
        create_agent(model, model_timeout=0)
    with pytest.raises(ValueError, match="max_turns must be 0 or more"):
        create_agent(model, max_turns=-1)
    with pytest.raises(ValueError, match="on_timeout must be 'raise' or 'finish'"):
        create_agent(model, on_timeout="later")  # type: ignore[arg-type]


def test_run_sync_runs_its_own_loop() -> None:
    model = ScriptedChatModel(["sync answer"])
    result = create_agent(model).run_sync("go", backend="trio")
    assert result.text == "sync answer"


async def test_run_sync_refuses_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match=r"use `await agent\.run"):
        create_agent(ScriptedChatModel()).run_sync("go")
    with pytest.raises(RuntimeError, match=r"use `await agent\.recover"):
        create_agent(ScriptedChatModel()).recover_sync("r")


def test_the_flow_picture() -> None:
    agent = create_agent(ScriptedChatModel(), [echo])
    picture = agent.to_mermaid()
    assert agent.flow is agent_flow
    for label in ("begin", "model", "tools", "finish", "resume"):
        assert f'"{label}"' in picture
    assert '-->|"pause"|' in picture
    assert [t.name for t in agent.tools] == ["echo"]
    assert agent.middleware == []
    assert isinstance(AgentState(), AgentState)
