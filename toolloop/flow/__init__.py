"""The event-triggered flow engine: steps, events, routing, fan-out, pause and resume.

Knows nothing of LLMs or tools; the tool loop and the agents are flows built on it.
"""

from __future__ import annotations

from ._context import Context as Context
from ._events import EventEmitted as EventEmitted
from ._events import ExecutionFailed as ExecutionFailed
from ._events import ExecutionFinished as ExecutionFinished
from ._events import ExecutionPaused as ExecutionPaused
from ._events import ExecutionStarted as ExecutionStarted
from ._events import FlowEvent as FlowEvent
from ._events import StepFailed as StepFailed
from ._events import StepFinished as StepFinished
from ._events import StepStarted as StepStarted
from ._execution import Execution as Execution
from ._execution import ExecutionStatus as ExecutionStatus
from ._flow import Branch as Branch
from ._flow import Chain as Chain
from ._flow import Flow as Flow
from ._flow import Target as Target
from ._nodes import Step as Step
from ._result import EventStream as EventStream
from ._result import FlowResult as FlowResult
from ._snapshot import FlowSnapshot as FlowSnapshot
from ._snapshot import Wait as Wait
from ._trace import Outcome as Outcome
from ._trace import TraceEntry as TraceEntry

__all__ = [
    "Branch",
    "Chain",
    "Context",
    "EventEmitted",
    "EventStream",
    "Execution",
    "ExecutionFailed",
    "ExecutionFinished",
    "ExecutionPaused",
    "ExecutionStarted",
    "ExecutionStatus",
    "Flow",
    "FlowEvent",
    "FlowResult",
    "FlowSnapshot",
    "Outcome",
    "Step",
    "StepFailed",
    "StepFinished",
    "StepStarted",
    "Target",
    "TraceEntry",
    "Wait",
]
