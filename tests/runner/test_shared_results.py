"""Shared results (:class:`toolloop.runner.SharedResults`): identical calls in flight run
once, each caller keeps its own record; the cache, in memory or in a store; failures,
cancellation and timeouts of the call that runs; the keys."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolloop import async_plan_and_execute
from toolloop.checkpoints import (
    CheckpointStore,
    MemoryCheckpointStore,
    PostgresCheckpointStore,
    SQLiteCheckpointStore,
)
from toolloop.kernel import RunOptions
from toolloop.runner import (
    Executor,
    SharedResults,
    SharedResultStore,
    ToolCommand,
    ToolExecutionRecord,
    _shared,
    shared_key,
)
from toolloop.testing import ManualClock, ScriptedPlanner

pytestmark = pytest.mark.anyio


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds, looking each time every task waits."""
    while not condition():
        await anyio.wait_all_tasks_blocked()


class Search:
    """``search`` notes each run of its body; with a ``gate`` it then waits for it."""

    def __init__(self, gate: anyio.Event | None = None, *, fail: int = 0) -> None:
        self.ran: list[str] = []
        self.gate = gate
        self.fail = fail

    async def search(self, q: str) -> dict[str, Any]:
        """Search.

        Args:
            q: what to look for.
        """
        self.ran.append(q)
        if self.gate is not None:
            await self.gate.wait()
        if len(self.ran) <= self.fail:
            raise ConnectionError("the search API went away")
        return {"q": q, "hits": [1, 2, 3]}


def command(q: Any = "rates") -> ToolCommand:
    return ToolCommand(tool_name="search", tool_kwargs={"q": q})


async def call_all(
    executor: Executor, n: int, shared: SharedResults, gate: anyio.Event
) -> list[ToolExecutionRecord]:
    """``n`` identical calls at once, the gate opened once all but one wait."""
    records: list[ToolExecutionRecord] = []

    async def one() -> None:
        records.append(await executor.call(command()))

    with anyio.fail_after(10):  # (a hang guard)
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
            await until(lambda: shared.waiting == n - 1)
            gate.set()
    return records


async def test_n_identical_calls_in_flight_run_the_tool_once_each_with_its_record() -> None:
    gate = anyio.Event()
    search = Search(gate)
    shared = SharedResults()
    executor = Executor([search.search], shared_results={"search": shared})
    records = await call_all(executor, 5, shared, gate)
    assert search.ran == ["rates"] and (shared.runs, shared.joined) == (1, 4)
    assert len(records) == 5 and len({id(r) for r in records}) == 5  # each its own
    assert all(r.success and r.result == {"q": "rates", "hits": [1, 2, 3]} for r in records)
    assert sorted(str(r.shared) for r in records) == ["None"] + ["in_flight"] * 4
    assert shared.in_flight() == 0 and shared.waiting == 0


