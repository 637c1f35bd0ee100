"""The plan/execute tool loop: a flow of PLAN and EXECUTE rounds on the engine."""

from __future__ import annotations

from ._answer import FINAL_ANSWER_RESULT_CHARS as FINAL_ANSWER_RESULT_CHARS
from ._answer import AnswerOptions as AnswerOptions
from ._answer import AnswerStream as AnswerStream
from ._answer import FinalAnswer as FinalAnswer
from ._answer import final_answer as final_answer
from ._answer import final_answer_messages as final_answer_messages
from ._answer import stream_final_answer as stream_final_answer
from ._api import LoopOptions as LoopOptions
from ._api import LoopStream as LoopStream
from ._api import async_plan_and_execute as async_plan_and_execute
from ._api import async_recover_plan_and_execute as async_recover_plan_and_execute
from ._api import async_resume_plan_and_execute as async_resume_plan_and_execute
from ._api import plan_and_execute as plan_and_execute
from ._api import recover_plan_and_execute as recover_plan_and_execute
from ._api import resume_plan_and_execute as resume_plan_and_execute
from ._api import stream_plan_and_execute as stream_plan_and_execute
from ._api import stream_recover_plan_and_execute as stream_recover_plan_and_execute
from ._api import stream_resume_plan_and_execute as stream_resume_plan_and_execute
from ._as_tool import as_tool as as_tool
from ._events import LoopEvent as LoopEvent
from ._events import PlanDecided as PlanDecided
from ._events import RoundFinished as RoundFinished
from ._events import RoundStarted as RoundStarted
from ._flow import AnswerWith as AnswerWith
from ._flow import RoundState as RoundState
from ._flow import loop_flow as loop_flow
from ._normalize import NormalizedPlan as NormalizedPlan
from ._normalize import PlanItem as PlanItem
from ._normalize import normalize_plan as normalize_plan
from ._results import EXTRA_INSTRUCTION as EXTRA_INSTRUCTION
from ._results import LoopResult as LoopResult
from ._results import StopReason as StopReason
from ._results import to_action_results as to_action_results

__all__ = [
    "EXTRA_INSTRUCTION",
    "FINAL_ANSWER_RESULT_CHARS",
    "AnswerOptions",
    "AnswerStream",
    "AnswerWith",
    "FinalAnswer",
    "LoopEvent",
    "LoopOptions",
    "LoopResult",
    "LoopStream",
    "NormalizedPlan",
    "PlanDecided",
    "PlanItem",
    "RoundFinished",
    "RoundStarted",
    "RoundState",
    "StopReason",
    "as_tool",
    "async_plan_and_execute",
    "async_recover_plan_and_execute",
    "async_resume_plan_and_execute",
    "final_answer",
    "final_answer_messages",
    "loop_flow",
    "normalize_plan",
    "plan_and_execute",
    "recover_plan_and_execute",
    "resume_plan_and_execute",
    "stream_final_answer",
    "stream_plan_and_execute",
    "stream_recover_plan_and_execute",
    "stream_resume_plan_and_execute",
    "to_action_results",
]
