"""The plan/execute loop as a flow on the engine: PLAN → EXECUTE → PLAN … → FINISH.

::

    start ──▶ plan ──▶ plan? ──execute──▶ execute ──▶ plan
                │        └────finish────▶ finish ──▶ end
                └─(emit command_ready, streaming dispatch)──▶ run_command

``plan`` checks ``max_rounds`` before it calls the planner, so no planner call is made whose
result would be thrown away; ``execute`` runs a round's commands concurrently and writes
every record into the ``round_state`` (even when the round is cancelled). With streaming
dispatch, ``plan`` hands each command to ``run_command`` as soon as it is complete, and
``execute`` waits for those still running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import anyio
from pydantic import BaseModel, Field

from .._errors import PlannerError
from ..flow import Context, Flow
from ..planners import (
    PlannerContext,
    PlannerLike,
    PlannerReply,
    StreamingPlanner,
    call_planner,
)
from ..runner import Executor, ToolCommand, ToolExecutionRecord, cancelled_error
from ..tools import ToolRegistry
from ._events import (
    CommandFinished,
    CommandStarted,
    LoopFinished,
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ._inflight import Inflight
from ._normalize import NormalizedPlan, normalize_command, normalize_plan, over_limit
from ._results import StopReason

__all__ = ["LoopDeps", "RoundState", "commit_inflight", "loop_flow"]

COMMAND_READY = "command_ready"


class RoundState(BaseModel):
    """The loop's per-run state, exactly: ``done_plans``, ``last_round_records``,
    ``round_index``."""

    done_plans: list[ToolExecutionRecord] = Field(default_factory=list)
    last_round_records: list[ToolExecutionRecord] = Field(default_factory=list)
    round_index: int = 0


@dataclass
class LoopDeps:
    """A run's configuration and services (not part of its state)."""

    user_input: str
    planner: PlannerLike
    registry: ToolRegistry
    executor: Executor
    max_rounds: int
    concurrency: int = 4
    user_extra_requirement: str | None = None
    planner_timeout: float | None = None
    max_commands: int = 64
    max_kwargs_bytes: int = 256 * 1024
    streaming_dispatch: bool = False
    available_tools: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stop_reason: StopReason | None = None
    planner_text: str | None = None
    inflight: Inflight | None = None
    slots: anyio.Semaphore | None = None


def _deps(ctx: Context[RoundState]) -> LoopDeps:
    deps = ctx.deps
    assert isinstance(deps, LoopDeps)
    return deps


def commit_inflight(state: RoundState, deps: LoopDeps) -> list[ToolExecutionRecord]:
    """Write the records of a streamed round into the state (once); they are the round's."""
    inflight = deps.inflight
    if inflight is None or inflight.committed:
        return []
    inflight.committed = True
    deps.inflight = None
    records = [record for _, record in inflight.ordered()]
    state.last_round_records = records
    state.done_plans.extend(records)
    state.round_index = inflight.round_index + 1
    return records