async def test_other_arguments_and_other_tools_are_not_shared() -> None:
    gate = anyio.Event()
    search = Search(gate)
    shared = SharedResults()
    executor = Executor([search.search], shared_results={"search": shared})
    plain = Executor([search.search])
    records: list[ToolExecutionRecord] = []

    async def one(ex: Executor, q: str) -> None:
        records.append(await ex.call(command(q)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, executor, "a")
            tg.start_soon(one, executor, "b")
            tg.start_soon(one, plain, "a")  # an executor without sharing runs its own
            await until(lambda: len(search.ran) == 3)
            assert shared.waiting == 0 and shared.in_flight() == 2
            gate.set()
    assert sorted(search.ran) == ["a", "a", "b"] and all(r.shared is None for r in records)


async def test_arguments_that_fail_the_schema_never_run_nor_share() -> None:
    search = Search()
    shared = SharedResults(ttl=60)
    executor = Executor([search.search], shared_results={"search": shared})
    record = await executor.call(command(q=["not", "a", "str"]))
    assert not record.success and "q" in str(record.error) and record.shared is None
    assert search.ran == [] and (shared.runs, shared.in_flight()) == (0, 0)


async def test_a_failure_is_each_waiter_s_and_never_cached() -> None:
    gate = anyio.Event()
    search = Search(gate, fail=1)
    shared = SharedResults(ttl=60, clock=ManualClock())
    executor = Executor([search.search], shared_results={"search": shared})
    records = await call_all(executor, 3, shared, gate)
    assert search.ran == ["rates"]
    assert [r.success for r in records] == [False] * 3
    assert {r.error_type for r in records} == {"ConnectionError"}
    assert all("went away" in str(r.error) for r in records)
    assert sorted(str(r.shared) for r in records) == ["None", "in_flight", "in_flight"]
    again = await executor.call(command())  # not cached: it runs
    assert again.success and again.shared is None and search.ran == ["rates", "rates"]
    cached = await executor.call(command())  # a success is
    assert cached.shared == "cache" and search.ran == ["rates", "rates"]


async def test_the_cache_keeps_a_result_for_its_ttl_on_its_clock() -> None:
    clock = ManualClock()
    search = Search()
    shared = SharedResults(ttl=10, clock=clock)
    executor = Executor([search.search], shared_results={"search": shared})
    first = await executor.call(command())
    clock.advance(9.5)
    hit = await executor.call(command())
    assert (first.shared, hit.shared, hit.result) == (None, "cache", first.result)
    clock.advance(0.5)  # expired
    late = await executor.call(command())
    assert late.shared is None and search.ran == ["rates", "rates"]
    assert (shared.runs, shared.hits) == (2, 1)


async def test_the_cache_holds_max_entries_the_least_recently_used_going_first() -> None:
    search = Search()
    shared = SharedResults(ttl=math.inf, max_entries=2)
    executor = Executor([search.search], shared_results={"search": shared})
    for q in ["a", "b", "a", "c", "a", "b"]:
        await executor.call(command(q))
    # a, b run; a is a hit (now the newest); c runs (b goes); a is a hit; b runs again
    assert search.ran == ["a", "b", "c", "b"] and shared.hits == 2


async def test_a_waiter_runs_the_tool_when_its_leader_is_cancelled() -> None:
    first_gate, second_gate = anyio.Event(), anyio.Event()
    gates = [first_gate, second_gate]
    ran: list[str] = []

    async def search(q: str) -> str:
        """Search.

        Args:
            q: what to look for.
        """
        gate = gates[len(ran)]
        ran.append(q)
        await gate.wait()
        return f"found {q}"

    shared = SharedResults()
    executor = Executor([search], shared_results={"search": shared})
    records: list[ToolExecutionRecord] = []

    async def waiter() -> None:
        records.append(await executor.call(command()))

    with anyio.fail_after(10):  # (a hang guard)
        async with anyio.create_task_group() as tg:
            leader = anyio.CancelScope()

            async def lead() -> None:
                with leader:
                    await executor.call(command())
                    raise AssertionError("the leader was to be cancelled")  # pragma: no cover

            tg.start_soon(lead)
            await until(lambda: len(ran) == 1)  # the leader's body runs
            tg.start_soon(waiter)
            await until(lambda: shared.waiting == 1)
            leader.cancel()  # its body is cancelled; the waiter wakes and runs it itself
            await until(lambda: len(ran) == 2)
            assert shared.waiting == 0 and not records
            second_gate.set()
    (record,) = records
    assert record.success and record.result == "found rates" and record.shared is None
    assert (shared.runs, shared.joined, shared.in_flight()) == (2, 0, 0)


async def test_a_waiter_s_own_timeout_bounds_its_wait() -> None:
    gate = anyio.Event()
    search = Search(gate)
    shared = SharedResults()
    patient = Executor([search.search], shared_results={"search": shared})
    hasty = Executor([search.search], shared_results={"search": shared}, tool_timeout=0.05)
    records: dict[str, ToolExecutionRecord] = {}

    async def call(name: str, executor: Executor) -> None:
        records[name] = await executor.call(command())

    with anyio.fail_after(10):  # (a hang guard)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "patient", patient)
            await until(lambda: search.ran == ["rates"])
            tg.start_soon(call, "hasty", hasty)
            await until(lambda: "hasty" in records)  # its wait ran out; the leader goes on
            gate.set()
    hasty_record = records["hasty"]
    assert not hasty_record.success and "did not finish within 0.05 s" in str(hasty_record.error)
    assert hasty_record.shared == "in_flight"
    assert records["patient"].success and search.ran == ["rates"]


async def test_a_tool_that_makes_its_own_call_again_does_not_wait_for_itself() -> None:
    shared = SharedResults()
    depth: list[int] = []

    async def search(q: str) -> str:
        """Search.

        Args:
            q: what to look for.
        """
        depth.append(len(depth))
        if len(depth) == 1:  # the same call, from inside its own run
            inner = await executor.call(command(q))
            return f"outer of {inner.result}"
        return "inner"

    executor = Executor([search], shared_results={"search": shared})
    with anyio.fail_after(10):  # (a hang guard: waiting for itself would hang)
        record = await executor.call(command())
    assert record.result == "outer of inner" and depth == [0, 1]


def test_keys_are_canonical_json_hashed_and_never_raise() -> None:
    a = shared_key("search", {"q": "x", "n": 1})
    assert a == shared_key("search", {"n": 1, "q": "x"})  # key order does not matter
    assert a != shared_key("search", {"q": "x", "n": 2})
    assert a != shared_key("fetch", {"q": "x", "n": 1})
    assert a is not None and a.startswith("search/") and len(a) == len("search/") + 64
    nan = shared_key("search", {"x": float("nan")})
    assert nan is not None and nan == shared_key("search", {"x": float("nan")})
    huge = shared_key("search", {"text": "x" * 10_000_000})
    assert huge is not None and len(huge) == len(a)
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert shared_key("search", {"c": cycle}) is None  # not shared: it runs on its own
    assert shared_key("search", {"o": object()}) is None
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert shared_key("search", {"d": deep}) is None


async def test_a_call_whose_arguments_cannot_be_keyed_runs_on_its_own() -> None:
    ran: list[object] = []

    async def probe(thing: Any) -> str:
        """Probe.

        Args:
            thing: anything.
        """
        ran.append(thing)
        return "ok"

    shared = SharedResults(ttl=60)
    executor = Executor([probe], shared_results={"probe": shared})
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    tool = executor.registry.get("probe")
    for _ in range(2):  # (the agent's way in: checked arguments)
        assert await executor.execute(tool, {"thing": cycle}) == "ok"
    assert len(ran) == 2 and shared.runs == 0


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="ttl must be a number of seconds above 0"):
        SharedResults(ttl=0)
    with pytest.raises(ValueError, match="give a ttl too"):
        SharedResults(store=MemoryCheckpointStore())
    with pytest.raises(TypeError, match="store must be a store of shared results"):
        SharedResults(ttl=1, store="runs.db")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_entries"):
        SharedResults(max_entries=0)
    with pytest.raises(TypeError, match="shared_results takes tool names"):
        RunOptions(shared_results={"search": 60})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="shared_results takes tool names"):
        RunOptions(shared_results=["search"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"shared_results\['search'\]"):
        Executor([], shared_results={"search": 1})  # type: ignore[dict-item]


async def test_two_runs_of_the_loop_share_one_call() -> None:
    gate = anyio.Event()
    search = Search(gate)
    shared = SharedResults()
    plan = {
        "next_action": "execute",
        "execution_commands": [{"tool_name": "search", "tool_kwargs": {"q": "rates"}}],
    }
    results: list[Any] = []

    async def run() -> None:
        planner = ScriptedPlanner([plan, {"next_action": "response"}])
        results.append(
            await async_plan_and_execute(
                "look", planner=planner, tools=[search.search], shared_results={"search": shared}
            )
        )

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tg.start_soon(run)
            await until(lambda: shared.waiting == 1)
            gate.set()
    assert search.ran == ["rates"]
    assert sorted(str(r.done_plans[0].shared) for r in results) == ["None", "in_flight"]


# -- the cache in a store --------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryCheckpointStore()
    elif request.param == "sqlite":
        async with SQLiteCheckpointStore(tmp_path / "runs.db") as sqlite:
            yield sqlite
    else:
        url = request.getfixturevalue("postgres_url")
        schema = f"shared_{abs(hash(request.node.nodeid)) % 10**8}"
        async with PostgresCheckpointStore(url, schema=schema) as postgres:
            yield postgres


async def test_a_store_shares_the_cache_with_other_objects_and_forgets_expired(
    store: CheckpointStore,
) -> None:
    assert isinstance(store, SharedResultStore)
    clock = ManualClock(1000.0)
    search = Search()
    # two objects, as two processes would have: the store is what they share
    here = SharedResults(ttl=30, store=store, clock=clock)
    there = SharedResults(ttl=30, store=store, clock=clock)
    first = await Executor([search.search], shared_results={"search": here}).call(command())
    elsewhere = Executor([search.search], shared_results={"search": there})
    second = await elsewhere.call(command())
    assert (first.shared, second.shared) == (None, "cache")
    assert second.result == first.result and search.ran == ["rates"]
    there.clear()  # (its memory: the store still has it)
    clock.advance(29)
    assert (await elsewhere.call(command())).shared == "cache"
    there.clear()
    clock.advance(1)  # expired in the store too
    assert (await elsewhere.call(command())).shared is None and search.ran == ["rates"] * 2


async def test_a_store_keeps_a_value_json_cannot_hold_as_json_data(tmp_path: Path) -> None:
    async def odd(q: str) -> Any:
        """Odd.

        Args:
            q: what to look for.
        """
        return {"bytes": b"\xff", "nan": float("nan"), "set": {1}}

    async with SQLiteCheckpointStore(tmp_path / "runs.db") as store:
        here = SharedResults(ttl=30, store=store)
        there = SharedResults(ttl=30, store=store)
        ran = await Executor([odd], shared_results={"odd": here}).call(
            ToolCommand(tool_name="odd", tool_kwargs={"q": "x"})
        )
        read = await Executor([odd], shared_results={"odd": there}).call(
            ToolCommand(tool_name="odd", tool_kwargs={"q": "x"})
        )
    assert ran.success and read.success and read.shared == "cache"
    assert read.result == {"bytes": "\\xff", "nan": "nan", "set": [1]}


async def test_a_broken_store_is_a_miss_and_the_call_still_runs() -> None:
    class Broken(MemoryCheckpointStore):
        async def get_shared(self, key: str, *, now: float) -> tuple[Any] | None:
            raise OSError("the disk is gone")

        async def put_shared(
            self, key: str, value: Any, *, expires_at: float | None, now: float
        ) -> None:
            raise OSError("the disk is gone")

    search = Search()
    shared = SharedResults(ttl=30, store=Broken())
    record = await Executor([search.search], shared_results={"search": shared}).call(command())
    assert record.success and record.shared is None and search.ran == ["rates"]


async def test_a_store_that_does_not_answer_is_a_miss_after_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Stuck(MemoryCheckpointStore):
        async def get_shared(self, key: str, *, now: float) -> tuple[Any] | None:
            await anyio.sleep_forever()
            raise AssertionError  # (never)

    monkeypatch.setattr(_shared, "_STORE_TIMEOUT", 0.05)
    search = Search()
    shared = SharedResults(ttl=30, store=Stuck())
    executor = Executor([search.search], shared_results={"search": shared})
    with anyio.fail_after(10):  # (a hang guard)
        record = await executor.call(command())
    assert record.success and record.shared is None and search.ran == ["rates"]


@pytest.mark.parametrize("second", ["asyncio", "trio"])
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
def test_runs_on_two_event_loops_share_no_call_in_flight(anyio_backend: str, second: str) -> None:
    # one object given to the runs of two threads, each on its own event loop: a call of
    # one loop never waits on the other's (its events cannot wake it): each runs its own
    shared = SharedResults(ttl=30)
    first_in, second_done = threading.Event(), threading.Event()
    ran: list[str] = []

    async def search(q: str) -> str:
        """Search.

        Args:
            q: what to look for.
        """
        ran.append(q)
        if len(ran) == 1:  # the first loop's call waits until the second's has ended
            first_in.set()
            await anyio.to_thread.run_sync(second_done.wait, 10)
        return f"results for {q}"

    records: dict[str, ToolExecutionRecord] = {}

    def run(name: str, backend: str, then: threading.Event | None) -> None:
        async def call() -> None:
            executor = Executor([search], shared_results={"search": shared})
            with anyio.fail_after(10):  # (a hang guard)
                records[name] = await executor.call(command())

        try:
            anyio.run(call, backend=backend)
        finally:
            if then is not None:
                then.set()

    first = threading.Thread(target=run, args=("first", anyio_backend, None))
    first.start()
    assert first_in.wait(10)
    run("second", second, second_done)
    first.join(10)
    assert records["second"].success and records["second"].shared is None, records["second"]
    assert records["first"].success and records["first"].shared is None, records["first"]
    assert ran == ["rates", "rates"] and shared.in_flight() == 0
