"""Driving one run of any product: what happens around its flow, written once.

:func:`drive` runs (or resumes) one execution of a product's flow and does everything a run
has besides its turns: the caller's observer, the usage meter (seeded with what the run
spent before a pause or a crash, so a budget holds across them; every model call told as
``ModelCallStarted`` / ``ModelCallFinished``; its ``model_rate_limit`` and retry policy),
the retries and limiter changes of its calls told as ``RetryScheduled`` and
``RateLimitChanged``, the tools' run context, what a timeout or a
spent budget does (``on_timeout``, ``on_usage_limit``), the store's bookkeeping of a durable
run (paused, completed, failed, or left to be recovered; the calls its own end cut off
noted; its model replies kept for a replay: :data:`~toolloop.kernel.REPLAY_NOTE`), and the
``RunFinished`` event. The product builds its result from the :class:`Ended` session
(``result_of``); the store keeps a completed run's result as JSON, so that recovering a
completed run gives it back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .._errors import ExecutionTimeoutError, UsageLimitError
from ..checkpoints import CheckpointedRun, note_cut_off
from ..flow import Execution, FlowEvent, FlowResult
from ..models import FinishedCall, Usage, UsageMeter
from ..ratelimit import (
    RateLimitState,
    ScheduledRetry,
    current_observer,
    observe,
    stop_observing,
)
from ..runner import ToolExecutionRecord, json_safe, progress_reporter
from ..tools import RunScope
from ._child import (
    ChildRunPaused,
    child_of,
    count_in_parents,
    forward_to_parent,
    run_meter,
)
from ._events import (
    ModelCallFinished,
    ModelCallStarted,
    RateLimitChanged,
    RetryScheduled,
    RunFinished,
    tell,
)
from ._keep import Keeper
from ._options import RunOptions
from ._result import RunResult, RunStatus
from ._vocabulary import StopReason

__all__ = ["Ended", "TurnLogic", "drive", "finish_reason_of", "observe_runs"]

S = TypeVar("S")
R = TypeVar("R")
S_contra = TypeVar("S_contra", contravariant=True)


class TurnLogic(Protocol[S_contra]):
    """What a product tells the kernel about its runs' states."""

    tool_step: str
    """The step whose events a tool's progress (``ctx.report``) is told among."""

    def stop_reason(self, state: S_contra) -> StopReason | None:
        """Why a completed run stopped."""

    def records(self, state: S_contra) -> list[ToolExecutionRecord]:
        """The run's records so far."""

    def turns(self, state: S_contra) -> int:
        """The turns the run took so far."""

    def settle(self, state: S_contra, stop: StopReason) -> None:
        """The product's last word on a state that a timeout or a spent budget finished in
        the middle of a turn (``"finish"``), e.g. answering the calls it cut off: called
        once, before ``RunFinished`` counts the records and before the store keeps the
        result."""

    def kept(self, state: S_contra, handle: str) -> str | None:
        """The whole text of the run's result of a handle (``None``: no such result), read
        from its state: what the built-in ``read_result`` reads, in slices of at most the
        run's ``max_result_chars``."""


@dataclass(slots=True)
class Ended(Generic[S]):
    """How a session of a run ended: completed (with why), or paused (with what it asks)."""

    status: RunStatus
    state: S
    stop_reason: StopReason | None
    flow: FlowResult[S] | None = None
    """The engine's result; ``None`` when a limit ended the run with ``"finish"``."""
    request: Any = None
    """What a paused run asks (its pause's request, as the product wrote it)."""
    execution: Execution[S] | None = None
    """The execution of the run (set by :func:`drive`)."""


def finish_reason_of(options: RunOptions, failure: BaseException | None) -> StopReason | None:
    """The stop reason a run ends with instead of raising ``failure`` (``on_timeout`` and
    ``on_usage_limit`` set to ``"finish"``), or ``None`` when it raises."""
    if isinstance(failure, ExecutionTimeoutError):
        if options.on_timeout == "finish" and failure.step is None:
            return "timeout"
    elif isinstance(failure, UsageLimitError) and options.on_usage_limit == "finish":
        return "usage_limit"
    return None


_OBSERVERS: ContextVar[tuple[Callable[[FlowEvent], None], ...]] = ContextVar(
    "toolloop_run_observers", default=()
)


@contextmanager
def observe_runs(observer: Callable[[FlowEvent], None]) -> Iterator[None]:
    """Tell ``observer`` the events of every run of any product started in this block (in
    this task and the tasks it starts: a run's tools too), besides the run's own
    ``on_event``; a plain function, called inline, as ``on_event`` is.

    What a test harness uses to watch runs it does not start itself (a replay: see
    :func:`toolloop.testing.replay`); the events say which run they belong to
    (``execution_id``).
    """
    token = _OBSERVERS.set((*_OBSERVERS.get(), observer))
    try:
        yield
    finally:
        _OBSERVERS.reset(token)


