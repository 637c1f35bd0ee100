"""Each routing rule of the agent, in order, with a scripted model (asyncio and trio)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from toolloop.agents import (
    AgentMiddleware,
    AgentState,
    AssistantMessage,
    Runtime,
    ToolCall,
    ToolMessage,
    UserMessage,
    create_agent,
    route_after_model,
    route_after_tools,
)
from toolloop.testing import ScriptedChatModel
from toolloop.tools import tool

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, Any] | None = None, id: str | None = None) -> dict[str, str]:
    out = {"name": name, "arguments": json.dumps(args or {})}
    if id is not None:
        out["id"] = id
    return out


def steps(result: Any) -> list[str]:
    return [e.step for e in result.trace if not e.step.endswith("?")]


async def echo(text: str) -> str:
    """Echo the text."""
    return text


# -- the rules as functions ----------------------------------------------------------------


def ai(*calls: ToolCall, content: str = "") -> AssistantMessage:
    return AssistantMessage(content=content, tool_calls=list(calls))


def answer(call_id: str) -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, content="ok")


def test_after_model_rules_in_order() -> None:
    c1, c2 = ToolCall(id="1", name="a"), ToolCall(id="2", name="b")
    user = UserMessage(content="hi")
    # 1. an explicit jump wins over everything
    assert route_after_model(AgentState(messages=[user, ai(c1)]), "end") == "end"
    assert route_after_model(AgentState(messages=[user, ai()]), "model") == "model"
    # 2. no model message, or one without tool calls: end
    assert route_after_model(AgentState(messages=[user])) == "end"
    assert route_after_model(AgentState(messages=[user, ai(content="done")])) == "end"
    # 3. calls without an answer yet: tools (even with a structured response)
    state = AgentState(messages=[user, ai(c1, c2), answer("1")], structured_response={"x": 1})
    assert route_after_model(state) == "tools"
    # 4. every call answered, and a structured response: end
    state = AgentState(messages=[user, ai(c1), answer("1")], structured_response={"x": 1})
    assert route_after_model(state) == "end"
    # 5. every call answered (synthetic results): back to the model
    assert route_after_model(AgentState(messages=[user, ai(c1), answer("1")])) == "model"


def test_after_tools_rules_in_order() -> None:
    c1 = ToolCall(id="1", name="answer")
    state = AgentState(messages=[ai(c1), answer("1")])
    assert route_after_tools(state, [False], (), "end") == "end"  # a jump wins
    assert route_after_tools(state, [True, True]) == "end"  # every tool return_direct
    assert route_after_tools(state, [True, False]) == "model"
    assert route_after_tools(state, []) == "model"  # nothing ran: not "all return_direct"
    assert route_after_tools(state, [False], {"answer"}) == "model"  # no response (yet)
    state.structured_response = {"x": 1}
    assert route_after_tools(state, [False], {"answer"}) == "end"  # the output tool gave it
    assert route_after_tools(state, [False], {"other"}) == "model"


# -- the rules through the agent -------------------------------------------------------------


async def test_no_tool_calls_ends_the_run() -> None:
    model = ScriptedChatModel(["Hello!"])
    result = await create_agent(model, [echo]).run("hi")
    assert result.status == "completed"
    assert result.text == "Hello!"
    assert steps(result) == ["begin", "model", "finish", "end"]
    assert [m.role for m in result.messages] == ["user", "assistant"]


async def test_pending_calls_go_to_tools_then_back_to_the_model() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "a"}), call("echo", {"text": "b"})])
    model.add_reply("a and b")
    result = await create_agent(model, [echo]).run("echo a and b")
    assert steps(result) == [
        "begin",
        "model",
        "tools",
        "model",
        "finish",
        "end",
    ]
    tool_messages = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages] == ["a", "b"]  # in call order
    assert [m.tool_call_id for m in tool_messages] == ["call_0_0", "call_0_1"]  # turn, place
    # the model saw the answers
    sent = model.requests[1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]


async def test_each_call_is_its_own_task_under_the_concurrency_limit() -> None:
    running = peak = 0

    @tool
    async def slow(n: int) -> int:
        """Take a while."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return n

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("slow", {"n": i}) for i in range(6)])
    model.add_reply("done")
    result = await create_agent(model, [slow], concurrency=2).run("go")
    assert peak <= 2  # never more; tests/runner/test_limits_everywhere.py proves it reaches 2
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == [
        str(i) for i in range(6)
    ]
    assert sum(e.step == "tools" for e in result.trace) == 1  # one batch ran the six

    peak = 0
    model.add_reply(tool_calls=[call("slow", {"n": i}) for i in range(6)])
    model.add_reply("done")
    await create_agent(model, [slow], concurrency=6).run("go")
    assert peak <= 6


