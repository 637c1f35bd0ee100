"""A run's counters live in its state, so its limits hold across any number of pauses and
resumes: in this process, from a JSON snapshot (as another process resumes it), and in
another process for real."""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from toolloop.agents import (
    AgentMiddleware,
    AgentResult,
    AgentState,
    Pause,
    Runtime,
    StructuredOutputError,
    ToolStrategy,
    create_agent,
)
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


class PauseAfterEachModelCall(AgentMiddleware):
    """Asks a human after every model call; any answer lets the run go on."""

    def after_model(self, state: AgentState, runtime: Runtime) -> Pause:
        return Pause({"model_calls": state.model_calls})


def endless_model(calls: int) -> ScriptedChatModel:
    """A model that would call a tool for ever."""
    model = ScriptedChatModel()
    for _ in range(calls):
        model.add_reply(tool_calls=[{"name": "echo", "arguments": '{"text": "again"}'}])
    return model


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    return text


async def resume_until_done(agent: Any, result: AgentResult, *, via_json: bool) -> int:
    """Resume a run paused after every model call until it ends; how many pauses."""
    pauses = 0
    while result.status == "paused":
        pauses += 1
        assert pauses < 20, "the limit did not stop the run"
        assert result.snapshot is not None
        paused: Any = result.snapshot
        if via_json:  # what a store or another process hands back
            paused = json.dumps(result.snapshot.model_dump(mode="json"))
        result = await agent.resume(paused, "go on")
    return pauses


async def resume_until_done_result(agent: Any, result: AgentResult) -> AgentResult:
    while result.status == "paused":
        assert result.snapshot is not None
        result = await agent.resume(json.dumps(result.snapshot.model_dump(mode="json")), "go on")
    return result


@pytest.mark.parametrize("via_json", [False, True], ids=["snapshot", "json"])
async def test_max_turns_holds_across_pauses(via_json: bool) -> None:
    model = endless_model(10)
    agent = create_agent(model, [echo], middleware=[PauseAfterEachModelCall()], max_turns=2)
    result = await agent.run("loop for ever")
    assert result.status == "paused"
    assert result.state.model_calls == 1
    pauses = await resume_until_done(agent, result, via_json=via_json)
    assert pauses == 2
    assert len(model.requests) == 2  # without the state, each resume started again at 0
    done = await resume_until_done_result(agent, await agent.run("loop", max_turns=2))
    assert (done.stop_reason, done.state.model_calls) == ("max_turns", 2)


class Answer(BaseModel):
    city: str


async def test_structured_output_retries_hold_across_pauses() -> None:
    model = ScriptedChatModel()
    for _ in range(10):  # never a valid answer
        model.add_reply(tool_calls=[{"name": "Answer", "arguments": '{"town": "Porto"}'}])
    agent = create_agent(
        model,
        middleware=[PauseAfterEachModelCall()],
        response_format=ToolStrategy(Answer, retries=2),
    )
    result = await agent.run("where?")
    with pytest.raises(StructuredOutputError, match="3 times"):
        await resume_until_done(agent, result, via_json=True)
    assert len(model.requests) == 3  # the first answer and two retries, however many pauses


async def test_a_new_run_from_an_old_state_starts_its_counters_at_zero() -> None:
    model = endless_model(3)
    model.add_reply("done")
    agent = create_agent(model, [echo], max_turns=2)
    ended = await agent.run("loop")
    assert ended.stop_reason == "max_turns"
    state = ended.state
    assert state.model_calls == 2 and len(ended.records) == 2
    model2 = ScriptedChatModel()
    model2.add_reply("fine")
    again = await create_agent(model2, max_turns=1).run("again", state=state)
    assert (again.text, again.stop_reason) == ("fine", "answered")
    assert again.state.model_calls == 1 and again.records == []  # this run's own


PROCESS = textwrap.dedent(
    """
    import json, sys
    import anyio
    from toolloop.agents import AgentMiddleware, Pause, create_agent
    from toolloop.testing import ScriptedChatModel

    class PauseAfterEachModelCall(AgentMiddleware):
        def after_model(self, state, runtime):
            return Pause({"model_calls": state.model_calls})

    def echo(text: str) -> str:
        "Say it back."
        return text

    model = ScriptedChatModel()
    for _ in range(10):
        model.add_reply(tool_calls=[{"name": "echo", "arguments": '{"text": "x"}'}])
    agent = create_agent(model, [echo], middleware=[PauseAfterEachModelCall()], max_turns=2)
    snapshot = sys.stdin.read()

    async def main():
        result = await agent.resume(snapshot, "go on")
        if result.stop_reason == "max_turns":
            print(json.dumps({"limit": True, "requests": len(model.requests)}))
            return
        print(json.dumps({"limit": False, "requests": len(model.requests),
                          "snapshot": result.snapshot.model_dump(mode="json")}))

    anyio.run(main)
    """
)


async def test_max_turns_holds_when_each_resume_is_another_process() -> None:
    model = endless_model(1)
    agent = create_agent(model, [echo], middleware=[PauseAfterEachModelCall()], max_turns=2)
    result = await agent.run("loop for ever")
    assert result.snapshot is not None
    snapshot = json.dumps(result.snapshot.model_dump(mode="json"))
    requests = 1
    for _ in range(5):
        with anyio.fail_after(120):  # a hang guard only
            done = await anyio.run_process(
                [sys.executable, "-c", PROCESS], input=snapshot.encode(), check=True
            )
        out = json.loads(done.stdout)
        requests += out["requests"]
        if out["limit"]:
            break
        snapshot = json.dumps(out["snapshot"])
    else:
        pytest.fail("five processes resumed the run and none hit the limit")
    assert requests == 2
