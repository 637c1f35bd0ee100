"""A checkpoint store in PostgreSQL, for many workers on many machines sharing their runs.

It keeps what the SQLite store keeps, with the same guarantees: every write is one
transaction (all or nothing); a write names the revision it overwrites and the row is
locked (``SELECT ... FOR UPDATE``) while it is checked, so of concurrent claims of one run
exactly one wins, across processes and hosts. The schema lives in a PostgreSQL schema of its
own (``toolloop`` by default) with a version table; the store creates and migrates it, and
refuses a schema written by a newer toolloop.

**Leases.** A worker that runs a run holds the run's *lease*: a session-level advisory lock
(``pg_try_advisory_lock``) on one connection of its store, kept apart from the pool. The
lock lives exactly as long as that session: when the worker's process dies (a crash, a
SIGKILL, its machine going away: the server drops the session once TCP keepalives give up),
the server releases it, and another worker can recover the run. No host name or process id
is trusted across machines: a run whose lease is held cannot be claimed, a run whose lease
is free and that is still marked ``running`` belongs to a worker that is gone.

**Why psycopg 3, in worker threads.** psycopg's async connections, like asyncpg, are built
on asyncio and do not run on trio; toolloop runs on both. psycopg's blocking API in a
worker thread (:func:`anyio.to_thread.run_sync`, as the SQLite store does) works on either,
keeps libpq's mature connection handling and :mod:`psycopg_pool`'s pooling, and a write
that has started is never abandoned half-way when its caller is cancelled.

Install it with ``pip install 'toolloop[postgres]'``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from .._secrets import REDACTED, register_secret, scrub
from ._errors import CheckpointError
from ._group import GroupCommit, PerLoop, Write
from ._sql import SQLStore, Step, WriteOp, own_copy

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["SCHEMA_VERSION", "PostgresCheckpointStore"]

SCHEMA_VERSION = 1

T = TypeVar("T")

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_SCHEMA = """
CREATE TABLE {s}.checkpoints (
    run_id      TEXT PRIMARY KEY,
    flow        TEXT NOT NULL,
    status      TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    data        TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    updated_at  DOUBLE PRECISION NOT NULL
);
CREATE INDEX checkpoints_by_status ON {s}.checkpoints (status, created_at);
CREATE TABLE {s}.journal (
    run_id      TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    seq         BIGSERIAL,
    tool_name   TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    state       TEXT NOT NULL,
    outcome     TEXT,
    started_at  DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    PRIMARY KEY (run_id, call_id)
)
"""

_SHARED_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.shared_results (
    shared_key  TEXT PRIMARY KEY,
    value       TEXT NOT NULL,
    expires_at  DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS shared_results_by_expiry ON {s}.shared_results (expires_at);
CREATE TABLE IF NOT EXISTS {s}.rate_limits (
    name        TEXT PRIMARY KEY,
    state       TEXT NOT NULL
)
"""
"""The cache of :class:`~toolloop.runner.SharedResults` and the state of each
:class:`~toolloop.ratelimit.SharedRateLimit` (made in a schema of version 1 too: tables
that an older toolloop leaves alone)."""

_MIGRATION_LOCK = 0x746F6F6C6C6F6F70  # "toolloop": one migrator at a time


