"""Durable runs of the middleware agent: progress checkpoints, a journal of tool calls, and
what a recovered run does with a call whose outcome is unknown.

With a store, the run writes a progress checkpoint after each model turn and after each
tools step (its state, and where it goes next), and every tool call goes through the run's
journal: its intent is written before the call (the ``wrap_tool_call`` onion), its outcome
after. :meth:`Agent.recover` continues a run whose process died from its last checkpoint:
a call with a journaled outcome is not run again (its outcome is replayed), and a call that
started without an outcome (it may or may not have taken effect) is put to a human, as the
status agent does: the run pauses with a :class:`~toolloop.checkpoints.HumanRequest` of kind
``interrupted_tool_calls``; approve (or edit) runs it again, reject answers it with an error.
No tool ever runs twice on its own. What cut such a call off is said truthfully: its process
stopped, or the run's own timeout, cancellation or error ended it (journaled by
:func:`~toolloop.checkpoints.note_cut_off` when the run ended).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from pydantic import ValidationError

from ..checkpoints import (
    Approve,
    CheckpointedRun,
    CorruptCheckpointError,
    Edit,
    HumanDecision,
    HumanRequest,
    JournalEntry,
    Reject,
    RequestedCall,
    check_decision,
    cut_off_causes,
    interruption,
)
from ..flow import FlowSnapshot, Wait
from ..runner import json_safe
from ._messages import AssistantMessage, ToolCall, ToolMessage, last_assistant, new_id
from ._state import AgentState
from ._tool_call import ToolOutcome, error_message

__all__ = [
    "RECOVER",
    "RECOVERY",
    "apply_recovery_answer",
    "check_recovery_answer",
    "interrupted",
    "interrupted_request",
    "journaled_call",
    "progress_snapshot",
]

RECOVER = "recover"
"""The external event a progress checkpoint waits for: recovering a run delivers it."""
RECOVERY = "toolloop.recovery"
"""Who paused a run that recovery found interrupted calls in (not a middleware)."""


def interrupted(cause: str | None) -> str:
    """The answer of a call that was cut off (``cause``: what ended the run while it ran,
    ``None``: its process stopped)."""
    return (
        f"the call was interrupted: {interruption(cause)}, so it may or may not have taken "
        "effect; it was not run again"
    )


def progress_snapshot(state: AgentState, execution_id: str, step: str, route: str) -> FlowSnapshot:
    """A snapshot of a run between two steps; recovering it goes on with ``route``."""
    return FlowSnapshot(
        flow="agent",
        execution_id=execution_id,
        state=state.model_dump(mode="json"),
        waiting=[Wait(event=RECOVER, step=step, request={"route": route})],
    )


def _dump(outcome: ToolOutcome) -> dict[str, Any]:
    return {
        "message": outcome.message.model_dump(mode="json"),
        "update": json_safe(outcome.update),
        "jump": outcome.jump,
        "return_direct": outcome.return_direct,
    }


def _load(data: Any, run_id: str, call_id: str) -> ToolOutcome:
    try:
        message = ToolMessage.model_validate(data["message"])
        update = data.get("update")
        return ToolOutcome(
            message,
            update if isinstance(update, Mapping) else None,
            data.get("jump"),
            bool(data.get("return_direct")),
        )
    except (KeyError, TypeError, ValidationError) as exc:
        raise CorruptCheckpointError(
            f"the journaled outcome of call {call_id!r} of run {run_id!r} is no tool answer "
            f"({exc}); it was left as it is"
        ) from exc


async def journaled_call(
    run: CheckpointedRun,
    journal: Mapping[str, JournalEntry],
    key: str,
    call: ToolCall,
    call_tool: Callable[[], Awaitable[ToolOutcome]],
) -> ToolOutcome | None:
    """The outcome of ``call`` under the journal ``key``, running it at most once ever;
    ``None`` when an earlier attempt was interrupted (its outcome is unknown)."""
    entry = journal.get(key)
    if entry is None:
        args = call.args if isinstance(call.args, dict) else {}
        mine = JournalEntry(call_id=key, tool_name=call.name, arguments=args)
        entry = await run.record_intent(mine)
        if entry.state == "started" and entry.started_at == mine.started_at:
            outcome = await call_tool()
            with anyio.CancelScope(shield=True):  # written even while cancelled: it did run
                await run.record_outcome(key, _dump(outcome))
            return outcome
    if entry.state == "started":
        answer = error_message(call, interrupted(cut_off_causes(journal).get(key)))
        await run.record_outcome(key, _dump(ToolOutcome(answer)), state="interrupted")
        return None
    if entry.state == "interrupted":
        return None
    return _load(entry.outcome, run.run_id, key)


def interrupted_request(calls: list[ToolCall], causes: Mapping[str, str]) -> dict[str, Any]:
    """The pause of a recovered run with interrupted calls (where, and what it asks);
    ``causes``: what ended the run while each ran, by call id (none: its process stopped)."""
    what = "; ".join(dict.fromkeys(interruption(causes.get(c.id), plural=True) for c in calls))
    request = HumanRequest(
        kind="interrupted_tool_calls",
        reason=(
            f"{len(calls)} tool call(s) were interrupted: {what}, so they may or may not "
            "have taken effect. They were not run again: approve (or edit) to run them "
            "again, or reject to tell the model they did not finish"
        ),
        tool_calls=[
            RequestedCall(
                call_id=c.id,
                tool_name=c.name,
                arguments=c.args if isinstance(c.args, dict) else {},
                why=f"interrupted: {interruption(causes.get(c.id))}; it may or may not have "
                "taken effect",
            )
            for c in calls
        ],
        allowed=["approve", "edit", "reject"],
    )
    return {
        "by": RECOVERY,
        "hook": "tools",
        "index": 0,
        "jump": None,
        "request": request.model_dump(mode="json"),
        "causes": {c.id: causes[c.id] for c in calls if c.id in causes},
    }


def check_recovery_answer(answer: Any, request: Any) -> dict[str, HumanDecision]:
    """One decision per interrupted call (a single decision applies to all)."""
    asked = HumanRequest.model_validate(request)
    checked = check_decision(asked, answer)
    if isinstance(checked, dict):
        return checked
    per_call: dict[str, HumanDecision] = {}
    for call in asked.tool_calls:
        if isinstance(checked, Edit) and call.call_id not in checked.arguments:
            per_call[call.call_id] = Approve()
        elif isinstance(checked, Edit):
            per_call[call.call_id] = Edit(arguments={call.call_id: checked.arguments[call.call_id]})
        else:
            per_call[call.call_id] = checked
    return per_call


def apply_recovery_answer(
    state: AgentState, decisions: dict[str, HumanDecision], causes: Mapping[str, str]
) -> None:
    """Approved (or edited) calls get a fresh id, so they run once more; rejected ones are
    answered with an error (saying what cut them off: ``causes``, by call id). The model
    sees the outcome either way."""
    i = last_assistant(state.messages)
    message = state.messages[i]
    assert isinstance(message, AssistantMessage)
    calls: list[ToolCall] = []
    answers: list[ToolMessage] = []
    for call in message.tool_calls:
        decision = decisions.get(call.id)
        if isinstance(decision, Reject):
            said = decision.message or "no reason given"
            cut = interrupted(causes.get(call.id))
            answers.append(
                error_message(call, f"{cut}; a human chose not to run it again ({said})")
            )
        elif decision is not None:
            args = decision.arguments[call.id] if isinstance(decision, Edit) else call.args
            call = call.model_copy(
                update={"id": new_id("call"), "args": args, "error": None, "raw_arguments": None}
            )
        calls.append(call)
    state.messages[i] = message.model_copy(update={"tool_calls": calls})
    state.messages.extend(answers)
