"""The planner protocol: what the loop asks a planner, and what it accepts back."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..models import Reasoning
from ..runner import ToolExecutionRecord

__all__ = [
    "Dispatch",
    "Planner",
    "PlannerContext",
    "PlannerLike",
    "PlannerReply",
    "PlannerTurn",
    "StreamingPlanner",
    "call_planner",
]


class PlannerTurn(BaseModel):
    """What a planner's model wrote in one executed round, to be sent back in the next
    rounds' requests as it was written (a planner that keeps no conversation has none).

    ``message`` is the assistant message in the chat-completions format, reasoning and
    provider signatures included (:meth:`~toolloop.models.ChatReply.message`), every tool
    call with an id; ``records`` holds, for each of its tool calls in order, the index in
    ``done_plans`` of the record the call came to (``None``: normalization dropped it).
    """

    model_config = ConfigDict(frozen=True)

    round_index: int
    message: dict[str, Any]
    records: list[int | None] = Field(default_factory=list)


class PlannerContext(BaseModel):
    """Everything a planner sees in one round."""

    model_config = ConfigDict(frozen=True)

    user_input: str
    user_extra_requirement: str | None = None
    available_tools: list[dict[str, Any]] = Field(default_factory=list)
    """``{"name", "description", "parameters"}`` of every tool."""
    done_plans: list[ToolExecutionRecord] = Field(default_factory=list)
    """Every record so far."""
    last_round_result: list[ToolExecutionRecord] = Field(default_factory=list)
    """The records of the last round only."""
    round_index: int = 0
    max_rounds: int = 5
    turns: tuple[PlannerTurn, ...] = ()
    """What the planner's model wrote in the executed rounds so far, when its replies keep
    a message (:attr:`PlannerReply.message`): the conversation to send back as it was."""
    max_result_chars: int | None = 2000
    """The run's ``max_result_chars``: a result longer than this (as text) is shown cut to
    it, with its handle (``"r:<index in done_plans>"``) for ``read_result`` (``None``: whole);
    a planner's own ``max_result_chars``, when given, wins."""


class PlannerReply(BaseModel):
    """A planner's output with how it was obtained (planners may return the bare output)."""

    model_config = ConfigDict(frozen=True)

    output: Any
    """The planner output, normalized by the loop like a bare one."""
    short_circuited: bool = False
    """The planner stopped reading once ``next_action`` was settled as ``response``."""
    decided_after: float | None = None
    """Seconds from the request to the moment the decision was known."""
    chars_read: int = 0
    """How much of the model's output was read."""
    finish_reason: str | None = None
    """Why the model's reply ended (``"stop"``, ``"tool_calls"``, ``"length"``: cut off by
    its token limit), when it was read to its end."""
    notes: tuple[str, ...] = ()
    """What the planner has to say about the reply (e.g. that it was cut off); the loop
    adds them to the run's notes."""
    reasoning: Reasoning | None = None
    """What the model reasoned before it answered, when its server sent it (shown in the
    loop's ``PlanDecided`` event and traces)."""
    refusal: str | None = None
    """The model refused to plan (OpenAI's ``refusal``): the loop stops with the stop
    reason ``refusal``."""
    message: dict[str, Any] | None = None
    """The reply as the assistant message of the next request (its reasoning and provider
    signatures included), for a planner that sends its conversation back (see
    :attr:`PlannerContext.turns`)."""


Dispatch = Callable[[int, Any], None]
"""``dispatch(index, raw_command)``: hand over the ``index``-th command of the output as
soon as it is complete, while the rest still streams."""


@runtime_checkable
class Planner(Protocol):
    """Anything with ``async plan(context)`` returning the planner output.

    The output is normalized by the loop, so it may be a dict, a pydantic model or JSON
    text: ``{"next_action": "execute" | "response", "execution_commands": [{"purpose",
    "tool_name", "tool_kwargs", "todo_suggestion"}]}``.
    """

    async def plan(self, context: PlannerContext) -> Any: ...


@runtime_checkable
class StreamingPlanner(Protocol):
    """A planner that can hand over each command while its output still streams."""

    async def plan(self, context: PlannerContext) -> Any: ...

    async def plan_streaming(self, context: PlannerContext, dispatch: Dispatch) -> Any: ...


PlannerLike = Planner | Callable[[PlannerContext], Any] | Callable[[PlannerContext], Awaitable[Any]]
"""A :class:`Planner`, or a plain function (sync or async) of the context."""


async def call_planner(planner: PlannerLike, context: PlannerContext) -> Any:
    """Ask ``planner`` for the output of one round."""
    # a runtime-checkable Protocol's isinstance is slow: look for the method instead
    plan = getattr(planner, "plan", None)
    result = plan(context) if callable(plan) else planner(context)  # type: ignore[operator]
    if type(result) is CoroutineType or inspect.isawaitable(result):
        result = await result
    return result
