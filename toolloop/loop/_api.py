"""The surface of the tool loop: ``async_plan_and_execute``, its sync twin, and a stream."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import sniffio

from .._errors import ExecutionTimeoutError, PlannerError, UsageLimitError
from ..flow import EventStream, Execution, FlowEvent
from ..models import UsageLimits, UsageMeter
from ..planners import PlannerLike
from ..runner import Executor, ToolCallEvent, ToolProgress
from ..tools import Progress, RunScope, Tool, ToolRegistry
from ._events import LoopEvent
from ._flow import LoopDeps, RoundState, loop_flow
from ._results import LoopResult, StopReason

__all__ = ["LoopStream", "async_plan_and_execute", "plan_and_execute", "stream_plan_and_execute"]

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
    usage_limits: UsageLimits | None = None,
    deps: Any = None,
) -> Execution[RoundState]:
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
    execution = loop_flow.execution(deps=loop_deps)
    if on_event is not None:
        execution.subscribe(on_event)
    scope = loop_deps.scope
    if scope is not None:
        scope.run_id = execution.id
        scope.report = _reporter(execution)
    return execution


def _reporter(execution: Execution[RoundState]) -> Callable[[Progress], None]:
    """A tool's progress as a :class:`ToolProgress` event of the run."""
    ctx = execution.context_for("execute")

    def report(progress: Progress) -> None:
        if ctx.observed:
            ctx.publish(
                ToolProgress(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=progress.round_index,
                    tool_name=progress.tool_name,
                    purpose=progress.purpose,
                    message=progress.message,
                    data=progress.data,
                )
            )

    return report


async def _run(
    execution: Execution[RoundState],
    timeout: float | None,
    on_timeout: Literal["raise", "finish"],
    on_usage_limit: Literal["raise", "finish"] = "raise",
) -> LoopResult:
    meter = UsageMeter(execution.deps.usage_limits)
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
        UsageLimitError: the run passed ``usage_limits`` (with ``on_usage_limit="raise"``).
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
    )
    meter = UsageMeter(usage_limits)
    scope = execution.deps.scope
    try:  # _run's body, inline: one frame less under every tool call
        with meter.active():
            if scope is None:
                done = await execution.run(timeout=timeout)
            else:
                with scope.active():
                    done = await execution.run(timeout=timeout)
    except Exception as exc:
        return _ended(execution, _stop_of(execution, exc, on_timeout, on_usage_limit, meter))
    return _ended(execution, done.value)


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
                tg.cancel_scope.cancel()
            await events.aclose()
    if failure:
        raise failure[0]
