"""Group commit in the SQL stores: the writes of concurrent callers are committed in one
transaction, and every promise of a write holds for each caller: its await returns only
after the commit that holds its write, its error is its own, and a cancelled caller leaves
the journal whole. On SQLite and PostgreSQL, on asyncio and trio."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from postgres_cluster import fresh_schema

from toolloop.checkpoints import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointError,
    CheckpointStore,
    JournalEntry,
    PostgresCheckpointStore,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowSnapshot

pytestmark = pytest.mark.anyio

HANG = 30  # seconds: a hang guard only


class Watch:
    """What a test sees of a store's writes: the transactions it committed, the size of
    each batch, a commit it holds before the commit (until released), a commit it makes
    fail, and a gate before a leader takes its batch."""

    def __init__(self) -> None:
        self.begun = 0
        self.commits = 0
        self.batches: list[int] = []
        self.hold_next = False
        self.holding = threading.Event()
        self.release = threading.Event()
        self.fail_next: BaseException | None = None
        self.slot_gate: anyio.Event | None = None
        self.in_slot = anyio.Event()

    @contextmanager
    def transaction(self, inner: Any) -> Iterator[Any]:
        self.begun += 1
        with inner as conn:
            yield conn
            # the writes are made: what follows runs before the COMMIT
            if self.hold_next:
                self.hold_next = False
                self.holding.set()
                assert self.release.wait(HANG), "the test never released the commit"
            if self.fail_next is not None:
                exc, self.fail_next = self.fail_next, None
                raise exc
        self.commits += 1

    @asynccontextmanager
    async def slot(self, inner: AbstractAsyncContextManager[Any]) -> AsyncIterator[None]:
        if self.slot_gate is not None:
            self.in_slot.set()
            await self.slot_gate.wait()
        async with inner:
            yield


class WatchedSQLite(SQLiteCheckpointStore):
    watch: Watch

    def _writing(self) -> Any:
        return self.watch.transaction(super()._writing())

    def _write_batch(self, batch: Any) -> None:
        self.watch.batches.append(len(batch))
        super()._write_batch(batch)

    def _batch_slot(self) -> Any:
        return self.watch.slot(super()._batch_slot())


class WatchedPostgres(PostgresCheckpointStore):
    watch: Watch

    def _writing(self) -> Any:
        return self.watch.transaction(super()._writing())

    def _write_batch(self, batch: Any) -> None:
        self.watch.batches.append(len(batch))
        super()._write_batch(batch)

    def _batch_slot(self) -> Any:
        return self.watch.slot(super()._batch_slot())


Watched = WatchedSQLite | WatchedPostgres


@pytest.fixture(params=["sqlite", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Makes stores of one backend sharing one database: ``make(group_commit=...)``."""
    if request.param == "sqlite":

        def sqlite(group_commit: bool = True) -> Watched:
            store = WatchedSQLite(tmp_path / "runs.db", group_commit=group_commit)
            store.watch = Watch()
            return store

        yield sqlite
        return
    url = request.getfixturevalue("postgres_url")
    schema = request.getfixturevalue("pg_schema")

    def postgres(group_commit: bool = True) -> Watched:
        store = WatchedPostgres(url, schema=schema, group_commit=group_commit)
        store.watch = Watch()
        return store

    yield postgres


