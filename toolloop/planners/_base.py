"""The planner protocol: what the loop asks a planner, and what it accepts back."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from .._records import ToolExecutionRecord

__all__ = ["Planner", "PlannerContext", "PlannerLike", "call_planner"]


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


@runtime_checkable
class Planner(Protocol):
    """Anything with ``async plan(context)`` returning the planner output.

    The output is normalized by the loop, so it may be a dict, a pydantic model or JSON
    text: ``{"next_action": "execute" | "response", "execution_commands": [{"purpose",
    "tool_name", "tool_kwargs", "todo_suggestion"}]}``.
    """

    async def plan(self, context: PlannerContext) -> Any: ...


PlannerLike = Planner | Callable[[PlannerContext], Any] | Callable[[PlannerContext], Awaitable[Any]]
"""A :class:`Planner`, or a plain function (sync or async) of the context."""


async def call_planner(planner: PlannerLike, context: PlannerContext) -> Any:
    """Ask ``planner`` for the output of one round."""
    if isinstance(planner, Planner):
        return await planner.plan(context)
    result = planner(context)
    if inspect.isawaitable(result):
        result = await result
    return result
