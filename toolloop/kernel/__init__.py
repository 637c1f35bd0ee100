"""The run kernel: what every run of every product has, written once.

The loop, the middleware agent and the status agent are their turn logic on top of it:
the same options (limits, timeouts, budget, store, approvals, deps), the same vocabulary
(stop reasons, one tool-call shape, one wording per failure), the same events, the same
journal of tool calls, the same human decisions, the same structured output of an answer,
the same result, the same verbs to resume and recover a run, and the same stream of a run's
events.
"""

from __future__ import annotations

from ._approval import Approval as Approval
from ._approval import ApprovalRule as ApprovalRule
from ._approval import ApprovalSpec as ApprovalSpec
from ._approval import approval_rule as approval_rule
from ._child import DEFAULT_MAX_CHILDREN as DEFAULT_MAX_CHILDREN
from ._child import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH
from ._child import ChildRunEvent as ChildRunEvent
from ._child import ChildRunLimitError as ChildRunLimitError
from ._child import ChildRunPaused as ChildRunPaused
from ._child import ChildRunPausedError as ChildRunPausedError
from ._child import ChildRuns as ChildRuns
from ._child import RunsAsTools as RunsAsTools
from ._child import answer_child as answer_child
from ._child import as_tool as as_tool
from ._child import child_asked as child_asked
from ._decisions import Decided as Decided
from ._decisions import Run as Run
from ._decisions import Skip as Skip
from ._decisions import Verdict as Verdict
from ._decisions import approval_request as approval_request
from ._decisions import decide as decide
from ._decisions import interrupted_request as interrupted_request
from ._decisions import replanned_error as replanned_error
from ._drive import Ended as Ended
from ._drive import TurnLogic as TurnLogic
from ._drive import drive as drive
from ._drive import finish_reason_of as finish_reason_of
from ._drive import observe_runs as observe_runs
from ._events import CheckpointSaved as CheckpointSaved
from ._events import ModelCallFinished as ModelCallFinished
from ._events import ModelCallStarted as ModelCallStarted
from ._events import RateLimitChanged as RateLimitChanged
from ._events import RetryScheduled as RetryScheduled
from ._events import RunEvent as RunEvent
from ._events import RunFinished as RunFinished
from ._events import tell as tell
from ._events import tell_call_finished as tell_call_finished
from ._events import tell_call_started as tell_call_started
from ._journal import MAX_ARGUMENT_BYTES as MAX_ARGUMENT_BYTES
from ._journal import Interrupted as Interrupted
from ._journal import Journaled as Journaled
from ._journal import arguments_problem as arguments_problem
from ._journal import journaled_call as journaled_call
from ._journal import own_key as own_key
from ._journal import record_interrupted as record_interrupted
from ._journal import resumes as resumes
from ._journal import same_call as same_call
from ._keep import REPLAY_NOTE as REPLAY_NOTE
from ._kept import READ_RESULT as READ_RESULT
from ._kept import RESULT_CHARS as RESULT_CHARS
from ._kept import ReadResultError as ReadResultError
from ._kept import ResultKept as ResultKept
from ._kept import check_tool_names as check_tool_names
from ._kept import is_cut as is_cut
from ._kept import read_result_spec as read_result_spec
from ._kept import read_result_tool as read_result_tool
from ._kept import result_handle as result_handle
from ._kept import result_text as result_text
from ._kept import shown_result as shown_result
from ._kept import tell_kept as tell_kept
from ._options import RENAMED_OPTIONS as RENAMED_OPTIONS
from ._options import OnEvent as OnEvent
from ._options import OnLimit as OnLimit
from ._options import RunDefaults as RunDefaults
from ._options import RunOptions as RunOptions
from ._options import RunOverrides as RunOverrides
from ._options import UnknownOutcome as UnknownOutcome
from ._options import option_hint as option_hint
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._stream import ENGINE_EVENTS as ENGINE_EVENTS
from ._stream import RunStream as RunStream
from ._stream import StreamTwins as StreamTwins
from ._stream import stream_run as stream_run
from ._structured import OutputSchema as OutputSchema
from ._structured import ProviderStrategy as ProviderStrategy
from ._structured import ResponseFormat as ResponseFormat
from ._structured import StructuredAnswer as StructuredAnswer
from ._structured import ToolStrategy as ToolStrategy
from ._structured import ask_structured as ask_structured
from ._structured import output_schema as output_schema
from ._sync import Backend as Backend
from ._sync import SyncTwins as SyncTwins
from ._sync import run_sync as run_sync
from ._vocabulary import HUMAN_EVENT as HUMAN_EVENT
from ._vocabulary import StopReason as StopReason
from ._vocabulary import cut_off_error as cut_off_error
from ._vocabulary import cut_off_record as cut_off_record
from ._vocabulary import interrupted_error as interrupted_error
from ._vocabulary import model_timeout_error as model_timeout_error
from ._vocabulary import rejected_error as rejected_error

__all__ = [
    "DEFAULT_MAX_CHILDREN",
    "DEFAULT_MAX_DEPTH",
    "ENGINE_EVENTS",
    "HUMAN_EVENT",
    "MAX_ARGUMENT_BYTES",
    "READ_RESULT",
    "RENAMED_OPTIONS",
    "REPLAY_NOTE",
    "RESULT_CHARS",
    "Approval",
    "ApprovalRule",
    "ApprovalSpec",
    "Backend",
    "CheckpointSaved",
    "ChildRunEvent",
    "ChildRunLimitError",
    "ChildRunPaused",
    "ChildRunPausedError",
    "ChildRuns",
    "Decided",
    "Ended",
    "Interrupted",
    "Journaled",
    "ModelCallFinished",
    "ModelCallStarted",
    "OnEvent",
    "OnLimit",
    "OutputSchema",
    "ProviderStrategy",
    "RateLimitChanged",
    "ReadResultError",
    "ResponseFormat",
    "ResultKept",
    "RetryScheduled",
    "Run",
    "RunDefaults",
    "RunEvent",
    "RunFinished",
    "RunOptions",
    "RunOverrides",
    "RunResult",
    "RunStatus",
    "RunStream",
    "RunsAsTools",
    "Skip",
    "StopReason",
    "StreamTwins",
    "StructuredAnswer",
    "SyncTwins",
    "ToolStrategy",
    "TurnLogic",
    "UnknownOutcome",
    "Verdict",
    "answer_child",
    "approval_request",
    "approval_rule",
    "arguments_problem",
    "as_tool",
    "ask_structured",
    "check_tool_names",
    "child_asked",
    "cut_off_error",
    "cut_off_record",
    "decide",
    "drive",
    "finish_reason_of",
    "interrupted_error",
    "interrupted_request",
    "is_cut",
    "journaled_call",
    "model_timeout_error",
    "observe_runs",
    "option_hint",
    "output_schema",
    "own_key",
    "read_result_spec",
    "read_result_tool",
    "record_interrupted",
    "rejected_error",
    "result_handle",
    "result_text",
    "resumes",
    "run_sync",
    "same_call",
    "shown_result",
    "stream_run",
    "tell",
    "tell_call_finished",
    "tell_call_started",
    "tell_kept",
]
