"""The seed scenario: "review the code, refactor it, write tests".

The model writes a todo list, then works through it one item per turn: each turn calls the
work tool beside ``write_todos`` (marking the item done and the next one in progress),
and finishes with an answer without tool calls. The final state holds three completed
todos, and the work happened in the list's order.
"""

from __future__ import annotations

import json

import pytest

from toolloop.agents import AssistantMessage, Todo, ToolMessage, create_agent
from toolloop.agents.middleware import TODO_SYSTEM_PROMPT, TodoListMiddleware
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio

TASKS = ["Review the code", "Refactor it", "Write tests"]


def todos(*statuses: str) -> dict[str, str]:
    items = [{"content": c, "status": s} for c, s in zip(TASKS, statuses, strict=True)]
    return {"name": "write_todos", "arguments": json.dumps({"todos": items})}


def work_on(step: str) -> dict[str, str]:
    return {"name": "work", "arguments": json.dumps({"step": step})}


async def test_review_refactor_write_tests() -> None:
    done: list[str] = []

    async def work(step: str) -> str:
        """Do one step of the work.

        Args:
            step: what to do.
        """
        done.append(step)
        return f"{step}: done"

    model = ScriptedChatModel()
    model.add_reply("I'll plan this first.", tool_calls=[todos("pending", "pending", "pending")])
    model.add_reply(tool_calls=[todos("in_progress", "pending", "pending"), work_on(TASKS[0])])
    model.add_reply(tool_calls=[todos("completed", "in_progress", "pending"), work_on(TASKS[1])])
    model.add_reply(tool_calls=[todos("completed", "completed", "in_progress"), work_on(TASKS[2])])
    model.add_reply(tool_calls=[todos("completed", "completed", "completed")])
    model.add_reply("The code is reviewed, refactored and tested.")

    agent = create_agent(model, [work], middleware=[TodoListMiddleware()])
    result = await agent.run("Review the code, refactor it, write tests.")

    assert result.status == "completed"
    assert result.todos == [Todo(content=c, status="completed") for c in TASKS]
    assert done == TASKS  # one by one, in order
    assert result.text == "The code is reviewed, refactored and tested."
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage) and not last.tool_calls
    assert len(model.requests) == 6
    assert all(TODO_SYSTEM_PROMPT in r.messages[0]["content"] for r in model.requests)
    answers = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert len(answers) == 8 and all(m.status == "success" for m in answers)
    # the model saw the list after each write: in progress before the work, done after it
    listing = [m.content for m in answers if m.name == "write_todos"]
    assert listing[2] == (
        "The todo list is now:\n1. [completed] Review the code\n"
        "2. [in_progress] Refactor it\n3. [pending] Write tests"
    )