async def plan(_: Any, ctx: Context[RoundState]) -> NormalizedPlan:
    """PLAN: ask the planner (unless ``max_rounds`` is reached) and normalize its output."""
    state, deps = ctx.state, _deps(ctx)
    if state.round_index >= deps.max_rounds:
        return NormalizedPlan(next_action="response", stop_reason="max_rounds")
    index = state.round_index
    if ctx.observed:
        ctx.publish(
            RoundStarted(execution_id=ctx.execution_id, at=ctx.elapsed(), round_index=index)
        )
    context = PlannerContext.model_construct(
        user_input=deps.user_input,
        user_extra_requirement=deps.user_extra_requirement,
        available_tools=deps.available_tools,
        done_plans=list(state.done_plans),
        last_round_result=list(state.last_round_records),
        round_index=index,
        max_rounds=deps.max_rounds,
    )
    planner = deps.planner
    streaming = deps.streaming_dispatch and isinstance(planner, StreamingPlanner)
    inflight: Inflight | None = None
    if streaming:
        inflight = deps.inflight = Inflight(index)

        def dispatch(i: int, raw: Any) -> None:
            assert inflight is not None
            item = normalize_command(i, raw, [], max_kwargs_bytes=deps.max_kwargs_bytes)
            if item is None:
                return  # dropped; the final normalization says why
            # counted as normalize_plan counts: every item kept so far, failed ones too
            if isinstance(item, ToolCommand) and len(inflight.items) >= deps.max_commands:
                item = over_limit(item, deps.max_commands)
            if inflight.add(i, item):
                ctx.emit(COMMAND_READY, (inflight, i))

    started = perf_counter()
    try:
        with anyio.fail_after(deps.planner_timeout):
            if inflight is not None:
                assert isinstance(planner, StreamingPlanner)
                raw = await planner.plan_streaming(context, dispatch)
            else:
                raw = await call_planner(planner, context)
    except Exception as exc:
        what = (
            f"did not answer within {deps.planner_timeout} s"
            if isinstance(exc, TimeoutError)
            else f"raised {type(exc).__name__}: {exc}"
        )
        raise PlannerError(
            f"the planner {what} in round {index}; the records made so far are kept in .done_plans",
            done_plans=state.done_plans,
            state=state,
        ) from exc
    decided = normalize_plan(
        raw, max_commands=deps.max_commands, max_kwargs_bytes=deps.max_kwargs_bytes
    )
    if inflight is not None:
        decided = _merge_streamed(decided, inflight, ctx)
    deps.notes.extend(f"round {index}: {note}" for note in decided.notes)
    output = raw.output if isinstance(raw, PlannerReply) else raw
    text = output.get("content") if isinstance(output, dict) else None
    deps.planner_text = text if isinstance(text, str) and text.strip() else None
    if ctx.observed:
        ctx.publish(
            PlanDecided(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=index,
                next_action=decided.next_action,
                commands=decided.commands,
                stop_reason=decided.stop_reason,
                notes=decided.notes,
                duration=perf_counter() - started,
                short_circuited=isinstance(raw, PlannerReply) and raw.short_circuited,
            )
        )
    return decided


def _merge_streamed(
    decided: NormalizedPlan, inflight: Inflight, ctx: Context[RoundState]
) -> NormalizedPlan:
    """The final plan of a streamed round: what was dispatched plus what was not yet."""
    if decided.next_action == "execute":
        for source, item in zip(decided.sources, decided.items, strict=True):
            if inflight.add(source, item):
                ctx.emit(COMMAND_READY, (inflight, source))
    elif inflight.items:
        # the tools already started: the round runs, and the planner sees them next round
        notes = [
            *decided.notes,
            f"the plan ended with {decided.next_action!r} ({decided.stop_reason}) after "
            f"{len(inflight.items)} commands had started: they run in this round",
        ]
        decided = decided.model_copy(update={"next_action": "execute", "notes": notes})
    if decided.next_action != "execute":
        _deps(ctx).inflight = None  # nothing was dispatched: a plain final round
        return decided
    indices = sorted(inflight.items)
    return decided.model_copy(
        update={
            "items": [inflight.items[i] for i in indices],
            "sources": indices,
            "stop_reason": None,
        }
    )


def route(decided: NormalizedPlan) -> str:
    return "execute" if decided.next_action == "execute" and decided.items else "finish"


