"""toolloop: an async plan/execute tool loop on a small event-triggered flow engine."""

from __future__ import annotations

from ._errors import DefinitionError as DefinitionError
from ._errors import ExecutionError as ExecutionError
from ._errors import ExecutionStalledError as ExecutionStalledError
from ._errors import ExecutionTimeoutError as ExecutionTimeoutError
from ._errors import FlowDefinitionError as FlowDefinitionError
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
from ._records import ToolCommand as ToolCommand
from ._records import ToolExecutionRecord as ToolExecutionRecord

__all__ = [
    "DefinitionError",
    "ExecutionError",
    "ExecutionStalledError",
    "ExecutionTimeoutError",
    "FlowDefinitionError",
    "ModelOutputError",
    "PlannerError",
    "ResumeError",
    "RunError",
    "StepFailedError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolCommand",
    "ToolDefinitionError",
    "ToolExecutionRecord",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "ToolloopError",
]
