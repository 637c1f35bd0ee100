"""The runner: the one way tool calls run, in the loop and in both agents.

A batch of calls runs under an exact per-run concurrency limit and an optional
:class:`anyio.CapacityLimiter` shared across runs, each call under its timeout, and every
command ends in exactly one :class:`ToolExecutionRecord`, whatever happens to it
(cancellation included). Commands may be submitted while the batch already runs.
"""

from __future__ import annotations

from ._executor import ExecutionRound as ExecutionRound
from ._executor import Executor as Executor
from ._executor import OnFinish as OnFinish
from ._executor import OnStart as OnStart
from ._executor import cancelled_error as cancelled_error
from ._executor import tool_error_text as tool_error_text
from ._records import DEFAULT_PURPOSE as DEFAULT_PURPOSE
from ._records import ToolCommand as ToolCommand
from ._records import ToolExecutionRecord as ToolExecutionRecord

__all__ = [
    "DEFAULT_PURPOSE",
    "ExecutionRound",
    "Executor",
    "OnFinish",
    "OnStart",
    "ToolCommand",
    "ToolExecutionRecord",
    "cancelled_error",
    "tool_error_text",
]
