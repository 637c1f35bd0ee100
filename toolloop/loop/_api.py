"""The surface of the tool loop: ``async_plan_and_execute``, its sync twin, and a stream."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import sniffio

from .._errors import ExecutionTimeoutError, PlannerError, UsageLimitError
from ..flow import EventStream, Execution, FlowEvent
from ..models import UsageLimits, UsageMeter
from ..planners import PlannerLike
from ..runner import Executor, ToolCallEvent, ToolProgress, progress_reporter
from ..tools import Progress, RunScope, Tool, ToolRegistry
from ._events import LoopEvent
from ._flow import LoopDeps, RoundState, loop_flow
from ._results import LoopResult, StopReason

if TYPE_CHECKING:
    from ..checkpoints import CheckpointStore

__all__ = [
    "LoopStream",
    "async_plan_and_execute",
    "async_resume_plan_and_execute",
    "plan_and_execute",
    "resume_plan_and_execute",
    "stream_plan_and_execute",
]

UnknownOutcome = Literal["fail", "retry"]

ToolsLike = ToolRegistry | Sequence[Tool | Callable[..., Any]]


def _prepare(
    user_input: str,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    max_rounds: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_event: Callable[[FlowEvent], None] | None = None,
    run_id: str | None = None,
    state: RoundState | None = None,
    usage_limits: UsageLimits | None = None,
    deps: Any = None,
    on_timeout: str = "raise",
    on_usage_limit: str = "raise",
) -> Execution[RoundState]:
    for name, value in (("on_timeout", on_timeout), ("on_usage_limit", on_usage_limit)):
        if value not in ("raise", "finish"):
            raise ValueError(f"{name} must be 'raise' or 'finish', got {value!r}")
    if not isinstance(user_input, str):
        raise TypeError(f"user_input must be a str, got {type(user_input).__name__}")
    if max_rounds < 0:
        raise ValueError(f"max_rounds must be 0 or more, got {max_rounds}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
        raise TypeError(
            f"usage_limits must be a toolloop.models.UsageLimits, got {type(usage_limits).__name__}"
        )
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    executor = Executor(
        registry, concurrency=concurrency, limiter=limiter, tool_timeout=tool_timeout
    )
    loop_deps = LoopDeps(
        user_input=user_input,
        planner=planner,
        registry=registry,
        executor=executor,
        max_rounds=max_rounds,
        user_extra_requirement=user_extra_requirement,
        planner_timeout=planner_timeout,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        available_tools=registry.specs(),
        usage_limits=usage_limits,
        deps=deps,
        scope=RunScope("", deps) if registry.takes_context else None,
    )
    if run_id is None:
        execution = loop_flow.execution(deps=loop_deps)
    else:
        execution = Execution(
            loop_flow, RoundState() if state is None else state, loop_deps, id=run_id
        )
    if on_event is not None:
        execution.subscribe(on_event)
    scope = loop_deps.scope
    if scope is not None:
        scope.run_id = execution.id
        scope.report = _reporter(execution)
    return execution


def _reporter(execution: Execution[RoundState]) -> Callable[[Progress], None]:
    """A tool's progress as a :class:`~toolloop.runner.ToolProgress` event of the run."""
    return progress_reporter(execution.context_for("execute"))


def _check_approval_names(names: Collection[str], registry: ToolRegistry) -> None:
    """A name in ``needs_approval=`` that is no tool of the run would let that tool run
    unapproved under its real name: refused."""
    if isinstance(names, str):
        raise TypeError(
            f"needs_approval= takes tool names (a list or set), not one str: "
            f"needs_approval=[{names!r}]"
        )
    unknown = sorted(n for n in names if n not in registry)
    if unknown:
        raise ValueError(
            f"needs_approval= names {unknown}, which are no tools of this run (its tools: "
            f"{registry.names}); a misspelt name would let the real tool run unapproved"
        )


