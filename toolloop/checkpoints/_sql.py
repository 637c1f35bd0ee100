"""What the SQL stores (SQLite, PostgreSQL) share: the protocol's calls, each run by a
function of the store on one of its connections in a worker thread, in one transaction; the
statements both write alike; and how their rows read back as checkpoints and journal
entries."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

from ._errors import CheckpointConflictError, CorruptCheckpointError
from ._model import Checkpoint, CheckpointStatus, JournalEntry
from ._store import StoreBase, json_text, stored

__all__ = ["CHECKPOINT_COLUMNS", "JOURNAL_COLUMNS", "SQLStore", "checkpoint_of", "journal_entry"]

T = TypeVar("T")

CHECKPOINT_COLUMNS = "data, status, revision, created_at, updated_at"
"""The columns of a checkpoints row that :func:`checkpoint_of` reads, in its order."""
JOURNAL_COLUMNS = "call_id, tool_name, arguments, state, outcome, started_at, finished_at"
"""The columns of a journal row that :func:`journal_entry` reads, in its order."""


class SQLStore(StoreBase):
    """A store whose every call runs one of its functions (``_get``, ``_put``, ...) on a
    connection (its first argument) in a worker thread, in one transaction: :meth:`_call`
    says how. The statements are written once, here, in the words both databases know:
    ``{checkpoints}`` and ``{journal}`` stand for the tables, ``?`` for a parameter
    (:meth:`_sql` puts the store's own)."""

    _JOURNAL_ORDER: str
    """The column that orders a run's journal as it was written."""
    _FOR_UPDATE: str
    """What ends a ``SELECT`` that locks the rows it reads until the transaction ends."""

    async def get(self, run_id: str) -> Checkpoint | None:
        return await self._call(self._get, run_id, write=False)

    async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Checkpoint:
        return await self._call(self._put, checkpoint, expected_revision)

    async def delete(self, run_id: str) -> bool:
        return await self._call(self._delete, run_id)

    async def run_ids(self, *, status: CheckpointStatus | None = None) -> list[str]:
        return await self._call(self._run_ids, status, write=False)

    async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
        return await self._call(self._record_intent, run_id, entry)

    async def _write_outcome(
        self, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        return await self._call(self._record_outcome, run_id, call_id, outcome, state)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close)

    # -- what each store says --------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, write: bool = True) -> T:
        """``fn(connection, *args)`` in a worker thread, in one transaction: a write, or
        (``write=False``) a read of one snapshot, so that what it reads agrees."""
        raise NotImplementedError

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

    def _put(self, conn: Any, checkpoint: Checkpoint, expected: int | None) -> Checkpoint:
        run_id = checkpoint.run_id
        row = conn.execute(
            self._sql(
                f"SELECT revision, created_at FROM {{checkpoints}} WHERE run_id = ?"
                f"{self._FOR_UPDATE}"
            ),
            (run_id,),
        ).fetchone()
        new = stored(checkpoint, None if row is None else (row[0], row[1]), expected)
        values = (
            new.flow,
            new.status,
            new.revision,
            new.dump_json(),
            new.created_at,
            new.updated_at,
            run_id,
        )
        if row is None:
            written = conn.execute(
                self._insert_new(
                    "INTO {checkpoints} (flow, status, revision, data, created_at, updated_at, "
                    "run_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                values,
            ).rowcount
            if written != 1:  # created by another writer since the SELECT
                raise CheckpointConflictError(
                    f"run {run_id!r} already has a checkpoint (another writer created it just "
                    "now); pick another run id, or read it and write with its revision"
                )
        else:
            conn.execute(
                self._sql(
                    "UPDATE {checkpoints} SET flow = ?, status = ?, revision = ?, data = ?, "
                    "created_at = ?, updated_at = ? WHERE run_id = ?"
                ),
                values,
            )
        return new

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

    def _record_intent(self, conn: Any, run_id: str, entry: JournalEntry) -> JournalEntry:
        arguments = json_text(entry.arguments, f"the arguments of {entry.call_id!r}")
        conn.execute(
            self._insert_new(
                "INTO {journal} (run_id, call_id, tool_name, arguments, state, started_at) "
                "VALUES (?, ?, ?, ?, 'started', ?)"
            ),
            (run_id, entry.call_id, entry.tool_name, arguments, entry.started_at),
        )
        row = self._journal_row(conn, run_id, entry.call_id)
        assert row is not None
        return journal_entry(run_id, row)

    def _record_outcome(
        self, conn: Any, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        text = json_text(outcome, f"the outcome of {call_id!r}")
        conn.execute(
            self._sql(
                "UPDATE {journal} SET state = ?, outcome = ?, finished_at = ? "
                "WHERE run_id = ? AND call_id = ? AND state = 'started'"
            ),
            (state, text, time.time(), run_id, call_id),
        )
        row = self._journal_row(conn, run_id, call_id)
        return None if row is None else journal_entry(run_id, row)

    def _journal_row(self, conn: Any, run_id: str, call_id: str) -> Any:
        return conn.execute(
            self._sql(
                f"SELECT {JOURNAL_COLUMNS} FROM {{journal}} WHERE run_id = ? AND call_id = ?"
            ),
            (run_id, call_id),
        ).fetchone()


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
