"""Both stores keep checkpoints and journals the same way: atomic, revisioned, JSON only."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from postgres_cluster import fresh_schema

from toolloop.checkpoints import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointedRun,
    CheckpointError,
    CheckpointStore,
    CorruptCheckpointError,
    JournalEntry,
    MemoryCheckpointStore,
    PostgresCheckpointStore,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowSnapshot, Wait

pytestmark = pytest.mark.anyio


class OldSQLiteStore(SQLiteCheckpointStore):
    """A SQLite store as on a SQLite before 3.35 (no ``UPDATE ... RETURNING``)."""

    _RETURNING = False


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        "sqlite-per-write",
        "sqlite-no-returning",
        "postgres",
        "postgres-per-write",
    ]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CheckpointStore]:
    """Every store, with group commit (the default) and with one transaction per write."""
    kind, _, how = request.param.partition("-")
    grouped = how != "per-write"
    if kind == "memory":
        yield MemoryCheckpointStore()
    elif kind == "sqlite":
        cls = OldSQLiteStore if how == "no-returning" else SQLiteCheckpointStore
        async with cls(tmp_path / "runs.db", group_commit=grouped) as sqlite_store:
            yield sqlite_store
    else:
        url = request.getfixturevalue("postgres_url")
        async with (
            fresh_schema(url) as schema,
            PostgresCheckpointStore(url, schema=schema, group_commit=grouped) as pg,
        ):
            yield pg


def checkpoint(run_id: str = "r1", **fields: Any) -> Checkpoint:
    snapshot = FlowSnapshot(
        flow="f", execution_id=run_id, state={"n": 1}, waiting=[Wait(event="go", request="?")]
    )
    data: dict[str, Any] = {"run_id": run_id, "flow": "f", "status": "paused", "snapshot": snapshot}
    return Checkpoint(**{**data, **fields})


async def test_create_read_update_with_revisions(store: CheckpointStore) -> None:
    assert isinstance(store, CheckpointStore)
    assert await store.get("r1") is None
    first = await store.put(checkpoint(metadata={"who": "me"}), expected_revision=None)
    assert first.revision == 1
    assert first.created_at > 0
    read = await store.get("r1")
    assert read == first
    second = await store.put(read.model_copy(update={"status": "running"}), expected_revision=1)
    assert second.revision == 2
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    again = await store.get("r1")
    assert again is not None
    assert again.status == "running"
    assert again.snapshot.waiting == [Wait(event="go", request="?")]
    assert again.metadata == {"who": "me"}


async def test_writes_against_a_stale_revision_change_nothing(store: CheckpointStore) -> None:
    await store.put(checkpoint(), expected_revision=None)
    with pytest.raises(CheckpointConflictError, match="already has a checkpoint"):
        await store.put(checkpoint(status="running"), expected_revision=None)
    await store.put(checkpoint(status="running"), expected_revision=1)
    with pytest.raises(CheckpointConflictError, match="is at revision 2, not 1"):
        await store.put(checkpoint(status="completed"), expected_revision=1)
    with pytest.raises(CheckpointConflictError, match="has no checkpoint any more"):
        await store.put(checkpoint("ghost"), expected_revision=3)
    stored = await store.get("r1")
    assert stored is not None
    assert (stored.status, stored.revision) == ("running", 2)
    assert await store.get("ghost") is None


async def test_one_of_two_concurrent_writers_of_a_revision_wins(store: CheckpointStore) -> None:
    await store.put(checkpoint(), expected_revision=None)
    outcomes: list[str] = []

    async def write(status: Any) -> None:
        try:
            await store.put(checkpoint(status=status), expected_revision=1)
            outcomes.append(status)
        except CheckpointConflictError:
            outcomes.append("conflict")

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "running")
        tg.start_soon(write, "completed")
    assert outcomes.count("conflict") == 1
    stored = await store.get("r1")
    assert stored is not None and stored.revision == 2


async def test_run_ids_delete_and_statuses(store: CheckpointStore) -> None:
    await store.put(checkpoint("a"), expected_revision=None)
    await store.put(checkpoint("b", status="running"), expected_revision=None)
    await store.put(checkpoint("c", status="completed"), expected_revision=None)
    assert await store.run_ids() == ["a", "b", "c"]
    assert await store.run_ids(status="paused") == ["a"]
    await store.record_intent("b", JournalEntry(call_id="x", tool_name="t"))
    assert await store.delete("b") is True
    assert await store.delete("b") is False
    assert await store.run_ids() == ["a", "c"]
    # the journal went with it
    await store.put(checkpoint("b"), expected_revision=None)
    fresh = await store.get("b")
    assert fresh is not None and fresh.journal == []


async def test_the_journal_records_intent_then_outcome_once(store: CheckpointStore) -> None:
    await store.put(checkpoint(), expected_revision=None)
    intent = JournalEntry(call_id="call-1", tool_name="send", arguments={"to": "ada"})
    stored = await store.record_intent("r1", intent)
    assert stored.state == "started"
    assert stored.started_at == intent.started_at
    # a second intent for the same call changes nothing and says what is stored
    again = await store.record_intent("r1", JournalEntry(call_id="call-1", tool_name="other"))
    assert again == stored
    done = await store.record_outcome("r1", "call-1", {"success": True, "result": [1, "two"]})
    assert done.state == "finished"
    assert done.outcome == {"success": True, "result": [1, "two"]}
    assert done.finished_at is not None
    # an outcome is written once: a later one is ignored
    later = await store.record_outcome("r1", "call-1", {"success": False}, state="interrupted")
    assert later == done
    read = await store.get("r1")
    assert read is not None
    assert read.journal == [done]
    assert read.entry("call-1") == done
    assert read.entry("call-2") is None


async def test_a_note_is_journaled_finished_in_one_write(store: CheckpointStore) -> None:
    run = CheckpointedRun(store, await store.put(checkpoint(), expected_revision=None))
    note = await run.record_note("plan/0", "<planner>", {"commands": [1, "two"]})
    assert (note.state, note.outcome) == ("finished", {"commands": [1, "two"]})
    assert note.finished_at is not None
    assert "plan/0" not in run.open_calls  # a note runs nothing
    # once: written again, the stored one comes back, unchanged
    again = await run.record_note("plan/0", "<planner>", {"commands": []})
    assert again == note
    read = await store.get("r1")
    assert read is not None and read.journal == [note]
    # an intent journaled before (e.g. by an older toolloop) gets the note's outcome
    await store.record_intent("r1", JournalEntry(call_id="usage/1", tool_name="<usage>"))
    done = await run.record_note("usage/1", "<usage>", {"n": 1})
    assert (done.state, done.outcome) == ("finished", {"n": 1})
    with pytest.raises(CheckpointError, match="is not JSON data"):
        await run.record_note("bad", "<planner>", {1, 2})
    read = await store.get("r1")
    assert read is not None and [e.call_id for e in read.journal] == ["plan/0", "usage/1"]


async def test_a_note_on_a_store_that_writes_intents_only_is_intent_then_outcome() -> None:
    class IntentsOnly(MemoryCheckpointStore):
        async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
            started = entry.model_copy(update={"state": "started", "outcome": None})
            return await super().record_intent(run_id, started)

    store = IntentsOnly()
    run = CheckpointedRun(store, await store.put(checkpoint(), expected_revision=None))
    note = await run.record_note("plan/0", "<planner>", {"x": 1})
    assert (note.state, note.outcome) == ("finished", {"x": 1})
    read = await store.get("r1")
    assert read is not None and read.journal == [note]


async def test_a_put_never_touches_the_journal(store: CheckpointStore) -> None:
    await store.put(checkpoint(), expected_revision=None)
    old = await store.get("r1")
    assert old is not None
    await store.record_intent("r1", JournalEntry(call_id="c", tool_name="t"))
    await store.put(old.model_copy(update={"status": "running"}), expected_revision=1)
    read = await store.get("r1")
    assert read is not None
    assert [e.call_id for e in read.journal] == ["c"]


async def test_journal_misuse_is_refused(store: CheckpointStore) -> None:
    await store.put(checkpoint(), expected_revision=None)
    with pytest.raises(CheckpointError, match="no intent of call 'nope'"):
        await store.record_outcome("r1", "nope", {})
    with pytest.raises(CheckpointError, match="is not JSON data"):
        await store.record_intent(
            "r1", JournalEntry(call_id="c", tool_name="t", arguments={"x": {1, 2}})
        )
    await store.record_intent("r1", JournalEntry(call_id="c", tool_name="t"))
    with pytest.raises(CheckpointError, match="is not JSON data"):
        await store.record_outcome("r1", "c", object())
    read = await store.get("r1")
    assert read is not None
    assert [(e.call_id, e.state) for e in read.journal] == [("c", "started")]


async def test_what_comes_back_is_a_copy(store: CheckpointStore) -> None:
    metadata: dict[str, Any] = {"items": [1]}
    await store.put(checkpoint(metadata=metadata), expected_revision=None)
    metadata["items"].append(2)
    read = await store.get("r1")
    assert read is not None and read.metadata == {"items": [1]}


# -- SQLite only --------------------------------------------------------------------------


async def test_sqlite_is_one_file_in_wal_mode_with_a_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "runs.db"
    async with SQLiteCheckpointStore(path) as store:
        await store.put(checkpoint(), expected_revision=None)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    # another store object (another process, say) on the same file sees the run
    async with SQLiteCheckpointStore(path) as other:
        read = await other.get("r1")
        assert read is not None and read.revision == 1
        # two store objects on one file: one revision, one winner
        async with SQLiteCheckpointStore(path) as third:
            await other.put(checkpoint(status="running"), expected_revision=1)
            with pytest.raises(CheckpointConflictError):
                await third.put(checkpoint(status="completed"), expected_revision=1)


async def test_sqlite_refuses_files_it_cannot_trust(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(CheckpointError, match="has checkpoint schema 99; this toolloop reads"):
        await SQLiteCheckpointStore(newer).get("r1")

    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE stuff (x)")
    conn.close()
    with pytest.raises(CheckpointError, match="a SQLite database of something else"):
        await SQLiteCheckpointStore(foreign).run_ids()

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(CheckpointError, match="is not a toolloop checkpoint database"):
        await SQLiteCheckpointStore(garbage).get("r1")
    assert garbage.read_bytes() == b"this is not a database at all" * 100


async def test_sqlite_corrupt_rows_are_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointStore(path) as store:
        await store.put(checkpoint("bad"), expected_revision=None)
        await store.put(checkpoint("other"), expected_revision=None)
        await store.record_intent("other", JournalEntry(call_id="c", tool_name="t"))
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE checkpoints SET data = '{\"run_id\": \"bad\"' WHERE run_id = 'bad'"
            )
            conn.execute("UPDATE journal SET arguments = 'nope' WHERE run_id = 'other'")
        conn.close()
        with pytest.raises(
            CorruptCheckpointError, match="the checkpoint of run 'bad' cannot be read"
        ):
            await store.get("bad")
        with pytest.raises(CorruptCheckpointError, match="journal entry 'c' of run 'other'"):
            await store.get("other")
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT data, revision FROM checkpoints WHERE run_id = 'bad'")
            assert row.fetchone() == ('{"run_id": "bad"', 1)
        conn.close()


async def test_sqlite_a_checkpoint_under_another_run_id_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointStore(path) as store:
        await store.put(checkpoint("a"), expected_revision=None)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE checkpoints SET run_id = 'b'")
        conn.close()
        with pytest.raises(CorruptCheckpointError, match="is the one of run 'a'"):
            await store.get("b")


async def test_sqlite_durability_is_a_choice(tmp_path: Path) -> None:
    def synchronous(store: SQLiteCheckpointStore) -> int:
        assert store._conn is not None
        return int(store._conn.execute("PRAGMA synchronous").fetchone()[0])

    async with SQLiteCheckpointStore(tmp_path / "full.db") as full:
        assert synchronous(full) == 2  # FULL
    async with SQLiteCheckpointStore(tmp_path / "normal.db", durable=False) as normal:
        assert synchronous(normal) == 1  # NORMAL
        await normal.put(checkpoint(), expected_revision=None)
        assert await normal.run_ids() == ["r1"]


async def test_sqlite_reopens_after_aclose(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    await store.put(checkpoint(), expected_revision=None)
    await store.aclose()
    await store.aclose()
    assert await store.run_ids() == ["r1"]
    await store.aclose()
    assert "runs.db" in repr(store)


async def test_a_read_only_file_can_be_read_and_says_so_on_a_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointStore(path) as writer:
        await writer.put(checkpoint("r1"), expected_revision=None)
    async with SQLiteCheckpointStore(path, read_only=True) as reader:
        stored = await reader.get("r1")
        assert stored is not None and stored.run_id == "r1"
        assert await reader.run_ids() == ["r1"]
        with pytest.raises(CheckpointError, match=r"is read-only .* needs the file and its"):
            await reader.put(checkpoint("r2"), expected_revision=None)
    with pytest.raises(CheckpointError, match="does not exist, and a read-only store"):
        async with SQLiteCheckpointStore(tmp_path / "none.db", read_only=True):
            pass


async def test_a_locked_file_is_reported_as_locked(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointStore(path) as store:
        await store.put(checkpoint("r1"), expected_revision=None)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in a long write
    blocked = SQLiteCheckpointStore(path, timeout=0.05)
    try:
        with pytest.raises(CheckpointError, match="is locked by another process"):
            await blocked.put(checkpoint("r2"), expected_revision=None)
    finally:
        await blocked.aclose()
        holder.execute("ROLLBACK")
        holder.close()


async def test_a_file_that_is_not_a_database_says_so(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database at all" * 100)
    with pytest.raises(CheckpointError, match="is not a toolloop checkpoint database"):
        async with SQLiteCheckpointStore(path):
            pass