def _import() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise CheckpointError(
            "PostgresCheckpointStore needs psycopg 3 and psycopg-pool: "
            "pip install 'toolloop[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class PostgresCheckpointStore(SQLStore):
    """A :class:`CheckpointStore` in a PostgreSQL database, shared by many workers.

    Args:
        url: a libpq connection string or URL (``postgresql://user@host:5432/db``). Its
            password never appears in an error.
        schema: the PostgreSQL schema that holds toolloop's tables (made if missing); stores
            with different schemas in one database do not see each other's runs.
        min_size: connections the pool keeps open.
        max_size: at most this many connections (and worker threads) at once.
        timeout: seconds to wait for a connection (to connect, or for a free one), and
            at most for one statement (a row lock held elsewhere, a busy server).
        group_commit: commit the writes of concurrent callers together, in one transaction
            on one connection; each call still returns only once its write is committed.
            ``False``: one transaction per write.

    Use it as ``async with PostgresCheckpointStore(url) as store`` (or call
    :meth:`aclose`); it connects, and creates or checks its schema, on first use. Closing
    it releases the leases of the runs it holds.
    """

    _JOURNAL_ORDER = "seq"
    _FOR_UPDATE = " FOR UPDATE"
    _RETURNING = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "toolloop",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        group_commit: bool = True,
        keep_replies: bool = False,
    ) -> None:
        self.keep_replies = keep_replies
        if not _NAME.match(schema):
            raise ValueError(
                f"schema must be a lower-case SQL name (letters, digits, _), got {schema!r}"
            )
        if not 1 <= max_size or min_size > max_size or min_size < 0:
            raise ValueError(f"need 0 <= min_size <= max_size >= 1, got {min_size}, {max_size}")
        self.url = url
        self._password = _password_of(url)
        register_secret(self._password)  # never in an error, a trace or a log
        self.schema = schema
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self.group_commit = group_commit
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._lease_conn: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()
        self._open_lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._limiters = PerLoop(lambda: anyio.CapacityLimiter(self.max_size))
        self._leasing = PerLoop(lambda: GroupCommit(self._change_leases, self._threads))

    def __repr__(self) -> str:
        return f"PostgresCheckpointStore({self.where()!r}, schema={self.schema!r})"

    def where(self) -> str:
        """The server and database, without the password (for messages)."""
        try:
            from psycopg.conninfo import conninfo_to_dict

            info = conninfo_to_dict(self.url)
        except Exception:
            return "<an unreadable connection string>"
        host = str(info.get("host") or "localhost")
        port = str(info.get("port") or "5432")
        return f"{info.get('user') or ''}@{host}:{port}/{info.get('dbname') or ''}".lstrip("@")

    async def __aenter__(self) -> PostgresCheckpointStore:
        await anyio.to_thread.run_sync(self._ensure_open)
        return self

    # -- leases ---------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str) -> bool:
        """Take the lease of ``run_id`` for this store (its process): ``False`` when another
        live session holds it. Taking a lease this store holds already is a no-op."""
        return bool(await self._lease_changes().write(_TAKE, (run_id,)))

    async def release_lease(self, run_id: str) -> None:
        """Give the lease of ``run_id`` back (if this store holds it)."""
        await self._lease_changes().write(_GIVE_BACK, (run_id,))

    def holds_lease(self, run_id: str) -> bool:
        """Whether this store holds the lease of ``run_id``."""
        return run_id in self._held

    def _lease_key(self, run_id: str) -> str:
        return f"{self.schema}:{run_id}"

    def _lease_changes(self) -> GroupCommit:
        """The lease changes of this event loop's runs, made together: the runs starting
        (or ending) at once take (or give back) their leases in one statement, one round
        trip on the lease session, not one each (and one worker thread, not one each).
        One queue per event loop, so a loop's changes keep their order."""
        return self._leasing.get()

    def _change_leases(self, batch: list[Write]) -> None:
        """In a worker thread: the lease changes of ``batch``, as if made in order: the
        gives and the takes of different runs in two statements (gives first), and where
        one run is both given and taken in the batch, each stretch of one kind in turn."""
        with self._lease_lock:
            gives = [w for w in batch if w.fn is _GIVE_BACK]
            takes = [w for w in batch if w.fn is not _GIVE_BACK]
            if (
                not gives
                or not takes
                or {w.args[0] for w in gives}.isdisjoint(w.args[0] for w in takes)
            ):
                if gives:
                    self._release_leases(gives)
                if takes:
                    self._acquire_leases(takes)
                return
            start = 0
            while start < len(batch):
                kind = batch[start].fn
                end = start + 1
                while end < len(batch) and batch[end].fn is kind:
                    end += 1
                if kind is _GIVE_BACK:
                    self._release_leases(batch[start:end])
                else:
                    self._acquire_leases(batch[start:end])
                start = end

    def _acquire_leases(self, writes: list[Write]) -> None:
        try:
            conn = self._lease_connection()  # (a new session holds nothing: before _held)
        except CheckpointError as exc:
            _fail_each(writes, exc)
            return
        keys = {
            self._lease_key(w.args[0]): w.args[0] for w in writes if w.args[0] not in self._held
        }
        if keys:
            try:
                rows = conn.execute(
                    "SELECT k, pg_try_advisory_lock(hashtextextended(k, 0)) "
                    "FROM unnest(%s::text[]) AS k",
                    (list(keys),),
                ).fetchall()
            except Exception as exc:
                if len(keys) > 1 and not self._session_lost(conn, exc):
                    # a run id the server cannot take (e.g. a NUL): each alone, so that
                    # only its own caller fails
                    for write in writes:
                        self._acquire_leases([write])
                    return
                if self._session_lost(conn, exc):
                    self._drop_lease_connection()  # its locks went with it
                error = self._error(exc)
                error.__cause__ = exc
                _fail_each(writes, error)
                return
            self._held.update(keys[key] for key, taken in rows if taken)
        for write in writes:
            write.done(write.args[0] in self._held)

    def _release_leases(self, writes: list[Write]) -> None:
        runs = {w.args[0] for w in writes} & self._held
        self._held -= runs
        conn = self._lease_conn  # (a session gone took its locks with it)
        if runs and conn is not None and not conn.closed:
            try:
                conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(k, 0)) "
                    "FROM unnest(%s::text[]) AS k",
                    ([self._lease_key(run_id) for run_id in runs],),
                )
            except Exception:
                self._drop_lease_connection()  # closing the session releases the locks
        for write in writes:
            write.done(None)

    @staticmethod
    def _session_lost(conn: psycopg.Connection[Any], exc: Exception) -> bool:
        """Whether ``exc`` ended the lease session (not only the statement)."""
        psycopg, _ = _import()
        return conn.closed or isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))

    def _lease_connection(self) -> psycopg.Connection[Any]:
        conn = self._lease_conn
        if conn is not None and not conn.closed:
            return conn
        self._held.clear()  # a new session holds nothing
        psycopg, _ = _import()
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, round(self.timeout)),
                application_name=f"toolloop-leases:{self.schema}",
            )
            # the server notices a worker whose machine is gone within about 30 s
            conn.execute("SET tcp_keepalives_idle = 10")
            conn.execute("SET tcp_keepalives_interval = 5")
            conn.execute("SET tcp_keepalives_count = 4")
        except Exception as exc:
            raise self._error(exc) from exc
        self._lease_conn = conn
        return conn  # type: ignore[no-any-return]

    def _drop_lease_connection(self) -> None:
        conn, self._lease_conn = self._lease_conn, None
        held, self._held = self._held, set()
        if conn is not None:
            try:
                if held and not conn.closed:  # at once, not when the server sees it closed
                    conn.execute("SELECT pg_advisory_unlock_all()")
            except Exception:
                pass
            try:
                conn.close()
            except Exception:
                pass

    # -- rate limits shared by the workers (toolloop.ratelimit.SharedRateLimit) -------------

    async def update_rate_limit(
        self, name: str, change: Callable[[str | None, float], tuple[str, T]]
    ) -> T:
        """Change the state of the shared rate limit ``name`` in one transaction: its row
        is locked (``SELECT ... FOR UPDATE``), ``change(state, now)`` is given its state
        (``None``: none yet) and the server's clock (seconds since the epoch, the same for
        every worker), and the state it returns is written. Its caller is not kept waiting
        when cancelled (the transaction ends on its own, within ``timeout``)."""
        async with self._threads():
            return await anyio.to_thread.run_sync(
                self._update_rate_limit, name, change, abandon_on_cancel=True
            )

    def _update_rate_limit(
        self, name: str, change: Callable[[str | None, float], tuple[str, T]]
    ) -> T:
        s = f'"{self.schema}"'
        select = (
            "SELECT state, extract(epoch FROM clock_timestamp())::float8 "
            f"FROM {s}.rate_limits WHERE name = %s FOR UPDATE"
        )
        try:
            with self._writing() as conn:
                row = conn.execute(select, (name,)).fetchone()
                if row is None:  # the first worker to use it: a row to lock
                    conn.execute(
                        f"INSERT INTO {s}.rate_limits (name, state) VALUES (%s, '') "
                        "ON CONFLICT DO NOTHING",
                        (name,),
                    )
                    row = conn.execute(select, (name,)).fetchone()
                if row is None:  # pragma: no cover  (inserted, or there already)
                    raise CheckpointError(f"the rate limit {name!r} has no row")
                state, result = change(row[0] or None, float(row[1]))
                conn.execute(
                    f"UPDATE {s}.rate_limits SET state = %s WHERE name = %s", (state, name)
                )
                return result
        except Exception as exc:
            error = self._failure(exc)
            if error is exc:
                raise
            raise error from exc

    # -- in a worker thread ---------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._threads():
            return await anyio.to_thread.run_sync(self._in_transaction, fn, args)

    def _threads(self) -> anyio.CapacityLimiter:
        """At most ``max_size`` worker threads at once (the others wait here, not for a
        connection); one limiter per event loop, so that the sync twins can share a store."""
        return self._limiters.get()

    def _batch_slot(self) -> anyio.CapacityLimiter:
        return self._threads()

    def _write_batch(self, batch: list[Write]) -> None:
        """The writes of a batch that are each one statement, touching rows no other write
        of the batch touches, are written kind by kind, each kind in one statement (a few
        round trips for the whole batch, not one or two per write). When one of them does
        not apply as its caller expected (a stale revision, an intent journaled before) or
        fails, the transaction is rolled back and the batch is written one write after the
        other (see :class:`SQLStore`), which says why."""
        if len(batch) > 1 and self._in_bulk(batch):
            return
        super()._write_batch(batch)

    def _in_bulk(self, batch: list[Write]) -> bool:
        """Whether ``batch`` was written and committed kind by kind (each write given its
        result, or, when the commit failed, its error)."""
        steps: dict[str, list[tuple[Write, Step]]] = {}
        keys: set[tuple[str, ...]] = set()
        for write in batch:
            try:
                step = write.fn.step(*write.args) if isinstance(write.fn, WriteOp) else None
            except Exception:  # its own error: said when written one after the other
                return False
            if step is None:
                return False
            key = _key(step)
            if key in keys:  # two writes of one row: in order, one after the other
                return False
            keys.add(key)
            steps.setdefault(step.kind, []).append((write, step))
        results: list[tuple[Write, Any]] = []
        sent = False
        try:
            with self._writing() as conn:
                for kind, some in steps.items():
                    columns = zip(*(step.params for _, step in some), strict=True)
                    params = [list(c) for c in columns]
                    rows = conn.execute(self._bulk(kind), params).fetchall()
                    if len(rows) != len(some):
                        raise _Missed
                    returned = {tuple(row[: _KEYS[kind]]): row[_KEYS[kind] :] for row in rows}
                    for write, step in some:
                        row = returned.get(_key(step)[1:])
                        if row is None:
                            raise _Missed
                        results.append((write, step.read(_Applied(row))))
                sent = True
        except Exception as exc:
            if not sent:  # rolled back: nothing was written
                return False
            error = self._failure(exc)  # the commit failed
            for write in batch:
                write.fail(own_copy(error, exc))
            return True
        for write, result in results:
            write.done(result)
        return True

    def _bulk(self, kind: str) -> str:
        """The statement that writes the steps of ``kind`` of a batch, given one array per
        column of their ``params``; it returns the key of each row it wrote (and what the
        step reads back)."""
        s = f'"{self.schema}"'
        return _BULK[kind].format(checkpoints=f"{s}.checkpoints", journal=f"{s}.journal")

    def _in_transaction(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``fn(connection, *args)`` in a transaction that reads one snapshot."""
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return fn(conn, *args)
        except Exception as exc:
            error = self._failure(exc)
            if error is exc:
                raise
            raise error from exc

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[Any]]:
        with self._connection() as conn, conn.transaction():
            yield conn

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        pool = self._pool or self._ensure_open()
        return pool.connection(timeout=self.timeout)

    def _failure(self, exc: Exception) -> BaseException:
        if isinstance(exc, (CheckpointError, ValueError)):
            return exc
        psycopg, psycopg_pool = _import()
        if isinstance(exc, psycopg_pool.PoolTimeout):
            error = CheckpointError(
                f"no connection to the checkpoint database {self.where()} within "
                f"{self.timeout:g} s ({exc}): the server is down or unreachable, or all "
                f"{self.max_size} connections stayed busy; check the server, or give a larger "
                "max_size= or timeout="
            )
        elif isinstance(exc, psycopg.Error):
            error = self._error(exc)
        else:
            return exc
        error.__cause__ = exc
        return error

    def _error(self, exc: BaseException) -> CheckpointError:
        """What went wrong with the database, in words a person can act on."""
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        said = scrub(said.replace(self._password, REDACTED) if self._password else said)
        low = said.lower()
        where = f"the checkpoint database {self.where()}"
        if "lock timeout" in low or "statement timeout" in low:
            why = (
                f"did not answer within {self.timeout:g} s (a row or table locked by another "
                "session, or an overloaded server): try again, or give a larger timeout="
            )
        elif "password authentication failed" in low or "authentication" in low:
            why = "refused the credentials: check the user and password of the URL"
        elif "does not exist" in low and "database" in low:
            why = "has no such database: create it (createdb) or fix the URL's database name"
        elif (
            "connection refused" in low
            or "could not connect" in low
            or "timeout" in low
            or "no such file" in low
            or "could not translate host name" in low
            or "connection failed" in low
        ):
            why = "cannot be reached: check that the server runs and that host and port are right"
        elif "permission denied" in low:
            why = "refused this user: grant it CREATE and USAGE on the schema (or use another)"
        elif "read-only" in low or "read only" in low:
            why = "is read-only (a standby?): connect to the primary"
        else:
            why = "failed"
        return CheckpointError(f"{where} {why} ({type(exc).__name__}: {said})")

    def _ensure_open(self) -> psycopg_pool.ConnectionPool[Any]:
        with self._open_lock:
            if self._pool is not None:
                return self._pool
            psycopg, psycopg_pool = _import()
            # one direct connection first: its error says what is wrong (the pool's would
            # only say that it timed out), and it creates or checks the schema
            try:
                with psycopg.connect(
                    self.url, autocommit=True, connect_timeout=max(1, round(self.timeout))
                ) as conn:
                    self._migrate(conn)
            except CheckpointError:
                raise
            except psycopg.Error as exc:
                raise self._error(exc) from exc
            pool = psycopg_pool.ConnectionPool(
                self.url,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.timeout,
                open=False,
                name=f"toolloop-{self.schema}",
                kwargs={"application_name": f"toolloop:{self.schema}", **self._session_options()},
            )
            pool.open(wait=False)
            self._pool = pool
            return pool  # type: ignore[no-any-return]

    def _session_options(self) -> dict[str, str]:
        """Every statement of the pool's sessions ends within ``timeout``: waiting for a lock
        or running (unless the URL sets its own ``options``)."""
        from psycopg.conninfo import conninfo_to_dict

        if conninfo_to_dict(self.url).get("options"):
            return {}
        ms = max(1, round(self.timeout * 1000))
        return {"options": f"-c lock_timeout={ms} -c statement_timeout={ms}"}

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        s = f'"{self.schema}"'
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            tables = {
                row[0]
                for row in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (self.schema,),
                ).fetchall()
            }
            if "schema_version" not in tables:
                if tables:
                    raise CheckpointError(
                        f"the schema {self.schema!r} of {self.where()} holds tables of something "
                        "else (no toolloop schema_version); give another schema="
                    )
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                for statement in _SCHEMA.format(s=s).split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"CREATE TABLE {s}.schema_version (version INTEGER NOT NULL)")
                conn.execute(
                    f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (SCHEMA_VERSION,)
                )
                self._shared_table(conn, s)
                return
            row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
            version = int(row[0]) if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                raise CheckpointError(
                    f"the schema {self.schema!r} of {self.where()} has checkpoint schema "
                    f"{version}; this toolloop reads schema {SCHEMA_VERSION}: upgrade toolloop"
                )
            # migrations from older versions go here, one step at a time
            self._shared_table(conn, s)

    @staticmethod
    def _shared_table(conn: psycopg.Connection[Any], s: str) -> None:
        for statement in _SHARED_SCHEMA.format(s=s).split(";"):
            if statement.strip():
                conn.execute(statement)

    def _sql(self, statement: str) -> str:
        s = f'"{self.schema}"'
        return statement.format(
            checkpoints=f"{s}.checkpoints", journal=f"{s}.journal", shared=f"{s}.shared_results"
        ).replace("?", "%s")

    def _insert_new(self, rest: str) -> str:
        return self._sql(f"INSERT {rest} ON CONFLICT DO NOTHING")

    def _close(self) -> None:
        with self._lease_lock:
            self._drop_lease_connection()
        with self._open_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def _fail_each(writes: list[Write], error: CheckpointError) -> None:
    """Each of ``writes`` failed with ``error``: an exception of its own each (an exception
    is raised by one caller only), with the same words and cause."""
    for k, write in enumerate(writes):
        own = error if k == 0 else CheckpointError(str(error))
        own.__cause__ = error.__cause__
        write.fail(own)


def _take_lease() -> None:
    """A lease change's kind (a :class:`Write`'s ``fn``, never called): take the lease."""


def _give_lease_back() -> None:
    """A lease change's kind (a :class:`Write`'s ``fn``, never called): give it back."""


_TAKE, _GIVE_BACK = _take_lease, _give_lease_back


class _Missed(Exception):
    """A write of a batch written in bulk did not apply as its caller expected."""


_BULK = {
    "create": (
        "INSERT INTO {checkpoints} (flow, status, revision, data, created_at, updated_at, "
        "run_id) SELECT * FROM unnest(%b::text[], %b::text[], %b::int[], %b::text[], "
        "%b::float8[], %b::float8[], %b::text[]) ON CONFLICT DO NOTHING RETURNING run_id"
    ),
    "update": (
        "UPDATE {checkpoints} AS c SET flow = v.flow, status = v.status, revision = v.rev, "
        "data = v.data, updated_at = v.updated FROM unnest(%b::text[], %b::text[], "
        "%b::int[], %b::text[], %b::float8[], %b::text[], %b::int[], %b::float8[]) AS "
        "v(flow, status, rev, data, updated, run_id, expected, created) WHERE c.run_id = "
        "v.run_id AND c.revision = v.expected AND c.created_at = v.created RETURNING c.run_id"
    ),
    "intent": (
        "INSERT INTO {journal} (run_id, call_id, tool_name, arguments, state, outcome, "
        "started_at, finished_at) SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], "
        "%b::text[], %b::text[], %b::text[], %b::float8[], %b::float8[]) ON CONFLICT DO "
        "NOTHING RETURNING run_id, call_id"
    ),
    "outcome": (
        "UPDATE {journal} AS j SET state = v.state, outcome = v.outcome, finished_at = "
        "v.finished FROM unnest(%b::text[], %b::text[], %b::float8[], %b::text[], "
        "%b::text[]) AS v(state, outcome, finished, run_id, call_id) WHERE j.run_id = "
        "v.run_id AND j.call_id = v.call_id AND j.state = 'started' RETURNING j.run_id, "
        "j.call_id, j.tool_name, j.arguments, j.started_at"
    ),
}
"""The statements that write the steps of one kind of a batch (see ``_bulk``)."""

_KEYS = {"create": 1, "update": 1, "intent": 2, "outcome": 2}
"""How many of the columns a bulk statement returns are the row's key."""


def _key(step: Step) -> tuple[str, ...]:
    """The table and the key of the row a step writes."""
    p = step.params
    if step.kind == "create":
        return ("checkpoints", p[6])
    if step.kind == "update":
        return ("checkpoints", p[5])
    if step.kind == "intent":
        return ("journal", p[0], p[1])
    return ("journal", p[3], p[4])


class _Applied:
    """What a step reads back of a row a bulk statement wrote (as if from its own
    cursor)."""

    __slots__ = ("_row",)
    rowcount = 1

    def __init__(self, row: tuple[Any, ...]) -> None:
        self._row = row

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [self._row]


def _password_of(url: str) -> str | None:
    """The password a connection string carries, if any (to keep it out of messages)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(url).get("password")
    except Exception:
        return None
    return str(password) if password else None
