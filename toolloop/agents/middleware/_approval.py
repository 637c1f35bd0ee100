"""Human approval of chosen tool calls: the run pauses before they run, and resumes with a
decision: approve, edit (new arguments), or reject (with a message for the model), for all
the calls at once or for each one.

::

    agent = create_agent(model, tools, middleware=[HumanApprovalMiddleware({"delete": True})])
    result = await agent.run("clean up")
    if result.paused:                      # result.request: a HumanRequest, what to decide
        store.save(result.snapshot.model_dump(mode="json"))
        ...                                # later, maybe in another process
        result = await agent.resume(store.load(...), Approve())

It speaks the human protocol of :mod:`toolloop.checkpoints`, the same as the status agent:
the pause asks a :class:`~toolloop.checkpoints.HumanRequest`, the answer is a
:class:`~toolloop.checkpoints.HumanDecision` or ``{call_id: decision}``. The pause is the
engine's: nothing runs while it waits, and the snapshot holds the whole state, so the
approved calls run once, after the answer, wherever the run is resumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ...checkpoints import (
    Approve,
    DecisionKind,
    Edit,
    HumanDecision,
    HumanRequest,
    Reject,
    RequestedCall,
    check_decision,
)
from .._messages import AssistantMessage, ToolCall, last_assistant, pending_tool_calls
from .._middleware import AgentMiddleware, Pause, Runtime
from .._state import AgentState
from .._tool_call import error_message

__all__ = ["ApprovalPolicy", "HumanApprovalMiddleware"]

_ALL: tuple[DecisionKind, ...] = ("approve", "edit", "reject")


@dataclass(frozen=True)
class ApprovalPolicy:
    """How the calls of one tool are approved.

    Args:
        allowed: the decisions a human may take (some of ``approve``, ``edit``, ``reject``).
        description: shown with each call to approve (what to look at).
    """

    allowed: tuple[DecisionKind, ...] = _ALL
    description: str | None = None


Policy: TypeAlias = "bool | ApprovalPolicy | Sequence[DecisionKind]"


class HumanApprovalMiddleware(AgentMiddleware):
    """Pause the run before chosen tools run, until a human decides on the calls.

    Args:
        interrupt_on: tool name → ``True`` (every decision allowed), ``False`` (no approval),
            a sequence of allowed decisions, or an :class:`ApprovalPolicy`.
        description_prefix: starts the description of each call to approve (its ``why``).

    The pause asks a :class:`~toolloop.checkpoints.HumanRequest` of kind
    ``approve_tool_calls`` (``result.request``; as JSON data in ``result.pause_request``),
    one :class:`~toolloop.checkpoints.RequestedCall` per call to approve, with the decisions
    it allows. The answer (:meth:`Agent.resume`) is one decision for every call
    (:class:`~toolloop.checkpoints.Approve`, :class:`~toolloop.checkpoints.Reject` with a
    message for the model, :class:`~toolloop.checkpoints.Edit` with new arguments by call
    id: the calls it does not name run as they are), its data (``{"kind": "approve"}``), a
    bare kind (``"approve"``), or one decision per call: ``{call_id: decision}``.
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

    def _requested(self, call: ToolCall) -> RequestedCall:
        policy = self.policies[call.name]
        why = f"{self.description_prefix}: {call.name}({call.args})"
        if policy.description:
            why += f"\n{policy.description}"
        return RequestedCall(
            call_id=call.id,
            tool_name=call.name,
            arguments=call.args if isinstance(call.args, dict) else {},
            why=why,
            allowed=list(policy.allowed),
        )

    def after_model(self, state: AgentState, runtime: Runtime) -> Pause | None:
        asks = [c for c in pending_tool_calls(state.messages) if c.name in self.policies]
        if not asks:
            return None
        calls = [self._requested(c) for c in asks]
        allowed = [k for k in _ALL if any(k in (c.allowed or ()) for c in calls)]
        names = ", ".join(sorted({c.tool_name for c in calls}))
        request = HumanRequest(
            kind="approve_tool_calls",
            reason=f"{len(calls)} tool call(s) need your approval before they run ({names})",
            tool_calls=calls,
            allowed=allowed,
        )
        return Pause(request.model_dump(mode="json"))

    def check_answer(self, answer: Any, request: Any) -> dict[str, HumanDecision]:
        """The answer as one decision per call (see the class docs); raises
        :class:`~toolloop.checkpoints.DecisionError` (a ``ResumeError``) if it does not fit."""
        asked = HumanRequest.model_validate(request)
        checked = check_decision(asked, answer)
        if isinstance(checked, dict):
            return checked
        per_call: dict[str, HumanDecision] = {}
        for call in asked.tool_calls:
            if isinstance(checked, Edit):
                if call.call_id in checked.arguments:
                    per_call[call.call_id] = Edit(
                        arguments={call.call_id: checked.arguments[call.call_id]},
                        message=checked.message,
                    )
                else:
                    per_call[call.call_id] = Approve()
            else:
                per_call[call.call_id] = checked
        return per_call

    def resume(self, answer: Any, state: AgentState, runtime: Runtime) -> dict[str, Any]:
        decisions: dict[str, HumanDecision] = answer
        i = last_assistant(state.messages)
        message = state.messages[i]
        assert isinstance(message, AssistantMessage)
        calls: list[ToolCall] = []
        answers = []
        edits = False
        for call in message.tool_calls:
            decision = decisions.get(call.id)
            if isinstance(decision, Edit):
                call = call.model_copy(
                    update={
                        "args": decision.arguments[call.id],
                        "error": None,
                        "raw_arguments": None,
                    }
                )
                edits = True
            elif isinstance(decision, Reject):
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
