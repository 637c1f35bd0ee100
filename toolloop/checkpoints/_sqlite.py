"""The default checkpoint store: one SQLite file, no server.

Every write is made in a ``BEGIN IMMEDIATE`` transaction (all or nothing, also across
processes sharing the file), with the writes of concurrent callers by default (group
commit: one fsync for them all); the database runs in WAL mode with ``synchronous=FULL``
(by default), so a write that returned survives a crash of the process or the machine.
The schema carries its version (``PRAGMA user_version``); a file written by a newer schema
is refused, not guessed at.
Blocking calls run in a worker thread (:func:`anyio.to_thread.run_sync`), never on the event
loop, and are not abandoned when the caller is cancelled, so a write is never cut in half.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from ._errors import CheckpointError
from ._sql import SQLStore

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

_SHARED_SCHEMA = """
CREATE TABLE IF NOT EXISTS shared_results (
    shared_key  TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    expires_at  REAL
);
CREATE INDEX IF NOT EXISTS shared_results_by_expiry ON shared_results (expires_at);
"""
"""The cache of :class:`~toolloop.runner.SharedResults` (made in a file of schema 1 too:
a table that an older toolloop leaves alone)."""

T = TypeVar("T")


class SQLiteCheckpointStore(SQLStore):
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
        group_commit: commit the writes of concurrent callers together, in one transaction
            (one fsync); each call still returns only once its write is committed.
            ``False``: one transaction per write.

    Use it as ``async with SQLiteCheckpointStore(path) as store`` (or call :meth:`aclose`);
    the file is opened on first use.
    """

    _JOURNAL_ORDER = "rowid"
    _FOR_UPDATE = ""  # a write's transaction (BEGIN IMMEDIATE) locks the whole file
    _RETURNING = sqlite3.sqlite_version_info >= (3, 35, 5)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 10.0,
        durable: bool = True,
        read_only: bool | None = None,
        group_commit: bool = True,
        keep_replies: bool = False,
    ) -> None:
        self.path = Path(path)
        self.keep_replies = keep_replies
        self.timeout = timeout
        self.durable = durable
        self.read_only = read_only
        self.group_commit = group_commit
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStore({str(self.path)!r})"

    async def __aenter__(self) -> SQLiteCheckpointStore:
        await self._read(lambda conn: None)
        return self

    # -- in the worker thread --------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self._locked, fn, args)

    def _locked(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            try:
                conn = self._conn or self._open()
                with _transaction(conn, "DEFERRED"):
                    return fn(conn, *args)
            except sqlite3.Error as exc:
                raise CheckpointError(self._explain(exc)) from exc

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn or self._open()
            with _transaction(conn, "IMMEDIATE"):
                yield conn

    def _failure(self, exc: Exception) -> BaseException:
        if isinstance(exc, sqlite3.Error):
            error = CheckpointError(self._explain(exc))
            error.__cause__ = exc
            return error
        return exc

    def _sql(self, statement: str) -> str:
        return statement.format(
            checkpoints="checkpoints", journal="journal", shared="shared_results"
        )

    def _insert_new(self, rest: str) -> str:
        return self._sql(f"INSERT OR IGNORE {rest}")

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
        with _transaction(conn, "IMMEDIATE"):
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
            for statement in _SHARED_SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@contextmanager
def _transaction(conn: sqlite3.Connection, mode: str) -> Iterator[None]:
    """One transaction (``IMMEDIATE`` for a write: it waits for other writers first,
    ``DEFERRED`` for a read: it reads one snapshot), committed if the block ends well,
    rolled back if not."""
    conn.execute(f"BEGIN {mode}")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # (a COMMIT that failed may have rolled back already)
            conn.execute("ROLLBACK")
        raise
