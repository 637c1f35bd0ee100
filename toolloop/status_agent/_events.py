"""Typed events of a status-routed run, published on the flow's event stream."""

from __future__ import annotations

from typing import Any, Literal

from ..checkpoints import CallSource, CheckpointStatus, HumanRequest
from ..flow import FlowEvent
from ..runner import ToolExecutionRecord
from ._state import AgentStatus, NodeName

__all__ = [
    "CheckpointSaved",
    "HumanInputRequested",
    "LoopGuardTripped",
    "StatusChanged",
    "StatusEvent",
    "StatusToolCallFinished",
    "StatusToolCallStarted",
]


class StatusEvent(FlowEvent):
    """Base of the status-routed agent's events (``execution_id`` is the run id)."""


class StatusChanged(StatusEvent):
    """A node set the run's status."""

    kind: Literal["status_changed"] = "status_changed"
    node: NodeName
    status: AgentStatus


class StatusToolCallStarted(StatusEvent):
    """A tool call's intent is journaled and the tool starts."""

    kind: Literal["status_tool_call_started"] = "status_tool_call_started"
    call_id: str
    tool_name: str
    arguments: dict[str, Any]


class StatusToolCallFinished(StatusEvent):
    """A tool call's outcome is journaled (``source``: it ``ran`` now, was ``replayed``
    from the journal, or was ``interrupted`` by an earlier crash)."""

    kind: Literal["status_tool_call_finished"] = "status_tool_call_finished"
    call_id: str
    record: ToolExecutionRecord
    source: CallSource


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
