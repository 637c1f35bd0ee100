"""The one error hierarchy of toolloop, every class in one place (see :mod:`toolloop._errors`
for the tree). The most common ones are also at the top level.

Subpackages add their own errors under these: :mod:`toolloop.agents`,
:mod:`toolloop.checkpoints` and :mod:`toolloop.tracing` list theirs.
"""

from __future__ import annotations

from ._errors import AnswerError as AnswerError
from ._errors import DefinitionError as DefinitionError
from ._errors import ExecutionError as ExecutionError
from ._errors import ExecutionStalledError as ExecutionStalledError
from ._errors import ExecutionTimeoutError as ExecutionTimeoutError
from ._errors import FlowDefinitionError as FlowDefinitionError
from ._errors import ModelCallError as ModelCallError
from ._errors import ModelOutputError as ModelOutputError
from ._errors import ModelRefusalError as ModelRefusalError
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
from ._errors import UsageLimitError as UsageLimitError

__all__ = [
    "AnswerError",
    "DefinitionError",
    "ExecutionError",
    "ExecutionStalledError",
    "ExecutionTimeoutError",
    "FlowDefinitionError",
    "ModelCallError",
    "ModelOutputError",
    "ModelRefusalError",
    "PlannerError",
    "ResumeError",
    "RunError",
    "StepFailedError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolDefinitionError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "ToolloopError",
    "UsageLimitError",
]
