"""The planner protocol: what the loop asks a planner, and what it accepts back."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..runner import ToolExecutionRecord

__all__ = [
    "Dispatch",
    "Planner",
    "PlannerContext",
    "PlannerLike",
    "PlannerReply",
    "StreamingPlanner",
    "call_planner",
]


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
    if inspect.isawaitable(result):
        result = await result
    return result
