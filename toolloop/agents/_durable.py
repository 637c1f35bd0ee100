"""Durable runs of the middleware agent: progress checkpoints, what the journal keeps of a
tool call, and the question a recovered run asks about a call whose outcome is unknown.

With a store, the run writes a progress checkpoint after each model turn and after each
tools step (its state, and where it goes next), and every tool call goes through the
kernel's journal (:func:`toolloop.kernel.journaled_call`) under its call id: the intent
before the call (the ``wrap_tool_call`` onion), its outcome after. :meth:`Agent.recover`
continues a run whose process died from its last checkpoint: a call with a journaled
outcome is not run again (its outcome is replayed); a call that started without an outcome
(it may or may not have taken effect) follows the run's ``unknown_outcome``: ``"fail"``
answers it with an error saying what cut it off, ``"retry"`` runs an idempotent tool again,
``"ask"`` pauses the run with a :class:`~toolloop.checkpoints.HumanRequest` of kind
``interrupted_tool_calls`` (approve or edit runs it again under the same id, reject answers
it with an error). No tool ever runs twice on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..checkpoints import RequestedCall, interruption
from ..flow import FlowSnapshot, Wait
from ..kernel import Decided, Interrupted, Run, Skip, interrupted_error
from ..kernel import interrupted_request as kernel_interrupted_request
from ..runner import ToolExecutionRecord, json_safe
from ._messages import AssistantMessage, ToolCall, ToolMessage, last_assistant
from ._state import AgentState
from ._tool_call import ToolOutcome, error_message, record_of

__all__ = [
    "RECOVER",
    "RECOVERY",
    "apply_recovery_answer",
    "dump_outcome",
    "interrupted_request",
    "load_outcome",
    "progress_snapshot",
]

RECOVER = "recover"
"""The external event a progress checkpoint waits for: recovering a run delivers it."""
RECOVERY = "toolloop.recovery"
"""Who paused a run that found interrupted calls (not a middleware)."""


def progress_snapshot(
    state: AgentState, execution_id: str, step: str, route: str, elapsed: float = 0.0
) -> FlowSnapshot:
    """A snapshot of a run between two steps; recovering it goes on with ``route``, its
    clock from ``elapsed`` (the seconds it had run)."""
    return FlowSnapshot(
        flow="agent",
        execution_id=execution_id,
        state=state.model_dump(mode="json"),
        waiting=[Wait(event=RECOVER, step=step, request={"route": route})],
        elapsed=elapsed,
    )


def dump_outcome(outcome: ToolOutcome) -> dict[str, Any]:
    """What the journal keeps of a call's outcome (JSON data)."""
    return {
        "message": outcome.message.model_dump(mode="json"),
        "record": json_safe(outcome.record),
        "update": json_safe(outcome.update),
        "jump": outcome.jump,
        "return_direct": outcome.return_direct,
    }


def load_outcome(data: Any) -> ToolOutcome:
    """A journaled outcome read back (raising on data that is none)."""
    try:
        message = ToolMessage.model_validate(data["message"])
        record = ToolExecutionRecord.model_validate(data["record"])
        update = data.get("update")
        return ToolOutcome(
            message,
            record,
            update if isinstance(update, Mapping) else None,
            data.get("jump"),
            bool(data.get("return_direct")),
        )
    except (KeyError, TypeError, ValidationError) as exc:
        raise ValueError(f"no tool answer: {exc}") from exc


def interrupted_request(cut: list[tuple[ToolCall, Interrupted]]) -> dict[str, Any]:
    """The pause of a run that found interrupted calls (``unknown_outcome="ask"``): where it
    stopped and what it asks, with what cut each call off (none: its process stopped)."""
    causes = {call.id: i.cause for call, i in cut if i.cause is not None}
    request = kernel_interrupted_request(
        [
            RequestedCall(
                call_id=call.id,
                tool_name=call.name,
                arguments=call.args if isinstance(call.args, dict) else {},
                why=f"interrupted: {interruption(i.cause)}; it may or may not have taken effect",
            )
            for call, i in cut
        ],
        [i.cause for _, i in cut],
        ["approve", "edit", "reject"],
    )
    return {
        "by": RECOVERY,
        "hook": "tools",
        "index": 0,
        "jump": None,
        "request": request.model_dump(mode="json"),
        "causes": causes,
    }


def _said(decided: Decided, call_id: str) -> str | None:
    one = decided.decision.get(call_id) if isinstance(decided.decision, dict) else decided.decision
    return None if one is None else one.message


def apply_recovery_answer(
    state: AgentState, decided: Decided, causes: Mapping[str, str]
) -> list[ToolOutcome]:
    """A human's answer about interrupted calls: approved (or edited) ones are to run
    again under their own id (``state.rerun``); rejected ones are answered with an error
    saying what cut them off. The outcomes of the rejected ones, in call order."""
    i = last_assistant(state.messages)
    message = state.messages[i]
    assert isinstance(message, AssistantMessage)
    calls: list[ToolCall] = []
    rejected: list[ToolOutcome] = []
    for call in message.tool_calls:
        verdict = decided.calls.get(call.id)
        if isinstance(verdict, Run):
            if verdict.arguments != call.args:
                call = call.model_copy(
                    update={"args": verdict.arguments, "error": None, "raw_arguments": None}
                )
            state.rerun.append(call.id)
        elif isinstance(verdict, Skip):
            said = _said(decided, call.id)
            error = (
                f"{interrupted_error(call.id, call.name, causes.get(call.id))}; a human chose "
                f"not to run it again{f': {said}' if said else ''}"
            )
            answer = error_message(call, error)
            rejected.append(ToolOutcome(answer, record_of(call, answer)))
        calls.append(call)
    state.messages[i] = message.model_copy(update={"tool_calls": calls})
    return rejected
