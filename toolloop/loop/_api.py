"""The surface of the tool loop: ``async_plan_and_execute``, resume and recover, their sync
twins and their stream twins; every run driven by the kernel (:func:`toolloop.kernel.drive`)."""

from __future__ import annotations

import functools
import types
import uuid
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeAlias

from typing_extensions import Unpack

from .._errors import PlannerError, UsageLimitError
from ..checkpoints import HumanRequest
from ..flow import Execution
from ..kernel import (
    Backend,
    Ended,
    RunOptions,
    RunOverrides,
    RunStream,
    StopReason,
    answer_child,
    approval_rule,
    check_tool_names,
    cut_off_record,
    drive,
    option_hint,
    run_sync,
    stream_run,
)
from ..models import ChatModel
from ..planners import PlannerLike
from ..runner import Executor, ToolExecutionRecord
from ..tools import RunScope, Tool, ToolRegistry
from ._flow import AnswerWith, LoopDeps, RoundState, kept_result, loop_flow
from ._results import LoopResult

if TYPE_CHECKING:
    from ..checkpoints import CheckpointedRun, CheckpointStore

__all__ = [
    "LoopOptions",
    "LoopStream",
    "async_plan_and_execute",
    "async_recover_plan_and_execute",
    "async_resume_plan_and_execute",
    "plan_and_execute",
    "recover_plan_and_execute",
    "resume_plan_and_execute",
    "stream_plan_and_execute",
    "stream_recover_plan_and_execute",
    "stream_resume_plan_and_execute",
]

ToolsLike = ToolRegistry | Sequence[Tool | Callable[..., Any]]
AnswerLike = ChatModel | AnswerWith


def _settle(state: RoundState, stop: StopReason) -> None:
    """A run its timeout or budget finished mid-round: the calls it cut off say so, in the
    kernel's words."""
    last = state.last_round_records
    told = [cut_off_record(r, stop) for r in last]
    if any(a is not b for a, b in zip(last, told, strict=True)):
        cut = {id(a): b for a, b in zip(last, told, strict=True)}
        state.last_round_records = told
        state.done_plans = [cut.get(id(r), r) for r in state.done_plans]


class _Logic:
    """What the loop tells the kernel about its round state."""

    __slots__ = ()
    tool_step = "execute"

    def stop_reason(self, state: RoundState) -> StopReason | None:
        return state.stop_reason

    def records(self, state: RoundState) -> list[ToolExecutionRecord]:
        return state.done_plans

    def turns(self, state: RoundState) -> int:
        return state.round_index

    settle = staticmethod(_settle)
    kept = staticmethod(kept_result)


_LOGIC = _Logic()


def _answer_spec(answer_with: AnswerLike | None) -> AnswerWith | None:
    if answer_with is None or isinstance(answer_with, AnswerWith):
        return answer_with
    if not callable(getattr(answer_with, "stream", None)):
        raise TypeError(
            "answer_with must be a ChatModel (the final answer's model) or an AnswerWith, got "
            f"{type(answer_with).__name__}"
        )
    return AnswerWith(answer_with)


def _prepare(
    user_input: str,
    options: RunOptions,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    max_turns: int = 5,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    state: RoundState | None = None,
    run_id: str | None = None,
    answer: AnswerWith | None = None,
    elapsed: float = 0.0,
) -> Execution[RoundState]:
    if not isinstance(user_input, str):
        raise TypeError(f"user_input must be a str, got {type(user_input).__name__}")
    if isinstance(tools, ToolRegistry):
        registry = tools
        executor = _executor(registry, options)
    else:
        registry = ToolRegistry(tools)
        executor = options.tool_executor(registry)
    own = getattr(planner, "max_result_chars", None)  # a planner's own limit wins
    limit = own if isinstance(own, int) and not isinstance(own, bool) else options.max_result_chars
    check_tool_names(registry, limit)
    loop_deps = LoopDeps(
        user_input=user_input,
        planner=planner,
        registry=registry,
        executor=executor,
        max_rounds=max_turns,
        user_extra_requirement=user_extra_requirement,
        model_timeout=options.model_timeout,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        available_tools=registry.specs(),
        scope=RunScope("", options.deps) if registry.takes_context else None,
        answer=answer,
        max_result_chars=limit,
    )
    state = RoundState() if state is None else state
    return Execution(loop_flow, state, loop_deps, id=run_id, elapsed=elapsed)


