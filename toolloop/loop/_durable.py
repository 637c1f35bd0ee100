"""Durable runs of the loop: a checkpoint after every round, a journal of every planner
output and tool call, and a run that continues after its process died.

An opt-in layer around the loop's flow, through the seams it already has: the planner is
wrapped (its output is journaled per round, and the round state is checkpointed before each
planner call, i.e. after each round), and the executor is one whose :meth:`call` goes
through the run's journal (intent before, outcome after). Without a store nothing of this
runs: the loop's per-call path is unchanged.

Resuming a run (:func:`resume_plan_and_execute`) restores the round state of its last
checkpoint and goes on: a round whose plan is journaled is not planned again (the same
commands come back), a tool call whose outcome is journaled is not run again (its record
comes back), and a call whose intent is journaled without an outcome (its process died while
it ran: it may or may not have taken effect) is handled by the caller's policy, never
silently re-run: ``"fail"`` makes it a failed record that says so, for the planner to decide;
``"retry"`` runs it again if its tool is named idempotent (else as ``"fail"``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Literal

import anyio
from pydantic import ValidationError

from ..checkpoints import (
    Checkpoint,
    CheckpointedRun,
    CheckpointStore,
    CorruptCheckpointError,
    JournalEntry,
    RunNotResumableError,
)
from ..flow import Execution, FlowSnapshot
from ..planners import PlannerContext, PlannerLike, PlannerReply, call_planner
from ..runner import Executor, ToolCommand, ToolExecutionRecord, json_safe
from ._flow import LoopDeps, RoundState, loop_flow
from ._results import LoopResult

__all__ = [
    "FLOW_KIND",
    "PLANNER",
    "DurableLoop",
    "JournaledExecutor",
    "JournaledPlanner",
    "UnknownOutcome",
    "interrupted_error",
    "resume_checkpoint",
    "run_durable",
]

UnknownOutcome = Literal["fail", "retry"]
"""What a resumed run does with a tool call whose outcome is unknown (its intent is
journaled, its outcome is not): ``"fail"``: a failed record saying so, the tool does not run
again, the planner decides; ``"retry"``: run it again if its tool is idempotent (named in
``idempotent_tools``), else as ``"fail"``."""

FLOW_KIND = "plan_and_execute"
"""The ``metadata["kind"]`` of a loop's checkpoint."""
PLANNER = "<planner>"
"""The ``tool_name`` of a journaled planner output."""


def interrupted_error(call_id: str, tool_name: str) -> str:
    """The error of the record of a call whose outcome is unknown."""
    return (
        f"call {call_id!r} of tool {tool_name!r} was interrupted: its process stopped after the "
        "call started and before its outcome was recorded, so it may or may not have taken "
        "effect; it was not run again (resume with unknown_outcome='retry' and the tool in "
        "idempotent_tools to run such a call again)"
    )


