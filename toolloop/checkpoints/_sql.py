"""What the SQL stores (SQLite, PostgreSQL) share: the protocol's calls, each run by a
function of the store on one of its connections in a worker thread, in a transaction (the
writes of concurrent callers in one: group commit); the statements both write alike; and
how their rows read back as checkpoints and journal entries."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from functools import cached_property
from typing import Any, NamedTuple, TypeVar

import anyio.lowlevel
import anyio.to_thread

from ._errors import CheckpointConflictError, CheckpointError, CorruptCheckpointError
from ._group import GroupCommit, PerLoop, Write
from ._model import Checkpoint, CheckpointStatus, JournalEntry
from ._store import StoreBase, json_text, stored

__all__ = [
    "CHECKPOINT_COLUMNS",
    "JOURNAL_COLUMNS",
    "MISSED",
    "SQLStore",
    "Step",
    "WriteOp",
    "checkpoint_of",
    "journal_entry",
    "own_copy",
]

_FIRST_WRITE = threading.Lock()
"""Held while a store makes its group commits' holder (once, on its first write)."""

T = TypeVar("T")

CHECKPOINT_COLUMNS = "data, status, revision, created_at, updated_at"
"""The columns of a checkpoints row that :func:`checkpoint_of` reads, in its order."""
JOURNAL_COLUMNS = "call_id, tool_name, arguments, state, outcome, started_at, finished_at"
"""The columns of a journal row that :func:`journal_entry` reads, in its order."""


