"""The nodes of the status-routed agent: each sets ``state.status``, then the run is
checkpointed.

Every node is wrapped the same way (:func:`node`): the loop guard counts the entry (and may
end the run), the node's body runs and sets the status, what its model calls cost is
journaled (also when it raises or is cancelled) and counted in the state, the transition is
noted (and published when the status changed: the human intervention node keeps the
decision's ``waiting_for_human``, the decision keeps the human's ``ready_for_execution``),
and a progress checkpoint is written (a snapshot that a crashed run is recovered from; told
as the kernel's ``CheckpointSaved(step=<node>)``). Transitions are
idempotent: a node entered again from the same state (after a recovery) does the same thing,
and tool calls go through the kernel's journal (:func:`toolloop.kernel.journaled_call`), so
none runs twice; a call whose outcome is unknown follows the run's ``unknown_outcome``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .._errors import ExecutionError
from ..checkpoints import (
    Approve,
    CheckpointedRun,
    Continue,
    Edit,
    Reject,
    Replan,
    RequestedCall,
    Stop,
    cut_off_causes,
    record_usage,
)
from ..flow import Context, FlowSnapshot, Step, Wait
from ..kernel import (
    CheckpointSaved,
    RunOptions,
    StopReason,
    StructuredAnswer,
    arguments_problem,
    own_key,
    tell,
)
from ..models import UsageMeter, current_meter
from ..runner import Executor
from ..tools import RunScope
from ._calls import StatusCalls
from ._events import LoopGuardTripped, StatusChanged
from ._guard import check_progress
from ._human import (
    HUMAN_EVENT,
    apply_decision,
    approval_request,
    interrupted_request,
    review_request,
)
from ._llm import CallDispatch, LLMStatusSteps
from ._state import (
    NodeName,
    Note,
    StatusAgentState,
    StatusCallRecord,
    StatusToolCall,
    Transition,
)
from ._steps import (
    StatusCallRequest,
    StatusDecision,
    StatusPlan,
    StatusReflection,
    StatusSteps,
    StatusView,
    as_output,
    as_text,
    call_step,
)

__all__ = [
    "FLOW_NAME",
    "RECOVER_EVENT",
    "StatusDeps",
    "analysis",
    "await_human",
    "conversation",
    "decision",
    "finish",
    "human_intervention",
    "planning",
    "recover_snapshot",
    "reflection",
    "tool_execution",
]

FLOW_NAME = "status_agent"
RECOVER_EVENT = "recover"
"""The external event a progress checkpoint waits for: recovering a run delivers it, and
the run continues after the node that wrote the checkpoint."""

State = StatusAgentState
_DECISIONS = (Approve, Edit, Reject, Replan, Continue, Stop)


ApprovalCheck = Callable[[RequestedCall], "RequestedCall | None"]
"""What the kernel's :func:`~toolloop.kernel.approval_rule` makes of ``needs_approval``."""


@dataclass
class StatusDeps:
    """A run's services and configuration (not checkpointed: given again on resume)."""

    steps: StatusSteps
    executor: Executor
    tools: list[dict[str, Any]]
    options: RunOptions
    """The run's options (this call's: a resume has its own)."""
    approval: ApprovalCheck | None
    """The call as a human is asked about it, or ``None`` when it runs at once (the
    kernel's :func:`~toolloop.kernel.approval_rule` of ``needs_approval``)."""
    max_turns: int
    max_idle_visits: int
    run: CheckpointedRun | None = None
    scope: RunScope | None = None
    """What the tools that take a run context are told (``None``: no tool takes one)."""
    answer: Callable[[StatusView], Awaitable[StructuredAnswer]] | None = None
    """The structured answer's writer, with a ``response_format`` (``None``: the answer is
    the conversation step's text)."""

    @property
    def checkpoint(self) -> CheckpointedRun:
        assert self.run is not None, "a status agent run writes checkpoints"
        return self.run

    async def step(self, name: str, state: StatusAgentState) -> Any:
        """What the step ``name`` answers for the run as it stands (within the run's
        ``model_timeout``)."""
        view = StatusView.of(state, self.tools, self.options.max_result_chars)
        fn = getattr(self.steps, name)
        return await call_step(fn, view, name=name, timeout=self.options.model_timeout)


def _deps(ctx: Context[State]) -> StatusDeps:
    deps = ctx.deps
    assert isinstance(deps, StatusDeps)
    return deps


