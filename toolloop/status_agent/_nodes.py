"""The nodes of the status-routed agent: each sets ``state.status``, then the run is
checkpointed.

Every node is wrapped the same way (:func:`node`): the loop guard counts the entry (and may
end the run), the node's body runs and sets the status, what its model calls cost is
journaled (also when it raises or is cancelled) and counted in the state, the transition is
noted and published, and a progress checkpoint is written (a snapshot that a crashed run is
recovered from). Transitions are idempotent: a node entered again from the same state (after a
recovery) does the same thing, and tool calls go through the journal, so none runs twice.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..checkpoints import (
    Approve,
    CallSource,
    CheckpointedRun,
    Continue,
    Edit,
    Reject,
    Replan,
    Stop,
    call_once,
    cut_off_causes,
    record_usage,
)
from ..flow import Context, FlowSnapshot, Step, Wait
from ..models import UsageMeter, current_meter
from ..runner import (
    Executor,
    ToolBatch,
    ToolCallFinished,
    ToolCallStarted,
    ToolExecutionRecord,
    cancelled_record,
)
from ..tools import RunScope
from ._events import (
    CheckpointSaved,
    HumanInputRequested,
    LoopGuardTripped,
    StatusChanged,
)
from ._guard import check_progress
from ._human import (
    HUMAN_EVENT,
    apply_decision,
    approval_request,
    interrupted_request,
    review_request,
)
from ._state import (
    NodeName,
    Note,
    StatusAgentState,
    StatusCallRecord,
    StatusToolCall,
    Transition,
)
from ._steps import (
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


@dataclass
class StatusDeps:
    """A run's services and configuration (not checkpointed: given again on resume)."""

    steps: StatusSteps
    executor: Executor
    tools: list[dict[str, Any]]
    needs_approval: Callable[[StatusToolCall], str | None]
    """``None`` when the call may run at once, else why it waits for a human."""
    max_steps: int
    max_idle_visits: int
    concurrency: int
    run: CheckpointedRun | None = None
    scope: RunScope | None = None
    """What the tools that take a run context are told (``None``: no tool takes one)."""

    @property
    def checkpoint(self) -> CheckpointedRun:
        assert self.run is not None, "a status agent run writes checkpoints"
        return self.run


def _deps(ctx: Context[State]) -> StatusDeps:
    deps = ctx.deps
    assert isinstance(deps, StatusDeps)
    return deps


def recover_snapshot(state: State, execution_id: str, node: str) -> FlowSnapshot:
    """A snapshot of a run between two nodes, resumed with :data:`RECOVER_EVENT`."""
    return FlowSnapshot(
        flow=FLOW_NAME,
        execution_id=execution_id,
        state=state.model_dump(mode="json"),
        waiting=[Wait(event=RECOVER_EVENT, step=node)],
    )


NodeBody = Callable[[Any, State, StatusDeps, Context[State]], Awaitable[None]]


def node(name: NodeName) -> Callable[[NodeBody], Step]:
    """Make a node's step from its body (see the module docs)."""

    def decorate(body: NodeBody) -> Step:
        async def run_node(value: Any, ctx: Context[State]) -> None:
            state, deps = ctx.state, _deps(ctx)
            if not (name == "human_intervention" and isinstance(value, (*_DECISIONS, dict))):
                reason = check_progress(
                    state, name, max_steps=deps.max_steps, max_idle_visits=deps.max_idle_visits
                )
                if reason is not None:
                    state.stop_reason = reason
                    if ctx.observed:
                        ctx.publish(_event(LoopGuardTripped, ctx, node=name, reason=reason))
                    ctx.end(state.answer)
                    return
            meter = current_meter()
            mark = meter.calls if meter is not None else 0
            at = len(state.history)  # the position of this node's transition
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
            if ctx.observed:
                ctx.publish(_event(StatusChanged, ctx, node=name, status=state.status))
            written = await deps.checkpoint.save(recover_snapshot(state, ctx.execution_id, name))
            if ctx.observed:
                ctx.publish(
                    _event(
                        CheckpointSaved,
                        ctx,
                        node=name,
                        status=written.status,
                        revision=written.revision,
                    )
                )

        run_node.__name__ = run_node.__qualname__ = name
        return Step(run_node, name=name)

    return decorate


async def _spent(deps: StatusDeps, meter: UsageMeter | None, mark: int, at: int) -> None:
    """Journal what the node's model calls cost (if it made any) at position ``at``: a
    crash before its checkpoint does not lose them."""
    spent = meter.since(mark) if meter is not None else None
    if spent is not None and deps.run is not None:
        await record_usage(deps.run, at, spent.model_dump(mode="json"))


def _event(cls: Callable[..., Any], ctx: Context[State], **fields: Any) -> Any:
    return cls(execution_id=ctx.execution_id, at=ctx.elapsed(), **fields)


def _view(state: State, deps: StatusDeps) -> StatusView:
    return StatusView.of(state, deps.tools)


