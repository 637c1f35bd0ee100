"""Tool calls under rate limits and retries: a tool's (or a group's) limiter admits each try,
only idempotent tools are retried, and the record keeps the tries."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolloop.errors import RateLimitedError
from toolloop.ratelimit import RateLimit, RetryPolicy
from toolloop.runner import CallTries, Executor, ToolCommand
from toolloop.testing import ManualClock

pytestmark = pytest.mark.anyio

NOW = RetryPolicy(backoff=0, jitter=0)


class HTTPError(Exception):
    """What an HTTP client raises for a refusal (httpx's shape: the response's status)."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status, "headers": headers})()


class Flaky:
    """Tools that fail ``failures`` times, then answer; every call counted."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls: list[str] = []

    async def fetch(self, url: str) -> str:
        """Fetch a page (safe to call twice).

        Args:
            url: the page.
        """
        self.calls.append(f"fetch {url}")
        if self.failures:
            raise self.failures.pop(0)
        return f"page {url}"

    async def pay(self, amount: int) -> str:
        """Pay (never twice).

        Args:
            amount: how much.
        """
        self.calls.append(f"pay {amount}")
        if self.failures:
            raise self.failures.pop(0)
        return "paid"


def fetch(url: str = "a") -> ToolCommand:
    return ToolCommand(purpose=f"fetch {url}", tool_name="fetch", tool_kwargs={"url": url})


def pay(amount: int = 1) -> ToolCommand:
    return ToolCommand(purpose="pay", tool_name="pay", tool_kwargs={"amount": amount})


async def test_an_idempotent_tool_is_retried_and_its_record_keeps_the_tries() -> None:
    tools = Flaky([RateLimitedError(), HTTPError(503, {})])
    executor = Executor([tools.fetch, tools.pay], retry=NOW, idempotent_tools=["fetch"])
    (record,) = await executor.run([fetch()])
    assert record.success and record.result == "page a"
    assert record.attempts == 3 and tools.calls == ["fetch a"] * 3


async def test_a_tool_that_is_not_idempotent_is_never_retried() -> None:
    tools = Flaky([RateLimitedError()])
    executor = Executor([tools.fetch, tools.pay], retry=NOW, idempotent_tools=["fetch"])
    (record,) = await executor.run([pay()])
    assert not record.success and record.attempts == 1
    assert record.error_type == "RateLimitedError"
    assert tools.calls == ["pay 1"]


async def test_a_failure_after_every_try_is_the_last_one_s_record() -> None:
    tools = Flaky([ConnectionResetError("one"), ConnectionResetError("two")])
    retry = RetryPolicy(tries=2, backoff=0)
    executor = Executor([tools.fetch], retry=retry, idempotent_tools=["fetch"])
    (record,) = await executor.run([fetch()])
    assert not record.success and record.attempts == 2
    assert record.error is not None and "two" in record.error


async def test_execute_raises_the_last_failure_and_counts_the_tries() -> None:
    """The agent's way: ``execute`` raises (its middleware decide), ``tries`` counts."""
    tools = Flaky([RateLimitedError(), RateLimitedError("still")])
    retry = RetryPolicy(tries=2, backoff=0)
    executor = Executor([tools.fetch], retry=retry, idempotent_tools=["fetch"])
    tries = CallTries()
    with pytest.raises(RateLimitedError, match="still"):
        await executor.execute(executor.registry.get("fetch"), {"url": "a"}, tries=tries)
    assert tries.count == 2
    assert await executor.execute(executor.registry.get("fetch"), {"url": "b"}, tries=tries)
    assert tries.count == 3


async def test_bad_arguments_are_never_tried_again() -> None:
    tools = Flaky([])
    executor = Executor([tools.fetch], retry=NOW, idempotent_tools=["fetch"])
    (record,) = await executor.run([ToolCommand(tool_name="fetch", tool_kwargs={"url": 3})])
    assert not record.success and record.attempts == 1 and tools.calls == []


async def test_a_group_limiter_holds_its_tools_together() -> None:
    group = RateLimit(concurrency=1, adaptive=False)
    inside = anyio.Event()
    gate = anyio.Event()
    seen: list[int] = []

    async def one() -> str:
        """The first tool."""
        seen.append(group.in_flight)
        inside.set()
        await gate.wait()
        return "one"

    async def two() -> str:
        """The second tool."""
        seen.append(group.in_flight)
        return "two"

    executor = Executor([one, two], concurrency=4, rate_limits={"one": group, "two": group})
    async with anyio.create_task_group() as tg:
        done: list[Any] = []

        async def run() -> None:
            done.extend(
                await executor.run([ToolCommand(tool_name="one"), ToolCommand(tool_name="two")])
            )

        tg.start_soon(run)
        with anyio.fail_after(10):
            await inside.wait()
            while group.waiting != 1:  # "two" waits for "one" to end
                await anyio.wait_all_tasks_blocked()
        assert seen == [1]
        gate.set()
    assert [r.result for r in done] == ["one", "two"] and seen == [1, 1]
    assert group.admitted == 2 and group.in_flight == 0


async def test_a_tool_s_http_refusal_holds_its_limiter_for_the_retry_after() -> None:
    clock = ManualClock()
    limit = RateLimit(concurrency=4, adaptive=False, clock=clock)
    tools = Flaky([HTTPError(429, {"Retry-After": "2"})])
    executor = Executor(
        [tools.fetch],
        rate_limits={"fetch": limit},
        retry=RetryPolicy(backoff=0, jitter=0, clock=clock),
        idempotent_tools=["fetch"],
    )
    async with anyio.create_task_group() as tg:
        done: list[Any] = []

        async def run() -> None:
            done.extend(await executor.run([fetch()]))

        tg.start_soon(run)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == [2.0] and limit.state().hold == 2.0
        clock.advance(1.5)
        assert tools.calls == ["fetch a"]  # the retry is not made before its Retry-After
        clock.advance(0.5)
    assert done[0].success and done[0].attempts == 2
    assert (limit.admitted, limit.refused) == (2, 1)


def test_bad_limits_are_refused() -> None:
    with pytest.raises(TypeError, match=r"rate_limits\['fetch'\] must be"):
        Executor([Flaky([]).fetch], rate_limits={"fetch": 5})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="not one str"):
        Executor([Flaky([]).fetch], retry=NOW, idempotent_tools="fetch")


async def test_without_limits_or_retries_nothing_is_guarded() -> None:
    executor = Executor([Flaky([]).fetch], idempotent_tools=["fetch"])
    assert executor._guards is None  # the plain path, as before: no frame of ours per call
    (record,) = await executor.run([fetch()])
    assert record.success and record.attempts == 1
