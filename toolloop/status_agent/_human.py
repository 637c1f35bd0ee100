"""The human in the status-routed agent: the questions a run asks, and how each decision
changes the run.

A node that needs a human leaves its question in ``state.question``; the human
intervention node pauses the run with it. The decision that resumes the run was checked
against that question before anything was written (:func:`~toolloop.checkpoints.check_decision`);
here it is applied, once:

===========  ==========================================================  ====================
decision     effect                                                      status
===========  ==========================================================  ====================
approve      the calls asked about may run (interrupted ones: again,     ready_for_execution
             under new call ids)
edit         the same, with the edited arguments                         plan_modified
reject       the calls asked about get a "rejected" record; not run      plan_modified
replan       pending calls are dropped                                   replan
continue     go on                                                       continue
stop         the run ends; the message is its answer                     human_stopped
===========  ==========================================================  ====================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checkpoints import (
    Approve,
    Continue,
    DecisionKind,
    Edit,
    HumanAnswer,
    HumanDecision,
    HumanRequest,
    Reject,
    Replan,
    RequestedCall,
    Stop,
    interruption,
)
from ..runner import ToolExecutionRecord
from ._state import Note, StatusAgentState, StatusCallRecord, StatusToolCall

__all__ = [
    "HUMAN_EVENT",
    "apply_decision",
    "approval_request",
    "interrupted_request",
    "review_request",
]

HUMAN_EVENT = "human_decision"
"""The external event a paused run waits for; its value is the human's decision."""

_ON_CALLS: list[DecisionKind] = ["approve", "edit", "reject", "replan", "stop"]
_ON_REVIEW: list[DecisionKind] = ["continue", "replan", "stop"]


def approval_request(calls: list[StatusToolCall], model_reason: str = "") -> HumanRequest:
    """Ask to approve ``calls`` before they run (``model_reason``: why the model wants them)."""
    names = ", ".join(sorted({c.tool_name for c in calls}))
    reason = f"{len(calls)} tool call(s) need your approval before they run ({names})"
    if model_reason:
        reason += f"; the model's reason: {model_reason}"
    return HumanRequest(
        kind="approve_tool_calls",
        reason=reason,
        tool_calls=[
            RequestedCall(
                call_id=c.call_id,
                tool_name=c.tool_name,
                arguments=c.arguments,
                purpose=c.purpose,
                why=c.why,
            )
            for c in calls
        ],
        allowed=_ON_CALLS,
    )


