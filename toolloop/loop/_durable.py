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
comes back), and a call whose intent is journaled without an outcome (it was cut off while
it ran: it may or may not have taken effect) is handled by the caller's policy, never
silently re-run: ``"fail"`` makes it a failed record that says what cut it off (its process
stopped, or the run's own timeout, cancellation or error ended it), for the planner to
decide; ``"retry"`` runs it again if its tool is named idempotent (else as ``"fail"``).

What the planner's model calls cost is journaled with the plan they paid for (and, for a
planner call that raised, on its own), so a resumed run counts every model call made before
it: its checkpoint's usage (the calls before the checkpoint's round was planned) and the
usage journaled from that round on. A budget holds exactly across resumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Literal

import anyio
from pydantic import ValidationError

from .._errors import PlannerError
from ..checkpoints import (
    Approve,
    Checkpoint,
    CheckpointConflictError,
    CheckpointedRun,
    CheckpointStore,
    CorruptCheckpointError,
    DecisionError,
    Edit,
    HumanAnswer,
    HumanDecision,
    HumanRequest,
    JournalEntry,
    Reject,
    RequestedCall,
    RunNotResumableError,
    check_decision,
    cut_off_causes,
    note_cut_off,
    parse_decision,
    record_usage,
    usage_since,
)
from ..checkpoints import interrupted_error as call_interrupted
from ..flow import Execution, FlowSnapshot
from ..models import Usage, current_meter
from ..planners import PlannerContext, PlannerLike, PlannerReply, call_planner
from ..runner import Executor, ToolCommand, ToolExecutionRecord, json_safe
from ._flow import LoopDeps, RoundState, loop_flow
from ._normalize import normalize_plan
from ._results import LoopResult