@pytest.fixture
async def pg_schema(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_schema(postgres_url) as name:
        yield name


def commit_error(store: Watched) -> BaseException:
    """What the database raises when a commit fails (a lost disk or server)."""
    if isinstance(store, SQLiteCheckpointStore):
        return sqlite3.OperationalError("disk I/O error")
    return psycopg.OperationalError("server closed the connection unexpectedly")


def intent(call_id: str, **arguments: Any) -> JournalEntry:
    return JournalEntry(call_id=call_id, tool_name="send", arguments=arguments)


def checkpoint(run_id: str) -> Checkpoint:
    snapshot = FlowSnapshot(flow="f", execution_id=run_id, state={"n": 1})
    return Checkpoint(run_id=run_id, flow="f", status="running", snapshot=snapshot)


async def journal_of(store: CheckpointStore, run_id: str) -> dict[str, JournalEntry]:
    read = await store.get(run_id)
    return {} if read is None else {e.call_id: e for e in read.journal}


async def test_one_commit_holds_the_writes_of_many_callers(make: Any) -> None:
    runs = [f"r{i}" for i in range(20)]
    for group_commit, commits in ((True, 1), (False, len(runs))):
        async with make(group_commit=group_commit) as store:
            for run_id in runs:  # (made one by one: a commit each)
                await store.put(checkpoint(f"{run_id}-{group_commit}"), expected_revision=None)
            store.watch.commits = 0
            with anyio.fail_after(HANG):
                async with anyio.create_task_group() as tg:
                    for run_id in runs:
                        tg.start_soon(store.record_intent, f"{run_id}-{group_commit}", intent("c"))
            # grouped: every writer queued in the same pass, one transaction holds them
            assert store.watch.commits == commits
            for run_id in runs:
                assert list(await journal_of(store, f"{run_id}-{group_commit}")) == ["c"]


async def test_a_batch_of_every_kind_of_write_is_one_transaction(make: Any) -> None:
    async with make() as store:
        await store.put(checkpoint("old"), expected_revision=None)
        await store.record_intent("old", intent("running"))
        old = await store.get("old")
        assert old is not None
        store.watch.begun = store.watch.commits = 0
        results: dict[str, Any] = {}

        async def write(name: str, call: Any) -> None:
            results[name] = await call

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write, "create", store.put(checkpoint("new"), expected_revision=None))
                tg.start_soon(write, "update", store.put(old, expected_revision=1))
                tg.start_soon(write, "intent", store.record_intent("new", intent("c", n=[1])))
                tg.start_soon(write, "outcome", store.record_outcome("old", "running", [1, "2"]))
        # written at once (PostgreSQL: each kind in one statement), none again one by one
        assert (store.watch.begun, store.watch.commits, store.watch.batches[-1]) == (1, 1, 4)
        assert results["create"].revision == 1
        assert results["update"].revision == 2
        assert results["update"].created_at == old.created_at
        assert results["intent"].arguments == {"n": [1]} and results["intent"].state == "started"
        done = results["outcome"]
        assert (done.state, done.outcome, done.tool_name) == ("finished", [1, "2"], "send")
        read_old, read_new = await store.get("old"), await store.get("new")
        assert read_old is not None and read_new is not None
        assert read_old.revision == 2 and read_old.created_at == old.created_at
        assert read_old.journal == [done]
        assert read_new.journal == [results["intent"]]
        assert read_new.model_copy(update={"journal": []}) == results["create"]


async def test_a_caller_returns_only_after_the_commit_that_holds_its_write(make: Any) -> None:
    async with make() as store, make() as reader:
        for run_id in ("a", "b", "c"):
            await store.put(checkpoint(run_id), expected_revision=None)
        store.watch.hold_next = True
        store.watch.batches.clear()
        returned: list[str] = []

        async def write(run_id: str) -> None:
            await store.record_intent(run_id, intent("call"))
            returned.append(run_id)

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for run_id in ("a", "b", "c"):
                    tg.start_soon(write, run_id)
                try:
                    await anyio.to_thread.run_sync(store.watch.holding.wait, HANG)
                    # the writes are made in the open transaction, not committed: no caller
                    # has returned, and another connection sees none of them
                    assert store.watch.batches == [3]
                    assert returned == []
                    for run_id in ("a", "b", "c"):
                        assert await journal_of(reader, run_id) == {}
                finally:
                    store.watch.release.set()
        assert sorted(returned) == ["a", "b", "c"]
        for run_id in ("a", "b", "c"):
            assert list(await journal_of(reader, run_id)) == ["call"]


