"""One run of a flow: its state, its trace, its observers, its task group."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import math
import os
from collections.abc import Callable, Coroutine, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from .._errors import (
    ExecutionError,
    ExecutionStalledError,
    ExecutionTimeoutError,
    FlowDefinitionError,
    ResumeError,
    StepFailedError,
)
from ._context import Context
from ._events import (
    EventEmitted,
    ExecutionFailed,
    ExecutionFinished,
    ExecutionPaused,
    ExecutionStarted,
    FlowEvent,
)
from ._result import EventStream, FlowResult
from ._snapshot import FlowSnapshot, Wait
from ._trace import RawEntry, TraceEntry, materialize

if TYPE_CHECKING:
    from ._flow import Flow
    from ._nodes import Node, StepNode

__all__ = ["Execution", "ExecutionStatus"]

_LOG = logging.getLogger("toolloop")


Closing = Callable[[str, "Exception | None", float], "Sequence[FlowEvent]"]
"""``closing(status, failure, at)``: the events to publish as an execution's session ends,
``at`` seconds into it (see :meth:`Execution.on_close`)."""


def _is_async_callable(callback: Any) -> bool:
    return inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
        getattr(callback, "__call__", None)  # noqa: B004 - async callable objects
    )


def _name_of(callback: Any) -> str:
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    module = getattr(callback, "__module__", None) or type(callback).__module__
    return f"{module}.{name}" if module else str(name)


def _seed() -> None:
    global _PREFIX, _COUNT
    _PREFIX = os.urandom(8).hex()
    _COUNT = itertools.count(int.from_bytes(os.urandom(4), "big") << 32)


_PREFIX = ""
_COUNT = itertools.count()
_seed()
os.register_at_fork(after_in_child=_seed)  # a forked worker never repeats its parent's ids


def new_execution_id() -> str:
    """A fresh id of 32 hex digits, unique across processes and time like a random UUID:
    64 random bits per process (drawn again in a forked child) and a counter."""
    return f"{_PREFIX}{next(_COUNT) & 0xFFFFFFFFFFFFFFFF:016x}"


S = TypeVar("S")


_NO_GROUP = contextlib.nullcontext()
"""What a chain that is no session's enters instead of the session's task group."""

_NO_WAITS: list[Wait] = []
"""The waits of an execution that waits for nothing: shared, so never changed in place
(an execution replaces its list when it pauses; it deletes only from a list it made)."""

ExecutionStatus = Literal["new", "running", "completed", "paused", "failed", "cancelled"]


class Execution(Generic[S]):
    """One run of a :class:`Flow`: cheap to make, used once (and again to resume a pause).

    Made by :meth:`Flow.execution` or :meth:`Flow.restore`; run with :meth:`run`.
    ``elapsed``: the seconds the run had run before (a run continued in a new execution):
    its events' ``at`` and its trace's times go on from there.
    """

    __slots__ = (
        "_closers",
        "_closing",
        "_collected",
        "_done",
        "_elapsed_before",
        "_failure",
        "_flow",
        "_live",
        "_observers",
        "_pausing",
        "_result",
        "_t0",
        "_tg",
        "_trace",
        "_waits",
        "deps",
        "id",
        "state",
        "status",
    )

    def __init__(
        self,
        flow: Flow[S],
        state: S,
        deps: Any = None,
        id: str | None = None,
        *,
        elapsed: float = 0.0,
    ) -> None:
        self._flow = flow
        self.state: S = state
        self.deps: Any = deps
        self.id: str = id or new_execution_id()
        self.status: ExecutionStatus = "new"
        self._trace: list[RawEntry] = []
        self._live = 0
        # replaced, never changed in place: cheap to iterate while callbacks subscribe
        self._observers: tuple[Callable[[FlowEvent], None], ...] = ()
        self._closers: tuple[Callable[[], None], ...] = ()
        self._closing: Closing | None = None
        self._collected: dict[str, dict[str, Any]] | None = None  # made by a join
        self._waits: list[Wait] = _NO_WAITS  # shared while empty: replaced, never changed
        self._tg: TaskGroup | None = None
        self._done = False
        self._result: Any = None
        self._failure: ExecutionError | None = None
        self._pausing: tuple[str, Any] | None = None
        """What :meth:`pause` waits for and asks, when it ended the session."""
        self._t0 = 0.0
        self._elapsed_before = elapsed

    # -- public -------------------------------------------------------------------------

    @property
    def flow(self) -> Flow[S]:
        return self._flow

    @property
    def trace(self) -> list[TraceEntry]:
        """What ran so far, in the order it finished (a copy)."""
        return materialize(self._trace)

    @property
    def waiting(self) -> list[Wait]:
        """The external events a paused execution waits for."""
        return list(self._waits)

    @property
    def observed(self) -> bool:
        """Whether anyone listens to the execution's events."""
        return bool(self._observers)

    def on_close(self, closing: Closing | None) -> None:
        """Call ``closing(status, failure, at)`` as each session of the execution ends, while
        its observers still listen: the events it returns are published before the
        engine's last one (``ExecutionFinished``, ``ExecutionPaused`` or ``ExecutionFailed``).
        ``status`` is ``completed``, ``paused`` or ``failed`` (then ``failure`` is the error
        about to be raised); ``at`` is the time of the engine's last event. Called only when
        someone observes the execution; one hook per execution (a later call replaces it,
        ``None`` removes it)."""
        self._closing = closing

    def run(
        self, value: Any = None, *, timeout: float | None = None
    ) -> Coroutine[Any, Any, FlowResult[S]]:
        """Run from the start with ``value``: ``await execution.run(...)``.

        Args:
            value: what the steps chained after ``flow.start`` receive.
            timeout: seconds for the whole execution; past it every step is cancelled and
                :class:`~toolloop.ExecutionTimeoutError` (with the trace so far) is raised.

        Returns:
            The result: ``completed`` with the value that reached the end, or ``paused``
            with what it waits for and a snapshot.

        Raises:
            StepFailedError: a step raised (the cause is chained; trace and state are kept).
            ExecutionTimeoutError: the execution or one step ran out of time.
            ExecutionStalledError: nothing was left to run, but no end was reached.
        """
        if self.status != "new":
            raise ResumeError(
                f"execution {self.id} is {self.status}; an execution runs once "
                "(make another with flow.execution(), or resume() a paused one)"
            )
        if not self._flow._valid:
            self._flow.validate()
        self.status = "running"  # claimed now: a second run() is refused at once
        session = self._drive(self._flow._start, value, "start", session=True, timeout=timeout)
        return session  # type: ignore[return-value]  # a session's outcome: a FlowResult

    async def resume(
        self, event: str, value: Any = None, *, timeout: float | None = None
    ) -> FlowResult[S]:
        """Continue a paused execution with the external ``event`` it waits for."""
        if self.status != "paused":
            raise ResumeError(
                f"execution {self.id} is {self.status}, not paused; only a paused execution "
                "can be resumed"
            )
        if not self._take_wait(event):
            raise ResumeError(
                f"execution {self.id} waits for {[w.event for w in self._waits]}, not for {event!r}"
            )
        node = self._flow._events.get(event)
        if node is None:  # validated flows handle every external event they declare
            raise ResumeError(f"flow {self._flow.name!r} has no handler for {event!r}")
        outcome = await self._drive(node, value, event, session=True, timeout=timeout)
        return outcome  # type: ignore[return-value]  # a session's outcome: a FlowResult

    def emit(self, event: str, value: Any = None) -> None:
        """Send an external event into a running execution (from outside its steps)."""
        node = self._flow._events.get(event)
        if node is None or not getattr(node, "external", False):
            raise FlowDefinitionError(
                f"{event!r} is not an external event of flow {self._flow.name!r}; declare it "
                f"with flow.when({event!r}, external=True)"
            )
        if self.status != "running":
            raise ResumeError(
                f"execution {self.id} is {self.status}; emit() reaches a running execution, "
                "resume() a paused one"
            )
        self._take_wait(event)
        self._emit(event, value, by=None)

    def _take_wait(self, event: str) -> bool:
        """Strike the first wait for ``event``; whether there was one."""
        for i, wait in enumerate(self._waits):
            if wait.event == event:
                del self._waits[i]
                return True
        return False

    def fail(self, error: ExecutionError) -> None:
        """End the running execution with ``error`` (its session raises it), cancelling
        what still runs: for a task of the execution whose own errors go elsewhere (a tool
        call's become its record), when the whole run must end (a run as a tool that spent
        its parent's budget). Nothing happens once the execution ended."""
        self._fail(error)

    def pause(self, error: ExecutionError, *, waiting_for: str, request: Any) -> None:
        """End the running execution paused, from a task of it: as :meth:`fail` (its
        session raises ``error``, for its caller to keep the pause; what still runs is
        cancelled), but its status is ``paused`` and its observers are told
        ``ExecutionPaused`` (``waiting_for``, ``request``), not ``ExecutionFailed``: a pause
        decided outside the flow's own waits (a run as a tool that paused for a human
        pauses the run that called it). Nothing happens once the execution ended."""
        if self._failure is None and not self._done:
            self._pausing = (waiting_for, request)
        self._fail(error)

    def snapshot(self) -> FlowSnapshot:
        """A JSON-ready picture of a paused (or finished) execution."""
        if self.status == "running":
            raise ResumeError(f"execution {self.id} is running; snapshot it when it pauses")
        return FlowSnapshot(
            flow=self._flow.name,
            execution_id=self.id,
            state=self._flow._dump_state(self.state),
            waiting=list(self._waits),
            trace=materialize(self._trace),
            elapsed=self._elapsed_before,
        )

    def subscribe(self, callback: Callable[[FlowEvent], None]) -> Callable[[], None]:
        """Call ``callback`` with every event, inline; returns a function that unsubscribes.

        The callback must be a quick plain function. If it raises, the run goes on: the
        error is logged (logger ``toolloop``, naming the callback) and the callback keeps
        receiving events. To handle events with ``await``, read :meth:`events` instead.

        Raises:
            TypeError: ``callback`` is an ``async`` function (it would never be awaited).
        """
        if _is_async_callable(callback):
            raise TypeError(
                f"the event callback {_name_of(callback)} is async, but callbacks are called "
                "inline and never awaited; pass a plain function, or read the events with "
                "`async for` (execution.events(), or stream_plan_and_execute(...))"
            )
        self._observers = (*self._observers, callback)

        def unsubscribe() -> None:
            if callback in self._observers:
                observers = list(self._observers)
                observers.remove(callback)
                self._observers = tuple(observers)

        return unsubscribe

    def events(self, *, buffer: float = math.inf) -> EventStream:
        """An async stream of this execution's events, to read while it runs.

        Subscribe before the run starts to see every event. The stream ends when the
        execution completes, pauses, fails or is cancelled.
        """
        send: MemoryObjectSendStream[FlowEvent]
        send, receive = anyio.create_memory_object_stream[FlowEvent](buffer)
        if self.status in ("completed", "failed", "cancelled"):
            send.close()
            return EventStream(receive, lambda: None)

        def forward(event: FlowEvent) -> None:
            try:
                send.send_nowait(event)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # a full or abandoned subscriber never stalls the execution

        def close() -> None:
            unsubscribe()
            send.close()

        unsubscribe = self.subscribe(forward)
        self._closers = (*self._closers, close)
        return EventStream(receive, close)

    # -- the run ------------------------------------------------------------------------

    def _outcome(self, timeout: float | None, cancelled: bool) -> FlowResult[S]:
        elapsed = self._elapsed_before
        failure = self._failure
        if failure is None and not self._done and cancelled and timeout is not None:
            failure = ExecutionTimeoutError(
                f"execution of flow {self._flow.name!r} did not finish within {timeout} s; "
                f"every running step was cancelled ({len(self._trace)} steps had run)",
                timeout=timeout,
                state=self.state,
            )
        if failure is None and not self._done and not self._waits:
            last = self._trace[-1][0] if self._trace else "start"
            failure = ExecutionStalledError(
                f"execution of flow {self._flow.name!r} ran out of steps without reaching "
                f"an end (last step: {last!r}); route every branch to .end() or add an "
                "else_/default",
                state=self.state,
            )
        pausing, self._pausing = self._pausing, None
        if failure is not None and pausing is not None:  # ended paused by a task (pause())
            failure.trace = materialize(self._trace)
            self._paused(elapsed, [pausing[0]], [pausing[1]])
            raise failure
        if failure is not None:
            self.status = "failed"
            failure.trace = materialize(self._trace)  # the whole story, cancellations too
            if self._observers:
                self._closed("failed", failure, elapsed)
                self._publish(
                    ExecutionFailed(
                        execution_id=self.id, at=elapsed, duration=elapsed, error=str(failure)
                    )
                )
            self._close_observers()
            raise failure
        if self._done:
            self.status = "completed"
            if self._observers:
                self._closed("completed", None, elapsed)
                self._publish(ExecutionFinished(execution_id=self.id, at=elapsed, duration=elapsed))
            if self._closers:
                self._close_observers()
            return FlowResult("completed", self._result, self.state, self._trace, self.id)
        self._paused(elapsed, [w.event for w in self._waits], [w.request for w in self._waits])
        return FlowResult(
            "paused",
            None,
            self.state,
            list(self._trace),
            self.id,
            waiting=list(self._waits),
            snapshot=self.snapshot(),
        )

    async def _drive(
        self,
        node: Node,
        value: Any,
        trigger: str,
        *,
        session: bool = False,
        timeout: float | None = None,
    ) -> FlowResult[S] | None:
        """Run ``node`` and what follows it in this task; spawn only for fan-out. A step
        without a timeout runs here in its parts, awaiting its function's own awaitable (as
        its :meth:`~StepNode.run` does); any other node runs whole.

        The one chain driver, of the session's chain too: for a ``session`` (:meth:`run`,
        :meth:`resume`, with its ``timeout``), it opens the execution's task group around
        the chain and returns the session's outcome; a chain of a fan-out or of an event
        runs in that group, and returns nothing."""
        if session:
            self._opened()
        try:
            group: TaskGroup | None
            async with anyio.create_task_group() if session else _NO_GROUP as group:
                if group is not None:
                    self._tg = group
                    if timeout is not None:
                        group.cancel_scope.deadline = anyio.current_time() + timeout
                self._live += 1
                try:
                    while not self._done:
                        if node.direct:
                            step: StepNode = node  # type: ignore[assignment]  # only steps are
                            started = step.begin(self, trigger)
                            try:
                                value = step._start(self, value)
                                if step.awaits:
                                    value = await value
                            except BaseException as exc:
                                error = step.failure(self, started, trigger, exc)
                                if error is None:
                                    raise
                                raise error from error.__cause__
                            step._succeeded(self, started, trigger)
                            nodes: Sequence[Node] = step.out
                        elif node.sync:  # it decides at once: no coroutine of its own
                            nodes, value = node.advance(self, value, trigger)
                        else:
                            nodes, value = await node.run(self, value, trigger)
                        if not nodes:
                            break
                        if not node.passthrough:  # routers pass on the trigger they got
                            trigger = node.name
                        if len(nodes) > 1:
                            self._fan_out(nodes[1:], value, trigger)
                        node = nodes[0]  # the first of the next nodes runs in this task
                except Exception as exc:
                    self._broke(node, exc)
                finally:
                    self._live -= 1
        except BaseException:
            if session:
                self.status = "cancelled"
                self._close_observers()
            raise
        finally:
            if session:
                self._tg = None
                self._elapsed_before = perf_counter() - self._t0
        if group is None:  # (no session's)
            return None
        return self._outcome(timeout, group.cancel_scope.cancelled_caught)

    def _paused(self, elapsed: float, waiting_for: list[str], requests: list[Any]) -> None:
        """The session ends paused, waiting for ``waiting_for`` (asking ``requests``): told
        to the observers, who are then let go."""
        self.status = "paused"
        if self._observers:
            self._closed("paused", None, elapsed)
            self._publish(
                ExecutionPaused(
                    execution_id=self.id, at=elapsed, waiting_for=waiting_for, requests=requests
                )
            )
        self._close_observers()

    def _opened(self) -> None:
        """A session starts: the execution runs (its clock goes on), observers are told."""
        self.status = "running"
        self._done = False
        self._result = None
        self._t0 = perf_counter() - self._elapsed_before
        if self._observers:
            self._publish(
                ExecutionStarted(
                    execution_id=self.id,
                    at=self._at(self._t0 + self._elapsed_before),
                    flow=self._flow.name,
                )
            )

    def _fan_out(self, nodes: Sequence[Node], value: Any, trigger: str) -> None:
        """Start a chain in a task of its own at each of ``nodes``."""
        tg = self._tg
        assert tg is not None
        for node in nodes:
            tg.start_soon(self._drive, node, value, trigger)

    def _broke(self, node: Node, exc: Exception) -> None:
        """A chain of steps raised: the execution fails (never leaks the exception)."""
        if isinstance(exc, ExecutionError):
            self._fail(exc)
            return
        # an observer broke (or the engine did)
        self._fail(self.step_failed(node.name, f"{node.name!r} failed:", exc))

    def step_failed(self, step: str, what: str, exc: Exception) -> StepFailedError:
        """The error of ``step`` that raised ``exc`` (its cause), with the trace so far."""
        failed = StepFailedError(
            f"{what} {type(exc).__name__}: {exc}", step=step, trace=self.trace, state=self.state
        )
        failed.__cause__ = exc
        return failed

    # -- called by nodes and contexts ---------------------------------------------------

    def context_for(self, step: str) -> Context[S]:
        return Context(self, step)

    def _at(self, t: float) -> float:
        return t - self._t0

    def _publish(self, event: FlowEvent) -> None:
        for callback in self._observers:
            try:
                callback(event)
            except Exception:  # an observer's bug never stops the run it observes
                _LOG.warning(
                    "the event callback %s raised on a %r event of execution %s; the run goes on",
                    _name_of(callback),
                    event.kind,
                    self.id,
                    exc_info=True,
                )

    def _emit(self, event: str, value: Any, by: str | None, *, declared: bool = False) -> None:
        node = self._flow._events.get(event)
        if node is None:
            raise FlowDefinitionError(
                f"{by or 'outside'!s} emitted {event!r}, which no flow.when({event!r}) handles"
            )
        if by is not None and not declared and not self._flow._may_emit(by, event):
            raise FlowDefinitionError(
                f"step {by!r} emitted {event!r} but does not declare it; add "
                f"emits=[{event!r}] where the step is added to the flow"
            )
        if self._observers:
            self._publish(
                EventEmitted(execution_id=self.id, at=self._at(perf_counter()), event=event, by=by)
            )
        tg = self._tg
        if tg is None or self._done:
            return
        tg.start_soon(self._drive, node, value, event)

    def _pause(self, event: str, request: Any, step: str) -> None:
        node = self._flow._events.get(event)
        if node is None or not getattr(node, "external", False):
            raise FlowDefinitionError(
                f"step {step!r} paused for {event!r}, which is not an external event; declare "
                f"it with flow.when({event!r}, external=True).to(...)"
            )
        self._waits = [*self._waits, Wait(event=event, request=request, step=step)]

    def _finish(self, value: Any, *, alone: bool = False) -> None:
        """End with ``value``; cancel whatever else runs (``alone``: the caller is the only
        chain still running and awaits nothing, so there is nothing to cancel)."""
        if self._done:
            return
        self._done = True
        self._result = value
        self._waits = _NO_WAITS
        if self._tg is not None and not (alone and self._live <= 1):
            self._tg.cancel_scope.cancel()

    def _fail(self, err: ExecutionError) -> None:
        if self._failure is None and not self._done:
            self._failure = err
            self._done = True
            if self._tg is not None:
                self._tg.cancel_scope.cancel()

    def _closed(self, status: str, failure: Exception | None, at: float) -> None:
        closing = self._closing
        if closing is None:
            return
        try:
            events = closing(status, failure, at)
        except Exception:  # a closing hook's bug never changes how the run ended
            _LOG.warning("the closing hook of execution %s raised", self.id, exc_info=True)
            return
        for event in events:
            self._publish(event)

    def _close_observers(self) -> None:
        closers, self._closers = self._closers, ()
        for close in closers:
            close()
