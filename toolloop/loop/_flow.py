"""The plan/execute loop as a flow on the engine: PLAN → EXECUTE → PLAN … → FINISH.

::

    start ──▶ plan ──▶ plan? ──execute──▶ execute ──▶ plan
                         └────finish────▶ finish ──▶ end

``plan`` checks ``max_turns`` before it calls the planner, so no planner call is made whose
result would be thrown away; ``execute`` runs a round's commands concurrently through the
runner (:class:`~toolloop.runner.ToolBatch`) and writes every record into the run's state,
even when the round is cancelled. With streaming dispatch the round's batch opens while the
plan streams: ``plan`` submits each command the moment it is complete, so the tools run
while the rest of the plan is written, and ``execute`` only reports the round.

Everything that changes during a run lives in its :class:`RoundState` (records, round index,
notes, stop reason, the planner's text); :class:`LoopDeps` holds configuration and
services only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from pydantic import BaseModel, Field

from .._errors import AnswerError, PlannerError, StructuredOutputError, UsageLimitError
from ..checkpoints import HumanRequest
from ..flow import Context, Flow
from ..kernel import (
    HUMAN_EVENT,
    READ_RESULT,
    ProviderStrategy,
    ResponseFormat,
    ToolStrategy,
    model_timeout_error,
    output_schema,
    read_result_spec,
    result_text,
    tell,
    tell_call_finished,
    tell_call_started,
    tell_kept,
)
from ..models import ChatModel, ModelSettings, Usage, UsageMeter, current_meter
from ..planners import (
    PlannerContext,
    PlannerLike,
    PlannerReply,
    PlannerTurn,
    StreamingPlanner,
    call_planner,
)
from ..runner import (
    CallSource,
    Executor,
    ToolCommand,
    ToolExecutionRecord,
    construct,
    longer_than,
)
from ..tools import RunScope, ToolRegistry
from ._events import PlanDecided, RoundFinished, RoundStarted
from ._normalize import NormalizedPlan, PlanItem, normalize_command, normalize_plan, over_limit
from ._results import StopReason

if TYPE_CHECKING:
    from ._answer import AnswerOptions

__all__ = [
    "HUMAN_EVENT",
    "AnswerWith",
    "DurableHooks",
    "LoopDeps",
    "PauseForHuman",
    "Planned",
    "RoundState",
    "loop_flow",
]


class PauseForHuman(Exception):
    """Raised by a durable run's planner when a planned call waits for a human: the round
    does not run, the run pauses with ``request`` (never seen by callers)."""

    def __init__(self, request: HumanRequest) -> None:
        super().__init__(request.reason)
        self.request = request


@dataclass(frozen=True, slots=True)
class AnswerWith:
    """The final answer a run makes once its loop stops (``answer_with=``): the model, and
    its settings for that call.

    ``response_format``: the answer is structured (see :func:`~toolloop.loop.final_answer`):
    a pydantic model class, a JSON schema, or a :class:`~toolloop.kernel.ToolStrategy` /
    :class:`~toolloop.kernel.ProviderStrategy`; checked when built
    (:class:`~toolloop.errors.ResponseFormatError`), held as its strategy.
    """

    model: ChatModel
    system_prompt: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    settings: ModelSettings | None = None
    response_format: ResponseFormat | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "response_format", output_schema(self.response_format))

    @property
    def strategy(self) -> ToolStrategy | ProviderStrategy | None:
        """The structured answer's strategy (``None``: the answer is text)."""
        return output_schema(self.response_format)

    def options(self) -> AnswerOptions:
        """Its settings as the answer's request options (:class:`AnswerOptions`)."""
        return {
            "system_prompt": self.system_prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "settings": self.settings,
        }


