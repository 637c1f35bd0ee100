"""The human in the status-routed agent: the questions a run asks, and how each decision
changes the run.

A node that needs a human leaves its question in ``state.question``; the human
intervention node pauses the run with it. The decision that resumes the run was checked
against that question before anything was written; here it is applied, once, through the
kernel's one applier (:func:`toolloop.kernel.decide`), whose verdicts map onto the state:

===========  ==========================================================  ====================
decision     effect                                                      status
===========  ==========================================================  ====================
approve      the calls asked about may run (interrupted ones: again,     ready_for_execution
             under new call ids)
edit         the same, with the edited arguments                         plan_modified
reject       the calls asked about get a "rejected" record (the          plan_modified
             kernel's :func:`~toolloop.kernel.rejected_error`); not run
replan       pending calls are dropped                                   replan
continue     go on                                                       continue
stop         the run ends (stop reason ``stopped``); the message is its  human_stopped
             answer
===========  ==========================================================  ====================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checkpoints import (
    DecisionKind,
    HumanAnswer,
    HumanRequest,
    RequestedCall,
    interruption,
)
from ..kernel import HUMAN_EVENT, Run, Skip, Verdict, decide
from ..kernel import approval_request as ask_approval
from ..kernel import interrupted_request as ask_interrupted
from ..runner import ToolExecutionRecord
from ._state import Note, StatusAgentState, StatusCallRecord, StatusToolCall

__all__ = [
    "HUMAN_EVENT",
    "apply_decision",
    "approval_request",
    "interrupted_request",
    "review_request",
]

_ON_CALLS: list[DecisionKind] = ["approve", "edit", "reject", "replan", "stop"]
_ON_REVIEW: list[DecisionKind] = ["continue", "replan", "stop"]


def approval_request(calls: list[StatusToolCall], model_reason: str = "") -> HumanRequest:
    """Ask to approve ``calls`` before they run (``model_reason``: why the model wants them)."""
    return ask_approval(
        [
            RequestedCall(
                call_id=c.call_id,
                tool_name=c.tool_name,
                arguments=c.arguments,
                purpose=c.purpose,
                why=c.why,
                allowed=c.allowed,
            )
            for c in calls
        ],
        _ON_CALLS,
        note=f"the model's reason: {model_reason}" if model_reason else "",
    )


def interrupted_request(
    records: list[StatusCallRecord], causes: Mapping[str, str] | None = None
) -> HumanRequest:
    """Ask what to do about calls that were cut off (they may have taken effect);
    ``causes``: what ended the run while each ran, by call id (none: its process stopped)."""
    causes = causes or {}
    return ask_interrupted(
        [
            RequestedCall(
                call_id=r.call_id,
                tool_name=r.record.tool_name,
                arguments=r.record.kwargs,
                purpose=r.record.purpose,
                why=f"interrupted: {interruption(causes.get(r.call_id))}; it may or may not "
                "have taken effect",
            )
            for r in records
        ],
        [causes.get(r.call_id) for r in records],
        ["approve", "edit", "reject", "replan", "continue", "stop"],
    )


def review_request(reason: str, details: dict[str, Any] | None = None) -> HumanRequest:
    """Ask a human to look at the run (no call waits)."""
    return HumanRequest(kind="review", reason=reason, allowed=_ON_REVIEW, details=details or {})


def apply_decision(state: StatusAgentState, answer: HumanAnswer) -> None:
    """Change ``state`` as ``answer`` says (see the module docs) and set the status."""
    question = state.question or review_request("the run waits for a human")
    decided = decide(question, answer)  # checked when the run was resumed: applied here
    state.question = None
    state.error = None
    state.decisions.append(decided.decision)
    if isinstance(decided.decision, dict):
        for call_id, one in decided.decision.items():
            if one.message:
                state.notes.append(Note(source="human", text=f"on {call_id}: {one.message}"))
    elif decided.message:
        state.notes.append(Note(source="human", text=decided.message))
    if decided.stops:
        state.pending_calls = []
        if decided.message:
            state.answer = decided.message
        state.stop_reason = "stopped"
        state.stop_detail = "a human stopped the run" + (
            f": {decided.message}" if decided.message else ""
        )
        state.status = "human_stopped"
    elif decided.replans:
        state.pending_calls = []
        state.status = "replan"
    elif decided.goes_on:
        state.status = "continue"
    else:
        if question.kind == "interrupted_tool_calls":
            _again(state, question, decided.calls)
        else:
            _approved(state, decided.calls)
        given = decided.decision
        kinds = {d.kind for d in given.values()} if isinstance(given, dict) else {given.kind}
        state.status = "ready_for_execution" if kinds == {"approve"} else "plan_modified"


def _approved(state: StatusAgentState, verdicts: Mapping[str, Verdict]) -> None:
    """The pending calls asked about: approved (with their arguments as decided) or
    rejected (a failed record each, ``source="rejected"``; they never run)."""
    kept: list[StatusToolCall] = []
    rejected: list[StatusCallRecord] = []
    for call in state.pending_calls:
        verdict = verdicts.get(call.call_id)
        if isinstance(verdict, Skip):
            record = ToolExecutionRecord.failed(call.command(), verdict.error)
            rejected.append(
                StatusCallRecord(call_id=call.call_id, record=record, source="rejected")
            )
            continue
        if verdict is not None:
            update = {"approved": True, "why": "", "allowed": None, "arguments": verdict.arguments}
            call = call.model_copy(update=update)
        kept.append(call)
    state.pending_calls = kept
    state.records.extend(rejected)


def _again(
    state: StatusAgentState, question: HumanRequest, verdicts: Mapping[str, Verdict]
) -> None:
    """Interrupted calls a human approved run again, under new call ids (their first call
    keeps its interrupted record); those rejected stay as they are."""
    state.pending_calls = [
        StatusToolCall(
            call_id=state.new_call_id(),
            tool_name=asked.tool_name,
            arguments=verdict.arguments,
            purpose=asked.purpose,
            approved=True,
        )
        for asked in question.tool_calls
        if isinstance(verdict := verdicts.get(asked.call_id), Run)
    ]
