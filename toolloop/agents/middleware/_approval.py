"""Human approval of chosen tool calls: the run pauses before they run, and resumes with a
decision: approve, edit (new arguments), or reject (with a message for the model), for all
the calls at once or for each one.

::

    agent = create_agent(model, tools, needs_approval=["delete"])    # or, the same:
    agent = create_agent(model, tools, middleware=[HumanApprovalMiddleware(["delete"])])
    result = await agent.run("clean up")
    if result.paused:                      # result.request: a HumanRequest, what to decide
        store.save(result.snapshot.model_dump(mode="json"))
        ...                                # later, maybe in another process
        result = await agent.resume(store.load(...), Approve())

Which calls wait is the kernel's one approval spec (:data:`~toolloop.kernel.ApprovalSpec`:
``True``, tool names, a mapping of tool names to ``True`` / ``False`` /
:class:`~toolloop.kernel.Approval`, or a rule), the same as the loop's and the status
agent's ``needs_approval``. The pause asks a :class:`~toolloop.checkpoints.HumanRequest`,
and the answer is applied by :func:`toolloop.kernel.decide`, as in every product: a
rejected call is answered with :func:`toolloop.kernel.rejected_error`. The pause is the
engine's: nothing runs while it waits, and the snapshot holds the whole state, so the
approved calls run once, after the answer, wherever the run is resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from ...checkpoints import DecisionKind, HumanRequest, RequestedCall
from ...kernel import ApprovalSpec, Decided, Run, Skip, approval_request, approval_rule, decide
from .._messages import AssistantMessage, ToolCall, last_assistant, pending_tool_calls
from .._middleware import AgentMiddleware, Pause, Runtime
from .._state import AgentState
from .._tool_call import error_message

__all__ = ["HumanApprovalMiddleware"]

_ALL: tuple[DecisionKind, ...] = ("approve", "edit", "reject")

Check = Callable[[RequestedCall], "RequestedCall | None"]
Validate = Callable[[str, dict[str, Any]], dict[str, Any]]


class HumanApprovalMiddleware(AgentMiddleware):
    """Pause the run before chosen tools run, until a human decides on the calls.

    Args:
        needs_approval: which calls wait (see the module docs). A tool name that is none
            of the agent's tools is refused when the agent is built (a misspelt name would
            let the real tool run unapproved).

    The pause asks a :class:`~toolloop.checkpoints.HumanRequest` of kind
    ``approve_tool_calls`` (``result.request``; as JSON data in ``result.pause_request``),
    one :class:`~toolloop.checkpoints.RequestedCall` per call to approve (its ``call_id``
    the model's tool-call id, as in the run's ``ToolCallStarted`` events), with the
    decisions it allows. The answer (:meth:`Agent.resume`) is one decision for every call
    (:class:`~toolloop.checkpoints.Approve`, :class:`~toolloop.checkpoints.Reject` with a
    message for the model, :class:`~toolloop.checkpoints.Edit` with new arguments by call
    id, checked against the tool's schema: the calls it does not name run as they are),
    its data (``{"kind": "approve"}``), a bare kind (``"approve"``), or one decision per
    call: ``{call_id: decision}``.

    Raises:
        TypeError: a spec of none of the shapes (one bare ``str`` included).
    """

    def __init__(self, needs_approval: ApprovalSpec) -> None:
        self.needs_approval = needs_approval
        self._check = approval_rule(needs_approval)

    def check_tools(self, tool_names: Collection[str]) -> None:
        """Refuse a spec that names a tool the agent does not have (called when an agent is
        built with this middleware).

        Raises:
            ValueError: a name that is no tool of the agent.
        """
        approval_rule(self.needs_approval, tool_names)

    def _rule(self, runtime: Runtime) -> Check | None:
        return self._check

    def after_model(self, state: AgentState, runtime: Runtime) -> Pause | None:
        check = self._rule(runtime)
        if check is None:
            return None
        calls: list[RequestedCall] = []
        run = runtime._run  # the run's services: its tools
        registry = run.spec.registry if run is not None else None
        for call in pending_tool_calls(state.messages):
            if registry is not None and not registry.accepts(call.name, call.args):
                continue  # it cannot run (no such tool, arguments off its schema): not asked
            asked = check(
                RequestedCall(
                    call_id=call.id,
                    tool_name=call.name,
                    arguments=call.args if isinstance(call.args, dict) else {},
                )
            )
            if asked is not None:
                calls.append(asked)
        if not calls:
            return None
        allowed = [k for k in _ALL if any(k in (c.allowed or _ALL) for c in calls)]
        return Pause(approval_request(calls, allowed).model_dump(mode="json"))

    def check_answer(
        self, answer: Any, request: Any, *, validate_arguments: Validate | None = None
    ) -> Decided:
        """The answer checked against the request and applied to its calls
        (:func:`toolloop.kernel.decide`; the agent gives ``validate_arguments``, its tools'
        schema check). Raises :class:`~toolloop.checkpoints.DecisionError` (a
        ``ResumeError``) if it does not fit: nothing changed."""
        return decide(
            HumanRequest.model_validate(request), answer, validate_arguments=validate_arguments
        )

    def resume(self, answer: Any, state: AgentState, runtime: Runtime) -> dict[str, Any]:
        decided: Decided = answer
        i = last_assistant(state.messages)
        message = state.messages[i]
        assert isinstance(message, AssistantMessage)
        calls: list[ToolCall] = []
        answers = []
        edits = False
        for call in message.tool_calls:
            verdict = decided.calls.get(call.id)
            if isinstance(verdict, Run) and verdict.arguments != call.args:
                call = call.model_copy(
                    update={"args": verdict.arguments, "error": None, "raw_arguments": None}
                )
                edits = True
            elif isinstance(verdict, Skip):
                answers.append(error_message(call, verdict.error))
            calls.append(call)
        if not edits:
            return {"messages": answers}
        edited = message.model_copy(update={"tool_calls": calls})
        if edited.id is None:  # nothing to replace it by: put it in its place
            state.messages[i] = edited
            return {"messages": answers}
        return {"messages": [edited, *answers]}