class RoundState(BaseModel):
    """A run's state: the design's round state (``done_plans``, ``last_round_records``,
    ``round_index``) and the run's other changing facts. It is all a snapshot carries."""

    done_plans: list[ToolExecutionRecord] = Field(default_factory=list)
    """Every record so far, in the order the commands were planned."""
    last_round_records: list[ToolExecutionRecord] = Field(default_factory=list)
    """The records of the last round only."""
    round_index: int = 0
    """How many rounds executed tools (the next round's index)."""
    notes: list[str] = Field(default_factory=list)
    """What normalization had to fix or drop, per round."""
    stop_reason: StopReason | None = None
    """Why the loop stopped, once it did."""
    planner_text: str | None = None
    """The text the planner's model wrote beside its last plan, if any."""
    usage: Usage | None = None
    """The run's model calls so far, summed (``None`` until one is counted)."""
    turns: list[PlannerTurn] | None = None
    """What the planner's model wrote in each executed round, when its replies keep a
    message (the tool-calling planner's): sent back as it was in the next rounds."""
    answer: str | None = None
    """The final answer, when the run made one (``answer_with=``)."""
    structured_response: Any = None
    """The structured final answer, when the run made one (``answer_with=`` with a
    ``response_format``): a model instance for a pydantic schema (its JSON data in a
    snapshot)."""
    results_cut: int = 0
    """How many results were longer than the run's ``max_result_chars``: shown cut to the
    planner, kept whole in ``done_plans`` (``read_result`` is offered once there is one)."""


class DurableHooks(Protocol):
    """What a durable run is told as the loop goes (see :mod:`toolloop.loop._durable`)."""

    async def checkpoint_round(self, ctx: Context[RoundState, Any]) -> None:
        """Before each round is planned: keep the rounds run so far."""

    def note_call(self, round_index: int, command: ToolCommand, position: int) -> None:
        """Before a command runs: its round and its position in the plan (its call id)."""

    def source_of(self, key: str) -> CallSource:
        """Where the record of call ``key`` came from (its journal may answer for it)."""

    async def on_pause(self, ctx: Context[RoundState, Any]) -> None:
        """As the run pauses for a human, before its snapshot is taken: keep the run as it
        waits (told as the kernel's ``CheckpointSaved``)."""


@dataclass(slots=True)
class LoopDeps:
    """A run's configuration and services: nothing here changes during the run (it is made
    for the run, and not frozen only because a frozen one costs more to make)."""

    user_input: str
    planner: PlannerLike
    registry: ToolRegistry
    executor: Executor
    max_rounds: int
    user_extra_requirement: str | None = None
    model_timeout: float | None = None
    """Seconds for each planner call (and the final answer's model call)."""
    max_commands: int = 64
    max_kwargs_bytes: int = 256 * 1024
    streaming_dispatch: bool = False
    available_tools: list[dict[str, Any]] = field(default_factory=list)
    scope: RunScope | None = None
    """What the tools that take a run context are told, the caller's ``deps`` with them
    (``None``: no tool takes one)."""
    durable: DurableHooks | None = None
    """What a durable run is told as it goes (``None``: a run without a store)."""
    answer: AnswerWith | None = None
    """The final answer the run makes once its loop stops (``None``: none)."""
    max_result_chars: int | None = 2000
    """Results longer than this are shown cut to the planner, with a handle
    (``"r:<index in done_plans>"``) that ``read_result`` reads by (``None``: no cut)."""


LoopContext = Context[RoundState, LoopDeps]


@dataclass(slots=True)
class Planned:
    """What PLAN hands to the next step: the decided plan, and for a streamed round the
    records its tools already came to (``None``: EXECUTE runs the commands)."""

    decided: NormalizedPlan
    records: list[ToolExecutionRecord] | None = None
    executed_at: float = 0.0
    """When the round's first tool call was submitted (``perf_counter``)."""
    pause: HumanRequest | None = None
    """What the run asks a human before the round runs (the round waits)."""


def _commit(
    state: RoundState,
    index: int,
    records: list[ToolExecutionRecord],
    ctx: LoopContext,
    sources: Sequence[int] | None = None,
) -> None:
    """Write one executed round's records into the state (``sources``: the position of
    each in the plan, when not its place), counting (and telling) the results too long to
    be shown whole."""
    first = len(state.done_plans)
    state.last_round_records = records
    state.done_plans.extend(records)
    state.round_index = index + 1
    limit = ctx.deps.max_result_chars
    if limit is None:
        return
    for k, record in enumerate(records):
        if not record.success or record.tool_name == READ_RESULT:
            continue
        value = record.result
        if value is None or type(value) in _SHORT or not longer_than(value, limit):
            continue
        state.results_cut += 1
        position = k if sources is None else sources[k]
        tell_kept(ctx, f"{index}.{position}", f"r:{first + k}", record.tool_name, value, limit)


_SHORT = frozenset((bool, float))
"""Results never longer than a limit (an int may be: a thousand digits)."""


