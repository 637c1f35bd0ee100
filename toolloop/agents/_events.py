"""Typed events of an agent run, published on the flow's event stream (``on_event=``)."""

from __future__ import annotations

from typing import Literal

from ..flow import FlowEvent
from ._messages import AssistantMessage, ToolCall, ToolMessage

__all__ = [
    "AgentEvent",
    "AgentFinished",
    "ModelCallFinished",
    "ModelCallStarted",
    "ToolCallFinished",
    "ToolCallStarted",
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


class ToolCallStarted(AgentEvent):
    kind: Literal["tool_call_started"] = "tool_call_started"
    tool_call: ToolCall


class ToolCallFinished(AgentEvent):
    kind: Literal["tool_call_finished"] = "tool_call_finished"
    tool_call: ToolCall
    message: ToolMessage
    duration: float


class AgentFinished(AgentEvent):
    kind: Literal["agent_finished"] = "agent_finished"
    model_calls: int
    """Model calls in this run (since it started or was resumed)."""
    messages: int
