"""Tool calls in the agent: state updates from tools, bad input, failures and timeouts."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from toolloop.agents import (
    AgentState,
    Command,
    ToolMessage,
    UserMessage,
    create_agent,
)
from toolloop.testing import ScriptedChatModel
from toolloop.tools import Tool, tool

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, Any] | str | None = None) -> dict[str, str]:
    arguments = args if isinstance(args, str) else json.dumps(args or {})
    return {"name": name, "arguments": arguments}


def answers(state: AgentState) -> list[ToolMessage]:
    return [m for m in state.messages if isinstance(m, ToolMessage)]


async def test_a_tool_returns_a_state_update_with_its_result() -> None:
    @tool
    def remember(key: str, value: str) -> Command:
        """Remember a value."""
        return Command(update={key: value}, result=f"remembered {key}")

    @tool
    def note(text: str) -> Command:
        """Write a note into the conversation."""
        extra = UserMessage(content=f"(note: {text})")
        return Command(
            update={
                "messages": [ToolMessage(tool_call_id="call_0_1", content="noted"), extra],
                "todos": [{"content": text}],
            }
        )

    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[
            call("remember", {"key": "city", "value": "Lisbon"}),
            call("note", {"text": "x"}),
        ]
    )
    model.add_reply("ok")
    result = await create_agent(model, [remember, note]).run("go")
    assert result.state.values == {"city": "Lisbon"}
    assert [t.content for t in result.todos] == ["x"]
    assert [(m.tool_call_id, m.content) for m in answers(result.state)] == [
        ("call_0_0", "remembered city"),
        ("call_0_1", "noted"),  # the tool's own message for its call
    ]
    # tool messages first (right after the assistant message), then the updates' messages
    assert [m.role for m in result.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]


async def test_a_tool_update_that_does_not_fit_changes_nothing() -> None:
    @tool
    def bad(x: int) -> Command:
        """Return a broken update."""
        return Command(update={"todos": [{"status": "unknown"}], "flag": True})

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("bad", {"x": 1})])
    model.add_reply("ok")
    result = await create_agent(model, [bad]).run("go")
    (message,) = answers(result.state)
    assert message.status == "error"
    assert "state update does not fit" in message.content
    assert result.state.values == {}
    assert result.todos == []


async def test_a_tool_can_jump() -> None:
    @tool
    def stop() -> Command:
        """Stop the run."""
        return Command(jump_to="end", result="stopped")

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("stop")])
    result = await create_agent(model, [stop]).run("go")
    assert len(model.requests) == 1
    assert answers(result.state)[0].content == "stopped"


async def test_bad_input_never_runs_a_tool_and_never_crashes() -> None:
    ran: list[Any] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append((a, b))
        return a + b

    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[
            call("add", '{"a": 1, "b": '),  # not JSON (cut off)
            call("add", "[1, 2]"),  # JSON, but no object
            call("add", {"a": "one", "b": 2}),  # fails the schema
            call("add", {"a": 1}),  # a required argument missing
            call("sub", {"a": 1, "b": 2}),  # no such tool
            call("add", {"a": 1, "b": 2}),  # fine
        ]
    )
    model.add_reply("3")
    result = await create_agent(model, [add]).run("add")
    assert ran == [(1, 2)]
    messages = answers(result.state)
    assert [m.status for m in messages] == ["error"] * 5 + ["success"]
    assert "not valid JSON" in messages[0].content
    assert "must be a JSON object, got list" in messages[1].content
    assert "do not fit its schema" in messages[2].content
    assert "'b'" in messages[3].content
    assert "no tool named 'sub'; available tools: 'add'" in messages[4].content
    assert all("the tool did not run" in m.content for m in messages[:5])
    assert messages[5].content == "3"
    # the model got the raw arguments back as it wrote them, and every error
    sent = model.requests[1].messages
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1, "b": '
    assert [m["role"] for m in sent].count("tool") == 6


async def test_a_tool_that_raises_or_hangs_is_answered_with_an_error() -> None:
    @tool
    async def broken() -> str:
        """Always fails."""
        raise ValueError("disk on fire")

    @tool(timeout=0.05)
    async def hangs() -> str:
        """Never answers."""
        await anyio.sleep_forever()
        return "never"  # pragma: no cover

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("broken"), call("hangs")])
    model.add_reply("sorry")
    result = await create_agent(model, [broken, hangs]).run("go")
    first, second = answers(result.state)
    assert first.content == "Error: tool 'broken' raised ValueError: disk on fire"
    assert "did not finish within 0.05 s" in second.content
    assert result.text == "sorry"


async def test_tool_timeout_applies_to_every_call() -> None:
    async def slow() -> str:
        """Slow."""
        await anyio.sleep(5)
        return "late"  # pragma: no cover

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("slow")])
    model.add_reply("ok")
    with anyio.fail_after(2):
        result = await create_agent(model, [slow], tool_timeout=0.05).run("go")
    assert answers(result.state)[0].status == "error"


async def test_a_shared_limiter_bounds_calls_across_runs() -> None:
    running = peak = 0

    three = anyio.Event()

    async def work(n: int) -> int:
        """Work."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running >= 3:
            three.set()
        with anyio.fail_after(30):  # a hang guard: a limiter below 3 would hang here
            await three.wait()
        running -= 1
        return n

    limiter = anyio.CapacityLimiter(3)

    def responder(request: Any) -> Any:
        from toolloop.testing import FakeToolCall, ScriptedChatReply

        if any(m["role"] == "tool" for m in request.messages):
            return "done"
        return ScriptedChatReply(
            tool_calls=tuple(FakeToolCall("work", json.dumps({"n": i})) for i in range(4))
        )

    model = ScriptedChatModel(responder=responder)
    agent = create_agent(model, [work], limiter=limiter, concurrency=4)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(agent.run, "go")
    assert peak == 3


async def test_an_explicit_tool_gets_its_arguments_as_json() -> None:
    seen: list[Any] = []

    def search(**kwargs: Any) -> str:
        seen.append(kwargs)
        return "found"

    search_tool = Tool(
        name="search",
        description="Search.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        function=search,
    )
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("search", {"q": "anyio"})])
    model.add_reply("ok")
    await create_agent(model, [search_tool]).run("go")
    assert seen == [{"q": "anyio"}]
