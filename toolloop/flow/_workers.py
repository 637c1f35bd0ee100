"""Worker tasks of an execution, kept to take more work when their own is done.

A step that spreads work over tasks round after round (the loop's tool calls) would start
new tasks every round, and a task started through anyio costs about twenty GC-tracked
objects and tens of microseconds. An execution's :class:`WorkerPool` keeps a worker whose
job is done waiting for the next one instead, so a run starts at most as many workers as
it ever needed at once, whatever its number of rounds. The execution closes its pool when
its own chain of steps ends (completed, paused or failed): idle workers leave at once, busy
ones after their job; the execution's cancellation (a timeout, a failure) reaches them all,
since they are tasks of its task group.

A worker runs the jobs it takes one after another in its own task's context, as any worker
pool does.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["PoolWorker", "WorkerPool"]

_NAME = "toolloop.flow.WorkerPool worker"


class PoolWorker:
    """One worker task of a :class:`WorkerPool`, as its own code sees it."""

    __slots__ = ("doomed", "handle", "owner", "pool")

    def __init__(self, pool: WorkerPool, owner: object) -> None:
        self.pool = pool
        self.owner: object = owner
        """Whose job it does now (``None`` while it waits for one)."""
        self.handle: Any = None  # its task's handle, to cancel it
        self.doomed = False
        """Cancelled with its owner's jobs: it takes no more."""


class WorkerPool:
    """Tasks of one task group that do a job and then wait for more (see the module).

    A worker is started with ``run(worker)``, which does its first job and then asks for
    the next one with ``await worker.pool.take(worker)`` until that gives ``None``, and
    always ends with ``worker.pool.leave(worker)``; a worker's own code runs the jobs, so
    no frame of the pool's sits under them.

    Args:
        task_group: the open task group the workers are started in; it must outlive them
            (the pool is closed before the group exits).
    """

    __slots__ = ("_closed", "_idle", "_jobs", "_task_group", "_wake", "_workers")

    def __init__(self, task_group: TaskGroup) -> None:
        self._task_group = task_group
        # owners whose job waits for an idle worker (a list: a deque's first block alone
        # is 600 bytes, and this holds a few owners at most)
        self._jobs: list[object] = []
        self._idle = 0  # workers waiting for a job
        self._wake: anyio.Event | None = None  # set when a job comes for the idle ones
        self._workers: list[PoolWorker] = []
        self._closed = False

    @property
    def workers(self) -> int:
        """How many worker tasks the pool has now, busy or idle."""
        return len(self._workers)

    @property
    def idle(self) -> int:
        """How many of them wait for a job."""
        return self._idle

    def start(self, owner: object, run: Callable[[PoolWorker], Coroutine[Any, Any, Any]]) -> None:
        """Give ``owner`` a job: an idle worker takes it (``take`` returns ``owner`` to
        it), or a new task starts with ``run(worker)``.

        ``run`` should not raise: an exception other than cancellation fails the group.
        """
        if not self._closed and self._idle > len(self._jobs):
            self._jobs.append(owner)
            if self._wake is not None:
                self._wake.set()
            return
        worker = PoolWorker(self, owner)
        self._workers.append(worker)
        worker.handle = self._task_group.start_soon(run, worker, name=_NAME)

    async def take(self, worker: PoolWorker) -> object | None:
        """For a worker whose job is done: the owner of its next job, once there is one;
        ``None`` when it should end (the pool closed, or the worker was cancelled)."""
        worker.owner = None
        if worker.doomed or (self._closed and not self._jobs):
            return None
        if not self._jobs:
            self._idle += 1
            try:
                while not self._jobs:
                    if self._closed:
                        return None
                    wake = self._wake
                    if wake is None or wake.is_set():
                        wake = self._wake = anyio.Event()
                    await wake.wait()
            finally:
                self._idle -= 1
        owner = worker.owner = self._jobs.pop(0)
        return owner

    def leave(self, worker: PoolWorker) -> None:
        """A worker ends (call it last, whatever ended it)."""
        worker.owner = None
        if worker in self._workers:
            self._workers.remove(worker)

    def cancel(self, owner: object) -> int:
        """Cancel ``owner``'s jobs: those no worker took yet are dropped, and a worker
        doing one is cancelled (it ends; the pool starts another when needed).

        Returns:
            How many jobs were dropped without having started.
        """
        dropped = 0
        if self._jobs:
            kept = [job for job in self._jobs if job is not owner]
            dropped = len(self._jobs) - len(kept)
            self._jobs = kept
        for worker in self._workers:
            if worker.owner is owner and not worker.doomed:
                worker.doomed = True
                worker.handle.cancel()
        return dropped

    def close(self) -> None:
        """No more waiting for jobs: idle workers leave now, busy ones after their job (a
        job started later gets a task of its own, which ends with it)."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()
