"""One rate limit for every worker: :class:`SharedRateLimit` objects of one name on one store
(each standing for a worker: a process of its own, with its own store object) pace their
calls from one schedule, back off and hold together, and pace alone when the store cannot be
reached.

With a store in memory the tests move a :class:`~toolloop.testing.ManualClock` (the store's
clock and the workers'); against PostgreSQL the permits the database handed out are read
back and checked (they are on its clock), never the wall clock.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import pytest

from toolloop.checkpoints import PostgresCheckpointStore
from toolloop.errors import ModelCallError
from toolloop.ratelimit import (
    Permit,
    RateLimit,
    RateLimitState,
    RateLimitStore,
    SharedRateLimit,
    observe,
)
from toolloop.ratelimit import stop_observing as stop
from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply, ManualClock

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def refused(retry_after: float | None = None) -> ModelCallError:
    return ModelCallError("HTTP 429", status=429, retry_after=retry_after)


class Memory:
    """A :class:`RateLimitStore` in memory, on a clock the test moves; it keeps every
    permit it handed out."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.state: str | None = None
        self.permits: list[float] = []
        self.trips = 0

    async def update_rate_limit(
        self, name: str, change: Callable[[str | None, float], tuple[str, T]]
    ) -> T:
        self.trips += 1
        await anyio.lowlevel.checkpoint()
        self.state, grant = change(self.state, self.clock.now())
        self.permits.extend(grant.permits)  # type: ignore[attr-defined]
        return grant


class Recording:
    """A real store, with every permit it handed out kept (on the database's clock)."""

    def __init__(self, store: PostgresCheckpointStore, permits: list[float]) -> None:
        self.store = store
        self.permits = permits

    async def update_rate_limit(
        self, name: str, change: Callable[[str | None, float], tuple[str, T]]
    ) -> T:
        grant = await self.store.update_rate_limit(name, change)
        self.permits.extend(grant.permits)  # type: ignore[attr-defined]
        return grant


class Told:
    def __init__(self) -> None:
        self.changes: list[RateLimitState] = []

    def retry_scheduled(self, retry: Any) -> None:
        pass

    def rate_limit_changed(self, state: RateLimitState) -> None:
        self.changes.append(state)


async def until(check: Callable[[], bool]) -> None:
    """Let the other tasks run until ``check()`` holds (a hang guard: 10 s)."""
    with anyio.fail_after(10):
        while not check():  # noqa: ASYNC110  (a state of the limiter, not an event)
            await anyio.sleep(0.001)


