"""A batch of calls under an exact concurrency limit, one result per call, whatever happens.

This is the one mechanism by which tool calls run, in the loop (a round, planned all at
once or streamed) and in both agents (a turn's tool calls). A batch is one task group,
open while calls are submitted::

    async with executor.batch() as batch:
        async for command in planner_stream:
            batch.submit(command)
    batch.results  # one per call, in submission order

At most ``concurrency`` calls run at once: the batch starts no more worker tasks than that,
and each worker takes the next waiting call when its own ends (FIFO), so the limit is exact
and costs nothing per call. If the block is cancelled or raises, running calls are
cancelled, every call without a result gets the ``cancelled`` one, and then the
cancellation or error propagates.

The batch is generic over what a call is and what it comes to: the loop runs
:class:`~toolloop.runner.ToolCommand` into :class:`~toolloop.runner.ToolExecutionRecord`; the
middleware agent runs a model's tool call through its ``wrap_tool_call`` onion; the status
agent runs a call through its checkpoint journal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import perf_counter
from types import TracebackType
from typing import Generic, TypeVar

import anyio
import anyio.abc

__all__ = ["BatchCall", "ToolBatch"]

T = TypeVar("T")
R = TypeVar("R")

BatchCall = Callable[[T, Callable[[], None]], Awaitable[R]]
"""``call(item, started)``: run one item and return its result; call ``started()`` once the
call really starts (e.g. after its arguments were checked), so that start events and
durations are true."""


class ToolBatch(Generic[T, R]):
    """One batch of calls: a task group, open while items are submitted.

    Args:
        call: runs one item (see :data:`BatchCall`); it returns a result for anything but
            cancellation (and the run's own fatal errors, which abort the batch).
        cancelled: the result of an item whose call was cut short or never started.
        concurrency: at most this many calls at once (``>= 1``).
        on_start: ``on_start(index, item)`` when a call starts.
        on_finish: ``on_finish(index, result, duration_s)`` when an item has its result,
            cancelled ones included. A callback that raises aborts the batch.
        results: a list to which the results are appended, in submission order, when the
            batch ends, also when it is cancelled or fails.
    """

    __slots__ = (
        "_call",
        "_cancelled",
        "_items",
        "_limit",
        "_next",
        "_on_finish",
        "_on_start",
        "_queue",
        "_results",
        "_sink",
        "_started",
        "_state",
        "_task_group",
        "_workers",
    )

    def __init__(
        self,
        call: BatchCall[T, R],
        cancelled: Callable[[T], R],
        *,
        concurrency: int,
        on_start: Callable[[int, T], object] | None = None,
        on_finish: Callable[[int, R, float], object] | None = None,
        results: list[R] | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self._call = call
        self._cancelled = cancelled
        self._limit = concurrency
        self._on_start = on_start
        self._on_finish = on_finish
        self._sink = results
        self._items: list[T] = []
        self._results: list[R | None] = []
        self._started: list[float] = []
        self._queue: list[int] = []  # waiting items; _next is the first not yet taken
        self._next = 0
        self._workers = 0
        self._state = 0  # 0 new, 1 open, 2 closed
        self._task_group: anyio.abc.TaskGroup | None = None

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
        """How many calls run now (at most ``concurrency``)."""
        return self._workers

    async def __aenter__(self) -> ToolBatch[T, R]:
        if self._state != 0:
            raise RuntimeError("a batch is used once: make a new one")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._task_group is not None
        try:
            return bool(await self._task_group.__aexit__(exc_type, exc, tb))
        except BaseException as error:
            # The workers never raise for a call, so a group holding only the block's own
            # exception is noise: let that exception through as it was raised.
            inner = getattr(error, "exceptions", None)
            if exc is None or inner is None or len(inner) != 1 or inner[0] is not exc:
                if inner is not None and len(inner) == 1 and exc is None:
                    raise inner[0] from error.__cause__  # one worker's fatal error, as is
                raise
        finally:
            self._close()
        raise exc

    def submit(self, item: T) -> int:
        """Start ``item`` now, or as soon as the concurrency limit allows; its index.

        Raises:
            RuntimeError: the batch is not open (outside its ``async with`` block).
        """
        index = self._add(item)
        if self._workers < self._limit:
            self._workers += 1
            self._task_group.start_soon(self._worker, index)  # type: ignore[union-attr]
        else:
            self._queue.append(index)
        return index

    async def submit_here(self, item: T) -> None:
        """Submit ``item``, running it in the calling task if a slot is free.

        The calling task then works like any worker (it takes waiting items too) until
        nothing waits: one task spawn less, for the batch's owner after its last
        submission.
        """
        index = self._add(item)
        if self._workers < self._limit:
            self._workers += 1
            await self._worker(index)
        else:
            self._queue.append(index)

    def _add(self, item: T) -> int:
        if self._state != 1:
            raise RuntimeError("submit() works only inside 'async with <batch>:'")
        index = len(self._items)
        self._items.append(item)
        self._results.append(None)
        self._started.append(0.0)
        return index

    async def _worker(self, index: int) -> None:
        try:
            while True:
                await self._run(index)
                if self._next >= len(self._queue):
                    return
                index = self._queue[self._next]
                self._next += 1
        finally:
            self._workers -= 1

    async def _run(self, index: int) -> None:
        item = self._items[index]
        on_start = self._on_start

        def started() -> None:
            self._started[index] = perf_counter()
            if on_start is not None:
                on_start(index, item)

        result = await self._call(item, started)
        self._results[index] = result
        if self._on_finish is not None:
            start = self._started[index]
            self._on_finish(index, result, perf_counter() - start if start else 0.0)

    def _close(self) -> None:
        """Give every item without a result the cancelled one; hand the results over."""
        self._state = 2
        self._queue.clear()
        self._next = 0
        results = self._results
        now = perf_counter()
        for index, result in enumerate(results):
            if result is None:
                cancelled = self._cancelled(self._items[index])
                results[index] = cancelled
                if self._on_finish is not None:
                    start = self._started[index]
                    self._on_finish(index, cancelled, now - start if start else 0.0)
        if self._sink is not None:
            self._sink.extend(results)  # type: ignore[arg-type]  # no None left