class SQLStore(StoreBase):
    """A store whose every call runs one of its functions (``_get``, ``_put``, ...) on a
    connection (its first argument) in a worker thread, in a transaction: :meth:`_read`
    says how for a read, :meth:`_writing` for a batch of writes (of one write, without
    group commit). The statements are written once, here, in the words both databases
    know: ``{checkpoints}``, ``{journal}`` and ``{shared}`` stand for the tables, ``?``
    for a parameter (:meth:`_sql` puts the store's own).

    **Group commit** (``group_commit=True``, the default): the writes of concurrent callers
    of one event loop are committed together, in one transaction, by the first of them
    (see :class:`~toolloop.checkpoints._group.GroupCommit`); each caller's await returns once
    the transaction that holds its write has committed, with its own result or error.
    """

    _JOURNAL_ORDER: str
    """The column that orders a run's journal as it was written."""
    _FOR_UPDATE: str
    """What ends a ``SELECT`` that locks the rows it reads until the transaction ends."""
    _RETURNING: bool
    """Whether ``UPDATE ... RETURNING`` works (a write is then one statement)."""

    group_commit: bool
    """Whether concurrent writes are committed together (else one transaction each)."""
    _groups: PerLoop[GroupCommit] | None = None
    """The group commits of the event loops that write, one each (made by the first write)."""

    async def get(self, run_id: str) -> Checkpoint | None:
        return await self._read(self._get, run_id)

    async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Checkpoint:
        return await self._write(self._put, checkpoint, expected_revision)

    async def delete(self, run_id: str) -> bool:
        return await self._write(self._delete, run_id)

    async def run_ids(self, *, status: CheckpointStatus | None = None) -> list[str]:
        return await self._read(self._run_ids, status)

    async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
        return await self._write(self._record_intent, run_id, entry)

    async def _write_outcome(
        self, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        return await self._write(self._record_outcome, run_id, call_id, outcome, state)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close)

    # -- shared results (a cache of tool results, see toolloop.runner.SharedResults) --------

    async def get_shared(self, key: str, *, now: float) -> tuple[Any] | None:
        """The result kept under ``key`` (boxed), or ``None`` (none, or expired)."""
        return await self._read(self._get_shared, key, now)

    async def put_shared(
        self, key: str, value: Any, *, expires_at: float | None, now: float
    ) -> None:
        """Keep ``value`` (JSON data) under ``key`` until ``expires_at``; the entries
        expired before ``now`` are forgotten."""
        text = json_text(value, f"the shared result {key!r}")
        await self._write(self._put_shared, key, text, expires_at, now)

    def _get_shared(self, conn: Any, key: str, now: float) -> tuple[Any] | None:
        row = conn.execute(
            self._sql("SELECT value, expires_at FROM {shared} WHERE shared_key = ?"), (key,)
        ).fetchone()
        if row is None or (row[1] is not None and row[1] <= now):
            return None
        return (json.loads(row[0]),)

    def _put_shared(
        self, conn: Any, key: str, text: str, expires_at: float | None, now: float
    ) -> None:
        conn.execute(self._sql("DELETE FROM {shared} WHERE expires_at <= ?"), (now,))
        conn.execute(
            self._sql(
                "INSERT INTO {shared} (shared_key, value, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (shared_key) DO UPDATE SET value = excluded.value, "
                "expires_at = excluded.expires_at"
            ),
            (key, text, expires_at),
        )

    # -- writes, committed together -------------------------------------------------------

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` written and committed, alone or with the writes of
        concurrent callers (:attr:`group_commit`)."""
        if not self.group_commit:  # a batch of its own
            write = Write(fn, args)
            async with self._batch_slot():
                await anyio.to_thread.run_sync(self._write_batch, [write])
            result: T = write.outcome()
            return result
        groups = self._groups
        if groups is None:  # one per event loop: the sync twins share stores
            with _FIRST_WRITE:  # (two loops' first writes make one)
                groups = self._groups
                if groups is None:
                    groups = self._groups = PerLoop(
                        lambda: GroupCommit(self._write_batch, self._batch_slot)
                    )
        return await groups.get().write(fn, args)  # type: ignore[no-any-return]

    def _write_batch(self, batch: list[Write]) -> None:
        """In a worker thread: the writes of ``batch`` in one transaction, each given its
        result. A write that raises is given its error and left out, and the others are
        written again without it; a transaction that cannot begin or commit gives its error
        to each write still in it (none of them was written)."""
        todo = batch
        while todo:
            results: list[Any] = []
            running: Write | None = None
            try:
                with self._writing() as conn:
                    for write in todo:
                        running = write
                        results.append(write.fn(conn, *write.args))
                    running = None
            except Exception as exc:
                error = self._failure(exc)
                if running is None:  # the transaction itself failed
                    for write in todo:
                        write.fail(error if len(todo) == 1 else own_copy(error, exc))
                    return
                running.fail(error)
                todo = [write for write in todo if write is not running]
                continue
            for write, result in zip(todo, results, strict=True):
                write.done(result)
            return

    # -- what each store says --------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` in a worker thread, in one transaction that reads one
        snapshot, so that what it reads agrees."""
        raise NotImplementedError

    def _writing(self) -> AbstractContextManager[Any]:
        """A connection in a write transaction (in a worker thread), committed if the block
        ends well, rolled back if not; errors as the database raised them."""
        raise NotImplementedError

    def _failure(self, exc: Exception) -> BaseException:
        """What a caller gets for ``exc``, raised by the database or a write: a
        :class:`CheckpointError` that says what to do, or ``exc`` itself when it is one (or
        a ``ValueError``)."""
        raise NotImplementedError

    def _batch_slot(self) -> AbstractAsyncContextManager[Any]:
        """What the leader of a batch holds while it writes (nothing by default)."""
        return nullcontext()

    def _sql(self, statement: str) -> str:
        """``statement`` with this store's tables and parameter marks."""
        raise NotImplementedError

    def _insert_new(self, rest: str) -> str:
        """``INSERT rest`` (with :meth:`_sql`) that writes nothing when the row's key is
        taken already."""
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    # -- the statements ---------------------------------------------------------------------

    def _get(self, conn: Any, run_id: str) -> Checkpoint | None:
        row = conn.execute(
            self._sql(f"SELECT {CHECKPOINT_COLUMNS} FROM {{checkpoints}} WHERE run_id = ?"),
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        rows = conn.execute(
            self._sql(
                f"SELECT {JOURNAL_COLUMNS} FROM {{journal}} WHERE run_id = ? "
                f"ORDER BY {self._JOURNAL_ORDER}"
            ),
            (run_id,),
        ).fetchall()
        return checkpoint_of(run_id, row, [journal_entry(run_id, r) for r in rows])

    # each write: one statement when it applies as the caller expects (new, at the revision
    # read, started), which is all a batch sends in the common case; else the rest of it

    @cached_property
    def _put(self) -> WriteOp:
        return WriteOp(self._put_step, self._put_rest)

    @cached_property
    def _record_intent(self) -> WriteOp:
        return WriteOp(self._intent_step, self._intent_rest)

    @cached_property
    def _record_outcome(self) -> WriteOp:
        return WriteOp(self._outcome_step, self._outcome_rest)

    def _put_step(self, checkpoint: Checkpoint, expected: int | None) -> Step:
        if expected is None:  # new
            new = stored(checkpoint, None, None)
            return Step(
                "create", self._insert_checkpoint(), self._row(new), lambda c: _if_one(c, new)
            )
        # still at the revision read (and its times: the caller's copy is the stored one)
        new = stored(checkpoint, (expected, checkpoint.created_at), expected)
        return Step(
            "update",
            self._sql(
                "UPDATE {checkpoints} SET flow = ?, status = ?, revision = ?, data = ?, "
                "updated_at = ? WHERE run_id = ? AND revision = ? AND created_at = ?"
            ),
            (*self._row(new)[:4], new.updated_at, new.run_id, expected, new.created_at),
            lambda cur: _if_one(cur, new),
        )

    def _put_rest(self, conn: Any, checkpoint: Checkpoint, expected: int | None) -> Checkpoint:
        """What is stored decides: an update, or the conflict that says why not."""
        run_id = checkpoint.run_id
        row = conn.execute(
            self._sql(
                f"SELECT revision, created_at FROM {{checkpoints}} WHERE run_id = ?"
                f"{self._FOR_UPDATE}"
            ),
            (run_id,),
        ).fetchone()
        if row is None and expected is None:  # (it was there for the INSERT: gone since)
            raise CheckpointConflictError(
                f"run {run_id!r} already has a checkpoint (another writer created it just "
                "now); pick another run id, or read it and write with its revision"
            )
        new = stored(checkpoint, None if row is None else (row[0], row[1]), expected)
        conn.execute(
            self._sql(
                "UPDATE {checkpoints} SET flow = ?, status = ?, revision = ?, data = ?, "
                "created_at = ?, updated_at = ? WHERE run_id = ?"
            ),
            self._row(new),
        )
        return new

    def _insert_checkpoint(self) -> str:
        return self._insert_new(
            "INTO {checkpoints} (flow, status, revision, data, created_at, updated_at, "
            "run_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )

    @staticmethod
    def _row(new: Checkpoint) -> tuple[Any, ...]:
        return (
            new.flow,
            new.status,
            new.revision,
            new.dump_json(),
            new.created_at,
            new.updated_at,
            new.run_id,
        )

    def _intent_step(self, run_id: str, entry: JournalEntry) -> Step:
        arguments = json_text(entry.arguments, f"the arguments of {entry.call_id!r}")
        outcome = finished_at = None
        if entry.state != "started":  # a note: finished as it is written
            outcome = json_text(entry.outcome, f"the outcome of {entry.call_id!r}")
            finished_at = entry.finished_at if entry.finished_at is not None else time.time()
        row = (entry.call_id, entry.tool_name, arguments, entry.state, outcome)
        return Step(
            "intent",
            self._insert_new(
                "INTO {journal} (run_id, call_id, tool_name, arguments, state, outcome, "
                "started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (run_id, *row, entry.started_at, finished_at),
            # as written (a copy: read back from its JSON)
            lambda cur: (
                journal_entry(run_id, (*row, entry.started_at, finished_at))
                if cur.rowcount == 1
                else MISSED
            ),
        )

    def _intent_rest(self, conn: Any, run_id: str, entry: JournalEntry) -> JournalEntry:
        """In the journal already: as it is."""
        row = self._journal_row(conn, run_id, entry.call_id)
        assert row is not None
        return journal_entry(run_id, row)

    def _outcome_step(self, run_id: str, call_id: str, outcome: Any, state: str) -> Step | None:
        if not self._RETURNING:
            return None
        text = json_text(outcome, f"the outcome of {call_id!r}")
        finished = time.time()

        def read(cur: Any) -> Any:
            rows = cur.fetchall()
            if not rows:
                return MISSED
            tool_name, arguments, started_at = rows[0]
            return journal_entry(
                run_id, (call_id, tool_name, arguments, state, text, started_at, finished)
            )

        return Step(
            "outcome",
            self._sql(f"{_FINISH} RETURNING tool_name, arguments, started_at"),
            (state, text, finished, run_id, call_id),
            read,
        )

    def _outcome_rest(
        self, conn: Any, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        """Finished before, or no intent: as it is (``None``: none)."""
        text = json_text(outcome, f"the outcome of {call_id!r}")
        conn.execute(self._sql(_FINISH), (state, text, time.time(), run_id, call_id))
        row = self._journal_row(conn, run_id, call_id)
        return None if row is None else journal_entry(run_id, row)

    def _delete(self, conn: Any, run_id: str) -> bool:
        conn.execute(self._sql("DELETE FROM {journal} WHERE run_id = ?"), (run_id,))
        deleted = conn.execute(self._sql("DELETE FROM {checkpoints} WHERE run_id = ?"), (run_id,))
        return bool(deleted.rowcount)

    def _run_ids(self, conn: Any, status: CheckpointStatus | None) -> list[str]:
        if status is None:
            cur = conn.execute(
                self._sql("SELECT run_id FROM {checkpoints} ORDER BY created_at, run_id")
            )
        else:
            cur = conn.execute(
                self._sql(
                    "SELECT run_id FROM {checkpoints} WHERE status = ? ORDER BY created_at, run_id"
                ),
                (status,),
            )
        return [r[0] for r in cur.fetchall()]

    def _journal_row(self, conn: Any, run_id: str, call_id: str) -> Any:
        return conn.execute(
            self._sql(
                f"SELECT {JOURNAL_COLUMNS} FROM {{journal}} WHERE run_id = ? AND call_id = ?"
            ),
            (run_id, call_id),
        ).fetchone()


MISSED: Any = object()
"""What a :class:`Step` reads when its statement did not apply (its write's rest says why)."""

_FINISH = (
    "UPDATE {journal} SET state = ?, outcome = ?, finished_at = ? "
    "WHERE run_id = ? AND call_id = ? AND state = 'started'"
)


class Step(NamedTuple):
    r"""A write as one statement: its ``statement`` and ``params``, and how its cursor
    ``read``\ s as the write's result, or :data:`MISSED` when it did not apply. Its
    ``kind`` (``"create"``, ``"update"``, ``"intent"``, ``"outcome"``) lets a store write
    the steps of one kind in a batch as one statement (the ``params`` are then that
    statement's row of the write)."""

    kind: str
    statement: str
    params: tuple[Any, ...]
    read: Callable[[Any], Any]


class WriteOp:
    """A write of a SQL store: its :class:`Step` (``None``: none fits), and its ``rest``
    (``rest(connection, *args)``), run when the step missed or is none. Called as
    ``op(connection, *args)`` it does both."""

    __slots__ = ("rest", "step")

    def __init__(self, step: Callable[..., Step | None], rest: Callable[..., Any]) -> None:
        self.step = step
        self.rest = rest

    def __call__(self, conn: Any, *args: Any) -> Any:
        step = self.step(*args)
        if step is not None:
            result = step.read(conn.execute(step.statement, step.params))
            if result is not MISSED:
                return result
        return self.rest(conn, *args)


def _if_one(cur: Any, result: Any) -> Any:
    return result if cur.rowcount == 1 else MISSED


def own_copy(error: BaseException, cause: BaseException) -> BaseException:
    """A write's own error for a transaction that failed as a whole (an exception is raised
    by one caller only)."""
    if not isinstance(error, CheckpointError):
        error = CheckpointError(f"{type(error).__name__}: {error}")
    copy = CheckpointError(f"{error} (the transaction that held this write failed)")
    copy.__cause__ = cause
    return copy


def checkpoint_of(run_id: str, row: Any, journal: list[JournalEntry]) -> Checkpoint:
    """The checkpoint of a row of :data:`CHECKPOINT_COLUMNS`, with its ``journal``."""
    checkpoint = Checkpoint.load_json(row[0], run_id=run_id, journal=journal)
    return checkpoint.model_copy(
        update={
            "status": row[1],
            "revision": row[2],
            "created_at": row[3],
            "updated_at": row[4],
        }
    )


def journal_entry(run_id: str, row: Any) -> JournalEntry:
    """The entry of a row of :data:`JOURNAL_COLUMNS`."""
    call_id, tool_name, arguments, state, outcome, started_at, finished_at = row
    try:
        return JournalEntry(
            call_id=call_id,
            tool_name=tool_name,
            arguments=json.loads(arguments),
            state=state,
            outcome=None if outcome is None else json.loads(outcome),
            started_at=started_at,
            finished_at=finished_at,
        )
    except ValueError as exc:
        raise CorruptCheckpointError(
            f"the journal entry {call_id!r} of run {run_id!r} cannot be read ({exc}); it was "
            "left as it is"
        ) from exc
