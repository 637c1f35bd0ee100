"""A human in the loop: what a paused run asks, and the decisions that answer it.

Shared by every agent that pauses for a person. A run that needs a human pauses with a
:class:`HumanRequest` — which tool calls, with which arguments, and why — and is resumed
with one :class:`HumanDecision` for all the calls it asks about, or with one per call
(``{call_id: decision}``: approve this one, edit that one, reject the third):

- :class:`Approve`: run the calls as they are;
- :class:`Edit`: run them with new arguments (``{call_id: arguments}``, checked against the
  tool's schema before anything changes);
- :class:`Reject`: do not run them; the ``message`` goes to the model;
- :class:`Replan`: drop the calls and plan again;
- :class:`Continue`: go on (after a review, when no call waits);
- :class:`Stop`: end the run.

A request lists the decisions it ``allows`` (a call may allow fewer); :func:`check_decision`
refuses the others with a :class:`DecisionError` saying what would fit. Both agents (the
middleware agent's :class:`~toolloop.agents.middleware.HumanApprovalMiddleware` and the
status agent) speak this one protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ._errors import DecisionError
from ._model import RunToolCall

__all__ = [
    "Approve",
    "Continue",
    "DecisionKind",
    "Edit",
    "HumanAnswer",
    "HumanDecision",
    "HumanRequest",
    "Reject",
    "Replan",
    "RequestKind",
    "RequestedCall",
    "Stop",
    "check_decision",
    "parse_decision",
]

DecisionKind = Literal["approve", "edit", "reject", "replan", "continue", "stop"]
RequestKind = Literal["approve_tool_calls", "interrupted_tool_calls", "review"]
"""``approve_tool_calls``: calls wait for approval before they run; ``interrupted_tool_calls``:
calls started but were cut off before their outcome was recorded (their process stopped, or
the run's own timeout, cancellation or error ended them: the request says which), so they may
have taken effect; ``review``: something needs a look (errors, repeated calls, a failed
answer)."""


class RequestedCall(RunToolCall):
    """A tool call the human is asked about."""

    purpose: str = ""
    """Why the model wants the call."""
    why: str = ""
    """Why the human is asked about it (e.g. the tool needs approval)."""
    allowed: list[DecisionKind] | None = None
    """The decisions that fit this call, when they are fewer than the request's."""


class HumanRequest(BaseModel):
    """What a paused run asks a human."""

    model_config = ConfigDict(frozen=True)

    kind: RequestKind
    reason: str
    """Why the run stopped to ask, in a sentence or two."""
    tool_calls: list[RequestedCall] = Field(default_factory=list)
    allowed: list[DecisionKind]
    """The decisions that fit this question."""
    details: dict[str, Any] = Field(default_factory=dict)
    """More context (JSON), e.g. the errors of failed calls."""

    def describe(self) -> str:
        """The question as text, for a person."""
        lines = [self.reason]
        for call in self.tool_calls:
            why = f" — {call.why}" if call.why else ""
            lines.append(f"  [{call.call_id}] {call.tool_name}({call.arguments}){why}")
        lines.append("answer with: " + ", ".join(self.allowed))
        return "\n".join(lines)


class _Decision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    message: str | None = None
    """Words for the model (it sees them on its next call)."""


class Approve(_Decision):
    """Run the calls asked about, as they are."""

    kind: Literal["approve"] = "approve"


class Edit(_Decision):
    """Run the calls asked about, with ``arguments[call_id]`` replacing the arguments of
    each call named (the others run as they are)."""

    kind: Literal["edit"] = "edit"
    arguments: dict[str, dict[str, Any]]


class Reject(_Decision):
    """Do not run the calls asked about; ``message`` tells the model why."""

    kind: Literal["reject"] = "reject"


class Replan(_Decision):
    """Drop the calls asked about and plan again (``message``: what to do differently)."""

    kind: Literal["replan"] = "replan"


class Continue(_Decision):
    """Go on from where the run stopped."""

    kind: Literal["continue"] = "continue"


class Stop(_Decision):
    """End the run now; ``message`` becomes its answer."""

    kind: Literal["stop"] = "stop"


HumanDecision = Annotated[
    Approve | Edit | Reject | Replan | Continue | Stop, Field(discriminator="kind")
]
"""One of the decisions, told apart by ``kind``."""

HumanAnswer = HumanDecision | dict[str, HumanDecision]
"""What answers a request: one decision for every call it asks about, or one per call
(``{call_id: Approve() | Edit(arguments={call_id: {...}}) | Reject(...)}``)."""

_DECISION: TypeAdapter[HumanDecision] = TypeAdapter(HumanDecision)
_PER_CALL: tuple[str, ...] = ("approve", "edit", "reject")
_KINDS: tuple[str, ...] = ("approve", "edit", "reject", "replan", "continue", "stop")


def parse_decision(value: object) -> HumanDecision:
    """A decision from a decision object, its JSON data (``{"kind": "approve"}``) or a bare
    kind (``"approve"``).

    Raises:
        DecisionError: ``value`` is none of these.
    """
    if isinstance(value, (Approve, Edit, Reject, Replan, Continue, Stop)):
        return value
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise DecisionError(
            f"a decision is Approve(), Edit(...), Reject(...), Replan(), Continue() or Stop() "
            f"(or their data, e.g. {{'kind': 'approve'}}); got {type(value).__name__}"
        )
    try:
        return _DECISION.validate_python(dict(value))
    except ValidationError as exc:
        kind = value.get("kind")
        if kind not in _KINDS:
            raise DecisionError(
                f"a decision's kind is one of {list(_KINDS)}; got {kind!r}"
            ) from exc
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or kind}: {e['msg']}" for e in exc.errors()
        )
        raise DecisionError(f"the {kind!r} decision is malformed: {problems}") from exc


