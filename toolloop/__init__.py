"""toolloop: an async plan/execute tool loop on a small event-triggered flow engine.

The main call is :func:`async_plan_and_execute` (and its sync twin :func:`plan_and_execute`).
The agents (:func:`create_agent`, :class:`StatusAgent`) are flows on the same engine.
Subpackages: :mod:`toolloop.flow` (the engine), :mod:`toolloop.tools`, :mod:`toolloop.planners`,
:mod:`toolloop.models` (model adapters and the incremental JSON reader) and
:mod:`toolloop.testing` (public test doubles).
"""

from __future__ import annotations

from ._answer import final_answer as final_answer
from ._answer import final_answer_messages as final_answer_messages
from ._answer import stream_final_answer as stream_final_answer
from ._errors import DefinitionError as DefinitionError
from ._errors import ExecutionError as ExecutionError
from ._errors import ExecutionStalledError as ExecutionStalledError
from ._errors import ExecutionTimeoutError as ExecutionTimeoutError
from ._errors import FlowDefinitionError as FlowDefinitionError
from ._errors import ModelCallError as ModelCallError
from ._errors import ModelOutputError as ModelOutputError
from ._errors import PlannerError as PlannerError
from ._errors import ResumeError as ResumeError
from ._errors import RunError as RunError
from ._errors import StepFailedError as StepFailedError
from ._errors import ToolArgumentsError as ToolArgumentsError
from ._errors import ToolCallError as ToolCallError
from ._errors import ToolDefinitionError as ToolDefinitionError
from ._errors import ToolloopError as ToolloopError
from ._errors import ToolNotFoundError as ToolNotFoundError
from ._errors import ToolTimeoutError as ToolTimeoutError
from ._executor import ExecutionRound as ExecutionRound
from ._executor import Executor as Executor
from ._executor import OnFinish as OnFinish
from ._executor import OnStart as OnStart
from ._records import DEFAULT_PURPOSE as DEFAULT_PURPOSE
from ._records import ToolCommand as ToolCommand
from ._records import ToolExecutionRecord as ToolExecutionRecord
from .agents import Agent as Agent
from .agents import AgentDefinitionError as AgentDefinitionError
from .agents import AgentMiddleware as AgentMiddleware
from .agents import AgentModelError as AgentModelError
from .agents import AgentResult as AgentResult
from .agents import AgentState as AgentState
from .agents import Command as Command
from .agents import ModelCallLimitError as ModelCallLimitError
from .agents import Pause as Pause
from .agents import ProviderStrategy as ProviderStrategy
from .agents import StatusAgent as StatusAgent
from .agents import StatusAgentResult as StatusAgentResult
from .agents import StructuredOutputError as StructuredOutputError
from .agents import Todo as Todo
from .agents import ToolCallLimitError as ToolCallLimitError
from .agents import ToolStrategy as ToolStrategy
from .agents import agent_flow as agent_flow
from .agents import create_agent as create_agent
from .agents import status_agent_flow as status_agent_flow
from .flow import Context as Context
from .flow import Flow as Flow
from .flow import FlowEvent as FlowEvent
from .flow import FlowResult as FlowResult
from .flow import FlowSnapshot as FlowSnapshot
from .flow import Step as Step
from .flow import TraceEntry as TraceEntry
from .loop import EXTRA_INSTRUCTION as EXTRA_INSTRUCTION
from .loop import CommandFinished as CommandFinished
from .loop import CommandStarted as CommandStarted
from .loop import LoopEvent as LoopEvent
from .loop import LoopFinished as LoopFinished
from .loop import LoopResult as LoopResult
from .loop import LoopStream as LoopStream
from .loop import NormalizedPlan as NormalizedPlan
from .loop import PlanDecided as PlanDecided
from .loop import PlanItem as PlanItem
from .loop import RoundFinished as RoundFinished
from .loop import RoundStarted as RoundStarted
from .loop import RoundState as RoundState
from .loop import StopReason as StopReason
from .loop import async_plan_and_execute as async_plan_and_execute
from .loop import loop_flow as loop_flow
from .loop import normalize_plan as normalize_plan
from .loop import plan_and_execute as plan_and_execute
from .loop import stream_plan_and_execute as stream_plan_and_execute
from .loop import to_action_results as to_action_results
from .planners import PLANNER_SYSTEM_PROMPT as PLANNER_SYSTEM_PROMPT
from .planners import TOOL_CALLING_SYSTEM_PROMPT as TOOL_CALLING_SYSTEM_PROMPT
from .planners import Dispatch as Dispatch
from .planners import Planner as Planner
from .planners import PlannerContext as PlannerContext
from .planners import PlannerLike as PlannerLike
from .planners import PlannerReply as PlannerReply
from .planners import PlannerSchema as PlannerSchema
from .planners import StreamingPlanner as StreamingPlanner
from .planners import StructuredPlanner as StructuredPlanner
from .planners import ToolCallingPlanner as ToolCallingPlanner
from .planners import ToolChoice as ToolChoice
from .planners import planner_messages as planner_messages
from .planners import planner_schema as planner_schema
from .planners import tool_calling_messages as tool_calling_messages
from .tools import Tool as Tool
from .tools import ToolRegistry as ToolRegistry
from .tools import async_call_tool as async_call_tool
from .tools import tool as tool

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PURPOSE",
    "EXTRA_INSTRUCTION",
    "PLANNER_SYSTEM_PROMPT",
    "TOOL_CALLING_SYSTEM_PROMPT",
    "Agent",
    "AgentDefinitionError",
    "AgentMiddleware",
    "AgentModelError",
    "AgentResult",
    "AgentState",
    "Command",
    "CommandFinished",
    "CommandStarted",
    "Context",
    "DefinitionError",
    "Dispatch",
    "ExecutionError",
    "ExecutionRound",
    "ExecutionStalledError",
    "ExecutionTimeoutError",
    "Executor",
    "Flow",
    "FlowDefinitionError",
    "FlowEvent",
    "FlowResult",
    "FlowSnapshot",
    "LoopEvent",
    "LoopFinished",
    "LoopResult",
    "LoopStream",
    "ModelCallError",
    "ModelCallLimitError",
    "ModelOutputError",
    "NormalizedPlan",
    "OnFinish",
    "OnStart",
    "Pause",
    "PlanDecided",
    "PlanItem",
    "Planner",
    "PlannerContext",
    "PlannerError",
    "PlannerLike",
    "PlannerReply",
    "PlannerSchema",
    "ProviderStrategy",
    "ResumeError",
    "RoundFinished",
    "RoundStarted",
    "RoundState",
    "RunError",
    "StatusAgent",
    "StatusAgentResult",
    "Step",
    "StepFailedError",
    "StopReason",
    "StreamingPlanner",
    "StructuredOutputError",
    "StructuredPlanner",
    "Todo",
    "Tool",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolCallLimitError",
    "ToolCallingPlanner",
    "ToolChoice",
    "ToolCommand",
    "ToolDefinitionError",
    "ToolExecutionRecord",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolStrategy",
    "ToolTimeoutError",
    "ToolloopError",
    "TraceEntry",
    "agent_flow",
    "async_call_tool",
    "async_plan_and_execute",
    "create_agent",
    "final_answer",
    "final_answer_messages",
    "loop_flow",
    "normalize_plan",
    "plan_and_execute",
    "planner_messages",
    "planner_schema",
    "status_agent_flow",
    "stream_final_answer",
    "stream_plan_and_execute",
    "to_action_results",
    "tool",
    "tool_calling_messages",
]