async def test_one_bad_write_in_a_batch_fails_only_its_caller(make: Any) -> None:
    async with make() as store:
        await store.put(checkpoint("run"), expected_revision=None)
        await store.record_intent("run", intent("before"))
        await store.record_intent("run", intent("dup"))
        stored = await store.get("run")
        assert stored is not None
        await store.put(stored, expected_revision=1)  # now at revision 2
        store.watch.batches.clear()
        results: dict[str, Any] = {}

        async def attempt(name: str, write: Any) -> None:
            try:
                results[name] = await write
            except CheckpointError as exc:
                results[name] = exc

        writes = {
            "good-1": store.record_intent("run", intent("g1", to="ada")),
            "stale": store.put(stored, expected_revision=1),
            "not-json": store.record_intent("run", intent("bad", when={1, 2})),
            "good-2": store.record_outcome("run", "before", {"sent": True}),
            "again": store.record_intent("run", intent("dup", to="someone else")),
            "no-intent": store.record_outcome("run", "ghost", {"x": 1}),
            "good-3": store.put(checkpoint("other"), expected_revision=None),
        }
        if isinstance(store, PostgresCheckpointStore):  # refused by the database itself
            writes["nul"] = store.record_intent("run", intent("nul\x00"))
        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for name, write in writes.items():
                    tg.start_soon(attempt, name, write)
        assert store.watch.batches[0] == len(writes)  # one batch held them all
        assert isinstance(results["stale"], CheckpointConflictError)
        assert "is at revision 2, not 1" in str(results["stale"])
        assert "is not JSON data" in str(results["not-json"])
        assert "no intent of call 'ghost'" in str(results["no-intent"])
        if "nul" in writes:
            assert isinstance(results["nul"], CheckpointError)
            assert "checkpoint database" in str(results["nul"])
        # the others were written, and each was told so
        assert results["good-1"].call_id == "g1" and results["good-1"].arguments == {"to": "ada"}
        assert results["good-2"].state == "finished" and results["good-2"].outcome == {"sent": True}
        assert results["again"].arguments == {} and results["again"].state == "started"
        assert results["good-3"].revision == 1
        journal = await journal_of(store, "run")
        assert sorted(journal) == ["before", "dup", "g1"]
        assert journal["before"].outcome == {"sent": True}
        read = await store.get("run")
        assert read is not None and read.revision == 2
        assert await store.get("other") is not None


async def test_a_commit_that_fails_fails_each_of_its_writes_and_writes_nothing(
    make: Any,
) -> None:
    async with make() as store:
        for run_id in ("a", "b", "c"):
            await store.put(checkpoint(run_id), expected_revision=None)
        store.watch.fail_next = commit_error(store)
        errors: list[BaseException] = []

        async def write(run_id: str) -> None:
            try:
                await store.record_intent(run_id, intent("call"))
            except CheckpointError as exc:
                errors.append(exc)

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for run_id in ("a", "b", "c"):
                    tg.start_soon(write, run_id)
        assert len(errors) == 3 and len({id(e) for e in errors}) == 3  # each its own error
        for error in errors:
            assert "(the transaction that held this write failed)" in str(error)
        for run_id in ("a", "b", "c"):
            assert await journal_of(store, run_id) == {}
        # the store goes on: the same writes, again, are made
        async with anyio.create_task_group() as tg:
            for run_id in ("a", "b", "c"):
                tg.start_soon(write, run_id)
        assert len(errors) == 3
        for run_id in ("a", "b", "c"):
            assert list(await journal_of(store, run_id)) == ["call"]


