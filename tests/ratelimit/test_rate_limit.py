"""The limiter: calls per second and at once, first come first served, that backs off on a
refusal for the rate, holds for a ``Retry-After`` and probes back up.

Time is a :class:`~toolloop.testing.ManualClock` the tests move by hand: what is admitted
when is read from the limiter's state and its sleepers, never from the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.abc
import pytest

from toolloop.errors import ModelCallError, RateLimitedError
from toolloop.ratelimit import Permit, RateLimit, RateLimitState, ScheduledRetry, observe
from toolloop.ratelimit import stop_observing as stop
from toolloop.testing import ManualClock

pytestmark = pytest.mark.anyio

REFUSED = ModelCallError("HTTP 429", status=429)


class Told:
    """An observer that keeps what it is told."""

    def __init__(self) -> None:
        self.changes: list[RateLimitState] = []
        self.retries: list[ScheduledRetry] = []

    def retry_scheduled(self, retry: ScheduledRetry) -> None:
        self.retries.append(retry)

    def rate_limit_changed(self, state: RateLimitState) -> None:
        self.changes.append(state)


class Waiting:
    """A call waiting for ``limit`` in a task of its own: ``admitted`` once it is."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self.admitted = anyio.Event()
        self.permit: Permit | None = None

    async def __call__(self) -> None:
        self.permit = await self.limit.acquire()
        self.admitted.set()


def start(tg: anyio.abc.TaskGroup, limit: RateLimit) -> Waiting:
    waiting = Waiting(limit)
    tg.start_soon(waiting)
    return waiting


async def until(check: Callable[[], bool]) -> None:
    """Let the other tasks run until ``check()`` holds (a hang guard: 10 s)."""
    with anyio.fail_after(10):
        while not check():
            await anyio.wait_all_tasks_blocked()


async def admitted(waiting: Waiting) -> Permit:
    with anyio.fail_after(10):
        await waiting.admitted.wait()
    assert waiting.permit is not None
    return waiting.permit


def test_bad_values_are_refused_saying_what_was_expected() -> None:
    with pytest.raises(ValueError, match="rate must be a number above 0"):
        RateLimit(0)
    with pytest.raises(ValueError, match="concurrency must be an int above 0"):
        RateLimit(concurrency=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="decrease must be between 0 and 1"):
        RateLimit(decrease=1.0)
    with pytest.raises(ValueError, match="clock must have now"):
        RateLimit(clock=object())  # type: ignore[arg-type]


async def test_a_fixed_rate_paces_calls_on_its_clock() -> None:
    clock = ManualClock()
    limit = RateLimit(2, adaptive=False, clock=clock)
    first = await limit.acquire()  # a burst of two at once, then one every 0.5 s
    second = await limit.acquire()
    async with anyio.create_task_group() as tg:
        third = start(tg, limit)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == [0.5]
        clock.advance(0.49)
        assert clock.sleepers == [0.5] and limit.waiting == 1  # not admitted yet
        clock.advance(0.01)
        await admitted(third)
    assert limit.in_flight == 3 and limit.admitted == 3
    for permit in (first, second, third.permit):
        assert permit is not None
        permit.release()
    assert limit.in_flight == 0


async def test_calls_at_once_wait_for_a_call_to_end_not_for_the_clock() -> None:
    clock = ManualClock()
    limit = RateLimit(concurrency=2, adaptive=False, clock=clock)
    first = await limit.acquire()
    await limit.acquire()
    async with anyio.create_task_group() as tg:
        third = start(tg, limit)
        await until(lambda: limit.waiting == 1)
        assert clock.sleepers == []  # no timer: it waits for room
        first.release()
        await admitted(third)
    assert limit.in_flight == 2


async def test_calls_are_admitted_first_come_first_served() -> None:
    limit = RateLimit(concurrency=1, adaptive=False, clock=ManualClock())
    held = await limit.acquire()
    order: list[int] = []

    async def call(n: int) -> None:
        permit = await limit.acquire()
        order.append(n)
        permit.release()

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(call, n)
            await until(lambda n=n: limit.waiting == n + 1)  # type: ignore[misc]
        held.release()
    assert order == [0, 1, 2, 3, 4]