_EXECUTORS: weakref.WeakKeyDictionary[ToolRegistry, Executor] = weakref.WeakKeyDictionary()
"""The last executor made for runs of a registry: the next runs with its limits share it."""


def _executor(registry: ToolRegistry, options: RunOptions) -> Executor:
    """The executor of a run of ``registry`` with ``options``: an executor is configuration
    only, so runs with the same limits share one (as the agents' runs share theirs)."""
    shared = _EXECUTORS.get(registry)
    executor = options.tool_executor(registry, reuse=shared)
    if executor is not shared:
        _EXECUTORS[registry] = executor
    return executor


def _drive(
    execution: Execution[RoundState],
    options: RunOptions,
    *,
    run: CheckpointedRun | None = None,
) -> Coroutine[Any, Any, LoopResult]:
    """One session of the run, through the kernel: await it for its result."""
    return drive(
        execution,
        None,  # the execution runs from the start (a paused one: from its journal)
        options,
        _LOGIC,
        result_of=_result_of,
        run=run,
        raised=_raised,
        max_result_chars=execution.deps.max_result_chars,
    )


def _result_of(ended: Ended[RoundState]) -> LoopResult:
    """The result of a session of the run."""
    state, stop, execution = ended.state, ended.stop_reason, ended.execution
    assert execution is not None  # (the kernel says which)
    if stop is not None and state.stop_reason != stop:  # a limit's finish: the state says so
        state.stop_reason = stop  # type: ignore[assignment]  # the loop's own reasons
    request = None
    if ended.status == "paused" and isinstance(ended.request, dict):
        request = HumanRequest.model_validate(ended.request)
    return LoopResult.build(
        execution.deps.user_input,
        state.done_plans,
        rounds=state.round_index,
        stop_reason=stop,  # type: ignore[arg-type]  # the loop's own reasons
        notes=state.notes,
        planner_text=state.planner_text,
        run_id=execution.id,
        request=request,
        usage=state.usage,
        text=state.answer,
        status=ended.status,
        structured_response=state.structured_response,
    )


def _raised(state: RoundState, exc: Exception) -> None:
    """What an error the run raises keeps of it: the records so far (a streamed round cut
    short too), and a spent budget's state and usage."""
    if isinstance(exc, PlannerError):
        exc.done_plans = list(state.done_plans)
    elif isinstance(exc, UsageLimitError):
        state.stop_reason = "usage_limit"
        exc.done_plans = list(state.done_plans)
        exc.state = state
        if not exc.estimated and state.usage is not None:  # an estimate is kept as it is
            exc.usage = state.usage


class LoopOptions(RunOverrides, total=False):
    """What a call of the loop takes besides its request, planner and tools: every run
    option of the kernel (:class:`~toolloop.kernel.RunOverrides`: ``concurrency``,
    ``timeout``, ``max_turns``, ``store``, ``streaming_dispatch``, ...) and the loop's own
    three (see :func:`async_plan_and_execute`)."""

    user_extra_requirement: str | None
    max_commands: int
    answer_with: AnswerLike | None


_OWN = ("user_extra_requirement", "max_commands", "answer_with")


_KNOWN = frozenset((*RunOverrides.__annotations__, *_OWN))
_OWN_NAMES = frozenset(_OWN)
_NONE_OWN: Mapping[str, Any] = types.MappingProxyType({})
"""The loop's own arguments of a call that gives none (read only)."""


def _split(given: Mapping[str, Any], verb: str) -> tuple[RunOptions, Mapping[str, Any]]:
    """The run options of a call (checked) and the loop's own arguments."""
    if not _KNOWN.issuperset(given):
        for name in given:
            if name not in _KNOWN:
                hint = option_hint(name, _KNOWN)
                raise TypeError(f"{verb}() got an unexpected keyword argument {name!r}{hint}")
    if _OWN_NAMES.isdisjoint(given):  # run options only
        return RunOptions.over_defaults(**given), _NONE_OWN
    own = {k: given[k] for k in _OWN if k in given}
    options = RunOptions.over_defaults(**{k: v for k, v in given.items() if k not in own})
    if "max_commands" in own and (
        not isinstance(own["max_commands"], int) or own["max_commands"] < 1
    ):
        raise ValueError(f"max_commands must be at least 1, got {own['max_commands']!r}")
    return options, own


