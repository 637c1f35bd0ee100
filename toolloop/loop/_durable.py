"""Durable runs of the loop: a checkpoint after every round, a journal of every planner
output and tool call, and a run that continues after its process died or a human answered.

An opt-in layer around the loop's flow, through the seams it already has: the planner is
wrapped (its reply is journaled per round, and the round state is checkpointed before each
planner call, i.e. after each round), each command is told to the layer before it runs (its
call id, ``"{round}.{position}"``: the id the events and a human's request give it), and the
executor's :meth:`call` goes through the kernel's journal
(:func:`~toolloop.kernel.journaled_call`: intent before, outcome after). Without a store
nothing of this runs: the loop's per-call path is unchanged.

A resumed or recovered run restores the round state of its last checkpoint and goes on: a
round whose plan is journaled is not planned again, a call whose outcome is journaled is not
run again, and a call whose intent is journaled without an outcome follows the run's
``unknown_outcome`` (a failed record that says what cut it off, a retry of an idempotent
tool, or a question to a human). A round whose calls need a human's approval waits before
they run (with streaming dispatch, those calls are held while the others run); the human's
decisions are journaled, and the round runs again with them.

What the planner's model calls cost is journaled with the plan they paid for (and, for a
planner call that raised, on its own), so a resumed run counts every model call made before
it: its checkpoint's usage (the calls before the checkpoint's round was planned) and the
usage journaled from that round on. A budget holds exactly across resumes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from ..checkpoints import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointedRun,
    CheckpointStore,
    CorruptCheckpointError,
    DecisionKind,
    HumanRequest,
    JournalEntry,
    RequestedCall,
    RunNotResumableError,
    cut_off_causes,
    interruption,
    record_usage,
    usage_since,
)
from ..flow import FlowSnapshot
from ..kernel import (
    CheckpointSaved,
    Decided,
    Run,
    RunOptions,
    Skip,
    Verdict,
    approval_request,
    approval_rule,
    decide,
    interrupted_request,
    journaled_call,
    own_key,
    resumes,
    tell,
)
from ..models import Usage, current_meter
from ..planners import (
    Dispatch,
    PlannerContext,
    PlannerLike,
    PlannerReply,
    StreamingPlanner,
    call_planner,
)
from ..runner import CallSource, Executor, ToolCommand, ToolExecutionRecord, json_safe
from ..tools import RunScope, ToolRegistry
from ._flow import LoopContext, LoopDeps, PauseForHuman, RoundState, loop_flow
from ._normalize import normalize_command, normalize_plan

__all__ = [
    "DECISIONS",
    "FLOW_KIND",
    "PLANNER",
    "DurableLoop",
    "JournaledExecutor",
    "JournaledPlanner",
    "begin",
    "call_id",
    "decision_of",
    "resume_checkpoint",
    "stored_approval",
]

_ON_CALLS: list[DecisionKind] = ["approve", "edit", "reject"]
"""What a human may decide on a loop run's calls (asked to approve them, or cut off)."""

FLOW_KIND = "plan_and_execute"
"""The ``metadata["kind"]`` of a loop's checkpoint."""
PLANNER = "<planner>"
"""The ``tool_name`` of a journaled planner output."""
DECISIONS = "<human>"
"""The ``tool_name`` of journaled human decisions (by call id: run, with these arguments,
or skip, with this error)."""


def call_id(round_index: int, position: int) -> str:
    """A call's id: its round and its position in the round's plan, the same in the events
    (``ToolCallStarted.call_id``), a human's request and the journal."""
    return f"{round_index}.{position}"


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


def _dump_verdict(verdict: Verdict, again: bool) -> dict[str, Any]:
    if isinstance(verdict, Run):
        return {"run": json_safe(verdict.arguments), "again": again}
    return {"skip": verdict.error, "why": verdict.why}