async def test_a_cancelled_wait_takes_no_place_and_hands_the_clock_on() -> None:
    clock = ManualClock()
    limit = RateLimit(1, adaptive=False, clock=clock)
    await limit.acquire()
    await limit.acquire()  # the burst of two
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        first = Waiting(limit)
        tg.start_soon(_in, scope, first)
        await clock.wait_for_sleepers(1)
        second = start(tg, limit)
        await until(lambda: limit.waiting == 2)
        scope.cancel()
        await until(lambda: limit.waiting == 1)
        await clock.wait_for_sleepers(1)  # the second took over the waiting
        clock.advance(1.0)
        await admitted(second)
    assert not first.admitted.is_set()
    assert limit.admitted == 3


async def _in(scope: anyio.CancelScope, waiting: Waiting) -> None:
    with scope:
        await waiting()


async def test_a_refusal_backs_off_once_a_burst_and_probes_back_up() -> None:
    clock = ManualClock()
    limit = RateLimit(10, clock=clock, decrease=0.5, increase=0.1)
    told = Told()
    token = observe(told)
    try:
        before = [await limit.acquire() for _ in range(2)]
        before[0].release(REFUSED)
        assert limit.rate == 5.0 and limit.backoffs == 1
        before[1].release(REFUSED)  # admitted before the back-off: the same burst
        assert limit.rate == 5.0 and limit.backoffs == 1 and limit.refused == 2
        after = await limit.acquire()
        after.release(RateLimitedError())  # a tool's refusal counts the same
        assert limit.rate == 2.5 and limit.backoffs == 2
        assert [c.reason for c in told.changes] == ["backoff", "backoff"]

        # probing: while calls wait, each second adds increase x the rate of the back-off
        going = await limit.acquire()
        async with anyio.create_task_group() as tg:
            waiting = start(tg, limit)  # held back by the rate
            await clock.wait_for_sleepers(1)
            clock.advance(2.0)
            going.release()  # (the waiting call is woken, and still waits to run)
            assert limit.rate == pytest.approx(2.5 + 0.1 * 2.5 * 2.0)
            await admitted(waiting)
        assert told.changes[-1].reason == "probe"
    finally:
        stop(token)


async def test_no_probe_while_nothing_waits_for_the_limiter() -> None:
    clock = ManualClock()
    limit = RateLimit(10, clock=clock)
    (await limit.acquire()).release(REFUSED)
    rate = limit.rate
    permit = await limit.acquire()
    clock.advance(5.0)
    permit.release()  # it went through, but nothing was held back
    assert limit.rate == rate


async def test_the_rate_at_the_end_of_the_start_is_what_went_through() -> None:
    clock = ManualClock()
    limit = RateLimit(clock=clock, decrease=0.5)
    for _ in range(10):  # ten calls go through in the last half second
        (await limit.acquire()).release()
        clock.advance(0.05)
    (await limit.acquire()).release(REFUSED)
    assert limit.rate == pytest.approx(0.5 * 10 / 0.5)
    (await limit.acquire()).release(REFUSED)  # then it multiplies its own rate
    assert limit.rate == pytest.approx(0.5 * 0.5 * 10 / 0.5)


async def test_a_retry_after_holds_every_call_until_it_has_passed() -> None:
    clock = ManualClock()
    limit = RateLimit(concurrency=4, adaptive=False, clock=clock)
    told = Told()
    token = observe(told)
    try:
        permit = await limit.acquire()
        permit.release(ModelCallError("HTTP 429", status=429, retry_after=2.0))
    finally:
        stop(token)
    assert limit.state().hold == 2.0
    assert [c.reason for c in told.changes] == ["hold"]
    assert limit.rate is None  # a fixed limiter only holds
    async with anyio.create_task_group() as tg:
        waiting = start(tg, limit)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == [2.0]
        clock.advance(1.9)
        assert not waiting.admitted.is_set() and limit.waiting == 1
        clock.advance(0.1)
        await admitted(waiting)


async def test_a_hold_is_no_longer_than_max_hold() -> None:
    clock = ManualClock()
    limit = RateLimit(adaptive=False, max_hold=5.0, clock=clock)
    (await limit.acquire()).release(RateLimitedError(retry_after=3600))
    assert limit.state().hold == 5.0


async def test_an_error_that_is_no_refusal_only_frees_the_place() -> None:
    limit = RateLimit(10, concurrency=1, clock=ManualClock())
    (await limit.acquire()).release(ModelCallError("HTTP 400", status=400))
    (await limit.acquire()).release(ValueError("the tool's own bug"))
    assert (limit.rate, limit.backoffs, limit.refused, limit.in_flight) == (10, 0, 0, 0)


