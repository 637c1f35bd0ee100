"""The checkpoint store protocol: a small seam, so another store is one class.

Two stores ship: :class:`SQLiteCheckpointStore` (a file, no server; the default) and
:class:`MemoryCheckpointStore` (for tests). A store keeps, per run id, the run's last
:class:`Checkpoint` and the journal of its tool calls. It knows nothing of agents: any
flow's paused snapshot can be kept in it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import CheckpointConflictError, CheckpointError
from ._model import Checkpoint, CheckpointStatus, JournalEntry

__all__ = ["CheckpointStore", "LeasingStore", "StoreBase", "json_text", "stored"]


@runtime_checkable
class CheckpointStore(Protocol):
    """Where checkpoints live. Every method is atomic: it writes all or nothing."""

    async def get(self, run_id: str) -> Checkpoint | None:
        """The run's checkpoint with its journal, or ``None`` if there is none.

        Raises:
            CorruptCheckpointError: the stored checkpoint cannot be read.
        """
        ...

    async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Checkpoint:
        """Write ``checkpoint`` (its journal is ignored); returns it as stored, with its new
        ``revision`` and times.

        Args:
            expected_revision: ``None`` to create the run (it must not exist yet); else the
                revision the caller read, which must still be the stored one.

        Raises:
            CheckpointConflictError: the run exists (on create), or no longer does, or its
                stored revision is another one. Nothing was written.
        """
        ...

    async def delete(self, run_id: str) -> bool:
        """Forget the run and its journal; whether there was one."""
        ...

    async def run_ids(self, *, status: CheckpointStatus | None = None) -> list[str]:
        """The ids of the stored runs (with that status), oldest first."""
        ...

    async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
        """Write the intent of a call before it starts; returns the stored entry.

        Idempotent: if ``entry.call_id`` is already in the run's journal, nothing is
        written and the stored entry (maybe finished) is returned.

        An entry given finished (``state`` not ``"started"``, with its ``outcome``: a note,
        see :meth:`CheckpointedRun.record_note`) may be written as it is, in this one
        write (the shipped stores do); a store that writes only intents returns it
        ``started``, and its outcome is written next.
        """
        ...

    async def record_outcome(
        self,
        run_id: str,
        call_id: str,
        outcome: Any,
        *,
        state: Literal["finished", "interrupted"] = "finished",
    ) -> JournalEntry:
        """Write the outcome (JSON data) of a call whose intent is in the journal.

        Idempotent: an entry that already has an outcome keeps it and is returned as is.

        Raises:
            CheckpointError: no intent of ``call_id`` is in the run's journal.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources (the store may be used again: it reopens)."""
        ...


@runtime_checkable
class LeasingStore(Protocol):
    """A store shared by workers on many machines, that knows which runs a live worker
    runs: the worker holds the run's *lease*, which ends when its worker dies (its database
    session ends). :class:`~toolloop.checkpoints.CheckpointedRun` takes the lease when it
    begins or claims a run and gives it back when the run pauses, completes or fails; a
    ``running`` run whose lease is free belongs to a worker that is gone, whatever host or
    process id its owner names. Stores without leases (SQLite, memory) judge by the owner's
    process id instead, which works only on one host."""

    async def acquire_lease(self, run_id: str) -> bool:
        """Take the run's lease for this store: ``False`` when another live worker holds it
        (taking one this store holds already is a no-op)."""
        ...

    async def release_lease(self, run_id: str) -> None:
        """Give the run's lease back (nothing if this store does not hold it)."""
        ...

    def holds_lease(self, run_id: str) -> bool:
        """Whether this store holds the run's lease now."""
        ...


class StoreBase:
    """What the shipped stores share (a base of theirs, not part of the protocol): the rule
    that an outcome needs an intent, and ``async with`` closing the store. A store writes an
    outcome in :meth:`_write_outcome`."""

    keep_replies: bool = False
    """Whether the durable runs of this store keep their model replies beside their journal,
    so that a run can be replayed from the store (``toolloop.testing.StoredRun``): a journal
    note per model call, written with the run's next write (no commit of its own). Off by
    default: it makes every durable run build its events and write more."""

    async def record_outcome(
        self,
        run_id: str,
        call_id: str,
        outcome: Any,
        *,
        state: Literal["finished", "interrupted"] = "finished",
    ) -> JournalEntry:
        entry = await self._write_outcome(run_id, call_id, outcome, state)
        if entry is None:
            raise CheckpointError(
                f"run {run_id!r} has no intent of call {call_id!r} in its journal; record the "
                "intent before the call starts"
            )
        return entry

    async def _write_outcome(
        self, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        """:meth:`CheckpointStore.record_outcome`, but ``None`` when no intent of ``call_id``
        is in the run's journal."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def stored(
    checkpoint: Checkpoint, previous: tuple[int, float] | None, expected: int | None
) -> Checkpoint:
    """``checkpoint`` as a store writes it over ``previous`` = (revision, created_at), after
    checking ``expected`` (see :meth:`CheckpointStore.put`)."""
    run_id = checkpoint.run_id
    if expected is None:
        if previous is not None:
            raise CheckpointConflictError(
                f"run {run_id!r} already has a checkpoint (revision {previous[0]}); pick "
                "another run id, or read it and write with its revision"
            )
        revision, created = 1, time.time()
    else:
        if previous is None:
            raise CheckpointConflictError(
                f"run {run_id!r} has no checkpoint any more (it was deleted); nothing was written"
            )
        if previous[0] != expected:
            raise CheckpointConflictError(
                f"run {run_id!r} is at revision {previous[0]}, not {expected}: someone else "
                "wrote it since it was read; nothing was written"
            )
        revision, created = expected + 1, previous[1]
    return checkpoint.model_copy(
        update={
            "revision": revision,
            "created_at": created,
            "updated_at": time.time(),
            "journal": [],
        }
    )


def json_text(value: Any, what: str) -> str:
    """``value`` as JSON text, or a :class:`CheckpointError` saying it is not JSON data."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{what} is not JSON data ({exc}); store dicts, lists, strings, numbers, "
            "booleans and None (e.g. model.model_dump(mode='json'))"
        ) from exc
