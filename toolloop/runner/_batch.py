"""A batch of calls under an exact concurrency limit, one result per call, whatever happens.

This is the one mechanism by which tool calls run, in the loop (a round, planned all at
once or streamed) and in both agents (a turn's tool calls). A batch is open while calls are
submitted::

    async with executor.batch() as batch:
        async for command in planner_stream:
            batch.submit(command)
    batch.results  # one per call, in submission order

At most ``concurrency`` calls run at once: the batch starts no more worker tasks than that,
and each worker takes the next waiting call when its own ends (FIFO), so the limit is exact
and costs nothing per call. If the block is cancelled or raises, running calls are
cancelled, every call without a result gets the ``cancelled`` one, and then the
cancellation or error propagates.

What a batch costs: :meth:`ToolBatch.run_here` runs the calls in the calling task, one
after another, while each finishes without waiting, and starts workers only when one waits
(a few at a time: the last one started starts more as it starts a call, while calls
wait);
a batch given the ``task_group`` of its run starts them there instead of opening a task
group of its own. A round of tools that return at once then costs no task and no task group.
Both paths take and finish calls through the same two methods and come to the same results,
hooks, errors and cancellation (``tests/runner/test_batch_paths.py`` holds them equal); every
call goes through the one ``call`` the batch was given (an executor's batch: its
:meth:`~toolloop.runner.Executor.call`, an override included).

The batch is generic over what a call is and what it comes to: the loop runs
:class:`~toolloop.runner.ToolCommand` into :class:`~toolloop.runner.ToolExecutionRecord`; the
middleware agent runs a model's tool call through its ``wrap_tool_call`` onion; the status
agent runs a call through its checkpoint journal.
"""

from __future__ import annotations

import contextvars
import functools
import types
from collections.abc import Awaitable, Callable, Generator, Iterable
from time import perf_counter
from types import CoroutineType, TracebackType
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

__all__ = ["BatchCall", "SplitCall", "ToolBatch", "call_split"]

T = TypeVar("T")
R = TypeVar("R")

BatchCall = Callable[[T, Callable[[], None]], Awaitable[R]]
"""``call(item, started)``: run one item and return its result; call ``started()`` once the
call really starts (e.g. after its arguments were checked), so that start events and
durations are true."""


class SplitCall(Generic[T, R]):
    """A call in three parts, which a batch runs awaiting the work itself.

    A :data:`BatchCall` is a coroutine per call, awaited whole. A split call hands the batch
    the work to await and makes the result of its outcome, so a running call has no
    coroutine of its own: one frame less under each of its awaits and one object less per
    call in flight. :func:`call_split` is the same call as one coroutine, the plain path: a
    batch given a split call comes to exactly what it comes to given
    ``lambda item, started: call_split(split, item, started)`` (results, hooks, errors,
    cancellation; ``tests/runner/test_batch_paths.py`` holds the two equal).

    :class:`~toolloop.runner.Executor` is one: its
    :meth:`~toolloop.runner.Executor.call` is ``call_split(executor, command, on_start)``.
    """

    __slots__ = ()

    def begin(self, item: T) -> tuple[R, None] | tuple[None, Awaitable[Any]]:
        """Check ``item`` and start its work: ``(result, None)`` for an item that cannot
        run (its result, at once), ``(None, work)`` for one whose ``work`` is awaited.

        It runs in the call's context (a copy of the calling task's, or a worker's), as
        the rest of the call does. An exception out of it is a fatal error of the batch."""
        raise NotImplementedError

    def succeeded(self, item: T, value: Any) -> R:
        """The result of an item whose work returned ``value``."""
        raise NotImplementedError

    def raised(self, item: T, exc: Exception) -> R:
        """The result of an item whose work raised ``exc`` (cancellation, which is not an
        ``Exception``, propagates)."""
        raise NotImplementedError