def kept_result(state: RoundState, handle: str) -> str | None:
    """The whole text of the result of ``handle`` (``"r:<index in done_plans>"``)."""
    if not handle.startswith("r:"):
        return None
    at = handle[2:]
    if not at.isdigit():
        return None
    k = int(at)
    if k >= len(state.done_plans):
        return None
    record = state.done_plans[k]
    return result_text(record.result) if record.success else None


def _failed(exc: Exception, who: str, timeout: float | None) -> tuple[str, Exception]:
    """How a model call of the run (``who``) failed, in words, and the error to chain: past
    ``model_timeout``, a model call that failed, as in every product."""
    if isinstance(exc, TimeoutError) and timeout is not None:
        return f"did not finish within {timeout} s", model_timeout_error(who, timeout)
    return f"raised {type(exc).__name__}: {exc}", exc


def _planner_error(exc: Exception, index: int, deps: LoopDeps, state: RoundState) -> PlannerError:
    """The run's error for a planner call that raised ``exc`` (its cause), or that outlived
    ``model_timeout`` (the cause: a model call that failed, as in every product)."""
    what, exc = _failed(exc, "the planner", deps.model_timeout)
    error = PlannerError(
        f"the planner {what} in round {index}; the records made so far are kept in .done_plans",
        done_plans=state.done_plans,
        round_index=index,
        state=state,
    )
    error.__cause__ = exc
    return error


def _started(ctx: LoopContext, index: int, position: int, command: ToolCommand) -> None:
    """Tell that the call at ``position`` of round ``index`` started."""
    tell_call_started(ctx, index, position, f"{index}.{position}", command)


def _finished(
    ctx: LoopContext, index: int, position: int, record: ToolExecutionRecord, duration: float
) -> None:
    """Tell the record of the call at ``position`` of round ``index`` (and where it came
    from: a durable run's journal may have answered for it)."""
    key = f"{index}.{position}"
    durable = ctx.deps.durable
    source = "ran" if durable is None else durable.source_of(key)
    tell_call_finished(ctx, index, position, key, record, duration, source)


async def plan(_: Any, ctx: LoopContext) -> Planned:
    """PLAN: ask the planner (unless ``max_rounds`` is reached) and normalize its output."""
    state, deps = ctx.state, ctx.deps
    if state.round_index >= deps.max_rounds:
        return Planned(NormalizedPlan.of("response", stop_reason="max_turns"))
    if deps.durable is not None:
        await deps.durable.checkpoint_round(ctx)
    index = state.round_index
    if deps.scope is not None:
        deps.scope.round_index = index
    if ctx.observed:
        tell(ctx, RoundStarted, round_index=index)
    context = construct(  # every field given, each of the right type
        PlannerContext,
        {
            "user_input": deps.user_input,
            "user_extra_requirement": deps.user_extra_requirement,
            "available_tools": deps.available_tools
            if not state.results_cut or deps.max_result_chars is None
            else [*deps.available_tools, read_result_spec()],
            "done_plans": list(state.done_plans),
            "last_round_result": list(state.last_round_records),
            "round_index": index,
            "max_rounds": deps.max_rounds,
            "turns": tuple(state.turns) if state.turns else (),
            "max_result_chars": deps.max_result_chars,
        },
    )
    planner = deps.planner
    started = perf_counter()
    meter = current_meter()
    mark = meter.calls if meter is not None else 0
    if deps.streaming_dispatch and isinstance(planner, StreamingPlanner):
        return await _plan_streaming(ctx, planner, context, started, meter, mark)
    try:
        if deps.model_timeout is None:  # no cancel scope where no timeout is set
            raw = await call_planner(planner, context)
        else:
            with anyio.fail_after(deps.model_timeout):
                raw = await call_planner(planner, context)
    except UsageLimitError:
        raise  # the run ends as its caller chose (raise, or finish with what it has)
    except PauseForHuman as pause:  # the round waits for a human: it does not run
        return Planned(NormalizedPlan.of("response"), pause=pause.request)
    except Exception as exc:
        raise _planner_error(exc, index, deps, state)  # noqa: B904  # its cause is set
    decided = normalize_plan(
        raw, max_commands=deps.max_commands, max_kwargs_bytes=deps.max_kwargs_bytes
    )
    return Planned(_decided(ctx, raw, decided, started, meter, mark))