def _read_verdicts(data: Any, run_id: str) -> tuple[dict[str, Verdict], set[str]]:
    """The decisions by call id, and the ids of the cut-off calls a human said to run
    once more."""
    verdicts: dict[str, Verdict] = {}
    again: set[str] = set()
    try:
        for key, value in dict(data).items():
            if "run" in value:
                verdicts[str(key)] = Run(dict(value["run"]))
                if value.get("again"):
                    again.add(str(key))
            else:
                verdicts[str(key)] = Skip(str(value["skip"]), value.get("why", "rejected"))
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptCheckpointError(
            f"a journaled human decision of run {run_id!r} cannot be read ({exc}); it was "
            "left as it is"
        ) from exc
    return verdicts, again


class DurableLoop:
    """The durable side of one run: its checkpoint, the journal read when it was claimed,
    its options (approvals, the policy for unknown outcomes), and the call ids of the round
    running. A service of the run (its deps)."""

    __slots__ = (
        "_data",
        "_ids",
        "_saved_round",
        "again",
        "approval",
        "base_usage",
        "cuts",
        "journal",
        "limits",
        "options",
        "registry",
        "run",
        "scope",
        "sources",
        "state",
        "verdicts",
    )

    def __init__(
        self,
        run: CheckpointedRun,
        state: RoundState,
        options: RunOptions,
        *,
        journal: Mapping[str, JournalEntry] | None = None,
        tool_names: Collection[str] = (),
    ) -> None:
        self.run = run
        self.state = state
        self.options = options
        self.scope: RunScope | None = None
        """The tools' run context (set with the run's deps)."""
        self.journal: dict[str, JournalEntry] = dict(journal or {})
        self.approval = approval_rule(options.needs_approval, tool_names)
        self.verdicts: dict[str, Verdict] = {}
        """A human's decision on each call that needed one, by call id."""
        self.again: set[str] = set()
        """The calls cut off before that a human said to run once more."""
        for entry in self.journal.values():
            if entry.tool_name == DECISIONS and entry.state == "finished":
                verdicts, again = _read_verdicts(entry.outcome, run.run_id)
                self.verdicts.update(verdicts)
                self.again |= again
        self.cuts = cut_off_causes(self.journal)
        """What the run's own end cut off, by call id (see ``note_cut_off``)."""
        self.base_usage = state.usage
        """The usage the last checkpoint holds: the model calls made before the current
        round was planned (the round's own are journaled)."""
        self.limits = (64, 256 * 1024)
        self.registry = ToolRegistry(())
        """The run's tools (set when the run's deps are wrapped)."""
        self._saved_round = state.round_index
        self.sources: dict[str, CallSource] = {}
        """Where each call's record came from, when not from running it (by call id)."""
        self._ids: dict[int, tuple[ToolCommand, str]] = {}
        self._data: dict[int, tuple[ToolExecutionRecord, Any]] = {}

    def wrap(self, deps: LoopDeps) -> LoopDeps:
        """The run's deps with the journaled planner and executor."""
        inner = deps.executor
        executor = JournaledExecutor(
            inner.registry,
            concurrency=inner.concurrency,
            limiter=inner.limiter,
            tool_timeout=inner.tool_timeout,
            rate_limits=inner.rate_limits,
            retry=inner.retry,
            idempotent_tools=inner.idempotent_tools,
            shared_results=inner.shared_results,
        )
        executor.durable = self
        self.scope = deps.scope
        self.limits = (deps.max_commands, deps.max_kwargs_bytes)
        self.registry = deps.registry
        planner: PlannerLike = (
            JournaledStreamingPlanner(deps.planner, self)
            if isinstance(deps.planner, StreamingPlanner)
            else JournaledPlanner(deps.planner, self)
        )
        return replace(
            deps,
            planner=planner,
            executor=executor,
            durable=self,
        )

    def note_call(self, round_index: int, command: ToolCommand, position: int) -> None:
        """The call id of ``command``, told before it runs (the executor reads it)."""
        self._ids[id(command)] = (command, call_id(round_index, position))

    def id_of(self, command: ToolCommand) -> str:
        """The call id told for ``command`` (one made up if none was: it is journaled all
        the same)."""
        known = self._ids.pop(id(command), None)
        if known is not None and known[0] is command:
            return known[1]
        return f"{self.state.round_index}.?{len(self.journal)}.{id(command)}"

    def source_of(self, key: str) -> CallSource:
        """Where the record of call ``key`` came from: ``"ran"``, or the journal's
        ``"replayed"`` outcome, or ``"interrupted"`` (cut off before; not run again)."""
        return self.sources.get(key, "ran")

    def own_key(self, key: str, command: ToolCommand) -> str:
        """The journal key of ``command``, planned at call id ``key``: the id itself, unless
        the journal holds another call under it. That happens only with streaming dispatch:
        a call started before its round's plan was journaled, the plan never was (the
        planner failed, the process died), and the round was planned again, differently.
        The earlier call is not this one: its outcome is not handed to this call, which runs
        under a key of its own (``"{key}~{n}"``), and a note says what the earlier one was."""
        mine, other = own_key(self.journal, key, command.tool_name, command.tool_kwargs)
        if other is not None:
            self.state.notes.append(_orphan_note(self.state.round_index, key, other))
        return mine

    async def on_pause(self, ctx: LoopContext) -> None:
        """The run pauses for a human in its round ``i``: a checkpoint of it as it waits,
        told as the kernel's :class:`~toolloop.kernel.CheckpointSaved`, step
        ``"round {i} plan"`` (the agents, too, tell the checkpoint of the step that paused,
        before the pause). The paused snapshot counts the usage of its checkpoint: the
        round's plan is journaled, and counted from there when the run is resumed."""
        state = ctx.state
        state.usage = self.base_usage
        await self.run.save(self.snapshot(ctx.elapsed()))
        tell(ctx, CheckpointSaved, step=f"round {state.round_index} plan")

    def asked(self, round_index: int, raw: Any) -> HumanRequest | None:
        """What the round must ask a human before its calls run: approvals its calls need,
        or (``unknown_outcome="ask"``) calls cut off before; ``None`` when nothing."""
        max_commands, max_bytes = self.limits
        plan = normalize_plan(raw, max_commands=max_commands, max_kwargs_bytes=max_bytes)
        if plan.next_action != "execute":
            return None
        approvals: list[RequestedCall] = []
        interrupted: list[RequestedCall] = []
        positions = plan.sources or range(len(plan.items))
        for item, position in zip(plan.items, positions, strict=True):
            if not isinstance(item, ToolCommand):
                continue
            key = call_id(round_index, position)
            if key in self.verdicts:
                continue
            asked = self.approval_of(key, item)
            if asked is not None:
                approvals.append(asked)
                continue
            entry = self.journal.get(key)
            if (
                self.options.unknown_outcome == "ask"
                and entry is not None
                and entry.state == "started"
                and not resumes(self.registry, item.tool_name)  # (a run as a tool goes on)
            ):
                interrupted.append(
                    RequestedCall(
                        call_id=key,
                        tool_name=item.tool_name,
                        arguments=json_safe(item.tool_kwargs),
                        purpose=item.purpose,
                        why=f"interrupted: {interruption(self.cuts.get(key))}; it may or may "
                        "not have taken effect",
                    )
                )
        if approvals:
            return approval_request(approvals, _ON_CALLS)
        if interrupted:
            causes = [self.cuts.get(call.call_id) for call in interrupted]
            return interrupted_request(interrupted, causes, _ON_CALLS)
        return None

    def approval_of(self, key: str, command: ToolCommand) -> RequestedCall | None:
        """The call as a human is asked about it, when it needs approval and was neither
        decided nor journaled (a journaled call ran, or started, already)."""
        if self.approval is None or key in self.verdicts or key in self.journal:
            return None
        if not self.registry.accepts(command.tool_name, command.tool_kwargs):
            return None  # it cannot run (no such tool, arguments off its schema): not asked
        return self.approval(
            RequestedCall(
                call_id=key,
                tool_name=command.tool_name,
                arguments=json_safe(command.tool_kwargs),
                purpose=command.purpose,
            )
        )

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

    async def checkpoint_round(self, ctx: LoopContext) -> None:
        """Write a checkpoint of the round state if a round ended since the last one (told
        as the kernel's :class:`~toolloop.kernel.CheckpointSaved`, step ``"round {i}"``)."""
        state = self.state
        if state.round_index == self._saved_round:
            return
        self._saved_round = state.round_index
        meter = current_meter()
        if meter is not None and meter.usage.requests:  # the tools' model calls too
            state.usage = meter.usage
        self.base_usage = state.usage
        await self.run.save(self.snapshot(ctx.elapsed()))
        tell(ctx, CheckpointSaved, step=f"round {state.round_index - 1}")

    def record_data(self, record: ToolExecutionRecord) -> Any:
        """``record`` as JSON data, made once per record (checkpoints repeat it)."""
        key = id(record)
        hit = self._data.get(key)
        if hit is not None and hit[0] is record:
            return hit[1]
        data = json_safe(record)
        self._data[key] = (record, data)
        return data

    def snapshot(self, elapsed: float = 0.0) -> FlowSnapshot:
        """The checkpointed picture of the run between rounds: its round state as JSON
        (each record made JSON once, not at every checkpoint), its usage the one before the
        round was planned (see :attr:`base_usage`), and the seconds it had run
        (``elapsed``: a recovered run's clock goes on from there)."""
        state = self.state
        rest = state.model_copy(
            update={"done_plans": [], "last_round_records": [], "usage": self.base_usage}
        )
        data = json_safe(rest)
        data["done_plans"] = [self.record_data(r) for r in state.done_plans]
        data["last_round_records"] = [self.record_data(r) for r in state.last_round_records]
        return FlowSnapshot(
            flow=loop_flow.name, execution_id=self.run.run_id, state=data, elapsed=elapsed
        )

    async def journaled(
        self,
        key: str,
        command: ToolCommand,
        call: Callable[[], Awaitable[ToolExecutionRecord]],
        *,
        told: str,
    ) -> ToolExecutionRecord:
        """The record of ``command`` under ``key``, its tool run at most once (``told``:
        its call id in the events)."""
        options = self.options
        done = await journaled_call(
            self.run,
            self.journal,
            key,
            tool_name=command.tool_name,
            arguments=json_safe(command.tool_kwargs),
            call=call,
            dump=self.record_data,
            load=ToolExecutionRecord.model_validate,
            failed=lambda error: ToolExecutionRecord.failed(command, error),
            unknown_outcome=options.unknown_outcome,
            idempotent_tools=options.idempotent_tools,
            resumes=resumes(self.registry, command.tool_name),
        )
        if done.source != "ran":
            self.sources[told] = done.source
        if done.source == "interrupted":
            return done.outcome
        # the planner's own words (purpose, todo) of this round, the journal's outcome
        return done.outcome.model_copy(
            update={"purpose": command.purpose, "todo_suggestion": command.todo_suggestion}
        )