async def test_cancelled_writers_leave_the_journal_whole(make: Any) -> None:
    """Cancelled while its batch is being committed (the leader and its followers): the
    writes are committed all the same. Cancelled while still queued: never written. The
    writer queued after them is written, in the next batch."""
    async with make() as store:
        names = [f"taken-{i}" for i in range(5)] + ["queued-kept", "queued-cancelled"]
        for name in names:
            await store.put(checkpoint(name), expected_revision=None)
        store.watch.hold_next = True
        store.watch.batches.clear()
        scopes = {name: anyio.CancelScope() for name in names}
        outcomes: dict[str, str] = {}

        async def write(name: str) -> None:
            with scopes[name]:
                entry = await store.record_intent(name, intent("call", who=name))
                outcomes[name] = f"returned {entry.call_id}"
                return
            outcomes[name] = "cancelled"

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for name in names[:5]:
                    tg.start_soon(write, name)
                try:
                    await anyio.to_thread.run_sync(store.watch.holding.wait, HANG)
                    assert store.watch.batches == [5]
                    for name in names[5:]:  # queued behind the batch being committed
                        tg.start_soon(write, name)
                    await anyio.wait_all_tasks_blocked()
                    for name in [*names[:5], "queued-cancelled"]:
                        scopes[name].cancel()
                    await anyio.wait_all_tasks_blocked()
                    assert outcomes == {"queued-cancelled": "cancelled"}  # the others wait
                finally:
                    store.watch.release.set()
        assert outcomes["queued-kept"] == "returned call"
        for name in names[:5]:  # the batch was committed whole, cancelled or not
            assert list(await journal_of(store, name)) == ["call"]
            assert outcomes[name] in ("returned call", "cancelled")
        assert list(await journal_of(store, "queued-kept")) == ["call"]
        assert await journal_of(store, "queued-cancelled") == {}
        assert store.watch.batches == [5, 1]


async def test_a_leader_cancelled_before_it_took_its_batch_hands_the_lead_on(
    make: Any,
) -> None:
    async with make() as store:
        for name in ("leader", "follower"):
            await store.put(checkpoint(name), expected_revision=None)
        store.watch.slot_gate = anyio.Event()
        store.watch.batches.clear()
        leader_scope = anyio.CancelScope()
        done: list[str] = []

        async def lead() -> None:
            with leader_scope:
                await store.record_intent("leader", intent("call"))
                done.append("leader")

        async def follow() -> None:
            await store.record_intent("follower", intent("call"))
            done.append("follower")

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lead)
                await store.watch.in_slot.wait()  # the leader waits to take its batch
                tg.start_soon(follow)
                await anyio.wait_all_tasks_blocked()
                leader_scope.cancel()
                await anyio.wait_all_tasks_blocked()
                store.watch.slot_gate.set()
        assert done == ["follower"]
        assert store.watch.batches == [1]
        assert await journal_of(store, "leader") == {}
        assert list(await journal_of(store, "follower")) == ["call"]


def test_event_loops_in_threads_share_a_store(tmp_path: Path) -> None:
    """Each event loop has its own group commit: two loops in two threads (asyncio and
    trio, as the sync twins may run) write through one store at once."""
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    runs = [f"{prefix}{n}" for prefix in ("a", "t") for n in range(3)]
    failures: list[BaseException] = []

    async def begin() -> None:
        for run_id in runs:
            await store.put(checkpoint(run_id), expected_revision=None)

    async def write(prefix: str) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(store.record_intent, f"{prefix}{i % 3}", intent(f"c{i}"))

    def loop(prefix: str, backend: str) -> None:
        try:
            anyio.run(write, prefix, backend=backend)
        except BaseException as exc:
            failures.append(exc)

    anyio.run(begin)
    threads = [
        threading.Thread(target=loop, args=(prefix, backend))
        for prefix, backend in (("a", "asyncio"), ("t", "trio"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []

    async def read() -> dict[str, list[str]]:
        async with store:
            return {run_id: sorted(await journal_of(store, run_id)) for run_id in runs}

    journals = anyio.run(read)
    for prefix in ("a", "t"):
        for n in range(3):
            assert journals[f"{prefix}{n}"] == sorted(f"c{i}" for i in range(n, 30, 3))