def interrupted_request(
    records: list[StatusCallRecord], causes: Mapping[str, str] | None = None
) -> HumanRequest:
    """Ask what to do about calls that were cut off (they may have taken effect);
    ``causes``: what ended the run while each ran, by call id (none: its process stopped)."""
    causes = causes or {}
    what = "; ".join(
        dict.fromkeys(interruption(causes.get(r.call_id), plural=True) for r in records)
    )
    return HumanRequest(
        kind="interrupted_tool_calls",
        reason=(
            f"{len(records)} tool call(s) were interrupted: {what}, so they may or may not "
            "have taken effect. They were not run again: approve (or edit) to run them "
            "again, reject or continue to go on without them, replan, or stop"
        ),
        tool_calls=[
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
        allowed=["approve", "edit", "reject", "replan", "continue", "stop"],
    )


def review_request(reason: str, details: dict[str, Any] | None = None) -> HumanRequest:
    """Ask a human to look at the run (no call waits)."""
    return HumanRequest(kind="review", reason=reason, allowed=_ON_REVIEW, details=details or {})


def apply_decision(state: StatusAgentState, decision: HumanAnswer) -> None:
    """Change ``state`` as ``decision`` says (see the module docs) and set the status."""
    question = state.question
    kind = question.kind if question is not None else "review"
    asked = {c.call_id: c for c in question.tool_calls} if question is not None else {}
    state.question = None
    state.error = None
    state.decisions.append(decision)
    if isinstance(decision, dict):
        _apply_per_call(state, kind, asked, decision)
        return
    if decision.message:
        state.notes.append(Note(source="human", text=decision.message))
    if isinstance(decision, (Approve, Edit)):
        edits = decision.arguments if isinstance(decision, Edit) else {}
        if kind == "interrupted_tool_calls":
            state.pending_calls = [
                StatusToolCall(
                    call_id=state.new_call_id(),
                    tool_name=c.tool_name,
                    arguments=edits.get(c.call_id, c.arguments),
                    purpose=c.purpose,
                    approved=True,
                )
                for c in asked.values()
            ]
        else:
            state.pending_calls = [
                c.model_copy(
                    update={
                        "approved": True,
                        "why": "",
                        "arguments": edits.get(c.call_id, c.arguments),
                    }
                )
                for c in state.pending_calls
            ]
        state.status = "ready_for_execution" if isinstance(decision, Approve) else "plan_modified"
    elif isinstance(decision, Reject):
        if kind == "approve_tool_calls":
            _reject(state, [c for c in state.pending_calls if c.call_id in asked], decision)
        state.status = "plan_modified"
    elif isinstance(decision, Replan):
        state.pending_calls = []
        state.status = "replan"
    elif isinstance(decision, Continue):
        state.status = "continue"
    else:
        assert isinstance(decision, Stop)
        state.pending_calls = []
        if decision.message:
            state.answer = decision.message
        state.stop_reason = "stopped by the human" + (
            f": {decision.message}" if decision.message else ""
        )
        state.status = "human_stopped"


def _reject(state: StatusAgentState, calls: list[StatusToolCall], decision: Reject) -> None:
    """The rejected calls get a failed record each (``source="rejected"``); they never run."""
    why = f"rejected by the human: {decision.message or 'no reason given'}"
    for call in calls:
        record = ToolExecutionRecord.failed(call.command(), why)
        state.records.append(
            StatusCallRecord(call_id=call.call_id, record=record, source="rejected")
        )
    gone = {c.call_id for c in calls}
    state.pending_calls = [c for c in state.pending_calls if c.call_id not in gone]


def _apply_per_call(
    state: StatusAgentState,
    kind: str,
    asked: dict[str, RequestedCall],
    decisions: dict[str, HumanDecision],
) -> None:
    """One decision per call: approve, edit (new arguments) or reject each."""
    for call_id, decision in decisions.items():
        if decision.message:
            state.notes.append(Note(source="human", text=f"on {call_id}: {decision.message}"))
    if kind == "interrupted_tool_calls":
        again = []
        for call_id, decision in decisions.items():
            if isinstance(decision, (Approve, Edit)):
                c = asked[call_id]
                edits = decision.arguments if isinstance(decision, Edit) else {}
                again.append(
                    StatusToolCall(
                        call_id=state.new_call_id(),
                        tool_name=c.tool_name,
                        arguments=edits.get(call_id, c.arguments),
                        purpose=c.purpose,
                        approved=True,
                    )
                )
        state.pending_calls = again
        state.status = "plan_modified"
        return
    rejected: list[tuple[StatusToolCall, Reject]] = []
    kept: list[StatusToolCall] = []
    for call in state.pending_calls:
        answer = decisions.get(call.call_id)
        if isinstance(answer, Reject):
            rejected.append((call, answer))
            continue
        if answer is not None:
            edits = answer.arguments if isinstance(answer, Edit) else {}
            call = call.model_copy(
                update={
                    "approved": True,
                    "why": "",
                    "arguments": edits.get(call.call_id, call.arguments),
                }
            )
        kept.append(call)
    state.pending_calls = kept
    for call, reject in rejected:
        _reject(state, [call], reject)
    everything_approved = all(isinstance(d, Approve) for d in decisions.values())
    state.status = "ready_for_execution" if everything_approved else "plan_modified"