async def _run(
    execution: Execution[RoundState],
    timeout: float | None,
    on_timeout: Literal["raise", "finish"],
    on_usage_limit: Literal["raise", "finish"] = "raise",
) -> LoopResult:
    meter = UsageMeter(execution.deps.usage_limits)
    if execution.state.usage is not None:  # a resumed run: its budget counts what came before
        meter.usage = execution.state.usage
    scope = execution.deps.scope
    try:
        with meter.active():
            if scope is None:
                done = await execution.run(timeout=timeout)
            else:
                with scope.active():
                    done = await execution.run(timeout=timeout)
    except Exception as exc:
        return _ended(execution, _stop_of(execution, exc, on_timeout, on_usage_limit, meter))
    return _ended(execution, done.value)


def _stop_of(
    execution: Execution[RoundState],
    exc: Exception,
    on_timeout: Literal["raise", "finish"],
    on_usage_limit: Literal["raise", "finish"],
    meter: UsageMeter,
) -> StopReason:
    """The stop reason of a run that raised ``exc``, or ``exc`` raised again."""
    state = execution.state
    if meter.calls:
        state.usage = meter.usage
    if isinstance(exc, ExecutionTimeoutError):
        if on_timeout == "raise" or exc.step is not None:
            raise exc
        return "timeout"
    if isinstance(exc, PlannerError):
        exc.done_plans = list(state.done_plans)  # a streamed round cut short too
    elif isinstance(exc, UsageLimitError):
        state.stop_reason = "usage_limit"
        exc.done_plans = list(state.done_plans)
        exc.state = state
        if not exc.estimated:  # an estimate of the closed reply is kept, not made unknown
            exc.usage = meter.usage
        if on_usage_limit == "finish":
            return "usage_limit"
    raise exc


def _ended(execution: Execution[RoundState], stop: StopReason) -> LoopResult:
    deps: LoopDeps = execution.deps
    state = execution.state
    return LoopResult.build(
        deps.user_input,
        state.done_plans,
        rounds=state.round_index,
        stop_reason=stop,
        notes=state.notes,
        planner_text=state.planner_text,
        run_id=execution.id,
        usage=state.usage,
    )