def _decided(
    ctx: LoopContext,
    raw: Any,
    decided: NormalizedPlan,
    started: float,
    meter: UsageMeter | None,
    mark: int,
) -> NormalizedPlan:
    """Note what the planner decided (notes, its text, the usage of its model calls, the
    reply it keeps for the next rounds) and tell the observers; the plan, with the stop
    reason ``refusal`` when the model refused."""
    state = ctx.state
    index = state.round_index
    notes = decided.notes
    reply: PlannerReply | None = None
    output = raw
    if isinstance(raw, PlannerReply):  # a model's reply: its output, and what came with it
        reply, output = raw, raw.output
        if reply.refusal is not None and decided.next_action == "response":
            decided = decided.model_copy(update={"stop_reason": "refusal"})
        if reply.message is not None and decided.next_action == "execute":
            _keep_turn(state, index, reply.message, decided.sources or range(len(decided.items)))
        if reply.notes:  # e.g. a reply cut off by max_tokens
            notes = [*notes, *reply.notes]
    used: Usage | None = None
    if meter is not None and meter.calls > mark:  # the planner called a model
        state.usage = meter.usage
        used = meter.since(mark)
    for note in notes:
        state.notes.append(f"round {index}: {note}")
    text = output.get("content") if isinstance(output, dict) else None
    if reply is not None and reply.refusal is not None:
        text = reply.refusal
    text = text if isinstance(text, str) and text.strip() else None
    if text != state.planner_text:  # (most planners write none: nothing to set)
        state.planner_text = text
    if ctx.observed:
        tell(
            ctx,
            PlanDecided,
            round_index=index,
            next_action=decided.next_action,
            commands=decided.commands,
            stop_reason=decided.stop_reason,
            notes=notes,
            duration=perf_counter() - started,
            short_circuited=reply is not None and reply.short_circuited,
            usage=used,
            reasoning=reply.reasoning.text or None
            if reply is not None and reply.reasoning is not None
            else None,
            refusal=reply.refusal if reply is not None else None,
        )
    return decided


def _keep_turn(
    state: RoundState, index: int, message: dict[str, Any], sources: Sequence[int]
) -> None:
    """Keep the planner's reply for the next rounds, each of its tool calls tied to the
    index its record will have in ``done_plans`` (records are committed in source order)."""
    first = len(state.done_plans)
    at = {source: first + k for k, source in enumerate(sources)}
    calls = message.get("tool_calls") or ()
    turn = PlannerTurn(
        round_index=index, message=message, records=[at.get(i) for i in range(len(calls))]
    )
    if state.turns is None:
        state.turns = []
    state.turns.append(turn)