class DurableLoop:
    """The durable side of one run: its checkpoint, the journal read when it was claimed,
    and the policy for calls with an unknown outcome. A service of the run (its deps)."""

    __slots__ = ("_saved_round", "_seen", "idempotent", "journal", "run", "state", "unknown")

    def __init__(
        self,
        run: CheckpointedRun,
        state: RoundState,
        *,
        journal: Mapping[str, JournalEntry] | None = None,
        unknown_outcome: UnknownOutcome = "fail",
        idempotent_tools: Collection[str] = (),
    ) -> None:
        if unknown_outcome not in ("fail", "retry"):
            raise ValueError(f"unknown_outcome must be 'fail' or 'retry', got {unknown_outcome!r}")
        self.run = run
        self.state = state
        self.journal: dict[str, JournalEntry] = dict(journal or {})
        self.unknown = unknown_outcome
        self.idempotent = frozenset(idempotent_tools)
        self._saved_round = state.round_index
        self._seen: dict[str, int] = {}

    def wrap(self, deps: LoopDeps) -> LoopDeps:
        """The run's deps with the journaled planner and executor."""
        inner = deps.executor
        executor = JournaledExecutor(
            inner.registry,
            concurrency=inner.concurrency,
            limiter=inner.limiter,
            tool_timeout=inner.tool_timeout,
        )
        executor.durable = self
        return replace(
            deps,
            planner=JournaledPlanner(deps.planner, self),
            executor=executor,
            streaming_dispatch=False,  # a plan is journaled whole before its tools run
        )

    def call_key(self, round_index: int, command: ToolCommand) -> str:
        """A stable id of ``command`` in its round: what it is, and which of its identical
        twins (identical commands are interchangeable, so their order does not matter)."""
        text = json.dumps(
            [command.tool_name, command.purpose, command.todo_suggestion, command.tool_kwargs],
            sort_keys=True,
            default=repr,
            ensure_ascii=False,
        )
        digest = hashlib.blake2b(text.encode(), digest_size=10).hexdigest()
        base = f"r{round_index}/{command.tool_name}/{digest}"
        n = self._seen.get(base, 0)
        self._seen[base] = n + 1
        return f"{base}#{n}"

    async def checkpoint_round(self) -> None:
        """Write a checkpoint of the round state if a round ended since the last one."""
        state = self.state
        if state.round_index == self._saved_round:
            return
        self._saved_round = state.round_index
        await self.run.save(snapshot_of(self.run.run_id, state))

    async def journaled(self, key: str, command: ToolCommand, run: Any) -> ToolExecutionRecord:
        """The record of ``command`` under ``key``, its tool run at most once (see the
        module's docstring); ``run()`` runs it."""
        entry = self.journal.get(key)
        if entry is None:
            mine = JournalEntry(
                call_id=key, tool_name=command.tool_name, arguments=command.tool_kwargs
            )
            entry = await self.run.record_intent(mine)
            if entry.state == "started" and entry.started_at == mine.started_at:
                record: ToolExecutionRecord = await run()
                await self._outcome(key, record, "finished")
                return record
        if entry.state == "started":
            if self.runs_again(entry):
                record = await run()
                await self._outcome(key, record, "finished")
                return record
            record = ToolExecutionRecord.failed(command, interrupted_error(key, command.tool_name))
            await self._outcome(key, record, "interrupted")
            return record
        try:
            record = ToolExecutionRecord.model_validate(entry.outcome)
        except ValidationError as exc:
            raise CorruptCheckpointError(
                f"the journaled outcome of call {key!r} of run {self.run.run_id!r} is no tool "
                f"record ({exc.error_count()} problems); it was left as it is"
            ) from exc
        # the planner's own words (purpose, todo) of this round, the journal's outcome
        return record.model_copy(
            update={"purpose": command.purpose, "todo_suggestion": command.todo_suggestion}
        )

    def runs_again(self, entry: JournalEntry) -> bool:
        """Whether a journaled call runs again now: only one with an unknown outcome, of an
        idempotent tool, under the ``"retry"`` policy."""
        return (
            entry.state == "started"
            and self.unknown == "retry"
            and entry.tool_name in self.idempotent
        )

    async def _outcome(self, key: str, record: ToolExecutionRecord, state: Any) -> None:
        # written even while the run is being cancelled: the tool did run
        with anyio.CancelScope(shield=True):
            await self.run.record_outcome(key, json_safe(record), state=state)


def snapshot_of(run_id: str, state: RoundState) -> FlowSnapshot:
    """The checkpointed picture of a loop run between rounds."""
    return FlowSnapshot(flow=loop_flow.name, execution_id=run_id, state=json_safe(state))


class JournaledExecutor(Executor):
    """An executor whose calls go through the run's journal (set ``durable`` before use)."""

    __slots__ = ("durable",)

    durable: DurableLoop

    async def call(self, command: ToolCommand, on_start: Any = None) -> ToolExecutionRecord:
        durable = self.durable
        key = durable.call_key(durable.state.round_index, command)
        try:  # a call that cannot run (unknown tool, bad arguments) has no side effect
            self.registry.get(command.tool_name).validate(command.tool_kwargs)
        except Exception:
            return await Executor.call(self, command, on_start)

        async def run() -> ToolExecutionRecord:
            return await Executor.call(self, command, on_start)

        entry = durable.journal.get(key)
        if entry is not None and on_start is not None and not durable.runs_again(entry):
            on_start()  # replayed: the call is told as started and finished all the same
        return await durable.journaled(key, command, run)