async def async_plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_rounds: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    store: CheckpointStore | None = None,
    run_id: str | None = None,
    needs_approval: Collection[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
) -> LoopResult:
    """Plan, execute tools, and plan again, round after round; return the results.

    Args:
        user_input: the user's request, given to the planner every round.
        tools: the tools the planner may call: typed functions, :class:`~toolloop.Tool`
            objects, or a :class:`~toolloop.tools.ToolRegistry`.
        planner: decides each round (see :class:`~toolloop.planners.Planner`).
        max_rounds: at most this many rounds execute tools; checked before the planner is
            called, so no planner call is wasted.
        concurrency: at most this many tool calls of this run at once.
        limiter: a :class:`anyio.CapacityLimiter` shared by many runs (both limits hold).
        timeout: seconds for the whole run; every running planner call and tool is cancelled
            when it passes.
        tool_timeout: seconds for each tool call (a tool's own, smaller timeout wins).
        planner_timeout: seconds for each planner call.
        user_extra_requirement: more instructions for the planner.
        max_commands: commands past this many in one round fail without running.
        streaming_dispatch: with a planner that streams (``plan_streaming``, e.g.
            :class:`~toolloop.planners.StructuredPlanner`), start each command as soon as
            it is complete in the stream, while the rest of the plan is still written.
        on_timeout: ``"raise"`` :class:`~toolloop.ExecutionTimeoutError` (its ``.state``
            keeps the records), or ``"finish"``: return the result so far with
            ``stop_reason="timeout"``.
        on_event: called with every event of the run, as it happens.
        store: make the run durable: a :class:`~toolloop.checkpoints.CheckpointStore`
            (SQLite, PostgreSQL, ...) that keeps its round state after every round and the
            journal of its planner outputs and tool calls, so that
            :func:`async_resume_plan_and_execute` continues it if its process dies (see
            the durability guide). Streaming dispatch is off in a durable run.
        run_id: the durable run's id (a new one by default: ``result.run_id``).
        needs_approval: names of tools whose calls wait for a human (needs ``store``):
            when a round plans one, the run pauses before the round runs and returns a
            result with ``paused`` true and ``result.request`` (a
            :class:`~toolloop.checkpoints.HumanRequest`'s data); resume it with
            :func:`async_resume_plan_and_execute` and ``decision=``, in any process.
        usage_limits: the run's budget of model calls and tokens
            (:class:`~toolloop.models.UsageLimits`), checked before each model call and
            while a stream runs (a stream that passes it is closed).
        on_usage_limit: ``"raise"`` :class:`~toolloop.errors.UsageLimitError` (its
            ``.done_plans`` keeps the records), or ``"finish"``: return the result so far
            with ``stop_reason="usage_limit"``.
        deps: your dependencies (a DB pool, an HTTP client...), handed to every tool that
            declares a :class:`~toolloop.tools.RunContext` parameter as ``ctx.deps``.

    Returns:
        The records, folded into ``prompt`` (``action_results``, ``extra_instruction``) and
        ``extra`` (``tool_logs``) when there are any.

    Raises:
        PlannerError: the planner raised or timed out (``.done_plans`` keeps the records).
        ExecutionTimeoutError: the run outlived ``timeout`` (with ``on_timeout="raise"``).
        CheckpointConflictError: the store already has a run ``run_id``.
        UsageLimitError: the run passed ``usage_limits`` (with ``on_usage_limit="raise"``).
    """
    if store is None and (run_id is not None or needs_approval):
        what = f"run_id={run_id!r} names" if run_id is not None else "needs_approval= pauses"
        raise ValueError(f"{what} a durable run, which needs store= (a CheckpointStore)")
    if store is not None and run_id is None:
        run_id = uuid.uuid4().hex
    execution = _prepare(
        user_input,
        tools=tools,
        planner=planner,
        max_rounds=max_rounds,
        concurrency=concurrency,
        limiter=limiter,
        tool_timeout=tool_timeout,
        planner_timeout=planner_timeout,
        user_extra_requirement=user_extra_requirement,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        on_event=on_event,
        usage_limits=usage_limits,
        deps=deps,
        run_id=run_id,
        on_timeout=on_timeout,
        on_usage_limit=on_usage_limit,
    )
    if needs_approval:
        _check_approval_names(needs_approval, execution.deps.registry)
    if store is None:
        meter = UsageMeter(usage_limits)
        scope = execution.deps.scope
        try:  # _run's body, inline: one frame less under every tool call
            meter.__enter__()  # not `with`: no bound __exit__ held while the run goes on
            try:
                if scope is None:
                    done = await execution.run(timeout=timeout)
                else:
                    with scope.active():
                        done = await execution.run(timeout=timeout)
            finally:
                meter.__exit__()
        except Exception as exc:
            return _ended(execution, _stop_of(execution, exc, on_timeout, on_usage_limit, meter))
        return _ended(execution, done.value)
    from ._durable import run_durable

    return await run_durable(
        execution,
        store,
        functools.partial(
            _run, timeout=timeout, on_timeout=on_timeout, on_usage_limit=on_usage_limit
        ),
        needs_approval=needs_approval,
    )


