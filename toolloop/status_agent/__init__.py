"""The status-routed agent: analysis, planning, conversation or decision, tool execution,
reflection and human intervention, routed only by the status each node sets.

Its runs are runs of the kernel (:mod:`toolloop.kernel`): the same options, events, result
base and verbs as every product. A run waiting for a human pauses and is checkpointed
(:mod:`toolloop.checkpoints`); it resumes later, in another process if need be, and
:meth:`StatusAgent.recover` continues a run whose process died, without running any tool
twice.
"""

from __future__ import annotations

from ._agent import StatusAgent as StatusAgent
from ._agent import StatusAgentResult as StatusAgentResult
from ._events import LoopGuardTripped as LoopGuardTripped
from ._events import StatusChanged as StatusChanged
from ._events import StatusEvent as StatusEvent
from ._flow import status_agent_flow as status_agent_flow
from ._llm import STATUS_SYSTEM_PROMPT as STATUS_SYSTEM_PROMPT
from ._llm import CallDispatch as CallDispatch
from ._llm import LLMStatusSteps as LLMStatusSteps
from ._state import AgentStatus as AgentStatus
from ._state import StatusAgentState as StatusAgentState
from ._state import StatusCallRecord as StatusCallRecord
from ._state import StatusToolCall as StatusToolCall
from ._steps import StatusCallRequest as StatusCallRequest
from ._steps import StatusDecision as StatusDecision
from ._steps import StatusPlan as StatusPlan
from ._steps import StatusReflection as StatusReflection
from ._steps import StatusSteps as StatusSteps
from ._steps import StatusView as StatusView

__all__ = [
    "STATUS_SYSTEM_PROMPT",
    "AgentStatus",
    "CallDispatch",
    "LLMStatusSteps",
    "LoopGuardTripped",
    "StatusAgent",
    "StatusAgentResult",
    "StatusAgentState",
    "StatusCallRecord",
    "StatusCallRequest",
    "StatusChanged",
    "StatusDecision",
    "StatusEvent",
    "StatusPlan",
    "StatusReflection",
    "StatusSteps",
    "StatusToolCall",
    "StatusView",
    "status_agent_flow",
]
