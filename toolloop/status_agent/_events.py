"""Typed events of a status-routed run, published on the flow's event stream: the facts of
this product only.

Besides them a run publishes what every run does (:mod:`toolloop.kernel`): each step's
model call (``ModelCallStarted`` / ``ModelCallFinished``), each node's checkpoint
(``CheckpointSaved``, ``step`` the node), ``RunFinished``; the runner's tool-call events;
and the engine's ``ExecutionPaused`` when the run pauses (its request is the
:class:`~toolloop.checkpoints.HumanRequest`).
"""

from __future__ import annotations

from typing import Literal

from ..flow import FlowEvent
from ._state import AgentStatus, NodeName

__all__ = ["LoopGuardTripped", "StatusChanged", "StatusEvent"]


class StatusEvent(FlowEvent):
    """Base of the status-routed agent's events (``execution_id`` is the run id)."""


class StatusChanged(StatusEvent):
    """The run's status changed: ``node`` set it (a node that keeps the status it found,
    such as the human intervention after a decision that waits for a human, tells none)."""

    kind: Literal["status_changed"] = "status_changed"
    node: NodeName
    status: AgentStatus


class LoopGuardTripped(StatusEvent):
    """The run cycled without progress (stop reason ``guard``) or took ``max_turns`` steps
    (stop reason ``max_turns``), and ends; ``reason`` says how."""

    kind: Literal["loop_guard_tripped"] = "loop_guard_tripped"
    node: NodeName
    reason: str
