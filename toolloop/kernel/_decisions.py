"""A human's answer to a paused run, applied the same way in every product.

:func:`decide` checks the answer against the run's :class:`~toolloop.checkpoints.HumanRequest`
(before anything changes) and says, for each call asked about, whether it runs (approved as
it is, or with edited arguments) or not (rejected, or dropped to plan again), and what the
whole answer asks of the run (go on, stop). A product only maps the verdicts onto its state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..checkpoints import (
    Continue,
    DecisionKind,
    Edit,
    HumanDecision,
    HumanRequest,
    Reject,
    Replan,
    RequestedCall,
    Stop,
    check_decision,
    interruption,
)
from ._vocabulary import rejected_error

__all__ = [
    "Decided",
    "Run",
    "Skip",
    "Verdict",
    "approval_request",
    "decide",
    "interrupted_request",
    "replanned_error",
]


@dataclass(frozen=True, slots=True)
class Run:
    """The call runs, with these arguments (as asked, or as a human edited them)."""

    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Skip:
    """The call does not run; ``error`` is what its record and the model are told."""

    error: str
    why: Literal["rejected", "replanned"]


Verdict = Run | Skip


def replanned_error(tool_name: str, message: str | None = None) -> str:
    """What a call dropped by a ``Replan`` decision says, in every product."""
    said = f"a human dropped this call of {tool_name!r} to plan again; it did not run"
    return f"{said}: {message}" if message else said


def approval_request(
    calls: list[RequestedCall], allowed: Sequence[DecisionKind], *, note: str = ""
) -> HumanRequest:
    """What a run asks before ``calls`` that need approval run, worded the same in every
    product (``note``: what more the product knows, e.g. the model's reason)."""
    names = ", ".join(sorted({call.tool_name for call in calls}))
    reason = f"{len(calls)} tool call(s) need your approval before they run ({names})"
    return HumanRequest(
        kind="approve_tool_calls",
        reason=f"{reason}; {note}" if note else reason,
        tool_calls=calls,
        allowed=list(allowed),
    )


def interrupted_request(
    calls: list[RequestedCall], causes: Iterable[str | None], allowed: Sequence[DecisionKind]
) -> HumanRequest:
    """What a run asks about ``calls`` a crash or a limit cut off (``causes``: what cut
    each off; ``None``: its process stopped), worded the same in every product: they may
    or may not have taken effect, were not run again, and what each decision allowed does."""
    what = "; ".join(dict.fromkeys(interruption(cause, plural=True) for cause in causes))
    return HumanRequest(
        kind="interrupted_tool_calls",
        reason=(
            f"{len(calls)} tool call(s) were interrupted: {what}, so they may or may not "
            f"have taken effect. They were not run again: {_choices(allowed)}"
        ),
        tool_calls=calls,
        allowed=list(allowed),
    )


def _choices(allowed: Sequence[DecisionKind]) -> str:
    said: list[str] = []
    if "approve" in allowed:
        again = "approve (or edit)" if "edit" in allowed else "approve"
        said.append(f"{again} to run them again")
    without = [kind for kind in ("reject", "continue") if kind in allowed]
    if without:
        said.append(f"{' or '.join(without)} to go on without them")
    said.extend(kind for kind in ("replan", "stop") if kind in allowed)
    if len(said) < 2:
        return "".join(said)
    return f"{', '.join(said[:-1])}, or {said[-1]}"


@dataclass(frozen=True, slots=True)
class Decided:
    """An answer, checked and applied to the request's calls."""

    decision: HumanDecision | dict[str, HumanDecision]
    """The answer as checked (one decision, or one per call)."""
    calls: dict[str, Verdict] = field(default_factory=dict)
    """By call id: what happens to each call asked about."""

    @property
    def kind(self) -> str:
        """The whole answer's kind (``per_call`` when each call got its own)."""
        return "per_call" if isinstance(self.decision, dict) else self.decision.kind

    @property
    def message(self) -> str | None:
        """The words for the model (a per-call answer has none of its own)."""
        return None if isinstance(self.decision, dict) else self.decision.message

    @property
    def stops(self) -> bool:
        """The human ended the run (``Stop``)."""
        return isinstance(self.decision, Stop)

    @property
    def replans(self) -> bool:
        """The human dropped the calls to plan again (``Replan``)."""
        return isinstance(self.decision, Replan)

    @property
    def goes_on(self) -> bool:
        """The human said to go on, with no call to decide (``Continue``)."""
        return isinstance(self.decision, Continue)


def _verdict(
    one: HumanDecision, call_id: str, tool_name: str, arguments: dict[str, Any]
) -> Verdict:
    if isinstance(one, Edit):
        return Run(dict(one.arguments.get(call_id, arguments)))
    if isinstance(one, Reject):
        return Skip(rejected_error(tool_name, one.message), "rejected")
    if isinstance(one, Replan):
        return Skip(replanned_error(tool_name, one.message), "replanned")
    return Run(dict(arguments))  # approve (continue/stop decide no call)


def decide(
    request: HumanRequest,
    answer: object,
    *,
    validate_arguments: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
) -> Decided:
    """``answer`` checked against ``request`` and applied to its calls.

    Args:
        answer: one decision for every call asked about (``Approve()``, ``Edit(...)``,
            ``Reject(...)``, ``Replan(...)``, ``Continue()``, ``Stop(...)``, their data, or a
            bare kind), or one per call (``{call_id: decision}``).
        validate_arguments: ``(tool_name, arguments) -> arguments``, raising when edited
            arguments do not fit the tool.

    Raises:
        DecisionError: the answer does not fit the request (a kind it does not allow, an
            edit of a call it does not ask about, arguments the tool refuses); nothing
            changed.
    """
    checked = check_decision(request, answer, validate_arguments=validate_arguments)
    calls: dict[str, Verdict] = {}
    for call in request.tool_calls:
        one = checked.get(call.call_id) if isinstance(checked, dict) else checked
        if one is None or isinstance(one, (Continue, Stop)):
            continue
        calls[call.call_id] = _verdict(one, call.call_id, call.tool_name, call.arguments)
    return Decided(checked, calls)
