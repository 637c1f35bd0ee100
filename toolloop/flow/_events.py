"""Typed events an execution publishes to its observers.

Events are facts: frozen pydantic models, named in the past tense, told apart by ``kind``.
Higher layers (the tool loop, the agents) publish their own events through the same stream
with :meth:`toolloop.flow.Context.publish`; they subclass :class:`FlowEvent`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "EventEmitted",
    "ExecutionFailed",
    "ExecutionFinished",
    "ExecutionPaused",
    "ExecutionStarted",
    "FlowEvent",
    "StepFailed",
    "StepFinished",
    "StepStarted",
]


class FlowEvent(BaseModel):
    """Base of every observable event. ``at`` is seconds since the execution started."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    kind: str
    execution_id: str
    at: float


class ExecutionStarted(FlowEvent):
    kind: Literal["execution_started"] = "execution_started"
    flow: str


class StepStarted(FlowEvent):
    kind: Literal["step_started"] = "step_started"
    step: str
    event: str


class StepFinished(FlowEvent):
    kind: Literal["step_finished"] = "step_finished"
    step: str
    duration: float


class StepFailed(FlowEvent):
    kind: Literal["step_failed"] = "step_failed"
    step: str
    duration: float
    error: str


class EventEmitted(FlowEvent):
    kind: Literal["event_emitted"] = "event_emitted"
    event: str
    by: str | None
    """The step that emitted it, or ``None`` when it came from outside."""


class ExecutionPaused(FlowEvent):
    kind: Literal["execution_paused"] = "execution_paused"
    waiting_for: list[str]
    requests: list[Any]


class ExecutionFinished(FlowEvent):
    kind: Literal["execution_finished"] = "execution_finished"
    duration: float


class ExecutionFailed(FlowEvent):
    kind: Literal["execution_failed"] = "execution_failed"
    duration: float
    error: str