@node("analysis")
async def analysis(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    state.analysis = as_text(await call_step(deps.steps.analyze, _view(state, deps)), "analyze")
    state.status = "analysis_completed"


@node("planning")
async def planning(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    plan = as_output(StatusPlan, await call_step(deps.steps.plan, _view(state, deps)), "plan")
    state.plan = list(plan.steps)
    state.status = "decision_ready" if plan.steps else "conversation_ready"


@node("conversation")
async def conversation(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    try:
        answer = as_text(await call_step(deps.steps.converse, _view(state, deps)), "converse")
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
    raw = await call_step(deps.steps.decide, _view(state, deps))
    decided = as_output(StatusDecision, raw, "decide")
    if decided.action == "ask_human":
        state.question = review_request(decided.reason or "the decision step asks for a human")
        state.status = "waiting_for_human"
    elif decided.action == "call_tools" and decided.tool_calls:
        calls: list[StatusToolCall] = []
        for asked in decided.tool_calls:
            call = StatusToolCall(
                call_id=state.new_call_id(),
                tool_name=asked.tool_name,
                arguments=asked.arguments,
                purpose=asked.purpose,
            )
            why = deps.needs_approval(call)
            calls.append(call.model_copy(update={"approved": why is None, "why": why or ""}))
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


@node("tool_execution")
async def tool_execution(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    run = deps.checkpoint
    calls = [c for c in state.pending_calls if c.approved]
    journal = await run.journal()
    todo = [c for c in calls if state.record_of(c.call_id) is None]  # never twice in the state
    observed = ctx.observed
    turn = sum(t.node == "tool_execution" for t in state.history)
    if deps.scope is not None:
        deps.scope.round_index = turn

    async def one(
        call: StatusToolCall, started: Callable[[], None]
    ) -> tuple[ToolExecutionRecord, CallSource]:
        return await call_once(
            run, call.call_id, call.command(), deps.executor, journal=journal, on_start=started
        )

    def cancelled(call: StatusToolCall) -> tuple[ToolExecutionRecord, CallSource]:
        return cancelled_record(call.command()), "interrupted"

    def on_start(k: int, call: StatusToolCall) -> None:
        ctx.publish(
            ToolCallStarted(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=turn,
                index=k,
                call_id=call.call_id,
                command=call.command(),
            )
        )

    def on_finish(k: int, done: tuple[ToolExecutionRecord, CallSource], took: float) -> None:
        ctx.publish(
            ToolCallFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=turn,
                index=k,
                call_id=todo[k].call_id,
                record=done[0],
                duration=took,
                source=done[1],
            )
        )

    batch: ToolBatch[StatusToolCall, tuple[ToolExecutionRecord, CallSource]] = ToolBatch(
        one,
        cancelled,
        concurrency=deps.concurrency,
        on_start=on_start if observed else None,
        on_finish=on_finish if observed else None,
    )
    async with batch:
        await batch.run_here(todo)
    for call, (record, source) in zip(todo, batch.results, strict=True):
        state.records.append(StatusCallRecord(call_id=call.call_id, record=record, source=source))
    state.pending_calls = [c for c in state.pending_calls if not c.approved]
    state.unreflected = [c.call_id for c in calls]
    failed = [c for c in calls if not _succeeded(state, c.call_id)]
    state.status = "tool_execution_failed" if failed else "tools_completed"


def _succeeded(state: State, call_id: str) -> bool:
    record = state.record_of(call_id)
    return record is not None and record.record.success


@node("reflection")
async def reflection(value: Any, state: State, deps: StatusDeps, ctx: Context[State]) -> None:
    fresh = set(state.unreflected)
    last = [r for r in state.records if r.call_id in fresh]
    earlier = [r for r in state.records if r.call_id not in fresh]
    interrupted = [r for r in last if r.source == "interrupted"]
    failed = [r for r in last if not r.record.success and r.source != "interrupted"]
    done = {_call_key(r) for r in earlier if r.source != "rejected" and r.record.success}
    repeated = [r for r in last if _call_key(r) in done]
    view = _view(state, deps)
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
    verdict = as_output(StatusReflection, await call_step(deps.steps.reflect, view), "reflect")
    if verdict.note:
        state.notes.append(Note(source="reflection", text=verdict.note))
    if verdict.answer is not None:
        state.answer = verdict.answer
    if verdict.verdict == "ask_human":
        state.question = review_request(verdict.note or "the reflection step asks for a human")
        state.status = "needs_human"
    elif verdict.verdict == "finish":
        state.status = "reflection_completed"
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
    if ctx.observed:
        ctx.publish(_event(HumanInputRequested, ctx, request=question))


_STOP_REASONS = {
    "conversation_completed": "answered",
    "reflection_completed": "finished",
}


def finish(value: Any, ctx: Context[State]) -> str | None:
    """The end of a run: its answer, and why it stopped."""
    state = ctx.state
    if state.stop_reason is None:
        state.stop_reason = _STOP_REASONS.get(state.status, state.status)
    return state.answer
