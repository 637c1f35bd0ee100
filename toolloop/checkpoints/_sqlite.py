"""The default checkpoint store: one SQLite file, no server.

Every write is one ``BEGIN IMMEDIATE`` transaction (all or nothing, also across processes
sharing the file); the database runs in WAL mode with ``synchronous=FULL`` (by default), so
a write that returned survives a crash of the process or the machine. The schema carries
its version (``PRAGMA user_version``); a file written by a newer schema is refused, not
guessed at.
Blocking calls run in a worker thread (:func:`anyio.to_thread.run_sync`), never on the event
loop, and are not abandoned when the caller is cancelled, so a write is never cut in half.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio.to_thread

from ._errors import CheckpointError, CorruptCheckpointError
from ._model import Checkpoint, CheckpointStatus, JournalEntry
from ._store import json_text, stored

__all__ = ["SCHEMA_VERSION", "SQLiteCheckpointStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE checkpoints (
    run_id      TEXT PRIMARY KEY,
    flow        TEXT NOT NULL,
    status      TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    data        TEXT NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE journal (
    run_id      TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    state       TEXT NOT NULL,
    outcome     TEXT,
    started_at  REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX checkpoints_by_status ON checkpoints (status, created_at);
"""

T = TypeVar("T")


class SQLiteCheckpointStore:
    """A :class:`CheckpointStore` in a SQLite file (made if missing).

    Args:
        path: the database file; processes that share it share its runs.
        timeout: seconds to wait for another process's write to finish.
        durable: ``synchronous=FULL``: a write that returned survives a power loss too.
            ``False`` (``synchronous=NORMAL``) still survives a crash of the process, and
            writes several times faster.
        read_only: open the file for reading only (e.g. to inspect runs); ``None``: when the
            file (or its folder) cannot be written. Reads work; a write raises a
            :class:`CheckpointError` saying so.

    Use it as ``async with SQLiteCheckpointStore(path) as store`` (or call :meth:`aclose`);
    the file is opened on first use.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 10.0,
        durable: bool = True,
        read_only: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.durable = durable
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStore({str(self.path)!r})"

    # -- the protocol ---------------------------------------------------------------------

    async def get(self, run_id: str) -> Checkpoint | None:
        return await self._call(self._get, run_id)

    async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Checkpoint:
        return await self._call(self._put, checkpoint, expected_revision)

    async def delete(self, run_id: str) -> bool:
        return await self._call(self._delete, run_id)

    async def run_ids(self, *, status: CheckpointStatus | None = None) -> list[str]:
        return await self._call(self._run_ids, status)

    async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
        return await self._call(self._record_intent, run_id, entry)

    async def record_outcome(
        self,
        run_id: str,
        call_id: str,
        outcome: Any,
        *,
        state: Literal["finished", "interrupted"] = "finished",
    ) -> JournalEntry:
        return await self._call(self._record_outcome, run_id, call_id, outcome, state)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._close)

    async def __aenter__(self) -> SQLiteCheckpointStore:
        await self._call(lambda conn: None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- in the worker thread --------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self._locked, fn, args)

    def _locked(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            try:
                conn = self._conn or self._open()
                return fn(conn, *args)
            except sqlite3.Error as exc:
                raise CheckpointError(self._explain(exc)) from exc

    def _explain(self, exc: sqlite3.Error) -> str:
        """What went wrong with the file, in words a person can act on."""
        said = str(exc).lower()
        where = f"the checkpoint database {str(self.path)!r}"
        if "locked" in said or "busy" in said:
            return (
                f"{where} is locked by another process (waited {self.timeout:g} s for it): "
                "a long write elsewhere, or a process that holds it open in a transaction; "
                "try again, or give a larger timeout="
            )
        if "readonly" in said or "read-only" in said or "read only" in said:
            return (
                f"{where} is read-only ({exc}): it can be read, but this write needs the file "
                "and its folder to be writable (SQLite writes a journal beside it)"
            )
        if "unable to open" in said:
            return (
                f"{where} cannot be opened ({exc}): check that its folder exists and that "
                "this process may read (and, to write, write) the file and the folder"
            )
        if "not a database" in said or "malformed" in said or "encrypted" in said:
            return f"{where} is not a toolloop checkpoint database ({exc}); give another path"
        return f"{where} failed: {type(exc).__name__}: {exc}"

    def _writable(self) -> bool:
        if self.path.exists():
            folder = self.path.parent
            return os.access(self.path, os.W_OK) and os.access(folder, os.W_OK)
        return True

    def _open(self) -> sqlite3.Connection:
        read_only = self.read_only if self.read_only is not None else not self._writable()
        if read_only:
            if not self.path.exists():
                raise CheckpointError(
                    f"the checkpoint database {str(self.path)!r} does not exist, and a "
                    "read-only store cannot make it"
                )
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            if read_only:
                conn.execute("PRAGMA query_only = ON")
                self._check_version(conn)
            else:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.durable else 'NORMAL'}")
                self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise CheckpointError(self._explain(exc)) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _check_version(self, conn: sqlite3.Connection) -> None:
        """A read-only file must already hold toolloop's schema (nothing can be made)."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 or version > SCHEMA_VERSION:
            what = "no toolloop schema" if version == 0 else f"schema {version}"
            raise CheckpointError(
                f"{str(self.path)!r} (read-only) has {what}; this toolloop reads schema "
                f"{SCHEMA_VERSION}"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise CheckpointError(
                        f"{str(self.path)!r} is a SQLite database of something else (it has "
                        "tables but no toolloop schema); give another path"
                    )
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version > SCHEMA_VERSION:
                raise CheckpointError(
                    f"{str(self.path)!r} has checkpoint schema {version}; this toolloop reads "
                    f"schema {SCHEMA_VERSION}: upgrade toolloop"
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _get(self, conn: sqlite3.Connection, run_id: str) -> Checkpoint | None:
        conn.execute("BEGIN")  # one read transaction: the checkpoint and its journal agree
        try:
            row = conn.execute(
                "SELECT data, status, revision, created_at, updated_at FROM checkpoints "
                "WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            rows = conn.execute(
                "SELECT call_id, tool_name, arguments, state, outcome, started_at, finished_at "
                "FROM journal WHERE run_id = ? ORDER BY rowid",
                (run_id,),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        if row is None:
            return None
        journal = [_journal_entry(run_id, r) for r in rows]
        checkpoint = Checkpoint.load_json(row[0], run_id=run_id, journal=journal)
        return checkpoint.model_copy(
            update={
                "status": row[1],
                "revision": row[2],
                "created_at": row[3],
                "updated_at": row[4],
            }
        )

    def _put(
        self, conn: sqlite3.Connection, checkpoint: Checkpoint, expected: int | None
    ) -> Checkpoint:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT revision, created_at FROM checkpoints WHERE run_id = ?",
                (checkpoint.run_id,),
            ).fetchone()
            new = stored(checkpoint, None if row is None else (row[0], row[1]), expected)
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints (run_id, flow, status, revision, data, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    new.run_id,
                    new.flow,
                    new.status,
                    new.revision,
                    new.dump_json(),
                    new.created_at,
                    new.updated_at,
                ),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return new

    def _delete(self, conn: sqlite3.Connection, run_id: str) -> bool:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM journal WHERE run_id = ?", (run_id,))
            deleted = conn.execute("DELETE FROM checkpoints WHERE run_id = ?", (run_id,)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return bool(deleted)

    def _run_ids(self, conn: sqlite3.Connection, status: CheckpointStatus | None) -> list[str]:
        if status is None:
            rows = conn.execute("SELECT run_id FROM checkpoints ORDER BY created_at, run_id")
        else:
            rows = conn.execute(
                "SELECT run_id FROM checkpoints WHERE status = ? ORDER BY created_at, run_id",
                (status,),
            )
        return [r[0] for r in rows.fetchall()]

    def _record_intent(
        self, conn: sqlite3.Connection, run_id: str, entry: JournalEntry
    ) -> JournalEntry:
        arguments = json_text(entry.arguments, f"the arguments of {entry.call_id!r}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT OR IGNORE INTO journal (run_id, call_id, tool_name, arguments, state, "
                "started_at) VALUES (?, ?, ?, ?, 'started', ?)",
                (run_id, entry.call_id, entry.tool_name, arguments, entry.started_at),
            )
            row = self._journal_row(conn, run_id, entry.call_id)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        assert row is not None
        return _journal_entry(run_id, row)

    def _record_outcome(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        call_id: str,
        outcome: Any,
        state: str,
    ) -> JournalEntry:
        text = json_text(outcome, f"the outcome of {call_id!r}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "UPDATE journal SET state = ?, outcome = ?, finished_at = ? "
                "WHERE run_id = ? AND call_id = ? AND state = 'started'",
                (state, text, time.time(), run_id, call_id),
            )
            row = self._journal_row(conn, run_id, call_id)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if row is None:
            raise CheckpointError(
                f"run {run_id!r} has no intent of call {call_id!r} in its journal; record the "
                "intent before the call starts"
            )
        return _journal_entry(run_id, row)

    @staticmethod
    def _journal_row(conn: sqlite3.Connection, run_id: str, call_id: str) -> Any:
        return conn.execute(
            "SELECT call_id, tool_name, arguments, state, outcome, started_at, finished_at "
            "FROM journal WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        ).fetchone()


def _journal_entry(run_id: str, row: Any) -> JournalEntry:
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
