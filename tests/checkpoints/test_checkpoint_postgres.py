"""The PostgreSQL store on a real server: its schema, its errors, its pool, its leases, and
many worker processes resuming and recovering the same runs at once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from postgres_cluster import fresh_schema

from toolloop.checkpoints import (
    Checkpoint,
    CheckpointedRun,
    CheckpointError,
    CheckpointStore,
    JournalEntry,
    LeasingStore,
    MemoryCheckpointStore,
    Owner,
    PostgresCheckpointStore,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowSnapshot
from toolloop.runner import ToolCommand, ToolExecutionRecord, json_safe

WORKER = Path(__file__).with_name("contention_worker.py")


def snapshot(run_id: str) -> FlowSnapshot:
    return FlowSnapshot(flow="f", execution_id=run_id, state={"n": 1})


@pytest.fixture
async def schema(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_schema(postgres_url) as name:
        yield name


@pytest.mark.anyio
async def test_the_schema_is_made_once_with_a_version_table(postgres_url: str, schema: str) -> None:
    async with PostgresCheckpointStore(postgres_url, schema=schema) as store:
        await store.put(
            Checkpoint(run_id="r", flow="f", status="paused", snapshot=snapshot("r")),
            expected_revision=None,
        )
    # a second store (another worker) on the same schema migrates nothing and sees the run
    async with PostgresCheckpointStore(postgres_url, schema=schema) as other:
        assert await other.run_ids() == ["r"]
    with psycopg.connect(postgres_url) as conn:
        versions = conn.execute(f'SELECT version FROM "{schema}".schema_version').fetchall()
        assert versions == [(1,)]
        conn.execute(f'UPDATE "{schema}".schema_version SET version = 99')
    with pytest.raises(CheckpointError, match="has checkpoint schema 99; this toolloop reads"):
        await PostgresCheckpointStore(postgres_url, schema=schema).run_ids()


@pytest.mark.anyio
async def test_a_schema_of_something_else_is_refused(postgres_url: str, schema: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".stuff (x int)')
    with pytest.raises(CheckpointError, match="holds tables of something else"):
        async with PostgresCheckpointStore(postgres_url, schema=schema):
            pass
    with pytest.raises(ValueError, match="schema must be a lower-case SQL name"):
        PostgresCheckpointStore(postgres_url, schema='x"; DROP TABLE y; --')


@pytest.mark.anyio
async def test_a_wrong_or_unreachable_database_says_so_without_the_password(
    postgres_url: str, tmp_path: Path
) -> None:
    nowhere = f"postgresql://ada:s3cret-pw@/postgres?host={tmp_path}&port=5432"
    store = PostgresCheckpointStore(nowhere, timeout=2)
    with pytest.raises(CheckpointError, match="cannot be reached") as caught:
        await store.get("r")
    assert "s3cret-pw" not in str(caught.value)
    assert "s3cret-pw" not in repr(store)
    from toolloop.tracing import redact_text

    assert redact_text("the password is s3cret-pw") == "the password is [redacted]"
    assert "ada@" in str(caught.value)
    await store.aclose()

    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    info["dbname"] = "no_such_db"
    wrong = psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})
    with pytest.raises(CheckpointError, match="has no such database: create it"):
        async with PostgresCheckpointStore(wrong, timeout=5):
            pass


@pytest.mark.anyio
async def test_leases_asked_for_at_once_of_an_unreachable_database_fail_each_on_its_own(
    tmp_path: Path,
) -> None:
    nowhere = f"postgresql://ada:s3cret-pw@/postgres?host={tmp_path}&port=5432"
    store = PostgresCheckpointStore(nowhere, timeout=2)
    errors: list[BaseException] = []

    async def take(run_id: str) -> None:
        try:
            await store.acquire_lease(run_id)
        except CheckpointError as exc:
            errors.append(exc)

    with anyio.fail_after(60):  # a hang guard
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(take, f"r{i}")
    assert len(errors) == 5 and len({id(e) for e in errors}) == 5  # each raised once
    for error in errors:
        chain: BaseException | None = error
        while chain is not None:  # nowhere in the exception chain either
            assert "s3cret-pw" not in f"{chain} {chain!r}"
            chain = chain.__cause__ or chain.__context__
        assert "cannot be reached" in str(error)
    assert not store.holds_lease("r0")
    await store.aclose()


@pytest.mark.anyio
async def test_a_row_locked_elsewhere_is_a_clear_error_in_time(
    postgres_url: str, schema: str
) -> None:
    async with PostgresCheckpointStore(postgres_url, schema=schema, timeout=0.5) as store:
        first = Checkpoint(run_id="r", flow="f", status="paused", snapshot=snapshot("r"))
        await store.put(first, expected_revision=None)
        with psycopg.connect(postgres_url) as holder:  # another session, in a long write
            holder.execute(
                f'SELECT * FROM "{schema}".checkpoints WHERE run_id = %s FOR UPDATE', ("r",)
            )
            with (
                anyio.fail_after(30),
                pytest.raises(CheckpointError, match=r"did not answer within 0\.5 s"),
            ):
                await store.put(first.model_copy(update={"status": "running"}), expected_revision=1)
            holder.rollback()
        read = await store.get("r")
        assert read is not None and (read.status, read.revision) == ("paused", 1)


@pytest.mark.anyio
async def test_many_tasks_share_a_small_pool(postgres_url: str, schema: str) -> None:
    async with PostgresCheckpointStore(postgres_url, schema=schema, max_size=2) as store:
        for i in range(20):
            await store.put(
                Checkpoint(run_id=f"r{i}", flow="f", status="paused", snapshot=snapshot("x")),
                expected_revision=None,
            )
        seen: list[int] = []

        async def read(i: int) -> None:
            checkpoint = await store.get(f"r{i}")
            assert checkpoint is not None
            seen.append(i)

        with anyio.fail_after(60):  # a hang guard
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    for _ in range(5):
                        tg.start_soon(read, i)
        assert sorted(seen) == sorted(list(range(20)) * 5)
        assert store._pool is not None
        assert store._pool.get_stats()["pool_size"] <= 2
        assert 1 <= connected(postgres_url, schema) <= 2
    # closing the store closed its connections (their server processes end a moment later)
    assert await anyio.to_thread.run_sync(none_left, postgres_url, schema)


def none_left(url: str, schema: str) -> bool:
    """Whether the sessions of ``schema``'s stores end (within a hang guard of 30 s)."""
    deadline = time.monotonic() + 30
    while connected(url, schema):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def connected(url: str, schema: str) -> int:
    """How many sessions the stores of ``schema`` hold (they name themselves after it)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"toolloop:{schema}",),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.anyio
async def test_a_run_held_by_a_live_worker_is_not_recovered_until_it_is_gone(
    postgres_url: str, schema: str
) -> None:
    worker_a = PostgresCheckpointStore(postgres_url, schema=schema)
    worker_b = PostgresCheckpointStore(postgres_url, schema=schema)
    assert isinstance(worker_a, LeasingStore)
    assert not isinstance(MemoryCheckpointStore(), LeasingStore)
    async with worker_b:
        run = await CheckpointedRun.begin(worker_a, run_id="r", flow="f", snapshot=snapshot("r"))
        assert worker_a.holds_lease("r")
        # worker B sees it running, owned by A, whose session holds the lease
        seen = await worker_b.get("r")
        assert seen is not None and seen.status == "running"
        with pytest.raises(RunNotResumableError, match="another live worker"):
            await CheckpointedRun.claim(worker_b, seen, expect=("running",))
        # even an owner that names no live process on this host does not fool it
        fake = seen.model_copy(update={"owner": Owner(host="elsewhere", pid=1, token="t")})
        with pytest.raises(RunNotResumableError, match="another live worker"):
            await CheckpointedRun.claim(worker_b, fake, expect=("running",))
        assert run.checkpoint.revision == 1
        await worker_a.aclose()  # A's session ends (as when its process dies)
        recovered = await CheckpointedRun.claim(worker_b, seen, expect=("running",))
        assert worker_b.holds_lease("r")
        await recovered.complete("done")
        assert not worker_b.holds_lease("r")  # completing gave the lease back
        final = await worker_b.get("r")
        assert final is not None and (final.status, final.result) == ("completed", "done")


def _advisory_locks(url: str, application: str) -> int:
    """How many advisory locks the sessions named ``application`` hold on the server."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND a.application_name = %s",
            (application,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.anyio
async def test_leases_taken_and_given_back_at_once_are_each_runs_own(
    postgres_url: str, schema: str
) -> None:
    """Many runs starting at once take their leases together (one statement on the lease
    session): each gets its own answer, a run held by another worker is refused, a lease
    asked for twice is taken once, and giving them back frees each for another worker."""
    worker_a = PostgresCheckpointStore(postgres_url, schema=schema)
    worker_b = PostgresCheckpointStore(postgres_url, schema=schema)
    app = f"toolloop-leases:{schema}"
    async with worker_a, worker_b:
        assert await worker_b.acquire_lease("held")
        runs = [f"r{i}" for i in range(40)]
        got: dict[str, list[bool]] = {}

        async def take(run_id: str) -> None:
            got.setdefault(run_id, []).append(await worker_a.acquire_lease(run_id))

        with anyio.fail_after(60):  # a hang guard
            async with anyio.create_task_group() as tg:
                for run_id in [*runs, "held", "r0", "r1"]:
                    tg.start_soon(take, run_id)
        assert got == {
            **{r: [True] for r in runs},
            "r0": [True, True],
            "r1": [True, True],
            "held": [False],
        }
        assert all(worker_a.holds_lease(r) for r in runs) and not worker_a.holds_lease("held")
        # one lock a run, whatever the asks: 41 held, across both workers' sessions
        assert _advisory_locks(postgres_url, app) == 41
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for run_id in [*runs[:20], "held", "r0"]:  # "held" is not A's: a no-op
                    tg.start_soon(worker_a.release_lease, run_id)
        assert not any(worker_a.holds_lease(r) for r in runs[:20])
        assert all(worker_a.holds_lease(r) for r in runs[20:])
        assert _advisory_locks(postgres_url, app) == 21  # 20 of A's, B's "held"
        # what A gave back, B can take; what A holds, B cannot
        assert [await worker_b.acquire_lease(r) for r in ("r0", "r19", "r20")] == [
            True,
            True,
            False,
        ]


class _Counting:
    """The lease session, counting the statements sent on it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self.conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


async def _counted(store: PostgresCheckpointStore) -> _Counting:
    counting = _Counting(await anyio.to_thread.run_sync(store._lease_connection))
    store._lease_conn = counting  # type: ignore[assignment]
    return counting


async def _at_once(*changes: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    with anyio.fail_after(60):  # a hang guard
        async with anyio.create_task_group() as tg:
            for change in changes:
                tg.start_soon(change)


@pytest.mark.anyio
async def test_leases_changed_at_once_go_in_one_statement_each_kind_and_keep_their_order(
    postgres_url: str, schema: str
) -> None:
    async with (
        PostgresCheckpointStore(postgres_url, schema=schema) as worker_a,
        PostgresCheckpointStore(postgres_url, schema=schema) as worker_b,
    ):
        session = await _counted(worker_a)
        await _at_once(*(partial(worker_a.acquire_lease, f"r{i}") for i in range(40)))
        assert session.statements <= 2  # one round trip for the 40 (not 40)
        assert all(worker_a.holds_lease(f"r{i}") for i in range(40))
        # the runs ending while others start: the gives, then the takes
        session.statements = 0
        await _at_once(
            *(partial(worker_a.release_lease, f"r{i}") for i in range(20)),
            *(partial(worker_a.acquire_lease, f"s{i}") for i in range(20)),
        )
        assert session.statements <= 3
        assert not any(worker_a.holds_lease(f"r{i}") for i in range(20))
        assert all(worker_a.holds_lease(f"s{i}") for i in range(20))
        # one run given back and taken again in one batch: in the order asked, held after
        # (the session held busy by a batch meanwhile, so that the two queue in order)
        stalled = worker_a._lease_lock
        stalled.acquire()
        held = True
        try:
            with anyio.fail_after(60):  # a hang guard
                async with anyio.create_task_group() as tg:
                    tg.start_soon(worker_a.acquire_lease, "pad")  # its batch waits
                    await anyio.wait_all_tasks_blocked()
                    tg.start_soon(worker_a.release_lease, "r20")
                    await anyio.wait_all_tasks_blocked()
                    tg.start_soon(worker_a.acquire_lease, "r20")
                    await anyio.wait_all_tasks_blocked()
                    stalled.release()
                    held = False
        finally:
            if held:
                stalled.release()
        assert worker_a.holds_lease("r20")
        assert not await worker_b.acquire_lease("r20")  # held by A, once: B cannot take it
        await worker_a.release_lease("r20")
        assert await worker_b.acquire_lease("r20")  # one give freed it: it was held once


@pytest.mark.anyio
async def test_a_run_id_the_server_refuses_fails_only_its_own_lease(
    postgres_url: str, schema: str
) -> None:
    async with PostgresCheckpointStore(postgres_url, schema=schema) as store:
        assert await store.acquire_lease("kept")
        got: dict[str, Any] = {}

        async def take(run_id: str) -> None:
            try:
                got[run_id] = await store.acquire_lease(run_id)
            except CheckpointError as exc:
                got[run_id] = exc

        await _at_once(partial(take, "bad\x00id"), partial(take, "fine"))
        assert got["fine"] is True and isinstance(got["bad\x00id"], CheckpointError)
        assert store.holds_lease("kept") and store.holds_lease("fine")  # the session lives on


def test_each_event_loop_keeps_its_own_queue_of_lease_changes(postgres_url: str) -> None:
    """A store shared by the event loops of several threads (the sync twins): a loop's lease
    changes stay in one queue of its own whatever the other loops do, so they keep their
    order."""
    store = PostgresCheckpointStore(postgres_url)
    seen: list[object] = []

    async def queue_twice_around(other: Callable[[], None]) -> None:
        seen.append(store._lease_changes())
        await anyio.to_thread.run_sync(other)
        seen.append(store._lease_changes())

    def elsewhere() -> None:
        async def use() -> None:
            seen.append(store._lease_changes())

        anyio.run(use)

    anyio.run(queue_twice_around, elsewhere)
    first, other, again = seen
    assert first is again and other is not first


HOLDER = """
import sys, anyio
from toolloop.checkpoints import CheckpointedRun, PostgresCheckpointStore
from toolloop.flow import FlowSnapshot
from toolloop.runner import ToolCommand, ToolExecutionRecord, json_safe

async def main():
    store = PostgresCheckpointStore(sys.argv[1], schema=sys.argv[2])
    snap = FlowSnapshot(flow="f", execution_id="r", state={})
    await CheckpointedRun.begin(store, run_id="r", flow="f", snapshot=snap)
    print("ready", flush=True)
    await anyio.sleep(600)

anyio.run(main)
"""


@pytest.mark.anyio
async def test_a_killed_workers_lease_ends_with_it(postgres_url: str, schema: str) -> None:
    holder = await anyio.open_process([sys.executable, "-c", HOLDER, postgres_url, schema])
    try:
        assert holder.stdout is not None
        with anyio.fail_after(60):  # a hang guard
            said = b""
            while b"ready" not in said:
                said += await holder.stdout.receive()
        async with PostgresCheckpointStore(postgres_url, schema=schema) as store:
            seen = await store.get("r")
            assert seen is not None
            with pytest.raises(RunNotResumableError, match="another live worker"):
                await CheckpointedRun.claim(store, seen, expect=("running",))
            holder.kill()  # SIGKILL: nothing of the worker runs any more
            await holder.wait()
            with anyio.fail_after(60):  # the server notices the closed socket at once
                while True:
                    try:
                        run = await CheckpointedRun.claim(store, seen, expect=("running",))
                        break
                    except RunNotResumableError:
                        await anyio.sleep(0.05)
            await run.complete()
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.aclose()


# -- many processes, one store ------------------------------------------------------------


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


async def _seed(store: CheckpointStore, effects: Path, live: list[str], dead: int) -> None:
    """100 runs: 40 paused, 25 running under a dead worker with no outcome journaled, 25
    running under a dead worker whose tool call already finished, 10 running under this
    (live) process."""
    gone = Owner(host=socket.gethostname(), pid=dead, token=uuid.uuid4().hex)
    for i in range(100):
        run_id = f"run-{i:03d}"
        status: Any = "paused" if i < 40 else "running"
        owner = gone if 40 <= i < 90 else None
        if i >= 90:
            await CheckpointedRun.begin(store, run_id=run_id, flow="f", snapshot=snapshot(run_id))
            live.append(run_id)
            continue
        await store.put(
            Checkpoint(
                run_id=run_id, flow="f", status=status, snapshot=snapshot(run_id), owner=owner
            ),
            expected_revision=None,
        )
        if 65 <= i < 90:  # the worker died after its tool call finished
            await store.record_intent(run_id, JournalEntry(call_id="effect-1", tool_name="effect"))
            with effects.open("a") as f:
                f.write(f"{run_id}\n")
            command = ToolCommand(purpose="p", tool_name="effect", tool_kwargs={"run": run_id})
            record = ToolExecutionRecord.succeeded(command, f"done {run_id}")
            await store.record_outcome(run_id, "effect-1", json_safe(record))


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield f"{url}#{name}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _open(spec: str) -> PostgresCheckpointStore | SQLiteCheckpointStore:
    if spec.startswith("postgresql://"):
        url, _, name = spec.partition("#")
        return PostgresCheckpointStore(url, schema=name)
    return SQLiteCheckpointStore(spec)


@pytest.mark.timeout(300)
def test_four_processes_resume_and_recover_100_runs_nothing_lost_nothing_twice(
    store_spec: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    effects.touch()
    store = _open(store_spec)
    live: list[str] = []
    dead = _dead_pid()

    async def main() -> dict[str, Checkpoint]:
        async with store:
            await _seed(store, effects, live, dead)
            workers = [
                await anyio.open_process(
                    [sys.executable, str(WORKER), store_spec, str(effects), str(seed)]
                )
                for seed in range(4)
            ]
            outputs: list[list[str]] = []
            with anyio.fail_after(240):  # a hang guard
                for worker in workers:
                    assert worker.stdout is not None
                    out = b""
                    async for chunk in worker.stdout:
                        out += chunk
                    assert await worker.wait() == 0
                    outputs.append(json.loads(out))
            completed = [run_id for out in outputs for run_id in out]
            final = {r: c for r in await store.run_ids() if (c := await store.get(r))}
            assert len(completed) == len(set(completed)) == 90
            return final

    final = anyio.run(main)
    lines = Counter(effects.read_text().split())
    # every run's one side effect happened exactly once: none lost, none twice
    assert {run for run, n in lines.items() if n != 1} == set()
    assert set(lines) == {f"run-{i:03d}" for i in range(90)}
    assert {r for r, c in final.items() if c.status == "completed"} == set(lines)
    # the runs of a live worker were left alone
    assert all(final[r].status == "running" for r in live)
    assert all(final[r].revision == 1 for r in live)


# -- the throwaway server of the tests ------------------------------------------------------


def test_without_server_binaries_the_tests_say_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import postgres_cluster

    monkeypatch.setattr(postgres_cluster, "find_bin_dir", lambda: None)
    with pytest.raises(FileNotFoundError) as caught:
        postgres_cluster.start_cluster()
    assert "apt-get install postgresql" in str(caught.value)
    assert "TOOLLOOP_POSTGRES_URL" in str(caught.value)


STARTER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from postgres_cluster import start_cluster
cluster = start_cluster()
print(cluster.root, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(180)
def test_the_throwaway_server_is_gone_when_its_test_session_is_killed() -> None:
    from postgres_cluster import find_bin_dir

    if find_bin_dir() is None:
        pytest.skip("no PostgreSQL server binaries")
    tests = str(Path(__file__).resolve().parent.parent)
    session = subprocess.Popen(
        [sys.executable, "-c", STARTER, tests], stdout=subprocess.PIPE, text=True
    )
    try:
        assert session.stdout is not None
        root = Path(session.stdout.readline().strip())  # the test timeout guards it
        assert (root / "data" / "postmaster.pid").exists()
        session.kill()  # SIGKILL: no teardown of its own runs
        session.wait()
        deadline = time.monotonic() + 60  # a hang guard: its watchdog stops the server
        while root.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not root.exists()
    finally:
        session.kill()
        session.wait()
        if session.stdout is not None:
            session.stdout.close()
