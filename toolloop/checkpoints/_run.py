"""One run's checkpoint, kept by the process that runs it: begin, save, pause, finish, and
claim a stored run to resume or recover it.

Generic: it knows flows and snapshots, not agents. An agent that pauses for a human does::

    run = await CheckpointedRun.begin(store, run_id=..., flow=flow.name, snapshot=...)
    result = await execution.run(...)
    await run.pause(result)                      # paused: the snapshot and what it asks

    # later, maybe in another process
    checkpoint = await CheckpointedRun.load(store, run_id)
    execution = restore(flow, checkpoint, deps=...)
    run = await CheckpointedRun.claim(store, checkpoint, event="decision", value=data)
    result = await execution.resume("decision", decision)
    await run.complete(result.value)

Every write names the revision it overwrites, so two processes can never both resume one
paused run: the second claim fails and changes nothing. With a store that has leases
(:class:`~toolloop.checkpoints.LeasingStore`, e.g. PostgreSQL), beginning or claiming a run
also takes its lease, and pausing, completing or failing gives it back: a ``running`` run
can be recovered exactly when the worker that ran it is gone, on whatever machine.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import anyio

from .._errors import ResumeError
from ..flow import Execution, Flow, FlowResult, FlowSnapshot
from ._errors import (
    CheckpointConflictError,
    CorruptCheckpointError,
    RunNotFoundError,
    RunNotResumableError,
)
from ._model import Checkpoint, CheckpointStatus, JournalEntry, Owner
from ._store import CheckpointStore, LeasingStore

__all__ = ["INTERRUPTED", "CheckpointedRun", "expect_status", "restore"]

S = TypeVar("S")
T = TypeVar("T")

_PAUSED: tuple[CheckpointStatus, ...] = ("paused",)
INTERRUPTED: tuple[CheckpointStatus, ...] = ("running", "failed")
"""The statuses of a run to recover: its process died (``running``), or it failed."""
_LIVE: set[str] = set()
"""Owner tokens of the runs this process is running right now."""


def owner_running(owner: Owner) -> bool | None:
    """Whether the owner's run call still runs: ``None`` when that cannot be known."""
    if owner.pid == os.getpid() and owner.host == socket.gethostname():
        return owner.token in _LIVE  # this process: is the run call still going?
    return owner.process_alive()


def restore(flow: Flow[S], checkpoint: Checkpoint, *, deps: Any = None) -> Execution[S]:
    """The execution stored in ``checkpoint``, restored into ``flow`` (nothing is written).

    Raises:
        CorruptCheckpointError: the snapshot does not restore into ``flow``.
    """
    try:
        return flow.restore(checkpoint.snapshot, deps=deps)
    except ResumeError as exc:
        raise CorruptCheckpointError(
            f"the checkpoint of run {checkpoint.run_id!r} does not restore into flow "
            f"{flow.name!r}: {exc}; it was left as it is"
        ) from exc


