"""Group commit: the writes of concurrent callers, committed together in one transaction.

A durable write waits for its commit: an fsync for SQLite (``synchronous=FULL``), round
trips and a WAL flush for PostgreSQL. With many runs at once most of a write's time is that
wait, and one commit holds many writes about as cheaply as one. So a store's writes go
through a :class:`GroupCommit`:

- a writer that arrives when no commit is under way becomes the **leader**: it lets the
  writers woken with it queue theirs for one scheduling pass, takes every queued write (up
  to :data:`MAX_BATCH`), has them written in one transaction in a worker thread, shielded
  from cancellation, and wakes each writer with its own result or error;
- a writer that arrives while a commit is under way is a **follower**: it queues its write
  and waits. When the leader is done, the first follower still queued leads the next batch.

No background task: the leader is one of the writers, so nothing outlives the calls that
wrote. A caller's await returns only once the transaction that holds its write has
committed (or failed: then its error says so). How a batch is written is the store's (see
:class:`~toolloop.checkpoints._sql.SQLStore`): a write that fails is left out and the others
are written again without it, so one bad write fails only its own caller.

Cancellation: a writer cancelled while its write is still queued leaves the queue (its write
was never made; a leader that has not taken its batch yet hands the lead on). A writer
whose write is in a batch being committed waits for the commit and gets its outcome, as a
call in a worker thread is never abandoned half-way; the cancellation is delivered at its
next checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._errors import CheckpointError

__all__ = ["MAX_BATCH", "GroupCommit", "PerLoop", "Write"]

T = TypeVar("T")

MAX_BATCH = 500
"""At most this many writes in one transaction (the others wait for the next one)."""

_QUEUED, _TAKEN, _DONE = 0, 1, 2


class Write:
    """One caller's write: ``fn(connection, *args)`` in its batch's transaction, and what
    came of it (set in the worker thread, read by its caller once woken)."""

    __slots__ = ("args", "error", "event", "fn", "lead", "result", "settled", "state")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.result: Any = None
        self.error: BaseException | None = None
        self.settled = False
        """Whether its result or its error is known."""
        self.event = anyio.Event()
        self.state = _QUEUED
        self.lead = False
        """Set (with the event) when it is its turn to lead."""

    def done(self, result: Any) -> None:
        """Written and committed: ``result`` is what its caller gets."""
        self.result, self.settled = result, True

    def fail(self, error: BaseException) -> None:
        """Not written: its caller gets ``error`` (its own: an exception is raised once)."""
        self.error, self.settled = error, True

    def outcome(self) -> Any:
        """Its result, or its error raised."""
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit:
    """The writes of one event loop to one store, committed in batches (see the module's
    docs). Touched by that event loop's tasks only; a batch is written in a worker thread.

    Args:
        run: writes a batch (in a worker thread), giving each :class:`Write` its result or
            its error.
        slot: what the leader holds while its batch is written (e.g. a store's limiter of
            worker threads; nothing by default).
    """

    __slots__ = ("_leading", "_queue", "_run", "_slot")

    def __init__(
        self,
        run: Callable[[list[Write]], None],
        slot: Callable[[], AbstractAsyncContextManager[Any]] = nullcontext,
    ) -> None:
        self._run = run
        self._slot = slot
        self._queue: list[Write] = []
        self._leading = False
        """Whether a writer leads (then the queue's first write is the leader's, or the
        queue is being written). No one leads: the queue is empty."""

    async def write(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``fn(connection, *args)``, committed (with the writes queued beside it) before
        this returns; its result, or its own error raised."""
        own = Write(fn, args)
        self._queue.append(own)
        if self._leading:
            await self._follow(own)
            if own.state == _DONE:
                return own.outcome()
        else:
            self._leading = True
        await self._lead(own)
        return own.outcome()

    async def _follow(self, own: Write) -> None:
        """Wait until ``own`` is written, or until it is its turn to lead."""
        try:
            await own.event.wait()
        except anyio.get_cancelled_exc_class():
            if own.state == _QUEUED:  # never taken: never written
                self._queue.remove(own)
                if own.lead:
                    self._hand_over()
                raise
            if own.state == _TAKEN:  # its transaction runs: what comes of it is its caller's
                with anyio.CancelScope(shield=True):
                    await own.event.wait()

    async def _lead(self, own: Write) -> None:
        """Take the queued writes (``own`` first), have them written, wake their writers,
        and hand the lead to the first writer queued since."""
        batch: list[Write] | None = None
        try:
            async with self._slot():
                await anyio.lowlevel.checkpoint()  # one pass: the writers woken with it queue
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                for write in batch:
                    write.state = _TAKEN
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._run, batch)
        except BaseException as exc:
            if batch is None:  # cancelled before it took a batch: nothing was written
                self._queue.remove(own)
                self._hand_over()
                raise
            for write in batch:  # the worker thread itself failed, not one write
                if not write.settled:
                    error = CheckpointError(
                        f"the transaction of this write did not finish ({type(exc).__name__}: "
                        f"{exc}); it may not have been committed"
                    )
                    error.__cause__ = exc
                    write.fail(error)
            if not isinstance(exc, Exception):
                self._wake(batch)
                raise
        self._wake(batch)

    def _wake(self, batch: list[Write]) -> None:
        for write in batch:
            write.state = _DONE
            write.event.set()
        self._hand_over()

    def _hand_over(self) -> None:
        """The first queued writer leads next; none: no one leads."""
        if self._queue:
            first = self._queue[0]
            first.lead = True
            first.event.set()
        else:
            self._leading = False


class PerLoop(Generic[T]):
    """One ``T`` for each event loop that asks (made by ``make`` the first time, gone with
    the loop): what a store's tasks share within their loop, apart from other loops (the
    sync twins run each call in a loop of its own, in threads, and may share one store).
    Each loop keeps its own for as long as it runs, so what it queued there (a
    :class:`GroupCommit`'s writes) keeps its order whatever other loops do."""

    __slots__ = ("_by_loop", "_make")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._by_loop: WeakKeyDictionary[object, T] = WeakKeyDictionary()

    def get(self) -> T:
        """This event loop's ``T``."""
        loop = anyio.lowlevel.current_token().native_token  # (anyio's RunVar keys the same)
        held = self._by_loop.get(loop)
        if held is None:
            held = self._by_loop[loop] = self._make()
        return held
