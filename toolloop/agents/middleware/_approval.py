"""Human approval of chosen tool calls: the run pauses before they run, and resumes with a
decision for each: approve, edit (new arguments), or reject (with a message for the model).

::

    agent = create_agent(model, tools, middleware=[HumanApprovalMiddleware({"delete": True})])
    result = await agent.run("clean up")
    if result.paused:                      # result.pause_request["actions"]: what to decide
        store.save(result.snapshot.model_dump(mode="json"))
        ...                                # later, maybe in another process
        result = await agent.resume(store.load(...), [{"type": "approve"}])

The pause is the engine's: nothing runs while it waits, and the snapshot holds the whole
state, so the approved calls run once, after the answer, wherever the run is resumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import pydantic
from pydantic import BaseModel

from ..._errors import ResumeError
from ...checkpoints import Approve, Continue, Edit, Reject, Replan, Stop, parse_decision
from .._messages import AssistantMessage, ToolCall, last_assistant, pending_tool_calls
from .._middleware import AgentMiddleware, Pause, Runtime
from .._state import AgentState
from .._tool_call import error_message

__all__ = ["ApprovalDecision", "ApprovalPolicy", "Decision", "HumanApprovalMiddleware"]

Decision: TypeAlias = Literal["approve", "edit", "reject"]
_ALL: tuple[Decision, ...] = ("approve", "edit", "reject")


@dataclass(frozen=True)
class ApprovalPolicy:
    """How the calls of one tool are approved.

    Args:
        allowed: the decisions a human may take.
        description: shown with each call to approve (what to look at).
    """

    allowed: tuple[Decision, ...] = _ALL
    description: str | None = None


class ApprovalDecision(BaseModel):
    """A human's decision on one tool call.

    ``{"type": "approve"}``, ``{"type": "edit", "args": {...}}`` (run it with these
    arguments, checked against the tool's schema as usual) or ``{"type": "reject",
    "message": "..."}`` (the call does not run; the model is told the message).
    """

    type: Decision
    args: dict[str, Any] | None = None
    message: str | None = None


Policy: TypeAlias = "bool | ApprovalPolicy | Sequence[Decision]"


class HumanApprovalMiddleware(AgentMiddleware):
    """Pause the run before chosen tools run, until a human decides on each call.

    Args:
        interrupt_on: tool name → ``True`` (every decision allowed), ``False`` (no approval),
            a sequence of allowed decisions, or an :class:`ApprovalPolicy`.
        description_prefix: starts the description of each call to approve.

    The pause request (``result.pause_request``) is JSON-ready::

        {"kind": "tool_approval",
         "actions": [{"tool_call_id", "name", "args", "description", "allowed"}, ...]}

    The answer (:meth:`Agent.resume`) is one decision per action, in order (a list), a dict
    of ``tool_call_id`` → decision, ``{"decisions": [...]}``, or ``"approve"`` /
    ``"reject"`` for every action at once. A decision is an :class:`ApprovalDecision` or its
    dict. The decisions shared with the status agent work too:
    :class:`~toolloop.checkpoints.Approve` (every call), :class:`~toolloop.checkpoints.Reject`
    (every call, with its message) and :class:`~toolloop.checkpoints.Edit` (new arguments
    by call id; the other calls are approved).
    """

    def __init__(
        self,
        interrupt_on: Mapping[str, Policy],
        *,
        description_prefix: str = "This tool call needs your approval",
    ) -> None:
        self.policies: dict[str, ApprovalPolicy] = {}
        for tool, policy in interrupt_on.items():
            if policy is False:
                continue
            if policy is True:
                self.policies[tool] = ApprovalPolicy()
            elif isinstance(policy, ApprovalPolicy):
                self.policies[tool] = policy
            else:
                allowed = tuple(policy)
                wrong = [d for d in allowed if d not in _ALL]
                if wrong or not allowed:
                    raise ValueError(
                        f"the decisions allowed for {tool!r} are some of {list(_ALL)}, got "
                        f"{list(allowed)}"
                    )
                self.policies[tool] = ApprovalPolicy(allowed=allowed)
        self.description_prefix = description_prefix

    def _action(self, call: ToolCall) -> dict[str, Any]:
        policy = self.policies[call.name]
        description = f"{self.description_prefix}: {call.name}({call.args})"
        if policy.description:
            description += f"\n{policy.description}"
        return {
            "tool_call_id": call.id,
            "name": call.name,
            "args": call.args,
            "description": description,
            "allowed": list(policy.allowed),
        }

    def after_model(self, state: AgentState, runtime: Runtime) -> Pause | None:
        asks = [c for c in pending_tool_calls(state.messages) if c.name in self.policies]
        if not asks:
            return None
        return Pause({"kind": "tool_approval", "actions": [self._action(c) for c in asks]})

    def check_answer(self, answer: Any, request: Any) -> dict[str, ApprovalDecision]:
        actions: list[dict[str, Any]] = list(request["actions"])
        ids = [a["tool_call_id"] for a in actions]
        if isinstance(answer, _SHARED) or (isinstance(answer, Mapping) and "kind" in answer):
            answer = _shared(answer, ids)
        if isinstance(answer, Mapping) and "decisions" in answer:
            answer = answer["decisions"]
        if answer in ("approve", "reject"):
            answer = [{"type": answer}] * len(actions)
        if isinstance(answer, (ApprovalDecision, Mapping)) and (
            isinstance(answer, ApprovalDecision) or "type" in answer
        ):
            answer = [answer]
        if isinstance(answer, Mapping):
            unknown = set(answer) - set(ids)
            if unknown:
                raise ResumeError(
                    f"decisions for unknown tool calls {sorted(unknown)}; the calls are {ids}"
                )
            answer = [answer.get(i) for i in ids]
        if not isinstance(answer, Sequence) or isinstance(answer, str) or len(answer) != len(ids):
            got = len(answer) if isinstance(answer, Sequence) else type(answer).__name__
            raise ResumeError(
                f"expected one decision per call to approve ({len(ids)}: {ids}), got {got}; "
                'e.g. [{"type": "approve"}] or {"<tool_call_id>": {"type": "reject"}}'
            )
        decisions: dict[str, ApprovalDecision] = {}
        for action, raw in zip(actions, answer, strict=True):
            if raw is None:
                raise ResumeError(f"no decision for the call {action['tool_call_id']!r}")
            try:
                decision = ApprovalDecision.model_validate(raw)
            except pydantic.ValidationError as exc:
                raise ResumeError(f"not a decision: {raw!r} ({exc.errors()[0]['msg']})") from None
            if decision.type not in action["allowed"]:
                raise ResumeError(
                    f"{decision.type!r} is not allowed for the call to {action['name']!r}; "
                    f"allowed: {action['allowed']}"
                )
            if decision.type == "edit" and decision.args is None:
                raise ResumeError(
                    f"an 'edit' of the call to {action['name']!r} needs 'args', the new arguments"
                )
            decisions[action["tool_call_id"]] = decision
        return decisions

    def resume(self, answer: Any, state: AgentState, runtime: Runtime) -> dict[str, Any]:
        decisions: dict[str, ApprovalDecision] = answer
        i = last_assistant(state.messages)
        message = state.messages[i]
        assert isinstance(message, AssistantMessage)
        calls: list[ToolCall] = []
        answers = []
        edits = False
        for call in message.tool_calls:
            decision = decisions.get(call.id)
            if decision is not None and decision.type == "edit":
                call = call.model_copy(
                    update={"args": decision.args, "error": None, "raw_arguments": None}
                )
                edits = True
            elif decision is not None and decision.type == "reject":
                said = decision.message or "no reason given"
                answers.append(
                    error_message(call, f"a human rejected this call ({said}); it did not run")
                )
            calls.append(call)
        if not edits:
            return {"messages": answers}
        edited = message.model_copy(update={"tool_calls": calls})
        if edited.id is None:  # nothing to replace it by: put it in its place
            state.messages[i] = edited
            return {"messages": answers}
        return {"messages": [edited, *answers]}


_SHARED = (Approve, Edit, Reject, Replan, Continue, Stop)


def _shared(answer: Any, ids: list[str]) -> list[dict[str, Any]]:
    """One decision per call from a decision shared with the status agent."""
    decision = parse_decision(answer)
    if isinstance(decision, Approve):
        return [{"type": "approve"} for _ in ids]
    if isinstance(decision, Reject):
        return [{"type": "reject", "message": decision.message} for _ in ids]
    if isinstance(decision, Edit):
        unknown = sorted(set(decision.arguments) - set(ids))
        if unknown:
            raise ResumeError(f"an edit of unknown tool calls {unknown}; the calls are {ids}")
        return [
            {"type": "edit", "args": decision.arguments[i]}
            if i in decision.arguments
            else {"type": "approve"}
            for i in ids
        ]
    raise ResumeError(
        f"a {decision.kind!r} decision does not answer a tool approval; answer approve, edit "
        "or reject"
    )