async def async_resume_plan_and_execute(
    run_id: str,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
    decision: object = None,
    force: bool = False,
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
) -> LoopResult:
    """Continue the durable run ``run_id`` (begun with ``store=``) whose process died, or
    that failed, or that paused for a human: from its last round, without running a
    finished tool call again.

    The request, ``max_rounds`` and the planner's extra requirement come from the stored
    run; the tools and the planner are given again (they are code). A run that completed
    returns its stored result and runs nothing. The arguments not listed below (``store``,
    ``tools``, ``planner``, ``concurrency``, ``limiter``, ``timeout``, ``tool_timeout``,
    ``planner_timeout``, ``on_timeout``, ``on_event``, ``usage_limits``, ``on_usage_limit``,
    ``deps``) are those of :func:`async_plan_and_execute`. A budget counts every model call
    the run made before it was resumed too, and so does ``result.usage``: the usage of a
    round's plan is journaled with the plan, that of a planner call that raised on its own,
    and that of the tools' model calls with the checkpoint of the next round (a call the
    crash itself cut off never reported what it cost, and is not counted).

    Args:
        unknown_outcome: what to do with a tool call that started and has no recorded
            outcome (its process died while it ran: it may or may not have taken effect).
            ``"fail"``: a failed record that says so, for the planner to decide;
            ``"retry"``: run it again if its tool is in ``idempotent_tools``, else as
            ``"fail"``. Such a call is never run again silently.
        idempotent_tools: names of the tools that are safe to run twice.
        decision: the answer to a paused run's request (``result.request``): one
            :class:`~toolloop.checkpoints.HumanDecision` for all its calls
            (:class:`~toolloop.checkpoints.Approve`, :class:`~toolloop.checkpoints.Edit`
            with new arguments by call id, :class:`~toolloop.checkpoints.Reject` with a
            message for the planner), its data, a bare kind (``"approve"``), or one per
            call (``{call_id: decision}``). Needed exactly when the run is paused.
        force: take over a run marked running even if its owner may still run it.

    Raises:
        RunNotFoundError: no run ``run_id`` in the store.
        RunNotResumableError: a live worker runs it (or another caller resumed it first),
            it is no run of the loop, or it is paused and no ``decision`` was given (or
            the other way round).
        DecisionError: the decision does not fit what the paused run asks.
    """
    from ..checkpoints import CheckpointedRun, RunNotResumableError
    from ._durable import answer_of, resume_checkpoint, run_durable

    checkpoint = await CheckpointedRun.load(store, run_id)
    if checkpoint.status == "completed":
        resume_checkpoint(checkpoint)  # a run of the loop?
        if decision is not None:
            raise RunNotResumableError(
                f"run {run_id!r} has completed, not paused: a decision has nothing to answer "
                "(was it answered already?); resume it without one for its result"
            )
        return LoopResult.model_validate(checkpoint.result)
    begun, state = resume_checkpoint(checkpoint)
    execution = _prepare(
        str(begun.get("user_input", "")),
        tools=tools,
        planner=planner,
        max_rounds=int(begun.get("max_rounds", 5)),
        concurrency=concurrency,
        limiter=limiter,
        tool_timeout=tool_timeout,
        planner_timeout=planner_timeout,
        user_extra_requirement=begun.get("user_extra_requirement"),
        max_commands=int(begun.get("max_commands", 64)),
        on_event=on_event,
        run_id=run_id,
        state=state,
        usage_limits=usage_limits,
        deps=deps,
        on_timeout=on_timeout,
        on_usage_limit=on_usage_limit,
    )
    paused = checkpoint.status == "paused"
    if paused != (decision is not None):
        raise RunNotResumableError(
            f"run {run_id!r} is paused for a human: resume it with decision= (an answer to "
            "its request)"
            if paused
            else f"run {run_id!r} is {checkpoint.status}, not paused: a decision has nothing "
            "to answer; resume it without one"
        )
    decisions = answer_of(checkpoint, decision, execution.deps.registry) if paused else None
    return await run_durable(
        execution,
        store,
        functools.partial(
            _run, timeout=timeout, on_timeout=on_timeout, on_usage_limit=on_usage_limit
        ),
        resume_from=checkpoint,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        decisions=decisions,
        force=force,
    )


def resume_plan_and_execute(
    run_id: str,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
    decision: object = None,
    force: bool = False,
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    backend: Literal["asyncio", "trio"] = "asyncio",
) -> LoopResult:
    """The sync twin of :func:`async_resume_plan_and_execute` (the same arguments, and
    ``backend``), for scripts."""
    _not_in_a_loop("resume_plan_and_execute", "async_resume_plan_and_execute")
    run = functools.partial(
        async_resume_plan_and_execute,
        run_id,
        store=store,
        tools=tools,
        planner=planner,
        concurrency=concurrency,
        limiter=limiter,
        timeout=timeout,
        tool_timeout=tool_timeout,
        planner_timeout=planner_timeout,
        on_timeout=on_timeout,
        on_event=on_event,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        decision=decision,
        force=force,
        usage_limits=usage_limits,
        on_usage_limit=on_usage_limit,
        deps=deps,
    )
    return anyio.run(run, backend=backend)


def _not_in_a_loop(name: str, twin: str) -> None:
    try:
        running = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        running = None
    if running is not None:
        raise RuntimeError(
            f"{name}() was called inside a running {running} event loop; "
            f"use `await {twin}(...)` there"
        )


def plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_rounds: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    store: CheckpointStore | None = None,
    run_id: str | None = None,
    needs_approval: Collection[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    backend: Literal["asyncio", "trio"] = "asyncio",
) -> LoopResult:
    """The sync twin of :func:`async_plan_and_execute`, for scripts (the same arguments,
    and ``backend``: the event loop it runs, ``"asyncio"`` or ``"trio"``).

    Runs its own event loop; from async code, ``await async_plan_and_execute(...)``.
    """
    try:
        running = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        running = None
    if running is not None:
        raise RuntimeError(
            f"plan_and_execute() was called inside a running {running} event loop; "
            "use `await async_plan_and_execute(...)` there"
        )
    run = functools.partial(
        async_plan_and_execute,
        user_input,
        tools=tools,
        planner=planner,
        max_rounds=max_rounds,
        concurrency=concurrency,
        limiter=limiter,
        timeout=timeout,
        tool_timeout=tool_timeout,
        planner_timeout=planner_timeout,
        user_extra_requirement=user_extra_requirement,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        on_timeout=on_timeout,
        on_event=on_event,
        store=store,
        run_id=run_id,
        needs_approval=needs_approval,
        usage_limits=usage_limits,
        on_usage_limit=on_usage_limit,
        deps=deps,
    )
    return anyio.run(run, backend=backend)


_LOOP_EVENTS = (LoopEvent, ToolCallEvent, ToolProgress)


class LoopStream:
    """A run in progress: iterate over its events; ``result`` is set once it is over."""

    def __init__(self, events: EventStream, *, loop_only: bool = False) -> None:
        self._events = events
        self._result: LoopResult | None = None
        self._exhausted = False
        self._left_early = False
        self._loop_only = loop_only

    def __aiter__(self) -> LoopStream:
        return self

    async def __anext__(self) -> FlowEvent:
        try:
            while True:
                event = await self._events.__anext__()
                if not self._loop_only or isinstance(event, _LOOP_EVENTS):
                    return event
        except StopAsyncIteration:
            self._exhausted = True
            raise

    @property
    def result(self) -> LoopResult:
        """The run's result (after the events ended)."""
        if self._result is None:
            if self._left_early:
                raise RuntimeError(
                    "the run was cancelled when its block was left before its events ended, "
                    "so it has no result; read the events to the end inside the block"
                )
            raise RuntimeError("the run has not finished; read its events to the end first")
        return self._result


@asynccontextmanager
async def stream_plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_rounds: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    planner_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    loop_events_only: bool = False,
) -> AsyncIterator[LoopStream]:
    """Run the loop in the background and read its typed events as they happen::

        async with stream_plan_and_execute("...", tools=..., planner=...) as run:
            async for event in run:
                print(event.kind)
        print(run.result.action_results)

    Takes the arguments of :func:`async_plan_and_execute`, and ``loop_events_only``: read
    only the loop's own events (rounds, plans, tool calls, the end), not the engine's
    (``step_started``, ...). Leaving the block early cancels the run; an error of the run
    is raised when the block exits. To keep an event as JSON (its results may be any Python
    value), use :func:`toolloop.tracing.dump_event`.
    """
    execution = _prepare(
        user_input,
        tools=tools,
        planner=planner,
        max_rounds=max_rounds,
        concurrency=concurrency,
        limiter=limiter,
        tool_timeout=tool_timeout,
        planner_timeout=planner_timeout,
        user_extra_requirement=user_extra_requirement,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        on_event=on_event,
        usage_limits=usage_limits,
        deps=deps,
        on_timeout=on_timeout,
        on_usage_limit=on_usage_limit,
    )
    events = execution.events()
    stream = LoopStream(events, loop_only=loop_events_only)
    failure: list[BaseException] = []

    async def drive() -> None:
        try:
            stream._result = await _run(execution, timeout, on_timeout, on_usage_limit)
        except Exception as exc:
            failure.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive)
        try:
            yield stream
        finally:
            if not stream._exhausted:  # left early: the run is not wanted any more
                stream._left_early = True
                tg.cancel_scope.cancel()
            await events.aclose()
    if failure:
        raise failure[0]