def _orphan_note(round_index: int, key: str, entry: JournalEntry) -> str:
    what = {
        "finished": "ran",
        "interrupted": "was cut off",
        "started": "started (its outcome is unknown)",
    }.get(entry.state, entry.state)
    arguments = json.dumps(entry.arguments, sort_keys=True, separators=(",", ":"), default=repr)
    return (
        f"round {round_index}: call {key} {what} before the round's plan was kept: "
        f"{entry.tool_name}({arguments[:200]}); the round was planned again "
        "with another call there, which runs as a call of its own"
    )


def decision_of(checkpoint: Checkpoint, decision: object, registry: Any) -> Decided:
    """The human's answer to a paused run, checked against what it asks.

    Raises:
        DecisionError: the answer does not fit (see :func:`~toolloop.kernel.decide`).
        CorruptCheckpointError: what the run asks cannot be read.
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

    return decide(request, decision, validate_arguments=validate)


def verdicts_data(decided: Decided, *, again: bool) -> dict[str, Any]:
    """A human's decisions on the round's calls as the journal keeps them; ``again``: they
    answer about calls cut off before (approved: run once more)."""
    return {k: _dump_verdict(v, again) for k, v in decided.calls.items()}


async def journal_verdicts(
    run: CheckpointedRun, journal: Mapping[str, JournalEntry], decided_at: int, data: Any
) -> bool:
    """Journal a human's decisions, noted with the claim that wrote revision ``decided_at``
    of the run's checkpoint (once: a recovered run finds them there, and a process that
    died before it journaled them does it now); whether it wrote them."""
    key = f"decisions/{decided_at}"
    if key in journal:
        return False
    await run.record_note(key, DECISIONS, data)
    return True


class JournaledExecutor(Executor):
    """The run's executor: each call goes through the journal under its call id, as a human
    decided it (edited arguments; a rejected call never runs)."""

    durable: DurableLoop

    async def call(self, command: ToolCommand, on_start: Any = None) -> ToolExecutionRecord:
        durable = self.durable
        key = durable.id_of(command)
        verdict = durable.verdicts.get(key)
        if isinstance(verdict, Skip):  # a human rejected it: it never runs
            if on_start is not None:
                on_start()
            return ToolExecutionRecord.failed(command, verdict.error)
        if isinstance(verdict, Run):
            command = command.model_copy(update={"tool_kwargs": verdict.arguments})
            if durable.scope is not None:  # the edited call is the same call
                durable.scope.name_call(command, key)
        if not self.registry.accepts(command.tool_name, command.tool_kwargs):
            # a call that cannot run (unknown tool, bad arguments) has no effect to journal
            return await Executor.call(self, command, on_start)

        async def run() -> ToolExecutionRecord:
            return await Executor.call(self, command, on_start)

        told = key
        identity = durable.own_key(key, command)  # the call, whatever ran under its id before
        if identity != told and durable.scope is not None:  # its idempotency key follows it
            durable.scope.name_call(command, told, identity=identity)
        # cut off before, a human said to run it once more: a fresh intent (so a second
        # cut-off is not run a third time), the same call (its idempotency key unchanged)
        key = f"{identity}/again" if told in durable.again else identity
        entry = durable.journal.get(key)
        if entry is not None and entry.state != "started" and on_start is not None:
            on_start()  # replayed: the call is told as started and finished all the same
        return await durable.journaled(key, command, run, told=told)


_REPLY_FIELDS = frozenset(
    {"short_circuited", "finish_reason", "notes", "reasoning", "refusal", "message"}
)
"""What a journaled plan keeps of its reply besides the output: a replayed round says what
the first did (its notes, a refusal) and sends the same reply back to the model."""


class JournaledPlanner:
    """The run's planner, its reply journaled per round: a round planned before a crash is
    not planned again. Before each call, the round state is checkpointed; after it, a round
    whose calls need a human pauses (:class:`~toolloop.loop.PauseForHuman`)."""

    __slots__ = ("durable", "inner")

    def __init__(self, inner: PlannerLike, durable: DurableLoop) -> None:
        self.inner = inner
        self.durable = durable

    async def plan(self, context: PlannerContext) -> Any:
        raw, _ = await self._plan(context, None)
        self._ask(context.round_index, raw)
        return raw

    def _ask(self, round_index: int, raw: Any) -> None:
        asked = self.durable.asked(round_index, raw)
        if asked is not None:
            raise PauseForHuman(asked)

    def _replayed(self, key: str) -> tuple[bool, Any]:
        entry = self.durable.journal.get(key)
        if entry is None or entry.state != "finished":
            return False, None
        # replayed: what it cost is counted already (see count_journaled_usage)
        data = entry.outcome if isinstance(entry.outcome, dict) else {}
        if data.get("reply"):  # the reply as it was: its message goes back to the model
            kept = {k: data[k] for k in _REPLY_FIELDS if data.get(k) is not None}
            return True, PlannerReply.model_validate({**kept, "output": data.get("output")})
        return True, data.get("output")

    async def _plan(self, context: PlannerContext, dispatch: Dispatch | None) -> tuple[Any, bool]:
        durable = self.durable
        index = context.round_index
        key = f"r{index}/plan"
        replayed, raw = self._replayed(key)
        if replayed:
            return raw, True
        run = durable.run
        meter = current_meter()
        mark = meter.calls if meter is not None else 0
        try:
            if dispatch is None:
                raw = await call_planner(self.inner, context)
            else:
                assert isinstance(self.inner, StreamingPlanner)
                raw = await self.inner.plan_streaming(context, dispatch)
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
        await run.record_note(key, PLANNER, data)
        return raw, False


class JournaledStreamingPlanner(JournaledPlanner):
    """The journaled planner of a planner that streams: each command is handed over as soon
    as it is complete, except one that waits for a human (held: it runs when answered);
    a round replayed from the journal is not streamed again."""

    __slots__ = ()

    async def plan_streaming(self, context: PlannerContext, dispatch: Dispatch) -> Any:
        durable = self.durable
        index = context.round_index
        max_bytes = durable.limits[1]

        def hand_over(position: int, raw: Any) -> None:
            if durable.approval is None:
                dispatch(position, raw)
                return
            try:
                item = normalize_command(position, raw, [], max_kwargs_bytes=max_bytes)
            except Exception:
                item = None
            if isinstance(item, ToolCommand):
                if durable.approval_of(call_id(index, position), item) is not None:
                    return  # held: it waits for a human, asked at the plan's end
            dispatch(position, raw)

        raw, _ = await self._plan(context, hand_over)
        self._ask(index, raw)  # a held call (or a replayed round's) waits for a human
        return raw


def stored_approval(options: RunOptions) -> list[str]:
    """The approval spec as a checkpoint keeps it: tool names (a rule is code: a resume is
    given it again)."""
    spec = options.needs_approval
    if spec is True:
        return ["*"]
    if isinstance(spec, Mapping):
        return sorted(str(k) for k, v in spec.items() if v is not False and v is not None)
    if isinstance(spec, Collection) and not isinstance(spec, str):
        return sorted(str(name) for name in spec)
    return []


def _approval_from(stored: Any) -> Any:
    if stored == ["*"]:
        return True
    return list(stored) if isinstance(stored, list) else ()


def metadata_of(deps: LoopDeps, options: RunOptions) -> dict[str, Any]:
    """What a resumed run needs to know of the call that began it (JSON)."""
    return {
        "kind": FLOW_KIND,
        "needs_approval": stored_approval(options),
        "user_input": deps.user_input,
        "max_turns": deps.max_rounds,
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


def check_kind(checkpoint: Checkpoint) -> None:
    if checkpoint.metadata.get("kind") != FLOW_KIND:
        raise RunNotResumableError(
            f"run {checkpoint.run_id!r} is not a run of plan_and_execute (its checkpoint is of "
            f"the flow {checkpoint.flow!r}); continue it with the product that made it"
        )


def resume_checkpoint(checkpoint: Checkpoint) -> tuple[dict[str, Any], RoundState]:
    """What a stored loop run was begun with, and its last round state.

    Raises:
        RunNotResumableError: the run is not one of the loop.
        CorruptCheckpointError: its checkpoint holds no round state.
    """
    check_kind(checkpoint)
    return dict(checkpoint.metadata), restored_state(checkpoint.snapshot.state, checkpoint.run_id)


def approval_of_checkpoint(checkpoint: Checkpoint, options: RunOptions) -> RunOptions:
    """The options of a resumed run: the approval spec given again, else the one stored."""
    if options.needs_approval:
        return options
    return replace(
        options, needs_approval=_approval_from(checkpoint.metadata.get("needs_approval"))
    )


async def begin(
    store: CheckpointStore, run_id: str, deps: LoopDeps, options: RunOptions
) -> CheckpointedRun:
    """Write the first checkpoint of a new durable run."""
    try:
        return await CheckpointedRun.begin(
            store,
            run_id=run_id,
            flow=loop_flow.name,
            snapshot=FlowSnapshot(
                flow=loop_flow.name, execution_id=run_id, state=json_safe(RoundState())
            ),
            metadata=metadata_of(deps, options),
        )
    except CheckpointConflictError as exc:
        raise CheckpointConflictError(
            f"the store already has a run {run_id!r}: to continue it, call "
            f"async_recover_plan_and_execute({run_id!r}, ...) (or, paused, "
            f"async_resume_plan_and_execute with a decision); for a new run, pass another "
            "run_id (or none: a fresh one is made)"
        ) from exc