async def test_calls_answered_by_synthetic_results_loop_back_to_the_model() -> None:
    class AnswerEverything(AgentMiddleware):
        def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
            last = state.messages[-1]
            assert isinstance(last, AssistantMessage)
            answers = [ToolMessage(tool_call_id=c.id, content="cached") for c in last.tool_calls]
            return {"messages": answers} if answers else None

    ran: list[str] = []

    @tool
    def work(x: str) -> str:
        """Work."""
        ran.append(x)
        return x

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("work", {"x": "1"})])
    model.add_reply("final")
    result = await create_agent(model, [work], middleware=[AnswerEverything()]).run("go")
    assert ran == []  # the tool never ran: its call was answered already
    assert steps(result) == ["begin", "model", "model", "finish", "end"]
    assert result.text == "final"


async def test_a_jump_wins_over_pending_calls() -> None:
    class Stop(AgentMiddleware):
        def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any]:
            return {"jump_to": "end"}

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "x"})])
    result = await create_agent(model, [echo], middleware=[Stop()]).run("go")
    assert steps(result) == ["begin", "model", "finish", "end"]
    # the tool never ran; its call is answered as not run
    answers = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [(m.status, m.content) for m in answers] == [
        ("error", "Error: the run ended before this call ran")
    ]


async def test_a_jump_from_before_model_skips_the_model() -> None:
    class Stop(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any]:
            return {"jump_to": "end"}

    model = ScriptedChatModel()
    result = await create_agent(model, [echo], middleware=[Stop()]).run("go")
    assert model.requests == []
    assert steps(result) == ["begin", "model", "finish", "end"]
    # with no model message the rules end the run too
    assert route_after_model(result.state) == "end"


class Answer(BaseModel):
    city: str
    temperature: float


async def test_a_structured_response_ends_the_run_after_the_model() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Answer", {"city": "Lisbon", "temperature": 21.5})])
    result = await create_agent(model, [echo], response_format=Answer).run("weather?")
    assert result.structured_response == Answer(city="Lisbon", temperature=21.5)
    assert steps(result) == ["begin", "model", "finish", "end"]


async def test_every_tool_return_direct_ends_the_run_after_the_tools() -> None:
    @tool(return_direct=True)
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("lookup", {"key": "a"}), call("lookup", {"key": "b"})])
    result = await create_agent(model, [lookup, echo]).run("look up a and b")
    assert len(model.requests) == 1  # the model is not asked again
    assert steps(result)[-3:] == ["tools", "finish", "end"]
    assert isinstance(result.messages[-1], ToolMessage)

    # one tool that is not return_direct: back to the model
    model.add_reply(tool_calls=[call("lookup", {"key": "a"}), call("echo", {"text": "b"})])
    model.add_reply("both")
    result = await create_agent(model, [lookup, echo]).run("look up a, echo b")
    assert result.text == "both"

    # a return_direct tool that failed does not end the run: the model sees the error
    model.add_reply(tool_calls=[call("lookup", {"wrong": "a"})])
    model.add_reply("sorry")
    result = await create_agent(model, [lookup]).run("look up")
    assert result.text == "sorry"


async def test_a_structured_output_tool_beside_other_tools_ends_after_the_tools() -> None:
    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        """Take a note."""
        ran.append(text)
        return "noted"

    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[
            call("note", {"text": "remember"}),
            call("Answer", {"city": "Porto", "temperature": 18}),
        ]
    )
    result = await create_agent(model, [note], response_format=Answer).run("go")
    assert ran == ["remember"]
    assert result.structured_response == Answer(city="Porto", temperature=18)
    assert len(model.requests) == 1
    assert steps(result) == [
        "begin",
        "model",
        "tools",
        "finish",
        "end",
    ]