class JournaledPlanner:
    """The run's planner, its output journaled per round: a round planned before a crash is
    not planned again. Before each call, the round state is checkpointed."""

    __slots__ = ("durable", "inner")

    def __init__(self, inner: PlannerLike, durable: DurableLoop) -> None:
        self.inner = inner
        self.durable = durable

    async def plan(self, context: PlannerContext) -> Any:
        durable = self.durable
        await durable.checkpoint_round()
        key = f"r{context.round_index}/plan"
        entry = durable.journal.get(key)
        if entry is not None and entry.state == "finished":
            data = entry.outcome if isinstance(entry.outcome, dict) else {}
            if data.get("reply"):
                return PlannerReply(
                    output=data.get("output"),
                    short_circuited=bool(data.get("short_circuited")),
                )
            return data.get("output")
        raw = await call_planner(self.inner, context)
        if isinstance(raw, PlannerReply):
            data = {
                "reply": True,
                "output": json_safe(raw.output),
                "short_circuited": raw.short_circuited,
            }
        else:
            data = {"reply": False, "output": json_safe(raw)}
        run = durable.run
        await run.record_intent(JournalEntry(call_id=key, tool_name=PLANNER))
        await run.record_outcome(key, data)
        return raw


def prepare_durable(
    execution: Execution[RoundState],
    run: CheckpointedRun,
    *,
    journal: Mapping[str, JournalEntry] | None = None,
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
) -> DurableLoop:
    """Make ``execution`` durable through ``run``: its deps get the journaled planner and
    executor."""
    durable = DurableLoop(
        run,
        execution.state,
        journal=journal,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
    )
    execution.deps = durable.wrap(execution.deps)
    return durable


def metadata_of(deps: LoopDeps) -> dict[str, Any]:
    """What a resumed run needs to know of the call that began it (JSON)."""
    return {
        "kind": FLOW_KIND,
        "user_input": deps.user_input,
        "max_rounds": deps.max_rounds,
        "user_extra_requirement": deps.user_extra_requirement,
        "max_commands": deps.max_commands,
    }


def restored_state(checkpoint_state: Any, run_id: str) -> RoundState:
    """The round state of a checkpoint."""
    try:
        return RoundState.model_validate(checkpoint_state)
    except ValidationError as exc:
        raise CorruptCheckpointError(
            f"the checkpoint of run {run_id!r} holds no round state of the loop "
            f"({exc.error_count()} problems); it was left as it is"
        ) from exc


def check_kind(metadata: Mapping[str, Any], run_id: str) -> None:
    if metadata.get("kind") != FLOW_KIND:
        raise RunNotResumableError(
            f"run {run_id!r} is not a run of plan_and_execute (its checkpoint is of "
            f"{metadata.get('kind') or 'another flow'!r}); resume it with the product that "
            "made it"
        )


async def begin(store: CheckpointStore, run_id: str, deps: LoopDeps) -> CheckpointedRun:
    """Write the first checkpoint of a new durable run."""
    return await CheckpointedRun.begin(
        store,
        run_id=run_id,
        flow=loop_flow.name,
        snapshot=snapshot_of(run_id, RoundState()),
        metadata=metadata_of(deps),
    )


async def run_durable(
    execution: Execution[RoundState],
    store: CheckpointStore,
    run: Callable[[Execution[RoundState]], Awaitable[LoopResult]],
    *,
    resume_from: Checkpoint | None = None,
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
    force: bool = False,
) -> LoopResult:
    """Run ``execution`` (with ``run``) as a durable run in ``store``: a new one under its
    id, or the stored run ``resume_from`` continued."""
    if resume_from is None:
        checkpointed = await begin(store, execution.id, execution.deps)
        journal: dict[str, JournalEntry] = {}
    else:
        checkpointed = await CheckpointedRun.claim(
            store, resume_from, expect=("running", "failed"), force=force
        )
        try:
            journal = await checkpointed.journal()
        except BaseException:
            await checkpointed.abandon()
            raise
    prepare_durable(
        execution,
        checkpointed,
        journal=journal,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
    )
    try:
        result = await run(execution)
    except Exception as exc:
        with anyio.CancelScope(shield=True):
            await checkpointed.fail(f"{type(exc).__name__}: {exc}")
        raise
    except BaseException:  # cancelled: the run stays running, to be recovered
        await checkpointed.abandon()
        raise
    await checkpointed.complete(json_safe(result))
    return result


def resume_checkpoint(checkpoint: Checkpoint) -> tuple[dict[str, Any], RoundState]:
    """What a stored loop run was begun with, and its last round state.

    Raises:
        RunNotResumableError: the run is not one of the loop.
        CorruptCheckpointError: its checkpoint holds no round state.
    """
    check_kind(checkpoint.metadata, checkpoint.run_id)
    return dict(checkpoint.metadata), restored_state(checkpoint.snapshot.state, checkpoint.run_id)