class _ModelCalls:
    """The meter's observer: each model call of the run as its two events."""

    __slots__ = ("_execution",)

    def __init__(self, execution: Execution[Any]) -> None:
        self._execution = execution

    def call_started(self, index: int, attempt: int = 1) -> None:
        ctx = self._execution.context_for("model")
        tell(ctx, ModelCallStarted, call_index=index, attempt=attempt)

    def call_finished(self, call: FinishedCall) -> None:
        ctx = self._execution.context_for("model")
        reply, error = call.reply, call.error
        reasoning = reply.reasoning.text if reply.reasoning is not None else None
        request = call.request
        tell(
            ctx,
            ModelCallFinished,
            call_index=call.index,
            attempt=call.attempt,
            duration=call.duration,
            usage=call.usage,
            text=reply.text,
            reasoning=reasoning or None,
            reasoning_field=reply.reasoning.field if reply.reasoning and reasoning else None,
            refusal=reply.refusal,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
            ],
            finish_reason=reply.finish_reason,
            closed_early=call.closed_early and error is None,
            error=None if error is None else f"{type(error).__name__}: {error}",
            request=None if request is None else request.summary(),
        )


class _Limits:
    """The run's observer of retries and limiters: each as its event."""

    __slots__ = ("_execution",)

    def __init__(self, execution: Execution[Any]) -> None:
        self._execution = execution

    def retry_scheduled(self, retry: ScheduledRetry) -> None:
        tell(
            self._execution.context_for(retry.target),
            RetryScheduled,
            target=retry.target,
            tool_name=retry.name,
            call_index=retry.index,
            attempt=retry.attempt,
            wait=retry.wait,
            error=retry.error,
            status=retry.status,
            retry_after=retry.retry_after,
        )

    def rate_limit_changed(self, state: RateLimitState) -> None:
        assert state.reason is not None
        # the event is the limiter's state after the change, field for field
        tell(self._execution.context_for("rate_limit"), RateLimitChanged, **dict(state))


def _scope_of(deps: Any) -> RunScope | None:
    """The tools' run context of a run (its deps' ``scope``), made active for the run, its
    progress reports told as the run's events (``None``: no tool takes one)."""
    scope = getattr(deps, "scope", None)
    return scope if isinstance(scope, RunScope) else None


def _usage_of(state: Any) -> Usage | None:
    usage = getattr(state, "usage", None)
    return usage if isinstance(usage, Usage) else None


def _keep_usage(state: Any, meter: UsageMeter) -> None:
    if meter.calls or _usage_of(state) is not None:
        state.usage = meter.usage


