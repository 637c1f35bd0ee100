"""Planners: what decides, round after round, which tools to run."""

from __future__ import annotations

from ._base import Dispatch as Dispatch
from ._base import Planner as Planner
from ._base import PlannerContext as PlannerContext
from ._base import PlannerLike as PlannerLike
from ._base import PlannerReply as PlannerReply
from ._base import PlannerTurn as PlannerTurn
from ._base import StreamingPlanner as StreamingPlanner
from ._base import call_planner as call_planner
from ._chat import ChatPlannerOptions as ChatPlannerOptions
from ._prompt import PLANNER_SYSTEM_PROMPT as PLANNER_SYSTEM_PROMPT
from ._prompt import PlannerSchema as PlannerSchema
from ._prompt import planner_messages as planner_messages
from ._prompt import planner_schema as planner_schema
from ._structured import StructuredPlanner as StructuredPlanner
from ._tool_calling import TOOL_CALLING_SYSTEM_PROMPT as TOOL_CALLING_SYSTEM_PROMPT
from ._tool_calling import ToolCallingPlanner as ToolCallingPlanner
from ._tool_calling import ToolChoice as ToolChoice
from ._tool_calling import tool_calling_messages as tool_calling_messages

__all__ = [
    "PLANNER_SYSTEM_PROMPT",
    "TOOL_CALLING_SYSTEM_PROMPT",
    "ChatPlannerOptions",
    "Dispatch",
    "Planner",
    "PlannerContext",
    "PlannerLike",
    "PlannerReply",
    "PlannerSchema",
    "PlannerTurn",
    "StreamingPlanner",
    "StructuredPlanner",
    "ToolCallingPlanner",
    "ToolChoice",
    "call_planner",
    "planner_messages",
    "planner_schema",
    "tool_calling_messages",
]
