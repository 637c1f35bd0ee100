"""The runner: the one way tool calls run, in the loop and in both agents.

A batch of calls runs under an exact per-run concurrency limit and an optional
:class:`anyio.CapacityLimiter` shared across runs, each call under its timeout, and every
command ends in exactly one :class:`ToolExecutionRecord`, whatever happens to it
(cancellation included). Commands may be submitted while the batch already runs.
Identical calls of a tool given a :class:`SharedResults` run once while in flight, and
their results may be cached.
"""

from __future__ import annotations

from ._batch import BatchCall as BatchCall
from ._batch import SplitCall as SplitCall
from ._batch import ToolBatch as ToolBatch
from ._batch import call_split as call_split
from ._events import CallSource as CallSource
from ._events import ToolCallEvent as ToolCallEvent
from ._events import ToolCallFinished as ToolCallFinished
from ._events import ToolCallStarted as ToolCallStarted
from ._events import ToolProgress as ToolProgress
from ._events import progress_reporter as progress_reporter
from ._executor import CallTries as CallTries
from ._executor import Executor as Executor
from ._executor import OnFinish as OnFinish
from ._executor import OnStart as OnStart
from ._executor import cancelled_error as cancelled_error
from ._executor import cancelled_record as cancelled_record
from ._executor import tool_error_text as tool_error_text
from ._jsonsafe import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from ._jsonsafe import flat_json_within as flat_json_within
from ._jsonsafe import json_safe as json_safe
from ._jsonsafe import nesting_depth as nesting_depth
from ._jsonsafe import short_repr as short_repr
from ._records import DEFAULT_PURPOSE as DEFAULT_PURPOSE
from ._records import EXTRA_INSTRUCTION as EXTRA_INSTRUCTION
from ._records import ToolCommand as ToolCommand
from ._records import ToolExecutionRecord as ToolExecutionRecord
from ._records import construct as construct
from ._result import RunResult as RunResult
from ._shared import SharedResults as SharedResults
from ._shared import SharedResultStore as SharedResultStore
from ._shared import SharedSource as SharedSource
from ._shared import shared_key as shared_key
from ._shown import READ_RESULT as READ_RESULT
from ._shown import RESULT_CHARS as RESULT_CHARS
from ._shown import is_cut as is_cut
from ._shown import longer_than as longer_than
from ._shown import result_handle as result_handle
from ._shown import result_text as result_text
from ._shown import shown_result as shown_result

__all__ = [
    "DEFAULT_PURPOSE",
    "EXTRA_INSTRUCTION",
    "MAX_JSON_DEPTH",
    "READ_RESULT",
    "RESULT_CHARS",
    "BatchCall",
    "CallSource",
    "CallTries",
    "Executor",
    "OnFinish",
    "OnStart",
    "RunResult",
    "SharedResultStore",
    "SharedResults",
    "SharedSource",
    "SplitCall",
    "ToolBatch",
    "ToolCallEvent",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCommand",
    "ToolExecutionRecord",
    "ToolProgress",
    "call_split",
    "cancelled_error",
    "cancelled_record",
    "construct",
    "flat_json_within",
    "is_cut",
    "json_safe",
    "longer_than",
    "nesting_depth",
    "progress_reporter",
    "result_handle",
    "result_text",
    "shared_key",
    "short_repr",
    "shown_result",
    "tool_error_text",
]