async def call_split(
    split: SplitCall[T, R], item: T, started: Callable[[], object] | None = None
) -> R:
    """Run ``item`` through ``split`` as one coroutine: a split call's plain path.

    ``started()``, if given, is called first (a batch tells ``on_start`` at that point).
    """
    if started is not None:
        started()
    result, work = split.begin(item)
    if work is None:
        return result  # type: ignore[return-value]  # an item that cannot run
    try:
        value = await work
    except Exception as exc:
        return split.raised(item, exc)
    return split.succeeded(item, value)


class ToolBatch(Generic[T, R]):
    """One batch of calls, open (``async with``) while items are submitted.

    Args:
        call: runs one item: a :data:`BatchCall`, or a :class:`SplitCall` (which the batch
            runs in its parts, awaiting the work itself). It comes to a result for anything
            but cancellation (and the run's own fatal errors, which abort the batch: the
            first one is raised by the block as it was raised, never in an exception group,
            on either path).
        cancelled: the result of an item whose call was cut short or never started.
        concurrency: at most this many calls at once (``>= 1``).
        on_start: ``on_start(index, item)`` when a call starts.
        on_finish: ``on_finish(index, result, duration_s)`` when an item has its result,
            cancelled ones included. A callback that raises aborts the batch.
        results: a list to which the results are appended, in submission order, when the
            batch ends, also when it is cancelled or fails.
        task_group: an open task group that outlives the batch (e.g. its run's), to start
            workers in; the batch then opens no task group of its own. Its workers are
            still its own: cancelled when the batch is, awaited before it ends. A worker's
            fatal error (a call or callback that raises) cancels the other workers and
            starts no more; the call the calling task runs itself, if any, ends first, then
            the error is raised when the block exits. For calls that may fail so, leave
            ``task_group`` out: the batch's own group aborts everything at once.
    """

    __slots__ = (
        "_call",
        "_cancelled",
        "_error",
        "_handles",
        "_idle",
        "_items",
        "_limit",
        "_next",
        "_on_finish",
        "_on_start",
        "_outer",
        "_pending",
        "_results",
        "_sink",
        "_split",
        "_started",
        "_state",
        "_task_group",
        "_told",
        "_workers",
    )

    def __init__(
        self,
        call: BatchCall[T, R] | SplitCall[T, R],
        cancelled: Callable[[T], R],
        *,
        concurrency: int,
        on_start: Callable[[int, T], object] | None = None,
        on_finish: Callable[[int, R, float], object] | None = None,
        results: list[R] | None = None,
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self._split: SplitCall[T, R] | None
        self._call: BatchCall[T, R] | None
        if isinstance(call, SplitCall):
            self._split, self._call = call, None
        else:
            self._split, self._call = None, call
        self._cancelled = cancelled
        self._limit = concurrency
        self._on_start = on_start
        self._on_finish = on_finish
        self._told = on_start is not None or on_finish is not None  # (when calls start)
        self._sink = results
        self._items: list[T] = []
        self._results: list[R | None] = []
        # when each call started, for on_finish's durations (kept only when told)
        self._started: dict[int, float] | None = {} if on_finish is not None else None
        self._next = 0  # the first item no worker took yet (items are taken in order)
        self._workers = 0
        self._pending = 0  # workers started that have not come to take a call yet
        self._state = 0  # 0 new, 1 open, 2 closed
        self._task_group: anyio.abc.TaskGroup | None = None
        self._outer = task_group
        self._handles: list[Any] | None = None  # of the workers started in the outer group
        self._idle: anyio.Event | None = None
        self._error: BaseException | None = None

    @property
    def items(self) -> list[T]:
        """The items submitted so far, in order."""
        return list(self._items)

    @property
    def results(self) -> list[R]:
        """One result per submitted item, in submission order, once the batch ended.

        Raises:
            RuntimeError: the batch has not ended yet.
        """
        if self._state != 2:
            raise RuntimeError("a batch's results are complete only after its block exits")
        return self._results  # type: ignore[return-value]  # no None once closed

    @property
    def running(self) -> int:
        """How many tasks work on the batch's calls now, at most ``concurrency``: its
        workers (those just started, not yet come to a call, included) and the calling
        task while it takes calls (:meth:`run_here`)."""
        return self._workers

    async def __aenter__(self) -> ToolBatch[T, R]:
        if self._state != 0:
            raise RuntimeError("a batch is used once: make a new one")
        if self._outer is None:
            task_group = anyio.create_task_group()
            await task_group.__aenter__()
            self._task_group = task_group
        else:
            self._task_group = self._outer
        self._state = 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._outer is not None:
            return await self._exit_outer(exc)
        assert self._task_group is not None
        try:
            suppressed = bool(await self._task_group.__aexit__(exc_type, exc, tb))
        except BaseException as error:
            # The workers never raise, so a group holding only the block's own exception
            # is noise: let that exception through as it was raised.
            inner = getattr(error, "exceptions", None)
            if exc is None or inner is None or len(inner) != 1 or inner[0] is not exc:
                raise
            suppressed = False
        finally:
            self._close()
        if self._error is not None and (exc is None or suppressed):
            # a worker's fatal error (the cancellation of the block was the group's own)
            raise self._error from self._error.__cause__
        return suppressed

    async def _exit_outer(self, exc: BaseException | None) -> bool:
        """The end of a batch whose workers run in an outer task group: wait for them
        (cancel them first if the block failed or is cancelled), then close."""
        try:
            if self._workers:
                if exc is None:
                    try:
                        await self._until_idle()
                    except BaseException:  # cancelled while waiting: the workers go too
                        self._cancel_workers()
                        with anyio.CancelScope(shield=True):
                            await self._until_idle()
                        raise
                else:
                    self._cancel_workers()
                    with anyio.CancelScope(shield=True):
                        await self._until_idle()
        finally:
            self._close()
        if exc is None and self._error is not None:
            raise self._error from self._error.__cause__
        return False

    async def _until_idle(self) -> None:
        while self._workers:
            if self._idle is None or self._idle.is_set():
                self._idle = anyio.Event()
            await self._idle.wait()

    def _fail(self, exc: Exception) -> None:
        """A worker's call or callback raised: no more calls start, the running ones are
        cancelled (with the batch's own task group, the block too), and the first such
        error is raised when the block exits (unless the block raises one of its own)."""
        if self._error is None:
            self._error = exc
        if self._outer is None:
            assert self._task_group is not None
            self._next = len(self._items)  # nothing more is taken
            self._task_group.cancel_scope.cancel()
        else:
            self._cancel_workers()

    def _cancel_workers(self) -> None:
        self._next = len(self._items)  # nothing more is taken
        for handle in self._handles or ():
            handle.cancel()

    def submit(self, item: T) -> int:
        """Start ``item`` now, or as soon as the concurrency limit allows; its index.

        Raises:
            RuntimeError: the batch is not open (outside its ``async with`` block).
        """
        index = self._add(item)
        if self._workers < self._limit and self._error is None:
            self._start_worker()
        return index

    def run_here(self, items: Iterable[T]) -> Awaitable[None]:
        """Submit ``items`` and work on them in the calling task, until none waits.

        The calling task takes the calls one after another, as a worker does. While a call
        finishes without waiting for anything (a cache hit, a pure function) no task is
        spawned at all; the moment a call waits (I/O, a sleep), workers start for half
        of the calls still waiting (at least one), and the last of them, as it starts a
        call, starts more the same way while calls wait, up to the limit: they run
        concurrently as if each had been submitted with :meth:`submit`, all started within
        a few scheduler passes, and a call that ends at once frees its task for the next
        (brief calls take fewer tasks). Calls start in submission order either way,
        and each the calling task runs gets a copy of its context, as in a task of its own
        (a worker runs the calls it takes in its own task's context). Await what it
        returns, in the calling task: ``await batch.run_here(items)`` (the calling task
        takes its slot only then). It is an awaitable that drives the calls itself, not a
        coroutine to start a task with.

        Raises:
            RuntimeError: the batch is not open (outside its ``async with`` block).
        """
        if self._state != 1:
            raise RuntimeError("run_here() works only inside 'async with <batch>:'")
        self._items.extend(items)
        self._results.extend([None] * (len(self._items) - len(self._results)))
        return self._here()  # takes a slot when it starts, if one is free

    def submit_here(self, item: T) -> Awaitable[None]:
        """Submit ``item`` and work in the calling task (see :meth:`run_here`)."""
        return self.run_here((item,))

    def _add(self, item: T) -> int:
        if self._state != 1:
            raise RuntimeError("submit() works only inside 'async with <batch>:'")
        index = len(self._items)
        self._items.append(item)
        self._results.append(None)
        return index

    def _spill(self) -> None:
        """A call of this batch is about to wait (or started to) while others wait: start
        workers for half of them (at least one, up to the limit), unless workers started
        before have not all come to take a call yet. The last of those to come does the
        same as it starts its call, so the waiting calls start within a few scheduler
        passes (about log2 of their number), each before any of them has to end; and a
        call that ends at once frees its task to take the next one, so brief calls take
        fewer tasks."""
        if self._pending or self._error is not None:
            return
        waiting = len(self._items) - self._next
        if waiting <= 0:
            return
        for _ in range(min(max(waiting // 2, 1), self._limit - self._workers)):
            self._start_worker()

    def _start_worker(self) -> None:
        assert self._task_group is not None
        self._workers += 1
        self._pending += 1
        handle = self._task_group.create_task(self._work(), name=_WORKER)
        if self._outer is not None:  # cancelled with the batch, not with the outer group
            if self._handles is None:
                self._handles = []
            self._handles.append(handle)

    def _mark_started(self, index: int) -> None:
        if self._started is not None:
            self._started[index] = perf_counter()
        if self._on_start is not None:
            self._on_start(index, self._items[index])

    def _take(self, context: contextvars.Context | None = None) -> tuple[int, T, Any, Any]:
        """Take the next waiting item (there is one) and start its call, in ``context`` if
        given: ``(index, item, result, work)``, where ``work`` is what to await (``None``:
        ``result`` is ready). Every call starts here, in either driver (the calling task's
        :meth:`_here`, a worker's :meth:`_work`), each of which then makes the result of
        the work's outcome with :meth:`_of_error` or, inline, ``split.succeeded`` (a plain
        call's value is its result)."""
        index = self._next
        self._next = index + 1
        item = self._items[index]
        told = self._told
        split = self._split
        if split is None:
            started = functools.partial(self._mark_started, index) if told else _nothing
            return index, item, None, self._call(item, started)  # type: ignore[misc]
        if told:
            self._mark_started(index)  # where call_split calls started()
        if context is None:
            result, work = split.begin(item)
        else:
            result, work = context.run(split.begin, item)
        return index, item, result, work

    def _of_error(self, item: T, exc: Exception) -> R:
        """The result of a call whose work raised ``exc``: a split call makes one; a plain
        call's error is the batch's fatal error (raised again)."""
        split = self._split
        if split is None:
            raise exc
        return split.raised(item, exc)

    def _finished(self, index: int, result: R) -> None:
        """``items[index]`` has its result: keep it, and tell ``on_finish``."""
        self._results[index] = result
        on_finish = self._on_finish
        if on_finish is not None:
            start = self._started.get(index, 0.0)  # type: ignore[union-attr]
            on_finish(index, result, perf_counter() - start if start else 0.0)

    @types.coroutine
    def _here(self) -> Generator[Any, Any, None]:
        """The batch's owner works on the waiting calls, if a slot is free.

        The same work as a worker's (:meth:`_work`): take the next call, await its work,
        keep its result. It runs each call in a copy of its context (as a task of its own
        would) and starts workers for the calls still waiting when one of its own waits
        (see :meth:`_spill`). A generator-based coroutine that drives the work itself:
        whatever the work yields goes to the event loop unchanged (asyncio futures, trio's
        traps), and what the loop sends or throws goes back to it, so the work runs in this
        task as if it were awaited directly, with one frame of ours above it.
        """
        if self._workers >= self._limit or self._error is not None:
            return  # no slot for the calling task: the workers take the calls
        self._workers += 1
        items = self._items
        split = self._split
        try:
            while self._next < len(items):
                context: Any = contextvars.copy_context()
                index, item, result, work = self._take(context)
                if work is not None:
                    coro: Any = None
                    failure: Exception | None = None
                    value: Any = None
                    try:
                        coro = work if isinstance(work, CoroutineType) else work.__await__()
                        work = None
                        signal = context.run(coro.send, None)
                    except StopIteration as done:
                        value = done.value
                        coro = None
                    except Exception as exc:
                        failure = exc
                        coro = None
                    if coro is not None:
                        if self._next < len(self._items):  # others wait: workers take them
                            try:
                                self._spill()
                            except BaseException:
                                context.run(coro.close)
                                raise
                        while True:
                            error: BaseException | None = None
                            try:
                                reply = yield signal
                            except GeneratorExit:
                                context.run(coro.close)
                                raise
                            except BaseException as exc:  # cancellation, whatever is thrown
                                # thrown on into the work as if it were awaited directly:
                                # without the frame of ours it passed through
                                tb = exc.__traceback__
                                error = exc.with_traceback(tb.tb_next if tb else None)
                                tb = None
                            # thrown in outside the handler, so the work does not see
                            # ``error`` as the exception being handled
                            try:
                                if error is None:
                                    signal = context.run(coro.send, reply)
                                else:
                                    signal = context.run(coro.throw, error)
                            except StopIteration as done:
                                value = done.value
                                break
                            except Exception as exc:
                                failure = exc
                                break
                            finally:
                                error = None
                        # nothing of this call stays referenced while the next one runs
                        coro = signal = reply = None
                    try:
                        if failure is not None:
                            result = self._of_error(item, failure)
                        elif split is None:
                            result = value
                        else:
                            result = split.succeeded(item, value)
                    finally:
                        failure = value = None
                context = None
                self._finished(index, result)
        finally:
            self._workers -= 1
            if not self._workers and self._idle is not None:
                self._idle.set()

    async def _work(self) -> None:
        """A worker: take waiting calls, first come first served, until none is left; as
        it starts each call, it starts more workers if calls still wait (:meth:`_spill`)."""
        items = self._items
        split = self._split
        self._pending -= 1
        try:
            while self._next < len(items):
                index, item, result, work = self._take()
                if work is not None:
                    if self._next < len(items):
                        try:
                            self._spill()
                        except BaseException:
                            if isinstance(work, CoroutineType):
                                work.close()
                            raise
                    try:
                        value = await work
                    except Exception as exc:
                        result = self._of_error(item, exc)
                    else:
                        result = value if split is None else split.succeeded(item, value)
                    work = value = None
                self._finished(index, result)
        except Exception as exc:  # a call or callback that raised: the batch's fatal error
            self._fail(exc)
        finally:
            self._workers -= 1
            if not self._workers and self._idle is not None:
                self._idle.set()

    def _close(self) -> None:
        """Give every item without a result the cancelled one; hand the results over."""
        self._state = 2
        self._next = len(self._items)
        results = self._results
        now = perf_counter()
        for index, result in enumerate(results):
            if result is None:
                cancelled = self._cancelled(self._items[index])
                results[index] = cancelled
                if self._on_finish is not None:
                    start = self._started.get(index, 0.0)  # type: ignore[union-attr]
                    self._on_finish(index, cancelled, now - start if start else 0.0)
        if self._sink is not None:
            self._sink.extend(results)  # type: ignore[arg-type]  # no None left


_WORKER = "toolloop.runner.ToolBatch worker"


def _nothing() -> None:
    """``started`` for a batch that tells nobody when calls start."""