async def _plan_streaming(
    ctx: LoopContext,
    planner: StreamingPlanner,
    context: PlannerContext,
    started: float,
    meter: UsageMeter | None,
    mark: int,
) -> Planned:
    """A streamed round: the batch is open while the plan streams; each command runs as
    soon as it is complete. Returns once every dispatched command has its record."""
    state, deps = ctx.state, ctx.deps
    index = state.round_index
    observed = ctx.observed
    items: dict[int, PlanItem] = {}  # by the command's place in the planner's list
    positions: list[int] = []  # the batch's k-th command is the planner's positions[k]
    executed_at = 0.0

    def on_start(k: int, command: ToolCommand) -> None:
        if observed:
            _started(ctx, index, positions[k], command)

    def on_finish(k: int, record: ToolExecutionRecord, duration: float) -> None:
        if observed:
            _finished(ctx, index, positions[k], record, duration)

    batch = deps.executor.batch(on_start=on_start, on_finish=on_finish, task_group=ctx.task_group)

    durable = deps.durable

    def add(position: int, item: PlanItem) -> None:
        nonlocal executed_at
        if position in items:
            return
        items[position] = item
        if isinstance(item, ToolCommand):
            positions.append(position)
            if not executed_at:
                executed_at = perf_counter()
            if durable is not None:
                durable.note_call(index, item, position)
            if deps.scope is not None:  # a tool's run context has its call's id
                deps.scope.name_call(item, f"{index}.{position}")
            batch.submit(item)
        elif observed:
            _finished(ctx, index, position, item, 0.0)

    def dispatch(position: int, raw: Any) -> None:
        try:
            item = normalize_command(position, raw, [], max_kwargs_bytes=deps.max_kwargs_bytes)
        except Exception:  # unreadable: the final normalization says why
            return
        if item is None:
            return  # dropped; the final normalization says why
        # counted as normalize_plan counts: every item kept so far, failed ones too
        if isinstance(item, ToolCommand) and len(items) >= deps.max_commands:
            item = over_limit(item, deps.max_commands)
        add(position, item)

    decided: NormalizedPlan | None = None
    paused: HumanRequest | None = None
    try:
        async with batch:
            try:
                with anyio.fail_after(deps.model_timeout):
                    raw = await planner.plan_streaming(context, dispatch)
            except UsageLimitError:
                raise  # the tools already dispatched run to their records, kept below
            except PauseForHuman as pause:  # the calls started run to their end, journaled
                paused = pause.request
            except Exception as exc:
                raise _planner_error(exc, index, deps, state)  # noqa: B904  # its cause is set
            if paused is not None:
                return Planned(NormalizedPlan.of("response"), pause=paused)
            decided = normalize_plan(
                raw, max_commands=deps.max_commands, max_kwargs_bytes=deps.max_kwargs_bytes
            )
            if decided.next_action == "execute":
                for source, item in zip(decided.sources, decided.items, strict=True):
                    add(source, item)
            elif items:
                # the tools already started: the round runs, and the planner sees them next
                notes = [
                    *decided.notes,
                    f"the plan ended with {decided.next_action!r} ({decided.stop_reason}) "
                    f"after {len(items)} commands had started: they run in this round",
                ]
                decided = decided.model_copy(update={"next_action": "execute", "notes": notes})
            if decided.next_action == "execute":
                order = sorted(items)
                decided = decided.model_copy(
                    update={
                        "items": [items[i] for i in order],
                        "sources": order,
                        "stop_reason": None,
                    }
                )
            decided = _decided(ctx, raw, decided, started, meter, mark)
    finally:
        # the round ran (maybe cut short): its records are kept, whatever happened; a round
        # that waits for a human runs again when it is answered (its journal answers for
        # the calls that ran)
        if items and paused is None:
            ran = dict(zip(positions, batch.results, strict=True))
            order = sorted(items)
            records = [ran.get(i) or items[i] for i in order]
            _commit(state, index, records, ctx, order)  # type: ignore[arg-type]  # records
    assert decided is not None  # the block ran to its end
    return Planned(decided, state.last_round_records if items else None, executed_at)


def route(planned: Planned) -> str:
    if planned.pause is not None:
        return "pause"
    decided = planned.decided
    return "execute" if decided.next_action == "execute" and decided.items else "finish"


async def await_human(planned: Planned, ctx: LoopContext) -> None:
    """Pause the run until a human decides on the round's calls (its request)."""
    request = planned.pause
    assert request is not None
    if ctx.deps.durable is not None:
        await ctx.deps.durable.on_pause(ctx)
    ctx.pause(HUMAN_EVENT, request.model_dump(mode="json"))


async def execute(planned: Planned, ctx: LoopContext) -> None:
    """EXECUTE: run the round's commands concurrently; one record per command, in order."""
    state = ctx.state
    observed = ctx.observed
    if planned.records is not None:  # a streamed round: its tools ran while it was planned
        index = state.round_index - 1
        records = planned.records
        duration = perf_counter() - planned.executed_at if planned.executed_at else 0.0
    else:
        index = state.round_index
        started = perf_counter()
        items = planned.decided.items
        # (a tool that takes a run context is told its call's id: a round of the mixed path)
        plain = not observed and ctx.deps.durable is None and ctx.deps.scope is None
        if plain:
            for item in items:
                if type(item) is not ToolCommand:  # a record of a command that cannot run
                    plain = False
                    break
        if not plain:
            records = await _execute_mixed(planned.decided, ctx)
        else:  # commands only, no one observing: the runner and nothing else
            records = []
            try:  # the batch's workers start in the run's own task group
                await ctx.deps.executor.run(
                    items,  # type: ignore[arg-type]  # commands only
                    results=records,
                    task_group=ctx.task_group,
                )
            finally:  # also when cancelled: the batch handed every command a record by now
                _commit(state, index, records, ctx)
        duration = perf_counter() - started
    if observed:
        tell(ctx, RoundFinished, round_index=index, records=records, duration=duration)


