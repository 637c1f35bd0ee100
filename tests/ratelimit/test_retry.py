"""Retries: which failures, how long a wait, the server's ``Retry-After`` read and honoured,
and never a wait past the deadline."""

from __future__ import annotations

import email.utils

import anyio
import pytest

from toolloop.errors import ModelCallError, ModelOutputError, RateLimitedError, ToolTimeoutError
from toolloop.ratelimit import (
    RateLimit,
    RateLimitState,
    RetryPolicy,
    ScheduledRetry,
    Tries,
    is_rate_limited,
    observe,
    retry_after_from_headers,
    retry_after_of,
    status_of,
    stop_observing,
)
from toolloop.testing import ManualClock

pytestmark = pytest.mark.anyio


class HTTPError(Exception):
    """An HTTP client's error, as httpx and requests raise it: the status on its response."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status, "headers": headers or {}})()


class Told:
    def __init__(self) -> None:
        self.retries: list[ScheduledRetry] = []
        self.changes: list[RateLimitState] = []

    def retry_scheduled(self, retry: ScheduledRetry) -> None:
        self.retries.append(retry)

    def rate_limit_changed(self, state: RateLimitState) -> None:
        self.changes.append(state)


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="tries must be an int >= 1"):
        RetryPolicy(tries=0)
    with pytest.raises(ValueError, match="jitter must be a number"):
        RetryPolicy(jitter=2)
    with pytest.raises(ValueError, match="retry_on must be a tuple of exception types"):
        RetryPolicy(retry_on=("ConnectionError",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="statuses must be HTTP statuses"):
        RetryPolicy(statuses=["429"])  # type: ignore[list-item]


def test_the_wait_doubles_up_to_its_bound_and_is_never_below_retry_after() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0, jitter=0)
    assert [policy.wait(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.wait(1, retry_after=7.5) == 7.5
    assert policy.wait(3, retry_after=0.1) == 2.0


def test_jitter_takes_off_up_to_its_fraction() -> None:
    policy = RetryPolicy(backoff=1.0, jitter=0.5)
    waits = [policy.wait(1) for _ in range(200)]
    assert all(0.5 <= wait <= 1.0 for wait in waits)
    assert len(set(waits)) > 1


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ModelCallError("HTTP 429", status=429), True),
        (ModelCallError("HTTP 503", status=503), True),
        (ModelCallError("HTTP 400", status=400), False),
        (ModelCallError("the connection failed"), True),  # no status: unreachable
        (ModelOutputError("not JSON"), False),
        (RateLimitedError(), True),
        (HTTPError(502), True),
        (HTTPError(404), False),
        (ConnectionResetError(), True),
        (ToolTimeoutError("slow"), False),
        (ValueError("a bug"), False),
    ],
)
def test_which_failures_are_retried(error: Exception, retried: bool) -> None:
    assert RetryPolicy().retries(error) is retried


def test_retry_on_and_statuses_are_the_caller_s() -> None:
    policy = RetryPolicy(retry_on=(TimeoutError,), statuses={418})
    assert policy.retries(ToolTimeoutError("slow"))
    assert policy.retries(HTTPError(418))
    assert not policy.retries(HTTPError(503))
    assert not policy.retries(ConnectionResetError())


def test_statuses_and_retry_after_are_read_from_clients_errors() -> None:
    aiohttp_like = Exception("429")
    aiohttp_like.status = 429  # type: ignore[attr-defined]
    aiohttp_like.headers = {"Retry-After": "3"}  # type: ignore[attr-defined]
    assert status_of(aiohttp_like) == 429 and retry_after_of(aiohttp_like) == 3.0
    assert is_rate_limited(aiohttp_like)
    httpx_like = HTTPError(503, {"retry-after-ms": "250"})
    assert status_of(httpx_like) == 503 and retry_after_of(httpx_like) == 0.25
    assert status_of(ValueError()) is None and retry_after_of(ValueError()) is None
    assert retry_after_of(RateLimitedError(retry_after=1.5)) == 1.5
    assert retry_after_of(ModelCallError("x", status=429, retry_after=float("nan"))) is None
    bogus = Exception()
    bogus.status = True  # type: ignore[attr-defined]
    assert status_of(bogus) is None


def test_retry_after_headers_in_milliseconds_seconds_or_a_date() -> None:
    assert retry_after_from_headers({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_from_headers({"Retry-After": "2"}) == 2.0
    assert retry_after_from_headers({"retry-after-ms": "x", "retry-after": "4"}) == 4.0
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after_from_headers({"retry-after": date}, now=1_000_000) == 30.0
    assert retry_after_from_headers({"retry-after": date}, now=1_000_100) == 0.0
    for bad in ({"retry-after": "-1"}, {"retry-after": "inf"}, {"retry-after": "soon"}, {}):
        assert retry_after_from_headers(bad) is None
    assert retry_after_from_headers({"retry-after": "9" * 100}) is None
    assert retry_after_from_headers(None) is None


async def _failing(tries: Tries, failures: list[Exception], calls: list[int]) -> str:
    """A call that raises each of ``failures`` in turn, then answers: the loop of
    :class:`Tries` as the runner and the model layer run it."""
    while True:
        permit = await tries.admit()
        calls.append(tries.attempt)
        failure: Exception | None = failures.pop(0) if failures else None
        tries.release(permit, failure)
        if failure is None:
            return "ok"
        if not await tries.again(failure):
            raise failure


async def test_a_retry_waits_then_tries_again_and_is_told() -> None:
    clock = ManualClock()
    tries = Tries(None, RetryPolicy(backoff=1.0, jitter=0, clock=clock), "tool", "search")
    told = Told()
    token = observe(told)
    calls: list[int] = []
    try:
        async with anyio.create_task_group() as tg:
            done: list[str] = []

            async def run() -> None:
                done.append(await _failing(tries, [HTTPError(502)], calls))

            tg.start_soon(run)
            await clock.wait_for_sleepers(1)
            assert clock.sleepers == [1.0] and calls == [1]
            clock.advance(1.0)
    finally:
        stop_observing(token)
    assert done == ["ok"] and calls == [1, 2]
    (retry,) = told.retries
    assert (retry.target, retry.name, retry.attempt, retry.wait, retry.status) == (
        "tool",
        "search",
        1,
        1.0,
        502,
    )
    assert retry.error == "HTTPError: HTTP 502"


async def test_tries_are_bounded_and_an_error_not_retried_fails_at_once() -> None:
    calls: list[int] = []
    policy = RetryPolicy(tries=3, backoff=0, jitter=0)
    with pytest.raises(RateLimitedError):
        await _failing(Tries(None, policy, "model"), [RateLimitedError()] * 5, calls)
    assert calls == [1, 2, 3]
    calls.clear()
    with pytest.raises(ValueError, match="a bug"):
        await _failing(Tries(None, policy, "model"), [ValueError("a bug")], calls)
    assert calls == [1]
    calls.clear()
    with pytest.raises(RateLimitedError):  # no policy: no retry
        await _failing(Tries(None, None, "model"), [RateLimitedError()], calls)
    assert calls == [1]


async def test_a_retry_that_would_pass_the_deadline_is_not_made() -> None:
    clock = ManualClock()
    calls: list[int] = []
    tries = Tries(None, RetryPolicy(backoff=30, jitter=0, clock=clock), "model")
    with anyio.fail_after(10), pytest.raises(ModelCallError):  # a run's timeout, say
        await _failing(tries, [ModelCallError("HTTP 503", status=503)], calls)
    assert calls == [1] and clock.sleepers == []  # failed at once, without waiting


async def test_a_retry_after_longer_than_allowed_is_not_waited_for() -> None:
    clock = ManualClock()
    calls: list[int] = []
    policy = RetryPolicy(max_retry_after=10, clock=clock)
    with pytest.raises(RateLimitedError):
        await _failing(Tries(None, policy, "tool"), [RateLimitedError(retry_after=11)], calls)
    assert calls == [1] and clock.sleepers == []


async def test_retry_after_is_honoured_by_the_retry_and_by_its_limiter() -> None:
    """The retry of a call refused with ``Retry-After: 2`` is not admitted before 2 s: it
    sleeps that long itself (more than its backoff), and its limiter holds every call."""
    clock = ManualClock()
    limit = RateLimit(concurrency=8, adaptive=False, clock=clock)
    tries = Tries(limit, RetryPolicy(backoff=0.1, jitter=0, clock=clock), "model")
    calls: list[int] = []
    failures: list[Exception] = [ModelCallError("HTTP 429", status=429, retry_after=2.0)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_failing, tries, failures, calls)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == [2.0] and limit.state().hold == 2.0
        clock.advance(1.9)
        assert calls == [1] and limit.admitted == 1  # not before it
        clock.advance(0.1)
    assert calls == [1, 2] and limit.admitted == 2 and limit.refused == 1
