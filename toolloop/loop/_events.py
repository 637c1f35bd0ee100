"""Typed events of a plan/execute run, published on the flow's event stream.

A run tells its rounds with these; each tool call with the runner's
:class:`~toolloop.runner.ToolCallStarted` and :class:`~toolloop.runner.ToolCallFinished`, each
model call with the kernel's :class:`~toolloop.kernel.ModelCallStarted` and
:class:`~toolloop.kernel.ModelCallFinished`, and its end with the kernel's
:class:`~toolloop.kernel.RunFinished`: the same events in every product.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..flow import FlowEvent
from ..models import Usage
from ..runner import ToolCommand, ToolExecutionRecord
from ._results import StopReason

__all__ = [
    "LoopEvent",
    "PlanDecided",
    "RoundFinished",
    "RoundStarted",
]


class LoopEvent(FlowEvent):
    """Base of the tool loop's events."""

    round_index: int


class RoundStarted(LoopEvent):
    """A planner call is about to be made for this round."""

    kind: Literal["round_started"] = "round_started"


class PlanDecided(LoopEvent):
    """The planner answered and its output was normalized."""

    kind: Literal["plan_decided"] = "plan_decided"
    next_action: Literal["execute", "response"]
    commands: list[ToolCommand]
    stop_reason: StopReason | None = None
    notes: list[str] = Field(default_factory=list)
    duration: float
    """Seconds the planner took."""
    short_circuited: bool = False
    """The planner stopped reading its output once ``next_action`` was settled."""
    usage: Usage | None = None
    """The model calls the planner made for this plan (``None``: it made none that
    toolloop counts, e.g. a scripted planner)."""
    reasoning: str | None = None
    """What the planner's model reasoned before it answered, when its server sent it."""
    refusal: str | None = None
    """What the planner's model said when it refused to plan."""


class RoundFinished(LoopEvent):
    kind: Literal["round_finished"] = "round_finished"
    records: list[ToolExecutionRecord]
    duration: float