def recover_snapshot(
    state: State, execution_id: str, node: str, elapsed: float = 0.0
) -> FlowSnapshot:
    """A snapshot of a run between two nodes, resumed with :data:`RECOVER_EVENT`
    (``elapsed``: the seconds it had run, where a recovered run's clock goes on from)."""
    return FlowSnapshot(
        flow=FLOW_NAME,
        execution_id=execution_id,
        state=state.model_dump(mode="json"),
        waiting=[Wait(event=RECOVER_EVENT, step=node)],
        elapsed=elapsed,
    )


NodeBody = Callable[[Any, State, StatusDeps, Context[State]], Awaitable[None]]


def node(name: NodeName) -> Callable[[NodeBody], Step]:
    """Make a node's step from its body (see the module docs)."""

    def decorate(body: NodeBody) -> Step:
        async def run_node(value: Any, ctx: Context[State]) -> None:
            state, deps = ctx.state, _deps(ctx)
            if not (name == "human_intervention" and isinstance(value, (*_DECISIONS, dict))):
                stopped = check_progress(
                    state, name, max_turns=deps.max_turns, max_idle_visits=deps.max_idle_visits
                )
                if stopped is not None:
                    state.stop_reason, state.stop_detail = stopped
                    tell(ctx, LoopGuardTripped, node=name, reason=state.stop_detail)
                    ctx.end(state.answer)
                    return
            meter = current_meter()
            mark = meter.calls if meter is not None else 0
            at = len(state.history)  # the position of this node's transition
            was = state.status
            try:
                await body(value, state, deps, ctx)
            except BaseException:
                await _spent(deps, meter, mark, at)
                raise
            await _spent(deps, meter, mark, at)
            if meter is not None:
                state.usage = meter.usage  # the checkpoint below counts it
            state.node = name
            state.history.append(Transition(node=name, status=state.status))
            if state.status != was:  # one change, one event (a node may keep the status)
                tell(ctx, StatusChanged, node=name, status=state.status)
            snapshot = recover_snapshot(state, ctx.execution_id, name, ctx.elapsed())
            await deps.checkpoint.save(snapshot)
            tell(ctx, CheckpointSaved, step=name)

        run_node.__name__ = run_node.__qualname__ = name
        return Step(run_node, name=name)

    return decorate


async def _spent(deps: StatusDeps, meter: UsageMeter | None, mark: int, at: int) -> None:
    """Journal what the node's model calls cost (if it made any) at position ``at``: a
    crash before its checkpoint does not lose them."""
    spent = meter.since(mark) if meter is not None else None
    if spent is not None and deps.run is not None:
        await record_usage(deps.run, at, spent.model_dump(mode="json"))


