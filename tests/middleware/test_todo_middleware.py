"""The todo-list middleware: write_todos, its prompt on every model call, one write a turn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolloop.agents import Todo, ToolMessage, create_agent
from toolloop.agents.middleware import TODO_SYSTEM_PROMPT, TodoListMiddleware, write_todos
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


def todos_call(*items: tuple[str, str]) -> dict[str, str]:
    todos = [{"content": c, "status": s} for c, s in items]
    return {"name": "write_todos", "arguments": json.dumps({"todos": todos})}


def search(query: str) -> str:
    """Search."""
    return f"results for {query}"


def answers(result: Any) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


async def test_write_todos_updates_the_state_and_answers_with_the_list() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[todos_call(("plan", "in_progress"), ("do", "pending"))])
    model.add_reply("planned")
    result = await create_agent(model, middleware=[TodoListMiddleware()]).run("go")
    assert result.todos == [Todo(content="plan", status="in_progress"), Todo(content="do")]
    (answer,) = answers(result)
    assert answer.content == "The todo list is now:\n1. [in_progress] plan\n2. [pending] do"
    assert answer.status == "success"
    tools = model.requests[0].tools
    assert tools is not None
    (spec,) = tools
    assert spec["function"]["name"] == "write_todos"
    item = spec["function"]["parameters"]["$defs"]["Todo"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]


async def test_its_prompt_is_added_before_every_model_call_and_kept_out_of_the_state() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[todos_call(("a", "pending"))])
    model.add_reply("done")
    agent = create_agent(model, middleware=[TodoListMiddleware()], system_prompt="You help.")
    result = await agent.run("go")
    assert len(model.requests) == 2
    for request in model.requests:
        assert request.messages[0] == {
            "role": "system",
            "content": f"You help.\n\n{TODO_SYSTEM_PROMPT}",
        }
    assert all(m.role != "system" for m in result.messages)

    model = ScriptedChatModel(["hi"])
    mine = TodoListMiddleware(system_prompt="Use the list.", tool_description="The list.")
    await create_agent(model, middleware=[mine]).run("go")
    assert model.requests[0].messages[0] == {"role": "system", "content": "Use the list."}
    tools = model.requests[0].tools
    assert tools is not None
    assert tools[0]["function"]["description"] == "The list."


async def test_two_writes_in_one_turn_are_both_rejected_and_change_nothing() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{**todos_call(("first", "pending")), "id": "call_0"}])
    model.add_reply(  # ids as a provider numbering each reply's calls from 0 gives them
        tool_calls=[
            {**todos_call(("first", "completed")), "id": "call_0"},
            {"name": "search", "arguments": '{"query": "x"}', "id": "call_1"},
            {**todos_call(("other", "pending")), "id": "call_2"},
        ]
    )
    model.add_reply("ok")
    result = await create_agent(model, [search], middleware=[TodoListMiddleware()]).run("go")
    assert result.todos == [Todo(content="first")]  # as after the first turn
    first, *second_turn = answers(result)
    assert first.status == "success"
    by_id = {m.tool_call_id: m for m in second_turn}
    # the model said "call_0" again: the agent made it the run's own ("call_0.<turn>")
    assert by_id["call_0.1"].status == by_id["call_2"].status == "error"
    assert "write_todos was called 2 times in one reply" in by_id["call_0.1"].content
    assert by_id["call_1"].content == "results for x"  # the other tool of the turn ran
    # the rejections are written by the middleware, the tool's answer after it ran
    assert [m.tool_call_id for m in second_turn] == ["call_0.1", "call_2", "call_1"]
    # one record per call, in the order they were answered
    assert [(r.tool_name, r.success) for r in result.records] == [
        ("write_todos", True),
        ("write_todos", False),
        ("write_todos", False),
        ("search", True),
    ]


async def test_a_bad_todo_list_is_refused_without_running() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[todos_call(("x", "someday"))])
    model.add_reply("ok")
    result = await create_agent(model, middleware=[TodoListMiddleware()]).run("go")
    (answer,) = answers(result)
    assert answer.status == "error"
    assert "someday" in answer.content
    assert result.todos == []


def test_write_todos_on_its_own() -> None:
    command = write_todos([])
    assert command.update == {"todos": []}
    assert command.result == "The todo list is now empty."