async def drive(
    execution: Execution[S],
    start: Callable[[], Awaitable[FlowResult[S]]] | None,
    options: RunOptions,
    logic: TurnLogic[S],
    *,
    result_of: Callable[[Ended[S]], R],
    run: CheckpointedRun | None = None,
    raised: Callable[[S, Exception], None] | None = None,
    max_result_chars: int | None = None,
) -> R:
    """Run one session of ``execution`` (``start()`` runs or resumes it; ``None``: it runs
    from the start, under ``options.timeout``) as a run of the kernel (see the module docs).

    Args:
        logic: what the product tells of its states (stop reason, records, turns, its
            last word on a state a limit finished, its kept results); its tools' run
            context is its deps' ``scope``.
        result_of: the product's result of the session (the store keeps a completed one's
            as JSON data).
        run: the store's handle of a durable run: how the session ends is written there.
        raised: the product's last word on an error the run raises (e.g. the records so
            far, kept on it): called with the state and the error just before it is raised,
            once the store has noted the failure.
        max_result_chars: the limit the product's prompts cut results to (``None``:
            nothing is cut, nothing for ``read_result`` to read).

    Raises:
        Exception: whatever the run raised, unless ``options`` turn it into a finish (a
            timeout, a spent budget); the error keeps the run's state. A cancelled run
            stays ``running`` in the store, to be recovered.
    """
    scope = _scope_of(execution.deps)
    state = execution.state
    if scope is not None:  # a tool's ctx.report(...): a ToolProgress of the run
        scope.run_id = execution.id
        scope.report = progress_reporter(execution.context_for(logic.tool_step))
    if options.on_event is not None:
        execution.subscribe(options.on_event)
    for observer in _OBSERVERS.get():
        execution.subscribe(observer)
    spent = _usage_of(state)
    if run is not None and getattr(run.store, "keep_replies", False):  # for a replay
        execution.subscribe(Keeper(run, spent.requests if spent is not None else 0))
    child = child_of()  # a run as a tool of another run: linked to it
    unforward = None if child is None else forward_to_parent(execution, child)
    observed = execution.observed
    meter = run_meter(
        execution,
        options,
        child,
        logic.kept,
        max_result_chars,
        observer=_ModelCalls(execution) if observed else None,
    )
    if spent is not None:  # a resumed run: its budget counts what came before
        meter.usage = spent
        meter.started = spent.requests
        if child is not None:  # and so do its parents' (their calls of it are made again)
            count_in_parents(meter.parent, spent)
    closing = _Closing(execution, state, options, logic, meter)
    execution.on_close(closing)
    try:
        # the meter is entered and left by hand: a with block would hold its bound __exit__
        # for the whole run
        meter.__enter__()  # (the run's link too: see run_meter)
        # told to this run's observer, or to none (not to a run this one runs inside)
        told = None
        if observed or current_observer() is not None:
            told = observe(_Limits(execution) if observed else None)
        try:
            session = execution.run(timeout=options.timeout) if start is None else start()
            if scope is None:
                result = await session
            else:
                with scope.active():
                    result = await session
        finally:
            if told is not None:
                stop_observing(told)
            meter.__exit__()
            if unforward is not None:
                unforward()
    except Exception as exc:
        execution.on_close(None)  # (the hook refers to the execution: no cycle is left)
        _keep_usage(state, meter)
        stop = finish_reason_of(options, exc)
        if run is not None:
            await note_cut_off(run, exc)  # a timeout, an error: what ended the calls it ran
            if isinstance(exc, ChildRunPaused):
                return await _paused_for_child(execution, state, run, exc, result_of)
        if stop is None:
            if run is not None:
                await _fail(run, exc)
            if raised is not None:
                raised(state, exc)
            raise
        closing.finish(stop)
        ended = Ended("completed", state, stop, execution=execution)
        return await _completed(ended, result_of, run)
    except BaseException as exc:  # cancelled: the run stays "running", to be recovered
        execution.on_close(None)
        _keep_usage(state, meter)
        if run is not None:
            await note_cut_off(run, exc)
            await run.abandon()  # (its lease, with a leasing store, is given back)
        raise
    execution.on_close(None)
    _keep_usage(state, meter)
    if result.status == "paused":
        if run is not None:
            await run.pause(result)
        request = result.waiting[0].request if result.waiting else None
        return result_of(Ended("paused", state, None, result, request, execution))
    ended = Ended("completed", state, logic.stop_reason(state), result, execution=execution)
    if run is None:
        return result_of(ended)
    return await _completed(ended, result_of, run)


async def _paused_for_child(
    execution: Execution[S],
    state: S,
    run: CheckpointedRun,
    paused: ChildRunPaused,
    result_of: Callable[[Ended[S]], R],
) -> R:
    """A run whose child paused for a human pauses with the child's request: its store's
    checkpoint is its last one, ``paused``; resumed, it goes on from there (its call of the
    child is made again, and resumes the child)."""
    request = paused.request
    await run.pause_at(run.checkpoint.snapshot, request.model_dump(mode="json"))
    made = result_of(Ended("paused", state, None, None, None, execution))
    if isinstance(made, RunResult):  # (every product's result is one)
        made = made.model_copy(update={"status": "paused", "request": request})
    return made


@dataclass(slots=True, eq=False)
class _Closing(Generic[S]):
    """How a session of a run ends, for its observers (the execution's closing hook:
    ``RunFinished``), and the product's last word on a state that a limit finished in the
    middle of a turn (``settle``, called once)."""

    execution: Execution[S]
    state: S
    options: RunOptions
    logic: TurnLogic[S]
    meter: UsageMeter
    settled: bool = False

    def finish(self, stop: StopReason) -> None:
        """The run ends with ``stop`` instead of raising: the product's ``settle`` says its
        last word (once)."""
        if not self.settled:
            self.settled = True
            self.logic.settle(self.state, stop)

    def __call__(self, status: str, failure: Exception | None, at: float) -> Sequence[FlowEvent]:
        if status == "paused":
            return ()
        state = self.state
        logic = self.logic
        stop = logic.stop_reason(state) if status == "completed" else None
        if stop is None:
            stop = finish_reason_of(self.options, failure)
            if stop is None:
                return ()
            self.finish(stop)
        _keep_usage(state, self.meter)
        return (
            RunFinished(
                execution_id=self.execution.id,
                at=at,
                stop_reason=stop,
                records=len(logic.records(state)),
                usage=_usage_of(state),
                turns=logic.turns(state),
            ),
        )


async def _completed(
    ended: Ended[S], result_of: Callable[[Ended[S]], R], run: CheckpointedRun | None
) -> R:
    """The result of a completed session, kept by the store of a durable run."""
    made = result_of(ended)
    if run is not None:
        await run.complete(json_safe(made))
    return made


async def _fail(run: CheckpointedRun, exc: Exception) -> None:
    try:
        await run.fail(f"{type(exc).__name__}: {exc}")
    except Exception:  # the run's own error matters more than this write's
        run.release()
