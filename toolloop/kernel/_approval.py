"""Which tool calls wait for a human: one spec for every product.

``needs_approval`` is any of:

- ``True``: every call; ``False`` or ``()``: none;
- tool names: ``["send_mail", "delete"]``;
- a mapping: ``{"send_mail": True, "delete": Approval(allowed=("approve", "reject")),
  "search": False}``, or a rule per tool;
- a rule: ``lambda call: "over the limit" if call.arguments["amount"] > 100 else None``,
  given each :class:`~toolloop.checkpoints.RequestedCall`; it returns ``True`` or a reason
  (the call waits), ``False`` or ``None`` (it runs).

A run pauses before a call that needs approval runs, asking a
:class:`~toolloop.checkpoints.HumanRequest` of kind ``approve_tool_calls``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..checkpoints import DecisionKind, RequestedCall

__all__ = ["Approval", "ApprovalRule", "ApprovalSpec", "approval_rule"]

_ALL: tuple[DecisionKind, ...] = ("approve", "edit", "reject")


@dataclass(frozen=True)
class Approval:
    """How the calls of one tool are approved.

    Args:
        allowed: the decisions a human may take on them (some of ``approve``, ``edit``,
            ``reject``).
        description: shown with each call to approve (what to look at).
    """

    allowed: tuple[DecisionKind, ...] = _ALL
    description: str | None = None

    def __post_init__(self) -> None:
        wrong = [d for d in self.allowed if d not in _ALL]
        if wrong or not self.allowed:
            raise ValueError(
                f"the decisions allowed on a call are some of {list(_ALL)}, got "
                f"{list(self.allowed)}"
            )


ApprovalRule: TypeAlias = Callable[[RequestedCall], "bool | str | None"]
"""A rule for a call: ``True`` or a reason (a str) when it waits for a human, ``False`` or
``None`` when it runs."""

ApprovalSpec: TypeAlias = (
    bool
    | Collection[str]
    | Mapping[str, bool | Approval | Sequence[DecisionKind] | ApprovalRule]
    | ApprovalRule
)
"""Which calls wait for a human (see the module docs)."""

Check = Callable[[RequestedCall], "RequestedCall | None"]


def _policy(tool: str, value: object) -> Approval | ApprovalRule | None:
    if value is False or value is None:
        return None
    if value is True:
        return Approval()
    if isinstance(value, Approval) or callable(value):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return Approval(allowed=tuple(value))
    raise TypeError(
        f"needs_approval[{tool!r}] must be True, False, an Approval, the allowed decisions "
        f"or a rule (a callable); got {type(value).__name__}"
    )


def _asked(call: RequestedCall, approval: Approval, why: str) -> RequestedCall:
    if approval.description:
        why = f"{why}\n{approval.description}"
    return call.model_copy(update={"why": why, "allowed": list(approval.allowed)})


def _by_rule(call: RequestedCall, rule: ApprovalRule) -> RequestedCall | None:
    try:
        verdict = rule(call)
    except Exception as exc:  # a rule that breaks never lets a call run unapproved
        why = f"the approval rule raised {type(exc).__name__}: {exc}; a human decides"
        return call.model_copy(update={"why": why})
    if verdict is None or verdict is False:
        return None
    why = verdict if isinstance(verdict, str) else f"{call.tool_name} needs approval"
    return call.model_copy(update={"why": why})


def approval_rule(spec: ApprovalSpec, tool_names: Collection[str] | None = None) -> Check | None:
    """The check ``spec`` makes of each call: the call as a human is asked about it (its
    ``why``, the decisions it ``allowed``), or ``None`` when it runs without one. ``None``
    when no call ever waits.

    Args:
        tool_names: the run's tools: a name in ``spec`` that is none of them is refused (a
            misspelt name would let the real tool run unapproved).

    Raises:
        TypeError: a spec of none of the shapes (one bare ``str`` included: give a list).
        ValueError: a tool name that is no tool of the run.
    """
    if spec is False or spec is None:
        return None
    if spec is True:
        return lambda call: _asked(
            call, Approval(), f"every call needs approval ({call.tool_name})"
        )
    if isinstance(spec, str):
        raise TypeError(
            f"needs_approval takes tool names (a list or set), a mapping or a rule, not one "
            f"str: needs_approval=[{spec!r}]"
        )
    if callable(spec) and not isinstance(spec, Mapping):
        rule = spec
        return lambda call: _by_rule(call, rule)
    if isinstance(spec, Mapping):
        policies = {str(tool): _policy(str(tool), value) for tool, value in spec.items()}
    elif isinstance(spec, Collection):
        policies = {str(tool): Approval() for tool in spec}
    else:
        raise TypeError(
            "needs_approval takes True, tool names, a mapping of tool names or a rule (a "
            f"callable); got {type(spec).__name__}"
        )
    if tool_names is not None:
        unknown = sorted(set(policies) - set(tool_names))
        if unknown:
            raise ValueError(
                f"needs_approval names {unknown}, which are no tools of this run (its tools: "
                f"{sorted(tool_names)}); a misspelt name would let the real tool run unapproved"
            )
    kept = {tool: policy for tool, policy in policies.items() if policy is not None}
    if not kept:
        return None

    def check(call: RequestedCall) -> RequestedCall | None:
        policy = kept.get(call.tool_name)
        if policy is None:
            return None
        if isinstance(policy, Approval):
            return _asked(call, policy, f"{call.tool_name} needs approval")
        return _by_rule(call, policy)

    return check