class CheckpointedRun:
    """The checkpoint of a run this process runs; each write overwrites exactly the
    revision written (or read) before it.

    Made by :meth:`begin` (a new run) or :meth:`claim` (a stored one).
    """

    __slots__ = ("_kept", "_open", "_written", "checkpoint", "store")

    def __init__(self, store: CheckpointStore, checkpoint: Checkpoint) -> None:
        self.store = store
        self.checkpoint = checkpoint
        self._open: set[str] = set()
        self._written: set[str] = set()
        self._kept: list[JournalEntry] = []
        if checkpoint.owner is not None:
            _LIVE.add(checkpoint.owner.token)

    @property
    def run_id(self) -> str:
        return self.checkpoint.run_id

    @classmethod
    async def begin(
        cls,
        store: CheckpointStore,
        *,
        run_id: str,
        flow: str,
        snapshot: FlowSnapshot,
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointedRun:
        """Write the first checkpoint of a new run (``running``, owned by this process).

        Raises:
            CheckpointConflictError: the store already has a run with this id.
        """
        leases = leases_of(store)
        if leases is not None and not await leases.acquire_lease(run_id):
            raise CheckpointConflictError(
                f"run {run_id!r} is held by another live worker (it holds the run's lease); "
                "pick another run id"
            )
        checkpoint = Checkpoint(
            run_id=run_id,
            flow=flow,
            status="running",
            snapshot=snapshot,
            owner=Owner.here(),
            metadata=dict(metadata or {}),
        )
        try:
            return cls(store, await store.put(checkpoint, expected_revision=None))
        except BaseException:
            if leases is not None:
                await _release_lease(store, run_id)
            raise

    @staticmethod
    async def load(store: CheckpointStore, run_id: str) -> Checkpoint:
        """The stored checkpoint of ``run_id``.

        Raises:
            RunNotFoundError: there is none.
            CorruptCheckpointError: it cannot be read.
        """
        checkpoint = await store.get(run_id)
        if checkpoint is None:
            raise RunNotFoundError(
                f"no run {run_id!r} in {store!r}; check the id (store.run_ids() lists them)"
            )
        return checkpoint

    @classmethod
    async def claim(
        cls,
        store: CheckpointStore,
        checkpoint: Checkpoint,
        *,
        expect: Sequence[CheckpointStatus] = _PAUSED,
        event: str | None = None,
        value: Any = None,
        force: bool = False,
    ) -> CheckpointedRun:
        """Take over the run read as ``checkpoint``: it becomes ``running``, owned by this
        process, noting the ``event`` (and JSON ``value``) about to be delivered to it.

        Args:
            expect: the statuses the run may be in.
            force: take over a ``running`` run even if its owner may still run it.

        Raises:
            RunNotResumableError: the run is in another status, its owner still runs it,
                or someone claimed it since it was read. Nothing was written.
        """
        run_id = checkpoint.run_id
        expect_status(checkpoint, expect)
        leases = leases_of(store)
        if leases is not None:
            return await cls._claim_leased(store, leases, checkpoint, event, value, force)
        owner = checkpoint.owner
        if checkpoint.status == "running" and owner is not None and not force:
            running = owner_running(owner)
            if running is not False:
                where = f"process {owner.pid} on {owner.host!r}"
                known = "still runs it" if running else "may still run it (another host)"
                raise RunNotResumableError(
                    f"run {run_id!r} is running: {where} {known}; recover it once that "
                    "process is gone (or pass force=True if you know it is)"
                )
        return cls(store, await _take(store, checkpoint, event, value))

    @classmethod
    async def recover(
        cls, store: CheckpointStore, checkpoint: Checkpoint, *, force: bool = False
    ) -> CheckpointedRun:
        """Take over a run whose process died, or that failed (``running`` or ``failed``),
        to go on from its last checkpoint with the event it was being resumed with, if any
        (see :meth:`claim`).

        Raises:
            RunNotResumableError: the run is in another status, or its owner still runs it.
        """
        return await cls.claim(
            store,
            checkpoint,
            expect=INTERRUPTED,
            event=checkpoint.resume_event,
            value=checkpoint.resume_value,
            force=force,
        )

    @classmethod
    async def _claim_leased(
        cls,
        store: CheckpointStore,
        leases: LeasingStore,
        checkpoint: Checkpoint,
        event: str | None,
        value: Any,
        force: bool,
    ) -> CheckpointedRun:
        """:meth:`claim` with a store that has leases: the lease says whether the worker
        that ran the run is gone; no host name or process id is trusted."""
        run_id = checkpoint.run_id
        held = leases.holds_lease(run_id)  # by this store: then a run call here may own it
        taken = await leases.acquire_lease(run_id)
        if not taken and not force:
            raise RunNotResumableError(
                f"run {run_id!r} is running on another live worker (it holds the run's lease); "
                "it can be recovered once that worker is gone: the lease ends with its "
                "database session (or pass force=True if you know it is)"
            )
        try:
            owner = checkpoint.owner
            if (
                held
                and checkpoint.status == "running"
                and owner is not None
                and owner.token in _LIVE
                and not force
            ):
                raise RunNotResumableError(
                    f"run {run_id!r} is running: a run call of this process still runs it; "
                    "nothing was changed"
                )
            written = await _take(store, checkpoint, event, value)
        except BaseException:
            if taken and not held:
                await _release_lease(store, run_id)
            raise
        return cls(store, written)

    async def save(self, snapshot: FlowSnapshot) -> Checkpoint:
        """Write a progress checkpoint (``running``) with ``snapshot``."""
        return await self._write(
            status="running", snapshot=snapshot, resume_event=None, resume_value=None
        )

    async def pause(self, result: FlowResult[Any]) -> Checkpoint:
        """Write the checkpoint of a paused execution: its snapshot and what it asks."""
        if result.snapshot is None:
            raise ValueError("pause() takes the result of a paused execution")
        requests = [w.request for w in result.waiting]
        return await self._finish(
            "paused",
            snapshot=result.snapshot,
            request=requests[0] if len(requests) == 1 else requests,
        )

    async def pause_at(self, snapshot: FlowSnapshot, request: Any) -> Checkpoint:
        """Write the checkpoint of a run that waits for a human, without a flow pause:
        ``paused``, with ``snapshot`` and what it asks (JSON ``request``). Resuming it
        claims it with ``expect=("paused",)``."""
        return await self._finish("paused", snapshot=snapshot, request=request)

    async def complete(self, result: Any = None) -> Checkpoint:
        """Write the last checkpoint: ``completed`` with ``result`` (JSON data)."""
        return await self._finish("completed", result=result, request=None)

    async def fail(self, error: str) -> Checkpoint:
        """Mark the run ``failed``; its snapshot stays the last one saved, and an event being
        delivered stays noted, so that recovering the run retries from there."""
        try:
            return await self._write(status="failed", owner=None, error=error)
        finally:
            self.release()
            await _release_lease(self.store, self.run_id)

    async def abandon(self) -> None:
        """Stop running the run here without writing anything: it stays ``running``, for
        a later recovery (its lease, if the store has leases, is given back)."""
        self.release()
        await _release_lease(self.store, self.run_id)

    def release(self) -> None:
        """Forget that this process runs the run (without writing anything)."""
        if self.checkpoint.owner is not None:
            _LIVE.discard(self.checkpoint.owner.token)

    @property
    def open_calls(self) -> frozenset[str]:
        """The calls whose intent this process journaled and whose outcome it has not (yet):
        the calls running now, or those the run's own end cut off."""
        return frozenset(self._open)

    def reopen(self, call_id: str) -> None:
        """Count ``call_id`` as running here: a call whose intent was journaled before, run
        once more under that intent (its outcome is still to come)."""
        self._open.add(call_id)

    async def record_intent(self, entry: JournalEntry) -> JournalEntry:
        """Journal a call before it starts (see :meth:`CheckpointStore.record_intent`)."""
        stored = await self._beside_kept(self.store.record_intent, self.run_id, entry)
        if stored.state == "started" and stored.started_at == entry.started_at:
            self._open.add(entry.call_id)  # ours: the call starts now
        return stored

    async def record_outcome(
        self,
        call_id: str,
        outcome: Any,
        *,
        state: Literal["finished", "interrupted"] = "finished",
    ) -> JournalEntry:
        """Journal what came of a call (see :meth:`CheckpointStore.record_outcome`)."""
        entry = await self._beside_kept(self._outcome, call_id, outcome, state)
        self._open.discard(call_id)
        if state == "finished":
            self._written.add(call_id)
        return entry

    async def _outcome(self, call_id: str, outcome: Any, state: Any) -> JournalEntry:
        return await self.store.record_outcome(self.run_id, call_id, outcome, state=state)

    @property
    def written_outcomes(self) -> frozenset[str]:
        """The calls whose outcome this process journaled (``finished``)."""
        return frozenset(self._written)

    def keep(self, call_id: str, tool_name: str, outcome: Any) -> None:
        """Journal a note with the run's next write, in the same commit where the store
        commits concurrent writes together (a group commit: SQLite, PostgreSQL): what the
        run keeps of itself for a later look (e.g. its model replies, for a replay), at no
        commit of its own. Kept when the run writes next, whatever it writes; lost if the
        process stops first. A store that fails to write it does not fail the run."""
        self._kept.append(JournalEntry.note(call_id, tool_name, outcome))

    async def _beside_kept(self, write: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``write(*args)``, with the notes kept since the last write written beside it."""
        if not self._kept:
            return await write(*args)
        kept, self._kept = self._kept, []
        async with anyio.create_task_group() as group:
            for note in kept:
                group.start_soon(self._write_kept, note)
            done = await write(*args)
        return done

    async def _write_kept(self, note: JournalEntry) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.store.record_intent(self.run_id, note)
            except Exception:  # what the run keeps of itself matters less than the run
                return

    async def record_note(self, call_id: str, tool_name: str, outcome: Any) -> JournalEntry:
        """Journal a note: an entry finished as it is written (what the planner answered,
        what model calls cost, a human's decisions), in one write where the store keeps an
        entry given finished as it is (the shipped stores do), else as an intent and its
        outcome. Idempotent, as :meth:`record_intent` and :meth:`record_outcome` are."""
        note = JournalEntry.note(call_id, tool_name, outcome)
        stored = await self._beside_kept(self.store.record_intent, self.run_id, note)
        if stored.state == "started":  # an intent only (this store's, or written before)
            return await self.store.record_outcome(self.run_id, call_id, outcome)
        return stored

    async def journal(self) -> dict[str, JournalEntry]:
        """The run's journal as stored now, by call id."""
        stored = await self.load(self.store, self.run_id)
        return {entry.call_id: entry for entry in stored.journal}

    async def _finish(self, status: CheckpointStatus, **fields: Any) -> Checkpoint:
        try:
            return await self._write(
                status=status, owner=None, resume_event=None, resume_value=None, **fields
            )
        finally:
            self.release()
            await _release_lease(self.store, self.run_id)

    async def _write(self, **fields: Any) -> Checkpoint:
        update = self.checkpoint.model_copy(update=fields)
        revision = self.checkpoint.revision
        self.checkpoint = await self._beside_kept(self._put, update, revision)
        return self.checkpoint

    async def _put(self, checkpoint: Checkpoint, revision: int) -> Checkpoint:
        return await self.store.put(checkpoint, expected_revision=revision)


async def _take(
    store: CheckpointStore, checkpoint: Checkpoint, event: str | None, value: Any
) -> Checkpoint:
    """Write ``checkpoint`` as ``running``, owned here, over exactly the revision read."""
    claimed = checkpoint.model_copy(
        update={
            "status": "running",
            "owner": Owner.here(),
            "resume_event": event,
            "resume_value": value,
            "error": None,
        }
    )
    try:
        return await store.put(claimed, expected_revision=checkpoint.revision)
    except CheckpointConflictError as exc:
        raise RunNotResumableError(
            f"run {checkpoint.run_id!r} was resumed by someone else since it was read (it is "
            f"no longer at revision {checkpoint.revision}); nothing was changed"
        ) from exc


async def _release_lease(store: CheckpointStore, run_id: str) -> None:
    """Give the run's lease back, if the store has leases (even while being cancelled)."""
    leases = leases_of(store)
    if leases is not None:
        with anyio.CancelScope(shield=True):
            await leases.release_lease(run_id)


_LEASING: dict[type, bool] = {}
"""Whether a store class has leases (a protocol's ``isinstance`` is slow: asked once)."""


def leases_of(store: CheckpointStore) -> LeasingStore | None:
    """``store`` if it has leases (:class:`LeasingStore`), else ``None``."""
    kind = type(store)
    leasing = _LEASING.get(kind)
    if leasing is None:
        leasing = _LEASING[kind] = isinstance(store, LeasingStore)
    return store if leasing else None  # type: ignore[return-value]


def expect_status(checkpoint: Checkpoint, expect: Sequence[CheckpointStatus]) -> None:
    """Raise :class:`RunNotResumableError` unless the run is in one of the ``expect``
    statuses (the message says what to do instead)."""
    if checkpoint.status not in expect:
        raise RunNotResumableError(_not_resumable(checkpoint, expect))


def _not_resumable(checkpoint: Checkpoint, expect: Sequence[CheckpointStatus]) -> str:
    run_id, status = checkpoint.run_id, checkpoint.status
    if status == "completed":
        why = "it has completed (was it resumed already?)"
    elif status == "paused":
        why = "it is paused: resume it with a decision"
    elif status == "running":
        why = "it is running (resumed already, or its process died: then recover it)"
    else:
        why = f"it failed ({checkpoint.error}): recover it to retry from its last checkpoint"
    wanted = " or ".join(expect)
    return f"run {run_id!r} is {status}, not {wanted}: {why}; nothing was changed"