@node("analysis")
async def analysis(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    state.analysis = as_text(await deps.step("analyze", state), "analyze")
    state.status = "analysis_completed"


@node("planning")
async def planning(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    plan = as_output(StatusPlan, await deps.step("plan", state), "plan")
    state.plan = list(plan.steps)
    state.status = "decision_ready" if plan.steps else "conversation_ready"


@node("conversation")
async def conversation(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    try:
        if deps.answer is not None:  # the answer is structured
            view = StatusView.of(state, deps.tools, deps.options.max_result_chars)
            timeout = deps.options.model_timeout
            structured = await call_step(deps.answer, view, name="converse", timeout=timeout)
            state.structured_response = structured.value
            answer: str | None = structured.text
        else:
            answer = as_text(await deps.step("converse", state), "converse")
    except ExecutionError as exc:  # the run's own end (its budget), or no answer fits
        if exc.state is None:
            meter = current_meter()
            if meter is not None:
                state.usage = meter.usage  # every try of the answer
            exc.state = state
        raise
    except Exception as exc:
        state.error = f"{type(exc).__name__}: {exc}"
        state.question = review_request(f"the answer could not be written: {state.error}")
        state.status = "conversation_error"
        return
    state.answer = answer
    state.error = None
    state.status = "conversation_completed"


@node("decision")
async def decision(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    if state.pending_calls:  # decided before (and maybe approved): nothing to ask the model
        waiting = [c for c in state.pending_calls if not c.approved]
        if waiting:
            state.question = state.question or approval_request(waiting)
            state.status = "waiting_for_human"
        else:
            state.status = "ready_for_execution"
        return
    streaming = _streaming_decide(deps)
    made: dict[int, StatusToolCall] = {}
    if streaming is None:
        decided = as_output(StatusDecision, await deps.step("decide", state), "decide")
    else:
        decided = await _decide_streaming(streaming, made, state, deps, ctx)
    if decided.action == "ask_human":
        state.question = review_request(decided.reason or "the decision step asks for a human")
        state.status = "waiting_for_human"
    elif decided.action == "call_tools" and decided.tool_calls:
        calls = [
            made.get(i) or _called(state.new_call_id(), asked, deps)
            for i, asked in enumerate(decided.tool_calls)
        ]
        state.pending_calls = calls
        waiting = [c for c in calls if not c.approved]
        if waiting:
            state.question = approval_request(waiting, decided.reason)
            state.status = "waiting_for_human"
        else:
            state.status = "ready_for_execution"
    else:
        if decided.answer is not None:
            state.answer = decided.answer
        state.status = "decision_completed"


def _streaming_decide(deps: StatusDeps) -> StreamingDecide | None:
    """The decision step that hands over its calls as they stream, with
    ``streaming_dispatch`` and the model's own decision step (a step of your own is called
    as it is)."""
    if not deps.options.streaming_dispatch:
        return None
    step = deps.steps.decide
    owner = getattr(step, "__self__", None)
    if isinstance(owner, LLMStatusSteps) and getattr(step, "__func__", None) is (
        LLMStatusSteps.decide
    ):
        return owner.decide_streaming
    return None


StreamingDecide = Callable[[StatusView, CallDispatch | None], Awaitable[StatusDecision]]


async def _decide_streaming(
    decide: StreamingDecide,
    made: dict[int, StatusToolCall],
    state: State,
    deps: StatusDeps,
    ctx: Context[State],
) -> StatusDecision:
    """The decision, each of its calls started the moment it is complete in the stream
    (see :mod:`toolloop.status_agent._calls`); ``made`` gets the calls made so far, by
    their place in the decision. The records of those that ran are in the state."""
    journal = await deps.checkpoint.journal()
    runner = StatusCalls(ctx, deps, journal, _turn(state))

    def dispatch(position: int, data: Any) -> None:
        if position in made:
            return
        try:
            asked = StatusCallRequest.model_validate(data)
        except ValidationError:
            return  # the whole decision says why
        key, _ = own_key(journal, state.new_call_id(), asked.tool_name, asked.arguments)
        call = _called(key, asked, deps)
        made[position] = call
        if call.approved and key not in journal:  # else a human, or the journal, answers
            runner.submit(position, call)

    view = StatusView.of(state, deps.tools, deps.options.max_result_chars)
    if deps.scope is not None:
        deps.scope.round_index = runner.turn
    try:
        async with runner.batch:
            data = await call_step(
                lambda view: decide(view, dispatch),
                view,
                name="decide",
                timeout=deps.options.model_timeout,
            )
    finally:  # one record per call that started, whatever happened
        runner.record(state)
    return as_output(StatusDecision, data, "decide")


def _called(call_id: str, asked: StatusCallRequest, deps: StatusDeps) -> StatusToolCall:
    """The call the decision step asked for, cleared to run or waiting for a human; one
    whose arguments cannot be kept (nested too deep, too large, a NaN) is refused: it never
    runs, and is not kept whole in the run's checkpoints."""
    problem = arguments_problem(asked.arguments)
    if problem is not None:
        return StatusToolCall(
            call_id=call_id,
            tool_name=asked.tool_name,
            purpose=asked.purpose,
            approved=True,
            refused=problem,
        )
    call = StatusToolCall(
        call_id=call_id, tool_name=asked.tool_name, arguments=asked.arguments, purpose=asked.purpose
    )
    return _cleared(call, deps)


def _cleared(call: StatusToolCall, deps: StatusDeps) -> StatusToolCall:
    """``call``, approved to run, or waiting for a human with why (and what they may
    decide), as the run's ``needs_approval`` says. A call that cannot run (no such tool,
    arguments off its schema) is not put to a human: it fails as it is."""
    approval = deps.approval
    if approval is not None and not deps.executor.registry.accepts(call.tool_name, call.arguments):
        approval = None
    asked = None if approval is None else approval(_requested(call))
    if asked is None:
        return call.model_copy(update={"approved": True})
    return call.model_copy(update={"why": asked.why, "allowed": asked.allowed})


def _requested(call: StatusToolCall) -> RequestedCall:
    return RequestedCall(
        call_id=call.call_id,
        tool_name=call.tool_name,
        arguments=call.arguments,
        purpose=call.purpose,
    )


@node("tool_execution")
async def tool_execution(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    calls = [c for c in state.pending_calls if c.approved]
    journal = await deps.checkpoint.journal()
    # never twice in the state: a call that ran while its decision streamed has its record
    todo = [c for c in calls if state.record_of(c.call_id) is None]
    if deps.scope is not None:
        deps.scope.round_index = _turn(state)
    runner = StatusCalls(ctx, deps, journal, _turn(state))
    try:
        async with runner.batch:
            await runner.run_here(todo)
    finally:  # also when the run's end cuts the calls off: its result has their records
        runner.record(state)
    state.pending_calls = [c for c in state.pending_calls if not c.approved]
    state.unreflected = [c.call_id for c in calls]
    failed = [c for c in calls if not _succeeded(state, c.call_id)]
    state.status = "tool_execution_failed" if failed else "tools_completed"


def _turn(state: State) -> int:
    """The index of the run's next tool execution (the turn its calls are told in)."""
    return sum(t.node == "tool_execution" for t in state.history)


def _succeeded(state: State, call_id: str) -> bool:
    record = state.record_of(call_id)
    return record is not None and record.record.success


@node("reflection")
async def reflection(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    fresh = set(state.unreflected)
    last = [r for r in state.records if r.call_id in fresh]
    earlier = [r for r in state.records if r.call_id not in fresh]
    ask = deps.options.unknown_outcome == "ask"
    interrupted = [r for r in last if r.source == "interrupted"] if ask else []
    failed = [r for r in last if not r.record.success and r not in interrupted]
    done = {_call_key(r) for r in earlier if r.source != "rejected" and r.record.success}
    repeated = [r for r in last if _call_key(r) in done]
    if interrupted or failed or repeated:
        state.unreflected = []
    if interrupted:  # what cut them off: a crash, or the run's own end (the journal says)
        causes = cut_off_causes(await deps.checkpoint.journal())
        state.question = interrupted_request(interrupted, causes)
        state.status = "needs_human"
        return
    if failed or repeated:
        what = [f"{len(failed)} tool call(s) failed"] if failed else []
        if repeated:
            what.append(f"{len(repeated)} call(s) repeat an earlier call with the same arguments")
        state.question = review_request(
            f"{' and '.join(what)}; continue (the model sees the errors), replan, or stop",
            details={
                "failed": [
                    {"call_id": r.call_id, "tool_name": r.record.tool_name, "error": r.record.error}
                    for r in failed
                ],
                "repeated": [
                    {
                        "call_id": r.call_id,
                        "tool_name": r.record.tool_name,
                        "arguments": r.record.kwargs,
                    }
                    for r in repeated
                ],
            },
        )
        state.status = "needs_human"
        return
    verdict = as_output(StatusReflection, await deps.step("reflect", state), "reflect")
    state.unreflected = []
    if verdict.note:
        state.notes.append(Note(source="reflection", text=verdict.note))
    if verdict.answer is not None:
        state.answer = verdict.answer
    if verdict.verdict == "ask_human":
        state.question = review_request(verdict.note or "the reflection step asks for a human")
        state.status = "needs_human"
    elif verdict.verdict == "finish":
        # a structured answer is the conversation's to write
        state.status = "reflection_completed" if deps.answer is None else "conversation_ready"
    else:
        state.status = verdict.verdict


def _call_key(record: StatusCallRecord) -> str:
    return json.dumps([record.record.tool_name, record.record.kwargs], sort_keys=True, default=repr)


@node("human_intervention")
async def human_intervention(
    value: Any, state: State, deps: StatusDeps, ctx: Context[State]
) -> None:
    if isinstance(value, (*_DECISIONS, dict)):  # the human answered (by HUMAN_EVENT)
        apply_decision(state, value)
        return
    if state.question is None:
        state.question = review_request(f"the {state.node} step ended with {state.status!r}")
    state.status = "waiting_for_human"


def await_human(value: Any, ctx: Context[State]) -> None:
    """Pause the run until a human decides (the question is the pause's request)."""
    state = ctx.state
    question = state.question or review_request("the run waits for a human")
    ctx.pause(HUMAN_EVENT, question.model_dump(mode="json"))


def finish(value: Any, ctx: Context[State]) -> str | None:
    """The end of a run: its answer, and why it stopped (a human's ``Stop`` said so
    already; otherwise the run answered: the conversation, or a reflection's ``finish``)."""
    state = ctx.state
    if state.stop_reason is None:
        state.stop_reason = _answered
    return state.answer


_answered: StopReason = "answered"