def test_it_is_a_rate_limit_and_checks_what_it_is_given() -> None:
    store = Memory(ManualClock())
    limit = SharedRateLimit(5, name="api", store=store)
    assert isinstance(limit, RateLimit) and isinstance(store, RateLimitStore)
    assert limit.rate == 5.0 and not limit.alone
    assert "SharedRateLimit('api'" in repr(limit)
    with pytest.raises(ValueError, match="name"):
        SharedRateLimit(5, name="", store=store)
    with pytest.raises(ValueError, match="update_rate_limit"):
        SharedRateLimit(5, name="api", store=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate"):
        SharedRateLimit(0, name="api", store=store)
    with pytest.raises(ValueError, match="sync"):
        SharedRateLimit(5, name="api", store=store, sync=-1)
    with pytest.raises(ValueError, match="decrease"):
        SharedRateLimit(5, name="api", store=store, decrease=2)
    with pytest.raises(TypeError, match="'start'"):  # a RateLimit's, not a shared one's
        SharedRateLimit(5, name="api", store=store, start=2)  # type: ignore[call-arg]
    fixed = SharedRateLimit(5, name="api", store=store, concurrency=2, adaptive=False)
    assert (fixed.concurrency, fixed.adaptive, fixed.max_hold) == (2, False, 60.0)


# -- in memory, on a clock the test moves ----------------------------------------------------


async def drive(clock: ManualClock, done: Callable[[], bool]) -> None:
    """Let every task run, then move the clock to the end of the first sleep in progress,
    until ``done()``."""
    with anyio.fail_after(10):
        while not done():
            for _ in range(50):
                await anyio.lowlevel.checkpoint()
            if not done() and clock.sleepers:
                clock.advance(max(clock.sleepers[0] - clock.now(), 0.0))


async def test_two_workers_together_stay_under_the_rate() -> None:
    clock = ManualClock(100.0)
    store = Memory(clock)
    workers = [
        SharedRateLimit(20, name="api", store=store, clock=clock, sync=0.5) for _ in range(2)
    ]
    admitted: list[tuple[int, float]] = []

    async def call(n: int) -> None:
        permit = await workers[n].acquire()
        admitted.append((n, clock.now()))
        permit.release()

    async with anyio.create_task_group() as tg:
        for _ in range(30):
            tg.start_soon(call, 0)
            tg.start_soon(call, 1)
        await drive(clock, lambda: len(admitted) == 60)
    times = sorted(t for _, t in admitted)
    # in every span, at most rate * span calls, plus one (a burst of one): 20 a second
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= 20 * (times[j] - first) + 1 + 1e-6, (first, times[j], j - i)
    assert {n for n, _ in admitted} == {0, 1}  # both workers' calls went, from one schedule
    assert times[-1] - 100.0 <= 59 / 20 + 1e-6  # and the whole rate was used
    assert len(store.permits) == 60  # every permit handed out was used
    # about a round trip per worker each sync (0.5 s), not one per call
    assert store.trips <= 2 * (3.0 / 0.5 + 2)


async def test_a_refusal_seen_by_one_worker_slows_and_holds_the_other() -> None:
    clock = ManualClock(100.0)
    store = Memory(clock)
    here = SharedRateLimit(10, name="api", store=store, clock=clock)
    there = SharedRateLimit(10, name="api", store=store, clock=clock)
    with anyio.fail_after(10):
        (await there.acquire()).release()
        clock.advance(1.0)
        (await here.acquire()).release(refused(retry_after=5.0))
    assert here.rate == 9.0 and there.rate == 10.0  # here at once; there does not know yet
    told = Told()
    admitted = anyio.Event()

    async def call() -> None:
        token = observe(told)
        try:
            (await there.acquire()).release()
        finally:
            stop(token)
        admitted.set()

    async with anyio.create_task_group() as tg:
        # the refused call is tried again: it tells the store, and waits for the hold
        tg.start_soon(lambda: here.acquire())
        await until(lambda: store.trips >= 3)
        clock.advance(1.0)  # there's view is old now: its next call asks the store
        tg.start_soon(call)
        await clock.wait_for_sleepers(2)
        assert there.rate == 9.0  # it learned the back-off
        assert 3.9 < there.state().hold <= 4.0  # and the hold, to the same end
        assert [c.reason for c in told.changes] == ["backoff"]
        assert not admitted.is_set()
        clock.advance(4.0)
        await drive(clock, admitted.is_set)  # the hold has passed: both go again
        tg.cancel_scope.cancel()
    assert here.backoffs == 1 and there.backoffs == 0  # one back-off, of the worker refused


async def test_a_refusal_of_an_older_burst_does_not_lower_the_rate_again() -> None:
    clock = ManualClock(100.0)
    store = Memory(clock)
    here = SharedRateLimit(10, name="api", store=store, clock=clock)
    there = SharedRateLimit(10, name="api", store=store, clock=clock)
    with anyio.fail_after(10):
        early = [await here.acquire()]
        clock.advance(0.1)
        early.append(await there.acquire())  # both of the first burst
        early[0].release(refused())
        early[1].release(refused())
        clock.advance(1.0)
        (await here.acquire()).release()
        clock.advance(1.0)
        (await there.acquire()).release()
    assert here.rate == there.rate == 9.0  # one back-off for the burst, not two


async def test_the_workers_probe_back_up_together_by_the_stores_clock() -> None:
    clock = ManualClock(100.0)
    store = Memory(clock)
    workers = [SharedRateLimit(10, name="api", store=store, clock=clock) for _ in range(2)]
    with anyio.fail_after(10):
        (await workers[0].acquire()).release(refused())
        clock.advance(1.0)
        (await workers[0].acquire()).release()
    assert workers[0].rate == 9.0
    count = [0]

    async def busy(n: int) -> None:
        while True:
            (await workers[n].acquire()).release()
            count[0] += 1

    async with anyio.create_task_group() as tg:
        for n in (0, 0, 1, 1):
            tg.start_soon(busy, n)
        await drive(clock, lambda: clock.now() >= 103.0)
        tg.cancel_scope.cancel()
    # 2 s of calls waiting: the rate grew by about 5 % a second, for both (not 5 % each)
    rates = [w.rate or 0.0 for w in workers]
    assert 9.0 * 1.09 < rates[0] < 9.0 * 1.11
    assert abs(rates[1] - rates[0]) < 0.2
    assert count[0] <= 10.0 * 2 + 2  # never above the rate given


# -- the store out of reach ------------------------------------------------------------------


class Down:
    async def update_rate_limit(self, name: str, change: Any) -> Any:
        raise ConnectionError("the database is gone")


class Hangs:
    async def update_rate_limit(self, name: str, change: Any) -> Any:
        await anyio.sleep_forever()


@pytest.mark.parametrize("store", [Down(), Hangs()], ids=["fails", "hangs"])
async def test_a_store_out_of_reach_paces_the_worker_alone_with_a_warning(
    store: RateLimitStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(100.0)
    limit = SharedRateLimit(10, name="api", store=store, clock=clock, timeout=0.05, alone_rate=2)
    with caplog.at_level(logging.INFO, logger="toolloop.ratelimit"):
        with anyio.fail_after(10):  # no hang: the round trip is bounded by timeout
            (await limit.acquire()).release()
        assert limit.alone and limit.rate == 2.0
        admitted: list[float] = []

        async def call() -> None:
            (await limit.acquire()).release()
            admitted.append(clock.now())

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(call)
            await drive(clock, lambda: len(admitted) == 4)
    assert admitted[-1] - admitted[0] >= 1.0 - 1e-6  # 2 a second, alone
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "'api'" in warning.getMessage() and "alone" in warning.getMessage()
    clock.advance(20.0)  # it asks the store again, fails again: said once more, quietly
    with anyio.fail_after(10), caplog.at_level(logging.INFO, logger="toolloop.ratelimit"):
        (await limit.acquire()).release()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


async def test_a_worker_back_from_an_outage_paces_with_the_others_again() -> None:
    clock = ManualClock(100.0)
    memory = Memory(clock)
    down = [True]

    class Flaky:
        async def update_rate_limit(self, name: str, change: Any) -> Any:
            if down[0]:
                raise ConnectionError("the database is gone")
            return await memory.update_rate_limit(name, change)

    limit = SharedRateLimit(10, name="api", store=Flaky(), clock=clock, alone_rate=1)
    (await limit.acquire()).release()
    assert limit.alone and limit.rate == 1.0
    down[0] = False
    clock.advance(11.0)
    (await limit.acquire()).release()
    assert not limit.alone and limit.rate == 10.0 and memory.permits


# -- PostgreSQL: each worker with its own store object, as in its own process ----------------


@pytest.fixture
async def url_and_schema(postgres_url: str) -> AsyncIterator[tuple[str, str]]:
    from postgres_cluster import fresh_schema

    async with fresh_schema(postgres_url) as schema:
        yield postgres_url, schema


async def test_workers_on_postgresql_share_one_schedule(
    url_and_schema: tuple[str, str],
) -> None:
    url, schema = url_and_schema
    permits: list[float] = []
    rate = 40.0
    async with (
        PostgresCheckpointStore(url, schema=schema) as one,
        PostgresCheckpointStore(url, schema=schema) as two,
    ):
        workers = [
            SharedRateLimit(rate, name="api", store=Recording(store, permits))
            for store in (one, two)
        ]
        admitted = [0, 0]

        async def call(n: int) -> None:
            (await workers[n].acquire()).release()
            admitted[n] += 1

        with anyio.fail_after(30):  # 40 calls at 40 a second: about 1 s
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(call, 0)
                    tg.start_soon(call, 1)
    assert admitted == [20, 20]
    # the database handed out each time of its schedule once, 1 / rate apart, to either
    permits.sort()
    assert len(permits) >= 40
    gaps = [b - a for a, b in itertools.pairwise(permits)]
    assert min(gaps) >= 1 / rate - 1e-6


async def test_a_refusal_on_postgresql_slows_and_holds_every_worker(
    url_and_schema: tuple[str, str],
) -> None:
    url, schema = url_and_schema
    async with (
        PostgresCheckpointStore(url, schema=schema) as one,
        PostgresCheckpointStore(url, schema=schema) as two,
    ):
        here = SharedRateLimit(10, name="api", store=one, sync=0.05)
        there = SharedRateLimit(10, name="api", store=two, sync=0.05)
        (await there.acquire()).release()
        (await here.acquire()).release(refused(retry_after=30.0))
        waiting: list[Permit] = []

        async def call(limit: SharedRateLimit) -> None:
            waiting.append(await limit.acquire())

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, here)  # tells the store, then holds
                await until(lambda: here.waiting == 1 and not here._reports)
                await anyio.sleep(0.06)  # there's view is older than its sync now
                tg.start_soon(call, there)
                await until(lambda: there.state().hold > 0)
                assert there.rate == 9.0 and 25 < there.state().hold <= 30
                assert there.waiting == 1 and not waiting  # held, both
                tg.cancel_scope.cancel()


async def test_an_unreachable_database_paces_the_worker_alone() -> None:
    store = PostgresCheckpointStore("postgresql://nobody@127.0.0.1:1/none", timeout=1.0)
    limit = SharedRateLimit(10, name="api", store=store, timeout=5.0)
    with anyio.fail_after(30):
        for _ in range(3):
            (await limit.acquire()).release()
    assert limit.alone and limit.admitted == 3
    await store.aclose()


# -- real processes against a server that refuses calls over its rate ------------------------

WORKER = Path(__file__).with_name("shared_limit_worker.py")


class Bucket:
    """The server's token bucket: ``rate`` tokens a second, at most ``burst`` kept."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = time.monotonic()
        self.admitted = 0
        self.refused = 0

    def respond(self, request: Any) -> FakeReply | FakeErrorReply:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            self.refused += 1
            wait = (1.0 - self.tokens) / self.rate
            return FakeErrorReply(429, "slow down", headers={"retry-after-ms": str(wait * 1000)})
        self.tokens -= 1.0
        self.admitted += 1
        return FakeReply(content="done")


async def test_worker_processes_sharing_a_limit_are_rarely_refused(
    url_and_schema: tuple[str, str],
) -> None:
    url, schema = url_and_schema
    rate, runs, workers = 20.0, 20, 3
    bucket = Bucket(rate, burst=rate / 2)
    async with FakeOpenAIServer(responder=bucket.respond) as server:
        base_url = f"http://127.0.0.1:{server.port}/v1"
        argv = [base_url, url, schema, "model", str(rate), str(runs), "shared"]

        async def worker() -> dict[str, Any]:
            done = await anyio.run_process(
                [sys.executable, str(WORKER), *argv], check=False, cwd=WORKER.parent
            )
            assert done.returncode == 0, done.stderr.decode()
            said: dict[str, Any] = json.loads(done.stdout)
            return said

        said: list[dict[str, Any]] = []

        async def keep() -> None:
            said.append(await worker())

        with anyio.fail_after(120):  # 60 calls at 20 a second: about 3 s, and 3 starts
            async with anyio.create_task_group() as tg:
                for _ in range(workers):
                    tg.start_soon(keep)
    assert [s["failed"] for s in said] == [0] * workers
    assert bucket.admitted == runs * workers
    # three processes, each allowed the whole rate alone, together kept under it: the
    # server refused next to nothing (each with a limiter of its own: 27 of 60, in a trial)
    assert bucket.refused <= 0.1 * bucket.admitted, (bucket.refused, said)
