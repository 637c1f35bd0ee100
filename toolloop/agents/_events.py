"""Typed events of an agent run, published on the flow's event stream (``on_event=``).

The tool calls are told by the runner's :class:`~toolloop.runner.ToolCallStarted` and
:class:`~toolloop.runner.ToolCallFinished`, the same events as in the loop.
"""

from __future__ import annotations

from typing import Literal

from ..flow import FlowEvent
from ..models import Usage
from ._messages import AssistantMessage

__all__ = [
    "AgentEvent",
    "AgentFinished",
    "ModelCallFinished",
    "ModelCallStarted",
]


class AgentEvent(FlowEvent):
    """Base of the agent's events."""


class ModelCallStarted(AgentEvent):
    """The model is about to be called (after the ``before_model`` hooks)."""

    kind: Literal["model_call_started"] = "model_call_started"
    call_index: int
    """0 for the run's first model call."""


class ModelCallFinished(AgentEvent):
    kind: Literal["model_call_finished"] = "model_call_finished"
    call_index: int
    message: AssistantMessage
    duration: float
    usage: Usage | None = None
    """This call's usage (``None``: no model call was counted, e.g. a middleware
    answered)."""


class AgentFinished(AgentEvent):
    kind: Literal["agent_finished"] = "agent_finished"
    model_calls: int
    """Model calls this run made in all (across pauses and resumes)."""
    messages: int
    usage: Usage | None = None
    """The run's model usage in all (across pauses and resumes)."""