async def async_plan_and_execute(
    user_input: str,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """Plan, execute tools, and plan again, round after round; return the results.

    Every option is a keyword argument. The run options are every product's, with the same
    names and defaults (:class:`~toolloop.kernel.RunOptions`); the last three are the
    loop's own.

    Args:
        user_input: the user's request, given to the planner every round.
        planner: decides each round (see :class:`~toolloop.planners.Planner`).
        tools: the tools the planner may call: typed functions, :class:`~toolloop.Tool`
            objects, or a :class:`~toolloop.tools.ToolRegistry`.
        **options: the run's options:

            - ``max_turns`` (5): at most this many rounds execute tools; checked before the
              planner is called, so no planner call is wasted (stop reason ``max_turns``).
            - ``concurrency`` (4): at most this many tool calls of this run at once;
              ``limiter``: a :class:`anyio.CapacityLimiter` shared by many runs (both hold).
            - ``timeout``: seconds for the whole run; every running planner call and tool
              is cancelled when it passes. ``on_timeout``: ``"raise"`` (the default)
              :class:`~toolloop.ExecutionTimeoutError` (its ``.state`` keeps the records),
              or ``"finish"``: return the result so far with ``stop_reason="timeout"``.
            - ``tool_timeout``: seconds for each tool call (a tool's own, smaller timeout
              wins); ``model_timeout``: seconds for each planner call (and the final
              answer's).
            - ``usage_limits``: the run's budget of model calls and tokens
              (:class:`~toolloop.models.UsageLimits`), checked before each model call (the
              final answer's too) and while a stream runs. ``on_usage_limit``:
              ``"raise"`` :class:`~toolloop.errors.UsageLimitError` (its ``.done_plans``
              keeps the records), or ``"finish"`` (``stop_reason="usage_limit"``).
            - ``store``: make the run durable: a
              :class:`~toolloop.checkpoints.CheckpointStore` (SQLite, PostgreSQL, ...) that
              keeps its round state after every round and the journal of its planner
              outputs and tool calls, so that :func:`async_recover_plan_and_execute`
              continues it if its process dies, and :func:`async_resume_plan_and_execute`
              when it paused (see the durability guide). ``run_id``: its id (a new one by
              default: ``result.run_id``).
            - ``needs_approval``: which calls wait for a human (needs ``store``): tool
              names, a mapping, a rule, or ``True`` (:data:`~toolloop.kernel.ApprovalSpec`).
              When a round plans one, the round waits and the run returns a result with
              ``paused`` true and ``result.request`` (a
              :class:`~toolloop.checkpoints.HumanRequest`).
            - ``unknown_outcome`` (``"fail"``): what a recovered run does with a call that
              started and has no recorded outcome (:data:`~toolloop.kernel.UnknownOutcome`:
              ``"fail"``, ``"retry"`` the ``idempotent_tools``, or ``"ask"`` a human).
            - ``deps``: your dependencies (a DB pool, an HTTP client...), handed to every
              tool that declares a :class:`~toolloop.tools.RunContext` parameter as
              ``ctx.deps``. ``on_event``: called with every event of the run, as it
              happens.
            - ``streaming_dispatch`` (``False``): with a planner that streams
              (``plan_streaming``, e.g. :class:`~toolloop.planners.StructuredPlanner`),
              start each command as soon as it is complete in the stream, while the rest of
              the plan is still written (a durable run too: a command that needs approval
              is held until it is answered).
            - ``user_extra_requirement``: more instructions for the planner.
            - ``max_commands`` (64): commands past this many in one round fail without
              running.
            - ``answer_with``: a :class:`~toolloop.models.ChatModel` (or an
              :class:`~toolloop.loop.AnswerWith` with its settings): once the loop stops,
              the run writes the final answer with it (:func:`~toolloop.loop.final_answer`)
              as its last model call, counted in ``result.usage`` and held to the budget;
              the answer is ``result.text``.

    Returns:
        The records, folded into ``prompt`` (``action_results``, ``extra_instruction``) and
        ``extra`` (``tool_logs``) when there are any; ``text``: the final answer with
        ``answer_with``, else the planner's text.

    Raises:
        PlannerError: the planner raised or timed out (``.done_plans`` keeps the records).
        AnswerError: the final answer's model call (``answer_with``) raised, refused or
            timed out (``.done_plans`` keeps the records).
        ExecutionTimeoutError: the run outlived ``timeout`` (with ``on_timeout="raise"``).
        UsageLimitError: the run passed ``usage_limits`` (with ``on_usage_limit="raise"``).
        CheckpointConflictError: the store already has a run ``run_id``.
        ValueError, TypeError: an option of the wrong kind or name (nothing ran).
    """
    session = _session(user_input, planner, tools, options)
    del options  # (the call's keywords, read: not held while the run goes on)
    return await session


def _session(
    user_input: str, planner: PlannerLike, tools: ToolsLike, options: Mapping[str, Any]
) -> Coroutine[Any, Any, LoopResult]:
    """The run :func:`async_plan_and_execute` asks for, checked and made: its session to
    await (a plain function, so that a run in progress holds no frame of it)."""
    opts, own = _split(options, "async_plan_and_execute")
    store, run_id = opts.store, opts.run_id
    if store is None and opts.needs_approval:
        raise ValueError(
            "needs_approval= pauses a durable run, which needs store= (a CheckpointStore)"
        )
    if store is not None and run_id is None:
        run_id = uuid.uuid4().hex
    execution = _prepare(
        user_input,
        opts,
        planner=planner,
        tools=tools,
        max_turns=opts.turns(5),
        user_extra_requirement=own.get("user_extra_requirement"),
        max_commands=own.get("max_commands", 64),
        streaming_dispatch=opts.streaming_dispatch,
        run_id=run_id,
        answer=_answer_spec(own.get("answer_with")),
    )
    if store is None:
        return _drive(execution, opts)
    approval_rule(opts.needs_approval, execution.deps.registry.names)  # refused before a write
    return _durable(execution, opts, store)


async def _durable(
    execution: Execution[RoundState], opts: RunOptions, store: CheckpointStore
) -> LoopResult:
    """A durable run: begun in ``store``, then its session."""
    from ._durable import DurableLoop, begin

    checkpointed = await begin(store, execution.id, execution.deps, opts)
    durable = DurableLoop(
        checkpointed, execution.state, opts, tool_names=execution.deps.registry.names
    )
    execution.deps = durable.wrap(execution.deps)
    return await _drive(execution, opts, run=checkpointed)


async def _continued(
    run_id: str,
    given: Mapping[str, Any],
    *,
    planner: PlannerLike,
    tools: ToolsLike,
    decision: object,
    force: bool,
    verb: str,
) -> LoopResult:
    """A stored run continued: a paused one with ``decision``, else one whose process died
    or that failed."""
    from ..checkpoints import CheckpointedRun, RunNotResumableError
    from ._durable import (
        DECISIONS,
        DurableLoop,
        approval_of_checkpoint,
        decision_of,
        journal_verdicts,
        resume_checkpoint,
        verdicts_data,
    )

    options, own = _split(given, verb)
    store = options.store
    if store is None:
        raise TypeError(f"{verb}() needs store= (the CheckpointStore that keeps run {run_id!r})")
    if options.run_id is not None and options.run_id != run_id:
        raise ValueError(
            f"run_id={options.run_id!r} names another run than the one continued "
            f"({run_id!r}); leave it out"
        )
    checkpoint = await CheckpointedRun.load(store, run_id)
    begun, state = resume_checkpoint(checkpoint)  # a run of the loop?
    if checkpoint.status == "completed":
        if decision is not None:
            raise RunNotResumableError(
                f"run {run_id!r} has completed, not paused: a decision has nothing to answer "
                "(was it answered already?); recover it without one for its result"
            )
        stored = LoopResult.model_validate(checkpoint.result)
        spec = _answer_spec(own.get("answer_with"))
        strategy = spec.strategy if spec is not None else None
        if strategy is None or stored.structured_response is None:
            return stored
        value = strategy.output.restore(stored.structured_response)
        return stored.model_copy(update={"structured_response": value})
    paused = checkpoint.status == "paused"
    if paused != (decision is not None):
        raise RunNotResumableError(
            f"run {run_id!r} is paused for a human: resume it with a decision (an answer to "
            "its request): async_resume_plan_and_execute(run_id, decision, ...)"
            if paused
            else f"run {run_id!r} is {checkpoint.status}, not paused: there is nothing to "
            "decide; recover it: async_recover_plan_and_execute(run_id, ...)"
        )
    if paused and await answer_child(store, checkpoint, decision):
        # it paused for its child: recovered, its call resumes the child with the decision
        verb = "async_recover_plan_and_execute"
        return await _continued(
            run_id, given, planner=planner, tools=tools, decision=None, force=False, verb=verb
        )
    options = approval_of_checkpoint(checkpoint, options)
    stored_turns = int(begun.get("max_turns", begun.get("max_rounds", 5)))
    execution = _prepare(
        str(begun.get("user_input", "")),
        options,
        planner=planner,
        tools=tools,
        max_turns=options.turns(stored_turns),
        user_extra_requirement=own.get(
            "user_extra_requirement", begun.get("user_extra_requirement")
        ),
        max_commands=own.get("max_commands", int(begun.get("max_commands", 64))),
        streaming_dispatch=options.streaming_dispatch,
        state=state,
        run_id=run_id,
        answer=_answer_spec(own.get("answer_with")),
        elapsed=checkpoint.snapshot.elapsed,  # its clock goes on from the time run before
    )
    registry = execution.deps.registry
    approval_rule(options.needs_approval, registry.names)  # refused before the run is claimed
    verdicts: Any = None
    if paused:
        decided = decision_of(checkpoint, decision, registry)
        asked = checkpoint.request if isinstance(checkpoint.request, dict) else {}
        verdicts = verdicts_data(decided, again=asked.get("kind") == "interrupted_tool_calls")
        # noted with the claim, so a process that dies before journaling them has them
        claimed = await CheckpointedRun.claim(
            store, checkpoint, expect=("paused",), event=DECISIONS, value=verdicts
        )
        decided_at = claimed.checkpoint.revision
    else:
        claimed = await CheckpointedRun.recover(store, checkpoint, force=force)
        if checkpoint.resume_event == DECISIONS:  # it may have died before journaling them
            verdicts = checkpoint.resume_value
        decided_at = checkpoint.revision
    try:
        journal = await claimed.journal()
        if verdicts is not None and await journal_verdicts(claimed, journal, decided_at, verdicts):
            journal = await claimed.journal()
        durable = DurableLoop(claimed, state, options, journal=journal, tool_names=registry.names)
        durable.count_journaled_usage()
    except BaseException:  # the run is given back as it was, to be continued
        await claimed.abandon()
        raise
    execution.deps = durable.wrap(execution.deps)
    return await _drive(execution, options, run=claimed)


async def async_resume_plan_and_execute(
    run_id: str,
    decision: object,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """Continue the durable run ``run_id`` that paused for a human, with their ``decision``:
    its round runs as decided (approved calls as they are, edited ones with the new
    arguments, rejected ones as failed records the planner sees), without running a finished
    tool call again.

    ``decision`` answers the run's request (``result.request``): one
    :class:`~toolloop.checkpoints.HumanDecision` for all its calls
    (:class:`~toolloop.checkpoints.Approve`, :class:`~toolloop.checkpoints.Edit` with new
    arguments by call id, :class:`~toolloop.checkpoints.Reject` with a message for the
    planner), its data, a bare kind (``"approve"``), or one per call
    (``{call_id: decision}``).

    ``store=`` is required: the store that keeps the run. The request comes from the stored
    run, and so do ``max_turns``, ``user_extra_requirement`` and ``max_commands`` unless
    given again; the tools and the planner are given again (they are code), and so is a
    ``needs_approval`` rule (names are kept with the run). The other options are those of
    :func:`async_plan_and_execute` (``timeout`` is this session's). A budget counts every
    model call the run made before it paused too, and so does ``result.usage``.

    Raises:
        RunNotFoundError: no run ``run_id`` in the store.
        RunNotResumableError: the run is not paused (recover it), a live worker runs it (or
            another caller resumed it first), or it is no run of the loop.
        DecisionError: the decision does not fit what the paused run asks.
        TypeError: no ``store=``, or no decision.
    """
    if decision is None:
        raise TypeError(
            "async_resume_plan_and_execute needs the human's decision (e.g. Approve()); a run "
            "whose process died is continued with async_recover_plan_and_execute"
        )
    return await _continued(
        run_id,
        options,
        planner=planner,
        tools=tools,
        decision=decision,
        force=False,
        verb="async_resume_plan_and_execute",
    )


async def async_recover_plan_and_execute(
    run_id: str,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    force: bool = False,
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """Continue the durable run ``run_id`` whose process died, or that failed, from its last
    round, without running a finished tool call again; a completed run gives its stored
    result and runs nothing.

    A call that started and has no recorded outcome (its process died while it ran: it may
    or may not have taken effect) follows ``unknown_outcome``: ``"fail"`` (a failed record
    that says so, for the planner to decide), ``"retry"`` (run it again if its tool is in
    ``idempotent_tools``), or ``"ask"`` (the run pauses and asks a human). Such a call is
    never run again silently. ``store=`` is required; the other options are those of
    :func:`async_resume_plan_and_execute`, and ``force``: take over a run marked running
    even if its owner may still run it.

    Raises:
        RunNotFoundError: no run ``run_id`` in the store.
        RunNotResumableError: the run is paused (resume it with a decision), a live worker
            runs it, or it is no run of the loop.
        TypeError: no ``store=``.
    """
    return await _continued(
        run_id,
        options,
        planner=planner,
        tools=tools,
        decision=None,
        force=force,
        verb="async_recover_plan_and_execute",
    )


def plan_and_execute(
    user_input: str,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    backend: Backend = "asyncio",
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """The sync twin of :func:`async_plan_and_execute`, for scripts (the same arguments,
    and ``backend``: the event loop it runs, ``"asyncio"`` or ``"trio"``).

    Runs its own event loop; from async code, ``await async_plan_and_execute(...)``.
    """
    call = functools.partial(
        async_plan_and_execute, user_input, planner=planner, tools=tools, **options
    )
    return run_sync(call, backend, name="plan_and_execute", instead="async_plan_and_execute")


def resume_plan_and_execute(
    run_id: str,
    decision: object,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    backend: Backend = "asyncio",
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """The sync twin of :func:`async_resume_plan_and_execute` (the same arguments, and
    ``backend``), for scripts."""
    call = functools.partial(
        async_resume_plan_and_execute, run_id, decision, planner=planner, tools=tools, **options
    )
    return run_sync(
        call, backend, name="resume_plan_and_execute", instead="async_resume_plan_and_execute"
    )


def recover_plan_and_execute(
    run_id: str,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    force: bool = False,
    backend: Backend = "asyncio",
    **options: Unpack[LoopOptions],
) -> LoopResult:
    """The sync twin of :func:`async_recover_plan_and_execute` (the same arguments, and
    ``backend``), for scripts."""
    call = functools.partial(
        async_recover_plan_and_execute, run_id, planner=planner, tools=tools, force=force, **options
    )
    return run_sync(
        call, backend, name="recover_plan_and_execute", instead="async_recover_plan_and_execute"
    )


LoopStream: TypeAlias = RunStream[LoopResult]
"""A run of the loop in progress (:class:`~toolloop.kernel.RunStream` of a
:class:`~toolloop.LoopResult`): iterate over its events; ``result`` once they ended."""


def stream_plan_and_execute(
    user_input: str,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    engine_events: bool = True,
    **options: Unpack[LoopOptions],
) -> AbstractAsyncContextManager[LoopStream]:
    """Run the loop beside the block and read its typed events as they happen::

        async with stream_plan_and_execute("...", tools=..., planner=...) as run:
            async for event in run:
                print(event.kind)
        print(run.result.action_results)

    Takes the arguments of :func:`async_plan_and_execute` (a durable run too: ``store=``;
    ``on_event`` is called with every event as well), and ``engine_events``: with
    ``False``, read only the run's own events (rounds, plans, model and tool calls, tool
    progress, checkpoints, a pause, the end), not the engine's (``step_started``, ...:
    :data:`~toolloop.kernel.ENGINE_EVENTS`). Leaving the block before the events ended
    cancels the run (``result`` then raises); an error of the run is raised when the block
    exits. Every product streams the same way (:func:`~toolloop.kernel.stream_run`). To
    keep an event as JSON (its results may be any Python value), use
    :func:`toolloop.tracing.dump_event`.
    """
    call = functools.partial(async_plan_and_execute, user_input, planner=planner, tools=tools)
    return stream_run(call, options, engine_events=engine_events)


def stream_resume_plan_and_execute(
    run_id: str,
    decision: object,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    engine_events: bool = True,
    **options: Unpack[LoopOptions],
) -> AbstractAsyncContextManager[LoopStream]:
    """The stream twin of :func:`async_resume_plan_and_execute` (the same arguments, and
    ``engine_events``), as :func:`stream_plan_and_execute` streams a run."""
    call = functools.partial(
        async_resume_plan_and_execute, run_id, decision, planner=planner, tools=tools
    )
    return stream_run(call, options, engine_events=engine_events)


def stream_recover_plan_and_execute(
    run_id: str,
    /,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    force: bool = False,
    engine_events: bool = True,
    **options: Unpack[LoopOptions],
) -> AbstractAsyncContextManager[LoopStream]:
    """The stream twin of :func:`async_recover_plan_and_execute` (the same arguments, and
    ``engine_events``), as :func:`stream_plan_and_execute` streams a run."""
    call = functools.partial(
        async_recover_plan_and_execute, run_id, planner=planner, tools=tools, force=force
    )
    return stream_run(call, options, engine_events=engine_events)
