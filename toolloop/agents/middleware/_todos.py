"""The todo list: a ``write_todos`` tool, its instructions before every model call, and one
write per turn.

The model keeps ``state.todos`` by calling ``write_todos`` with the whole list (each item
``{content, status}``, status ``pending``, ``in_progress`` or ``completed``); the call
replaces the list and is answered with it. The instructions are added to the system prompt
of every model call (not to the conversation). Two ``write_todos`` calls in one model turn
contradict each other: both are answered with an error and the list stays as it was.
"""

from __future__ import annotations

from typing import Any

from ...tools import Tool
from .._messages import pending_tool_calls
from .._middleware import AgentMiddleware, ModelHandler, ModelRequest, ModelResponse
from .._state import AgentState, Command, Todo
from .._tool_call import error_message

__all__ = ["TODO_SYSTEM_PROMPT", "WRITE_TODOS_DESCRIPTION", "TodoListMiddleware", "write_todos"]

TODO_SYSTEM_PROMPT = """\
## Your todo list (the `write_todos` tool)
For work of several steps, keep a todo list with `write_todos`, so that you and the user can \
see where things stand.
- Plan before you start: when a request needs three steps or more, write them down as \
todos first. A quick one-step request needs no list.
- Every call replaces the whole list: send all the items, each with its status \
(`pending`, `in_progress` or `completed`).
- Set an item to `in_progress` before you begin working on it; have one in progress at a \
time.
- Set an item to `completed` as soon as it is done, in your very next call, before you \
start on the next one. Never save up finished items to tick them off together.
- Call `write_todos` at most once per reply; other tools can go in the same reply.
- When you learn something that changes the plan, change the list: add, remove or reword \
items."""

WRITE_TODOS_DESCRIPTION = (
    "Replace your todo list with `todos`: every item, each with its `content` and its "
    "`status` (pending, in_progress or completed). Use it to plan work of several steps and "
    "to show your progress as you go."
)


def _listing(todos: list[Todo]) -> str:
    if not todos:
        return "The todo list is now empty."
    lines = "\n".join(f"{i}. [{t.status}] {t.content}" for i, t in enumerate(todos, 1))
    return f"The todo list is now:\n{lines}"


def write_todos(todos: list[Todo]) -> Command:
    """Replace the todo list.

    Args:
        todos: every item of the list, in order, with its status.
    """
    return Command(update={"todos": todos}, result=_listing(todos))


class TodoListMiddleware(AgentMiddleware):
    """Gives the agent a todo list: the ``write_todos`` tool, its instructions added to the
    system prompt of every model call, and ``state.todos``.

    Args:
        system_prompt: the instructions (:data:`TODO_SYSTEM_PROMPT` by default).
        tool_description: the tool's description for the model.
    """

    def __init__(
        self,
        *,
        system_prompt: str = TODO_SYSTEM_PROMPT,
        tool_description: str = WRITE_TODOS_DESCRIPTION,
    ) -> None:
        self.system_prompt = system_prompt
        self.tools = [Tool.from_function(write_todos, description=tool_description)]

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        prompt = request.system_prompt
        joined = f"{prompt}\n\n{self.system_prompt}" if prompt else self.system_prompt
        return await handler(request.override(system_prompt=joined))

    def after_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        calls = [c for c in pending_tool_calls(state.messages) if c.name == "write_todos"]
        if len(calls) < 2:
            return None
        error = (
            f"write_todos was called {len(calls)} times in one reply, so none of the calls "
            "was applied and the list is unchanged; call it once per reply, with the whole list"
        )
        return {"messages": [error_message(call, error) for call in calls]}