async def run_command(value: tuple[Inflight, int], ctx: Context[RoundState]) -> None:
    """Run one dispatched command under the run's concurrency limit; note its record."""
    inflight, index = value
    deps = _deps(ctx)
    command = inflight.items[index]
    assert isinstance(command, ToolCommand)
    assert deps.slots is not None
    observed = ctx.observed
    record: ToolExecutionRecord | None = None
    started = perf_counter()

    def on_start() -> None:
        nonlocal started
        started = perf_counter()
        if observed:
            ctx.publish(
                CommandStarted(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=inflight.round_index,
                    index=index,
                    command=command,
                )
            )

    try:
        async with deps.slots:
            record = await deps.executor.call(command, on_start=on_start)
    finally:
        if record is None:
            record = ToolExecutionRecord.failed(command, cancelled_error(command.tool_name))
        inflight.finished(index, record)
        if observed:
            ctx.publish(
                CommandFinished(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=inflight.round_index,
                    index=index,
                    record=record,
                    duration=perf_counter() - started,
                )
            )


async def execute(decided: NormalizedPlan, ctx: Context[RoundState]) -> None:
    """EXECUTE: run the round's commands concurrently; one record per command, in order."""
    state, deps = ctx.state, _deps(ctx)
    index = state.round_index
    started = perf_counter()
    inflight = deps.inflight
    if inflight is not None:
        try:
            await inflight.wait()
        finally:
            done = commit_inflight(state, deps)
    else:
        done = await _execute_round(decided, ctx)
    if ctx.observed:
        ctx.publish(
            RoundFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=index,
                records=done,
                duration=perf_counter() - started,
            )
        )


async def _execute_round(
    decided: NormalizedPlan, ctx: Context[RoundState]
) -> list[ToolExecutionRecord]:
    state, deps = ctx.state, _deps(ctx)
    index = state.round_index
    items = decided.items
    sources = decided.sources or list(range(len(items)))
    records: list[ToolExecutionRecord | None] = [None] * len(items)
    positions: list[int] = []
    commands: list[ToolCommand] = []
    for i, item in enumerate(items):
        if isinstance(item, ToolCommand):
            positions.append(i)
            commands.append(item)
        else:
            records[i] = item
    observed = ctx.observed

    def on_start(k: int, command: ToolCommand) -> None:
        if observed:
            ctx.publish(
                CommandStarted(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=index,
                    index=sources[positions[k]],
                    command=command,
                )
            )

    def on_finish(k: int, record: ToolExecutionRecord, duration: float) -> None:
        records[positions[k]] = record
        if observed:
            ctx.publish(
                CommandFinished(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=index,
                    index=sources[positions[k]],
                    record=record,
                    duration=duration,
                )
            )

    if observed:
        for i, item in enumerate(items):
            if isinstance(item, ToolExecutionRecord):
                ctx.publish(
                    CommandFinished(
                        execution_id=ctx.execution_id,
                        at=ctx.elapsed(),
                        round_index=index,
                        index=sources[i],
                        record=item,
                        duration=0.0,
                    )
                )
    try:
        await deps.executor.run(commands, on_start=on_start, on_finish=on_finish)
    finally:
        done = [r for r in records if r is not None]
        state.last_round_records = done
        state.done_plans.extend(done)
        state.round_index = index + 1
    return done


def finish(decided: NormalizedPlan, ctx: Context[RoundState]) -> StopReason:
    """FINISH: say why the loop stopped."""
    deps = _deps(ctx)
    reason: StopReason = decided.stop_reason or "response"
    deps.stop_reason = reason
    if ctx.observed:
        ctx.publish(
            LoopFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=ctx.state.round_index,
                stop_reason=reason,
                rounds=ctx.state.round_index,
                records=len(ctx.state.done_plans),
            )
        )
    return reason


def _build() -> Flow[RoundState]:
    flow = Flow("plan_execute", state=RoundState)
    flow.start.to(plan, emits=[COMMAND_READY])
    flow.step(plan).match(route, {"execute": execute, "finish": finish})
    flow.step(execute).to(plan)
    flow.step(finish).end()
    flow.when(COMMAND_READY).to(run_command)
    flow.validate()
    return flow


loop_flow: Flow[RoundState] = _build()
"""The loop's flow definition, shared by every run (runs are executions of it)."""