def parse_answer(value: object) -> HumanAnswer:
    """One decision (see :func:`parse_decision`), or a mapping of call ids to decisions.

    Raises:
        DecisionError: ``value`` is none of these.
    """
    if isinstance(value, Mapping) and "kind" not in value:
        answers: dict[str, HumanDecision] = {}
        for call_id, decision in value.items():
            try:
                answers[str(call_id)] = parse_decision(decision)
            except DecisionError as exc:
                raise DecisionError(f"the decision for call {call_id!r}: {exc}") from exc
        return answers
    return parse_decision(value)


def _check_edit(
    edit: Edit,
    calls: Mapping[str, RequestedCall],
    validate_arguments: Callable[[str, dict[str, Any]], dict[str, Any]] | None,
) -> Edit:
    unknown = sorted(set(edit.arguments) - set(calls))
    if unknown or not edit.arguments:
        raise DecisionError(
            f"an edit names the calls it changes, among {sorted(calls)}; got {unknown or 'none'}"
        )
    checked: dict[str, dict[str, Any]] = {}
    for call_id, arguments in edit.arguments.items():
        tool_name = calls[call_id].tool_name
        if validate_arguments is None:
            checked[call_id] = dict(arguments)
            continue
        try:
            checked[call_id] = validate_arguments(tool_name, dict(arguments))
        except Exception as exc:
            raise DecisionError(
                f"the edited arguments of call {call_id!r} do not fit tool {tool_name!r}: {exc}"
            ) from exc
    return edit.model_copy(update={"arguments": checked})


def check_decision(
    request: HumanRequest,
    decision: object,
    *,
    validate_arguments: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
) -> HumanAnswer:
    """The answer (one decision, or one per call) parsed and checked against ``request``;
    raises before anything changes.

    Args:
        validate_arguments: ``(tool_name, arguments) -> arguments``, raising when the
            arguments do not fit the tool (e.g. ``registry.get(name).validate``); edited
            arguments are checked with it.

    Raises:
        DecisionError: a kind the request (or one of its calls) does not allow, an edit of a
            call it does not ask about, edited arguments the tool refuses, or per-call
            decisions that miss a call or name one it does not ask about.
    """
    calls = {c.call_id: c for c in request.tool_calls}
    parsed = parse_answer(decision)
    if isinstance(parsed, dict):
        unknown = sorted(set(parsed) - set(calls))
        missing = sorted(set(calls) - set(parsed))
        if unknown or missing or not calls:
            raise DecisionError(
                f"per-call decisions answer each call asked about, {sorted(calls)}; "
                f"unknown: {unknown}, missing: {missing}"
            )
        checked: dict[str, HumanDecision] = {}
        for call_id, one in parsed.items():
            allowed = calls[call_id].allowed or request.allowed
            if one.kind not in _PER_CALL or one.kind not in allowed:
                fits = [k for k in allowed if k in _PER_CALL]
                raise DecisionError(
                    f"a {one.kind!r} decision does not fit call {call_id!r} "
                    f"({calls[call_id].tool_name}): answer it with one of {fits}"
                )
            if isinstance(one, Edit):
                if set(one.arguments) != {call_id}:
                    raise DecisionError(
                        f"the edit of call {call_id!r} gives its new arguments as "
                        f"{{{call_id!r}: {{...}}}}; got arguments for {sorted(one.arguments)}"
                    )
                one = _check_edit(one, calls, validate_arguments)
            checked[call_id] = one
        return checked
    if parsed.kind not in request.allowed:
        raise DecisionError(
            f"the run asks {request.kind!r} ({request.reason}); a {parsed.kind!r} decision "
            f"does not fit it: answer with one of {list(request.allowed)}"
        )
    if parsed.kind in _PER_CALL:
        for call in calls.values():
            kind = parsed.kind
            if isinstance(parsed, Edit) and call.call_id not in parsed.arguments:
                kind = "approve"  # an edit runs the calls it does not name as they are
            if call.allowed is not None and kind not in call.allowed:
                raise DecisionError(
                    f"a {kind!r} decision does not fit call {call.call_id!r} "
                    f"({call.tool_name}), which allows {call.allowed}: answer per call, "
                    f"e.g. {{{call.call_id!r}: {{'kind': {call.allowed[0]!r}}}}}"
                )
    if isinstance(parsed, Edit):
        parsed = _check_edit(parsed, calls, validate_arguments)
    return parsed