__all__ = [
    "DECISIONS",
    "FLOW_KIND",
    "PLANNER",
    "DurableLoop",
    "JournaledExecutor",
    "JournaledPlanner",
    "PauseForHuman",
    "UnknownOutcome",
    "answer_of",
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


def interrupted_error(call_id: str, tool_name: str, cause: str | None = None) -> str:
    """The error of the record of a call whose outcome is unknown (``cause``: what ended the
    run while it ran, ``None`` when its process stopped)."""
    return (
        f"{call_interrupted(call_id, tool_name, cause)} (resume with unknown_outcome='retry' "
        "and the tool in idempotent_tools to run such a call again)"
    )


def _next_key(seen: dict[str, int], round_index: int, command: ToolCommand) -> str:
    """A stable id of ``command`` in its round: what it is, and which of its identical
    twins (identical commands are interchangeable, so their order does not matter);
    ``seen`` counts the twins met so far."""
    text = json.dumps(
        [command.tool_name, command.purpose, command.todo_suggestion, command.tool_kwargs],
        sort_keys=True,
        default=repr,
        ensure_ascii=False,
    )
    digest = hashlib.blake2b(text.encode(), digest_size=10).hexdigest()
    base = f"r{round_index}/{command.tool_name}/{digest}"
    n = seen.get(base, 0)
    seen[base] = n + 1
    return f"{base}#{n}"


class PauseForHuman(Exception):
    """Raised by the journaled planner when a planned call waits for a human's decision:
    the run pauses before the round runs (never seen by callers)."""

    def __init__(self, request: HumanRequest) -> None:
        super().__init__(request.reason)
        self.request = request


class DurableLoop:
    """The durable side of one run: its checkpoint, the journal read when it was claimed,
    and the policy for calls with an unknown outcome. A service of the run (its deps)."""

    __slots__ = (
        "_data",
        "_saved_round",
        "_seen",
        "approval",
        "base_usage",
        "cuts",
        "decisions",
        "idempotent",
        "journal",
        "limits",
        "run",
        "state",
        "unknown",
    )

    def __init__(
        self,
        run: CheckpointedRun,
        state: RoundState,
        *,
        journal: Mapping[str, JournalEntry] | None = None,
        unknown_outcome: UnknownOutcome = "fail",
        idempotent_tools: Collection[str] = (),
        needs_approval: Collection[str] = (),
    ) -> None:
        if unknown_outcome not in ("fail", "retry"):
            raise ValueError(f"unknown_outcome must be 'fail' or 'retry', got {unknown_outcome!r}")
        self.run = run
        self.state = state
        self.journal: dict[str, JournalEntry] = dict(journal or {})
        self.unknown = unknown_outcome
        self.idempotent = frozenset(idempotent_tools)
        self.approval = frozenset(needs_approval)
        self.decisions: dict[str, HumanDecision] = {}
        """The human's decision on each call that needed one, by call key."""
        for entry in self.journal.values():
            if entry.tool_name == DECISIONS and entry.state == "finished":
                self.decisions.update(_read_decisions(entry.outcome, run.run_id))
        self.cuts = cut_off_causes(self.journal)
        """What the run's own end cut off, by call key (see :func:`note_cut_off`)."""
        self.base_usage = state.usage
        """The usage the last checkpoint holds: the model calls made before the current
        round was planned (the round's own are journaled)."""
        self.limits = (64, 256 * 1024)
        self._saved_round = state.round_index
        self._seen: dict[str, int] = {}
        self._data: dict[int, tuple[ToolExecutionRecord, Any]] = {}

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
        self.limits = (deps.max_commands, deps.max_kwargs_bytes)
        return replace(
            deps,
            planner=JournaledPlanner(deps.planner, self),
            executor=executor,
            streaming_dispatch=False,  # a plan is journaled whole before its tools run
        )

    def call_key(self, round_index: int, command: ToolCommand) -> str:
        """A stable id of ``command`` in its round (see :func:`_next_key`)."""
        return _next_key(self._seen, round_index, command)

    def check_approval(self, round_index: int, raw: Any) -> None:
        """Raise :class:`PauseForHuman` if the round's plan has calls of tools that need
        approval and no decision was taken on them yet."""
        max_commands, max_bytes = self.limits
        decided = normalize_plan(raw, max_commands=max_commands, max_kwargs_bytes=max_bytes)
        if decided.next_action != "execute":
            return
        seen: dict[str, int] = {}
        asked: list[RequestedCall] = []
        for command in decided.commands:
            key = _next_key(seen, round_index, command)
            if command.tool_name not in self.approval or key in self.decisions:
                continue
            if self.journal.get(key) is not None:
                continue  # it ran (or started) before: the journal answers for it
            asked.append(
                RequestedCall(
                    call_id=key,
                    tool_name=command.tool_name,
                    arguments=json_safe(command.tool_kwargs),
                    purpose=command.purpose,
                    why=f"tool {command.tool_name!r} needs a human's approval",
                )
            )
        if asked:
            raise PauseForHuman(
                HumanRequest(
                    kind="approve_tool_calls",
                    reason=(
                        f"round {round_index} plans {len(asked)} call(s) that need approval: "
                        "approve, edit their arguments, or reject them (the planner is told)"
                    ),
                    tool_calls=asked,
                    allowed=["approve", "edit", "reject"],
                )
            )

    def decided(self, key: str, command: ToolCommand) -> ToolCommand | ToolExecutionRecord:
        """``command`` as the human decided it (edited arguments), or the record of a
        rejected call."""
        decision = self.decisions.get(key)
        if isinstance(decision, Edit) and key in decision.arguments:
            return command.model_copy(update={"tool_kwargs": decision.arguments[key]})
        if isinstance(decision, Reject):
            said = decision.message or "no reason given"
            return ToolExecutionRecord.failed(
                command, f"a human rejected this call of {command.tool_name!r}: {said}"
            )
        return command

    def count_journaled_usage(self) -> None:
        """Add to the state's usage what the journal holds from the checkpoint's round on:
        the model calls a resumed run made before, that its checkpoint does not count."""
        at = self.state.round_index
        run_id = self.run.run_id
        spent = usage_since(self.journal, at, Usage.model_validate, run_id)
        for key, entry in self.journal.items():
            if entry.tool_name != PLANNER or entry.state != "finished":
                continue
            data = entry.outcome
            used = data.get("usage") if isinstance(data, dict) else None
            if used is not None and _round_of(key) >= at:
                spent.append(_read_usage(used, key, run_id))
        if spent:
            self.state.usage = sum(spent, self.state.usage or Usage())

    async def checkpoint_round(self) -> None:
        """Write a checkpoint of the round state if a round ended since the last one."""
        state = self.state
        if state.round_index == self._saved_round:
            return
        self._saved_round = state.round_index
        meter = current_meter()
        if meter is not None and meter.usage.requests:  # the tools' model calls too
            state.usage = meter.usage
        self.base_usage = state.usage
        await self.run.save(self.snapshot())

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
                self.run.reopen(key)  # running here now, under the intent journaled before
                record = await run()
                await self._outcome(key, record, "finished")
                return record
            error = interrupted_error(key, command.tool_name, self.cuts.get(key))
            record = ToolExecutionRecord.failed(command, error)
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

    def record_data(self, record: ToolExecutionRecord) -> Any:
        """``record`` as JSON data, made once per record (checkpoints repeat it)."""
        key = id(record)
        hit = self._data.get(key)
        if hit is not None and hit[0] is record:
            return hit[1]
        data = json_safe(record)
        self._data[key] = (record, data)
        return data

    def snapshot(self) -> FlowSnapshot:
        """The checkpointed picture of the run between rounds: its round state as JSON
        (each record made JSON once, not at every checkpoint), its usage the one before the
        round was planned (see :attr:`base_usage`)."""
        state = self.state
        rest = state.model_copy(
            update={"done_plans": [], "last_round_records": [], "usage": self.base_usage}
        )
        data = json_safe(rest)
        data["done_plans"] = [self.record_data(r) for r in state.done_plans]
        data["last_round_records"] = [self.record_data(r) for r in state.last_round_records]
        return FlowSnapshot(flow=loop_flow.name, execution_id=self.run.run_id, state=data)

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
            await self.run.record_outcome(key, self.record_data(record), state=state)


DECISIONS = "<human>"
"""The ``tool_name`` of a journaled human decision (its outcome: decisions by call key)."""


def _round_of(key: str) -> int:
    """The round of a planner output's key, ``r{i}/plan``."""
    try:
        return int(key[1 : key.index("/")])
    except ValueError:
        return -1


def _read_usage(data: Any, key: str, run_id: str) -> Usage:
    try:
        return Usage.model_validate(data)
    except ValidationError as exc:
        raise CorruptCheckpointError(
            f"the usage journaled with {key!r} of run {run_id!r} is no usage "
            f"({exc.error_count()} problems); it was left as it is"
        ) from exc


def _read_decisions(data: Any, run_id: str) -> dict[str, HumanDecision]:
    try:
        return {str(k): parse_decision(v) for k, v in dict(data).items()}
    except (TypeError, ValueError, DecisionError) as exc:
        raise CorruptCheckpointError(
            f"a journaled human decision of run {run_id!r} cannot be read ({exc}); it was "
            "left as it is"
        ) from exc


async def journal_decisions(
    run: CheckpointedRun, round_index: int, decisions: Mapping[str, HumanDecision]
) -> None:
    """Journal a human's decisions (once: a recovered run finds them there)."""
    key = f"r{round_index}/decisions"
    data = {k: v.model_dump(mode="json") for k, v in decisions.items()}
    await run.record_intent(JournalEntry(call_id=key, tool_name=DECISIONS))
    await run.record_outcome(key, data)


def per_call(request: HumanRequest, answer: HumanAnswer) -> dict[str, HumanDecision]:
    """One decision per call asked about (a single decision applies to every call)."""
    if isinstance(answer, dict):
        return answer
    decisions: dict[str, HumanDecision] = {}
    for call in request.tool_calls:
        if isinstance(answer, Edit):
            if call.call_id in answer.arguments:
                decisions[call.call_id] = Edit(
                    arguments={call.call_id: answer.arguments[call.call_id]},
                    message=answer.message,
                )
            else:
                decisions[call.call_id] = Approve()
        else:
            decisions[call.call_id] = answer
    return decisions


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
        decided = durable.decided(key, command) if durable.decisions else command
        if isinstance(decided, ToolExecutionRecord):  # a human rejected it: it never runs
            rejected = decided

            async def run() -> ToolExecutionRecord:
                if on_start is not None:
                    on_start()
                return rejected

        else:
            command = decided
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


_REPLY_FIELDS = frozenset(
    {"short_circuited", "finish_reason", "notes", "reasoning", "refusal", "message"}
)
"""What a journaled plan keeps of its reply besides the output: a replayed round says what
the first did (its notes, a refusal) and sends the same reply back to the model."""


class JournaledPlanner:
    """The run's planner, its output journaled per round: a round planned before a crash is
    not planned again. Before each call, the round state is checkpointed."""

    __slots__ = ("durable", "inner")

    def __init__(self, inner: PlannerLike, durable: DurableLoop) -> None:
        self.inner = inner
        self.durable = durable

    async def plan(self, context: PlannerContext) -> Any:
        raw = await self._plan(context)
        if self.durable.approval:
            self.durable.check_approval(context.round_index, raw)
        return raw

    async def _plan(self, context: PlannerContext) -> Any:
        durable = self.durable
        await durable.checkpoint_round()
        index = context.round_index
        key = f"r{index}/plan"
        entry = durable.journal.get(key)
        if entry is not None and entry.state == "finished":
            # replayed: what it cost is counted already (see count_journaled_usage)
            data = entry.outcome if isinstance(entry.outcome, dict) else {}
            if data.get("reply"):  # the reply as it was: its message goes back to the model
                kept = {k: data[k] for k in _REPLY_FIELDS if data.get(k) is not None}
                return PlannerReply.model_validate({**kept, "output": data.get("output")})
            return data.get("output")
        run = durable.run
        meter = current_meter()
        mark = meter.calls if meter is not None else 0
        try:
            raw = await call_planner(self.inner, context)
        except BaseException:  # no plan, but the model calls it made were made
            spent = meter.since(mark) if meter is not None else None
            if spent is not None:
                await record_usage(run, index, spent.model_dump(mode="json"))
            raise
        spent = meter.since(mark) if meter is not None else None
        if isinstance(raw, PlannerReply):
            data = {
                "reply": True,
                **raw.model_dump(mode="json", include=set(_REPLY_FIELDS)),
                "output": json_safe(raw.output),
            }
        else:
            data = {"reply": False, "output": json_safe(raw)}
        if spent is not None:  # the plan and what it cost: one write
            data["usage"] = spent.model_dump(mode="json")
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
    needs_approval: Collection[str] = (),
) -> DurableLoop:
    """Make ``execution`` durable through ``run``: its deps get the journaled planner and
    executor."""
    durable = DurableLoop(
        run,
        execution.state,
        journal=journal,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        needs_approval=needs_approval,
    )
    execution.deps = durable.wrap(execution.deps)
    return durable


