"""The plan/execute loop as a flow on the engine: PLAN → EXECUTE → PLAN … → FINISH.

::

    start ──▶ plan ──▶ plan? ──execute──▶ execute ──▶ plan
                         └────finish────▶ finish ──▶ end

``plan`` checks ``max_rounds`` before it calls the planner, so no planner call is made whose
result would be thrown away; ``execute`` runs a round's commands concurrently and writes
every record into the ``round_state`` (even when the round is cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import anyio
from pydantic import BaseModel, Field

from .._errors import PlannerError
from .._executor import Executor
from .._records import ToolCommand, ToolExecutionRecord
from ..flow import Context, Flow
from ..planners._base import PlannerContext, PlannerLike, call_planner
from ..tools import ToolRegistry
from ._events import (
    CommandFinished,
    CommandStarted,
    LoopFinished,
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ._normalize import NormalizedPlan, normalize_plan
from ._results import StopReason

__all__ = ["LoopDeps", "RoundState", "loop_flow"]


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
    user_extra_requirement: str | None = None
    planner_timeout: float | None = None
    max_commands: int = 64
    max_kwargs_bytes: int = 256 * 1024
    available_tools: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stop_reason: StopReason | None = None


def _stop(reason: StopReason) -> NormalizedPlan:
    return NormalizedPlan(next_action="response", stop_reason=reason)


async def plan(_: Any, ctx: Context[RoundState]) -> NormalizedPlan:
    """PLAN: ask the planner (unless ``max_rounds`` is reached) and normalize its output."""
    state, deps = ctx.state, ctx.deps
    assert isinstance(deps, LoopDeps)
    if state.round_index >= deps.max_rounds:
        return _stop("max_rounds")
    index = state.round_index
    ctx.publish(RoundStarted(execution_id=ctx.execution_id, at=ctx.elapsed(), round_index=index))
    context = PlannerContext.model_construct(
        user_input=deps.user_input,
        user_extra_requirement=deps.user_extra_requirement,
        available_tools=deps.available_tools,
        done_plans=list(state.done_plans),
        last_round_result=list(state.last_round_records),
        round_index=index,
        max_rounds=deps.max_rounds,
    )
    started = perf_counter()
    try:
        if deps.planner_timeout is None:
            raw = await call_planner(deps.planner, context)
        else:
            with anyio.fail_after(deps.planner_timeout):
                raw = await call_planner(deps.planner, context)
    except Exception as exc:
        what = (
            f"did not answer within {deps.planner_timeout} s"
            if isinstance(exc, TimeoutError)
            else f"raised {type(exc).__name__}: {exc}"
        )
        raise PlannerError(
            f"the planner {what} in round {index}; the {len(state.done_plans)} records made so "
            "far are kept in .done_plans",
            done_plans=state.done_plans,
            state=state,
        ) from exc
    decided = normalize_plan(
        raw, max_commands=deps.max_commands, max_kwargs_bytes=deps.max_kwargs_bytes
    )
    deps.notes.extend(f"round {index}: {note}" for note in decided.notes)
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
        )
    )
    return decided


def route(decided: NormalizedPlan) -> str:
    return "execute" if decided.next_action == "execute" and decided.items else "finish"


async def execute(decided: NormalizedPlan, ctx: Context[RoundState]) -> None:
    """EXECUTE: run the round's commands concurrently; one record per command, in order."""
    state, deps = ctx.state, ctx.deps
    assert isinstance(deps, LoopDeps)
    index = state.round_index
    started = perf_counter()
    items = decided.items
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
                    index=positions[k],
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
                    index=positions[k],
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
                        index=i,
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
    ctx.publish(
        RoundFinished(
            execution_id=ctx.execution_id,
            at=ctx.elapsed(),
            round_index=index,
            records=done,
            duration=perf_counter() - started,
        )
    )


def finish(decided: NormalizedPlan, ctx: Context[RoundState]) -> StopReason:
    """FINISH: say why the loop stopped."""
    deps = ctx.deps
    assert isinstance(deps, LoopDeps)
    reason: StopReason = decided.stop_reason or "response"
    deps.stop_reason = reason
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
    flow.start.to(plan)
    flow.step(plan).match(route, {"execute": execute, "finish": finish})
    flow.step(execute).to(plan)
    flow.step(finish).end()
    flow.validate()
    return flow


loop_flow: Flow[RoundState] = _build()
"""The loop's flow definition, shared by every run (runs are executions of it)."""