async def _execute_mixed(decided: NormalizedPlan, ctx: LoopContext) -> list[ToolExecutionRecord]:
    """A round with records of commands that could not run, or observed: events for each."""
    state, deps = ctx.state, ctx.deps
    index = state.round_index
    items = decided.items
    sources = decided.sources or list(range(len(items)))
    records: list[ToolExecutionRecord | None] = [None] * len(items)
    positions: list[int] = []
    commands: list[ToolCommand] = []
    for i, item in enumerate(items):
        if type(item) is ToolCommand:
            positions.append(i)
            commands.append(item)
        else:
            records[i] = item  # type: ignore[assignment]  # a command that could not run
    on_start: Callable[[int, ToolCommand], None] | None = None
    on_finish: Callable[[int, ToolExecutionRecord, float], None] | None = None
    if ctx.observed:

        def on_start(k: int, command: ToolCommand) -> None:
            _started(ctx, index, sources[positions[k]], command)

        def on_finish(k: int, record: ToolExecutionRecord, duration: float) -> None:
            _finished(ctx, index, sources[positions[k]], record, duration)

        for i, item in enumerate(items):
            if isinstance(item, ToolExecutionRecord):
                _finished(ctx, index, sources[i], item, 0.0)
    if deps.durable is not None:
        for k, command in enumerate(commands):
            deps.durable.note_call(index, command, sources[positions[k]])
    scope = deps.scope
    if scope is not None:  # a tool's run context has its call's id
        for k, command in enumerate(commands):
            scope.name_call(command, f"{index}.{sources[positions[k]]}")
    ran: list[ToolExecutionRecord] = []
    try:
        await deps.executor.run(
            commands,
            results=ran,
            on_start=on_start,
            on_finish=on_finish,
            task_group=ctx.task_group,
        )
    finally:  # also when cancelled: the batch handed every command a record by now
        for k, record in enumerate(ran):
            records[positions[k]] = record
        done = [r for r in records if r is not None]
        _commit(state, index, done, ctx, sources)
    return done


async def finish(planned: Planned, ctx: LoopContext) -> StopReason:
    """FINISH: say why the loop stopped; make the final answer when the run asks for one
    (its model call is the run's: counted, and held to its budget)."""
    state, deps = ctx.state, ctx.deps
    reason: StopReason = planned.decided.stop_reason or "answered"
    state.stop_reason = reason
    if deps.answer is not None:
        await _answer(state, deps, deps.answer, ctx.execution_id)
    return reason


async def _answer(state: RoundState, deps: LoopDeps, answer: AnswerWith, run_id: str) -> None:
    from ._answer import final_answer
    from ._results import LoopResult

    so_far = LoopResult.build(
        deps.user_input,
        state.done_plans,
        rounds=state.round_index,
        stop_reason=state.stop_reason,
        notes=state.notes,
        planner_text=state.planner_text,
        run_id=run_id,
    )
    try:
        with anyio.fail_after(deps.model_timeout):
            text = await final_answer(
                answer.model, so_far, **answer.options(), response_format=answer.strategy
            )
    except UsageLimitError:
        raise  # the run ends as its caller chose (raise, or finish with what it has)
    except StructuredOutputError as exc:  # its own words: what was expected, what came
        exc.done_plans = list(state.done_plans)
        exc.state = state
        raise
    except Exception as exc:
        what, cause = _failed(exc, "the final answer's model call", deps.model_timeout)
        error = AnswerError(
            f"the final answer's model call {what}; the loop had stopped "
            f"({state.stop_reason}), and its records are kept in .done_plans",
            done_plans=state.done_plans,
            state=state,
        )
        raise error from cause
    state.answer = str(text)
    state.structured_response = text.structured_response
    if text.cut_off:
        state.notes.append("the final answer was cut off by its token limit; raise max_tokens")


def _build() -> Flow[RoundState]:
    flow = Flow("plan_execute", state=RoundState)
    flow.start.to(plan)
    flow.step(plan).match(route, {"execute": execute, "finish": finish, "pause": await_human})
    flow.step(execute).to(plan)
    flow.step(finish).end()
    # a paused run answered in this process plans its round again: the journal replays the
    # plan, the decisions apply (a stored run is resumed from its checkpoint instead)
    flow.when(HUMAN_EVENT, external=True).to(plan)
    flow.validate()
    return flow


loop_flow: Flow[RoundState] = _build()
"""The loop's flow definition, shared by every run (runs are executions of it)."""