def metadata_of(deps: LoopDeps, needs_approval: Collection[str] = ()) -> dict[str, Any]:
    """What a resumed run needs to know of the call that began it (JSON)."""
    return {
        "kind": FLOW_KIND,
        "needs_approval": sorted(needs_approval),
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


async def begin(
    store: CheckpointStore, run_id: str, deps: LoopDeps, needs_approval: Collection[str] = ()
) -> CheckpointedRun:
    """Write the first checkpoint of a new durable run."""
    try:
        return await CheckpointedRun.begin(
            store,
            run_id=run_id,
            flow=loop_flow.name,
            snapshot=snapshot_of(run_id, RoundState()),
            metadata=metadata_of(deps, needs_approval),
        )
    except CheckpointConflictError as exc:
        raise CheckpointConflictError(
            f"the store already has a run {run_id!r}: to continue it, call "
            f"async_resume_plan_and_execute({run_id!r}, ...); for a new run, pass another "
            "run_id (or none: a fresh one is made)"
        ) from exc


async def run_durable(
    execution: Execution[RoundState],
    store: CheckpointStore,
    run: Callable[[Execution[RoundState]], Awaitable[LoopResult]],
    *,
    resume_from: Checkpoint | None = None,
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
    needs_approval: Collection[str] = (),
    decisions: Mapping[str, HumanDecision] | None = None,
    force: bool = False,
) -> LoopResult:
    """Run ``execution`` (with ``run``) as a durable run in ``store``: a new one under its
    id, or the stored run ``resume_from`` continued (a paused one with the human's
    ``decisions``, by call key)."""
    state = execution.state
    if resume_from is None:
        checkpointed = await begin(store, execution.id, execution.deps, needs_approval)
        journal: dict[str, JournalEntry] = {}
    else:
        needs_approval = resume_from.metadata.get("needs_approval") or ()
        if decisions is not None:
            value: Any = {k: v.model_dump(mode="json") for k, v in decisions.items()}
            checkpointed = await CheckpointedRun.claim(
                store, resume_from, expect=("paused",), event=DECISIONS, value=value
            )
        else:
            checkpointed = await CheckpointedRun.claim(
                store, resume_from, expect=("running", "failed"), force=force
            )
            if resume_from.resume_event == DECISIONS:  # it died before it noted them
                decisions = _read_decisions(resume_from.resume_value, resume_from.run_id)
        try:
            if decisions:
                await journal_decisions(checkpointed, state.round_index, decisions)
            journal = await checkpointed.journal()
        except BaseException:
            await checkpointed.abandon()
            raise
    durable = prepare_durable(
        execution,
        checkpointed,
        journal=journal,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        needs_approval=needs_approval,
    )
    durable.count_journaled_usage()
    try:
        result = await run(execution)
    except PlannerError as exc:
        pause = exc.__cause__
        if not isinstance(pause, PauseForHuman):
            with anyio.CancelScope(shield=True):
                await checkpointed.fail(f"{type(exc).__name__}: {exc}")
            raise
        request = pause.request.model_dump(mode="json")
        await checkpointed.pause_at(durable.snapshot(), request)
        deps = execution.deps
        return LoopResult.build(
            deps.user_input,
            state.done_plans,
            rounds=state.round_index,
            stop_reason=None,
            notes=state.notes,
            planner_text=state.planner_text,
            run_id=execution.id,
            request=request,
            usage=state.usage,
        )
    except Exception as exc:
        await note_cut_off(checkpointed, exc)  # a timeout, an error: what ended its calls
        with anyio.CancelScope(shield=True):
            await checkpointed.fail(f"{type(exc).__name__}: {exc}")
        raise
    except BaseException as exc:  # cancelled: the run stays running, to be recovered
        await note_cut_off(checkpointed, exc)
        await checkpointed.abandon()
        raise
    await checkpointed.complete(json_safe(result))
    return result


def answer_of(checkpoint: Checkpoint, decision: object, registry: Any) -> dict[str, HumanDecision]:
    """The human's answer to a paused run, checked against what it asks: one decision per
    call key.

    Raises:
        DecisionError: the answer does not fit (see :func:`~toolloop.checkpoints.check_decision`).
    """
    try:
        request = HumanRequest.model_validate(checkpoint.request)
    except ValidationError as exc:
        raise CorruptCheckpointError(
            f"run {checkpoint.run_id!r} is paused, but what it asks cannot be read "
            f"({exc.error_count()} problems); it was left as it is"
        ) from exc

    def validate(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        checked: dict[str, Any] = registry.get(name).validate(arguments)
        return checked

    answer = check_decision(request, decision, validate_arguments=validate)
    return per_call(request, answer)


def resume_checkpoint(checkpoint: Checkpoint) -> tuple[dict[str, Any], RoundState]:
    """What a stored loop run was begun with, and its last round state.

    Raises:
        RunNotResumableError: the run is not one of the loop.
        CorruptCheckpointError: its checkpoint holds no round state.
    """
    check_kind(checkpoint.metadata, checkpoint.run_id)
    return dict(checkpoint.metadata), restored_state(checkpoint.snapshot.state, checkpoint.run_id)
