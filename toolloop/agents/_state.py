"""The agent's per-run state, and how hooks and tools change it: updates and ``Command``.

A hook or a tool changes the state by returning an update rather than by mutating it, so
every change is visible in one place::

    {"messages": [...], "todos": [...], "my_counter": 3, "jump_to": "end"}

- ``messages`` are appended (a message whose ``id`` is already there replaces it);
- ``todos`` and ``structured_response`` are replaced;
- ``jump_to`` is not state: it says where the run goes next, once;
- any other key is the middleware's own value, kept in ``state.values`` (JSON-ready, so it
  survives a pause).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, Field, PrivateAttr

from ..kernel import StopReason
from ..models import Usage
from ..runner import ToolExecutionRecord
from ._messages import Message, add_messages, as_messages

__all__ = [
    "AgentState",
    "Command",
    "JumpTo",
    "Todo",
    "TodoStatus",
    "apply_update",
    "check_jump",
    "check_update",
]

JumpTo: TypeAlias = Literal["model", "tools", "end"]
"""Where a hook (or a tool) can send the run next."""

_JUMPS = ("model", "tools", "end")

TodoStatus: TypeAlias = Literal["pending", "in_progress", "completed"]


class Todo(BaseModel):
    """One item of the agent's todo list."""

    content: str = Field(min_length=1, description="What to do, in a few words.")
    status: TodoStatus = Field(
        default="pending", description="pending, in_progress (being worked on) or completed."
    )


class AgentState(BaseModel):
    """What one agent run works on and returns (JSON-ready, so a paused run can be saved).

    Attributes:
        messages: the conversation, in order.
        todos: the todo list (kept by :class:`~toolloop.agents.middleware.TodoListMiddleware`).
        structured_response: the validated final answer when the agent has a
            ``response_format`` (a model instance for a pydantic schema; after a snapshot is
            restored, its JSON data).
        values: the middleware's own values, by key (e.g. call counters).
        model_calls: model calls made by this run so far (across pauses and resumes; a new
            run starts at 0): its turns, which ``max_turns`` bounds.
        structured_failures: final answers that failed the ``response_format`` so far.
        paused_at: where a paused run stopped (which middleware, which hook, what it asks);
            ``None`` while the run is not paused.
        usage: the run's model usage so far (across pauses and resumes; a new run starts
            at nothing), held to the agent's ``usage_limits``.
        usage_limit: the limit that ended the run (``"max_requests"``, ...) when the agent
            finishes at its ``usage_limits`` (``on_usage_limit="finish"``).
        stop_reason: why the run ended, when its own bound ended it (``"max_turns"``,
            ``"usage_limit"``) rather than the conversation; ``None`` otherwise.
        records: one :class:`~toolloop.ToolExecutionRecord` per tool call of this run, in
            the order the calls were answered: a call the tools ran holds the tool's value
            as it returned it; a call answered without running (a middleware's answer, a
            human's rejection, a limit, the structured-output tool) holds its answer.
        rerun: the calls a human approved to run again although an earlier attempt's
            outcome is unknown (``unknown_outcome="ask"``); emptied when they ran.
        streamed: with ``streaming_dispatch``, the outcomes (JSON data) of the calls of the
            last turn that ran while the model wrote its reply, when the run paused before
            the others ran (a call that needs approval): the tools step answers them from
            here, never running them again; emptied when it did.

    Everything a run changes is here, so a snapshot or a checkpoint carries it and the
    limits hold across any number of pauses and resumes.
    """

    messages: list[Message] = Field(default_factory=list)
    todos: list[Todo] = Field(default_factory=list)
    structured_response: Any = None
    values: dict[str, Any] = Field(default_factory=dict)
    model_calls: int = 0
    structured_failures: int = 0
    paused_at: dict[str, Any] | None = None
    usage: Usage = Field(default_factory=Usage)
    usage_limit: str | None = None
    stop_reason: StopReason | None = None
    records: list[ToolExecutionRecord] = Field(default_factory=list)
    rerun: list[str] = Field(default_factory=list)
    streamed: dict[str, Any] = Field(default_factory=dict)
    _ran: dict[str, Any] = PrivateAttr(default_factory=dict)
    # the outcomes of the calls that ran while the model streamed, as they came (never
    # saved): the tools step answers them; ``streamed`` is their JSON form for a pause


@dataclass(frozen=True)
class Command:
    """A state update with a ``jump_to``; and, from a tool, its result as well.

    A tool returns ``Command(update={"todos": [...]}, result="saved")`` to change the state
    as well as answer the call (``result`` becomes its message; a ``ToolMessage`` for the
    call in ``update["messages"]`` is used instead, if there is one). A hook may return a
    ``Command`` instead of a dict.
    """

    update: Mapping[str, Any] | None = None
    jump_to: JumpTo | None = None
    result: Any = None


def check_jump(value: Any, where: str) -> JumpTo | None:
    """``value`` as a jump target; raises ``ValueError`` naming ``where`` if it is none."""
    if value is None or value in _JUMPS:
        return value  # type: ignore[no-any-return]
    raise ValueError(f"{where} asked to jump to {value!r}; jump_to is one of {list(_JUMPS)}")


def _checked(update: Mapping[str, Any]) -> tuple[list[Message] | None, list[Todo] | None]:
    messages = as_messages(update["messages"]) if "messages" in update else None
    todos = None
    if "todos" in update:
        todos = [
            t if isinstance(t, Todo) else Todo.model_validate(t) for t in update["todos"] or ()
        ]
    if "values" in update and not isinstance(update["values"], Mapping):
        raise ValueError(f"an update's 'values' is a dict, got {type(update['values']).__name__}")
    return messages, todos


def check_update(update: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` if :func:`apply_update` would refuse ``update``."""
    _checked(update)


def apply_update(state: AgentState, update: Mapping[str, Any]) -> None:
    """Apply one update to ``state`` (see the module docs); ``jump_to`` is skipped.

    Everything is checked before anything changes: an update with a bad message or todo
    raises ``ValueError`` and leaves the state as it was.
    """
    messages, todos = _checked(update)
    for key, value in update.items():
        if key == "messages":
            assert messages is not None
            add_messages(state.messages, messages)
        elif key == "todos":
            assert todos is not None
            state.todos = todos
        elif key == "structured_response":
            state.structured_response = value
        elif key == "jump_to":
            continue
        elif key == "values":
            state.values.update(value)
        else:
            state.values[key] = value