async def test_an_unknown_rate_starts_small_and_grows_until_the_first_refusal() -> None:
    clock = ManualClock()
    limit = RateLimit(start=2, clock=clock, decrease=0.5)
    told = Told()
    token = observe(told)
    try:
        assert limit.state().concurrency == 2 and limit.rate is None
        a, b = await limit.acquire(), await limit.acquire()
        async with anyio.create_task_group() as tg:
            c, d, e = start(tg, limit), start(tg, limit), start(tg, limit)
            await until(lambda: limit.waiting == 3)  # held back: no room
            clock.advance(0.5)
            a.release()  # through while calls were held back: one more at once (3)
            await until(lambda: limit.admitted == 4 and limit.waiting == 1)
            assert limit.state().concurrency == 3
            b.release()  # and again: 4
            await until(lambda: limit.admitted == 5)
        assert limit.state().concurrency == 4
        assert [x.reason for x in told.changes] == ["probe"]
        third = next(w.permit for w in (c, d, e) if w.permit is not None)
        third.release(REFUSED)  # the first refusal: paced from now on
        assert limit.rate == pytest.approx(0.5 * 2 / 0.5)  # two went through in 0.5 s
        assert limit.state().concurrency is None
        assert told.changes[-1].reason == "slow_start_ended"
    finally:
        stop(token)


async def test_the_start_grows_only_while_it_holds_calls_back() -> None:
    limit = RateLimit(start=2, clock=ManualClock())
    for _ in range(5):  # one call at a time: the room is never what holds a call back
        (await limit.acquire()).release()
    assert limit.state().concurrency == 2


async def test_a_ceiling_bounds_the_probe() -> None:
    clock = ManualClock()
    limit = RateLimit(4, clock=clock, increase=10.0)
    (await limit.acquire()).release(REFUSED)
    going = await limit.acquire()
    async with anyio.create_task_group() as tg:
        waiting = start(tg, limit)
        await clock.wait_for_sleepers(1)
        clock.advance(10.0)
        going.release()
        await admitted(waiting)
    assert limit.rate == 4


async def test_slot_releases_with_what_the_block_raised() -> None:
    limit = RateLimit(10, clock=ManualClock())
    with pytest.raises(RateLimitedError):
        async with limit.slot():
            raise RateLimitedError()
    assert (limit.refused, limit.backoffs, limit.in_flight) == (1, 1, 0)
    async with limit.slot():
        pass
    assert limit.in_flight == 0


async def test_a_permit_released_twice_counts_once() -> None:
    limit = RateLimit(concurrency=2, adaptive=False, clock=ManualClock())
    permit = await limit.acquire()
    await limit.acquire()
    permit.release()
    permit.release()
    assert limit.in_flight == 1


async def test_many_waiting_calls_cost_one_timer() -> None:
    clock = ManualClock()
    limit = RateLimit(1, adaptive=False, clock=clock)
    await limit.acquire()
    await limit.acquire()
    done: list[Waiting] = []
    async with anyio.create_task_group() as tg:
        for _ in range(50):
            done.append(start(tg, limit))
        await until(lambda: limit.waiting == 50)
        await clock.wait_for_sleepers(1)
        assert len(clock.sleepers) == 1
        for n in range(50):
            await clock.wait_for_sleepers(1)
            assert len(clock.sleepers) == 1  # only the first waiting call sleeps
            clock.advance(1.0)
            await until(lambda n=n: limit.admitted == 3 + n)  # type: ignore[misc]
    assert limit.admitted == 52 and all(w.admitted.is_set() for w in done)


def test_a_limiter_outlives_an_event_loop() -> None:
    """Sync calls one after another each run a loop of their own (trio's clock starts at a
    random point each time): a limiter paced in one is not thrown off in the next."""
    limit = RateLimit(1000, adaptive=False)

    async def two_calls() -> None:
        with anyio.fail_after(10):  # a hang guard: two calls at 1,000 a second
            for _ in range(2):
                async with limit.slot():
                    pass

    for backend in ("trio", "asyncio", "trio", "trio"):
        anyio.run(two_calls, backend=backend)
    assert limit.admitted == 8
