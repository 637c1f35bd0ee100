"""Typed events of a status-routed run, published on the flow's event stream."""

from __future__ import annotations

from typing import Literal

from ..checkpoints import CheckpointStatus, HumanRequest
from ..flow import FlowEvent
from ._state import AgentStatus, NodeName

__all__ = [
    "CheckpointSaved",
    "HumanInputRequested",
    "LoopGuardTripped",
    "StatusChanged",
    "StatusEvent",
]


class StatusEvent(FlowEvent):
    """Base of the status-routed agent's events (``execution_id`` is the run id)."""


class StatusChanged(StatusEvent):
    """A node set the run's status."""

    kind: Literal["status_changed"] = "status_changed"
    node: NodeName
    status: AgentStatus


class CheckpointSaved(StatusEvent):
    """The run's checkpoint was written after a node."""

    kind: Literal["checkpoint_saved"] = "checkpoint_saved"
    node: NodeName
    status: CheckpointStatus
    revision: int


class HumanInputRequested(StatusEvent):
    """The run pauses to ask a human."""

    kind: Literal["human_input_requested"] = "human_input_requested"
    request: HumanRequest


class LoopGuardTripped(StatusEvent):
    """The run cycled without progress (or ran out of steps) and ends."""

    kind: Literal["loop_guard_tripped"] = "loop_guard_tripped"
    node: NodeName
    reason: str
