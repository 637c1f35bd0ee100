"""Model calls under a run's limiter and retry policy: each try admitted, counted, checked
against the budget and told; the OpenAI adapter keeps the server's ``Retry-After`` and
leaves the tries to toolloop (its client's own retries off)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolloop.errors import ModelCallError, UsageLimitError
from toolloop.models import (
    ChatRequest,
    FinishedCall,
    OpenAIChatModel,
    UsageLimits,
    UsageMeter,
    stream_chat,
)
from toolloop.ratelimit import RateLimit, RetryPolicy
from toolloop.testing import FakeOpenAIServer, ManualClock, ScriptedChatModel

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}])
TEN = {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}
NOW = RetryPolicy(backoff=0, jitter=0)
"""Retries without a wait."""


def refused(retry_after: float | None = None) -> ModelCallError:
    return ModelCallError("HTTP 429: slow down", status=429, retry_after=retry_after)


class Calls:
    """A call observer that keeps each try it is told of."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.finished: list[FinishedCall] = []

    def call_started(self, index: int, attempt: int = 1) -> None:
        self.started.append((index, attempt))

    def call_finished(self, call: FinishedCall) -> None:
        self.finished.append(call)


async def read(model: Any) -> str:
    async with stream_chat(model, REQUEST) as deltas:
        return "".join([d.content async for d in deltas])


async def test_a_refused_call_is_tried_again_each_try_counted_and_told() -> None:
    model = ScriptedChatModel()
    model.add_error(refused())
    model.add_error(ModelCallError("the connection failed"))
    model.add_reply("hello", usage=TEN)
    calls = Calls()
    meter = UsageMeter(observer=calls, retry=NOW)
    with meter:
        assert await read(model) == "hello"
        assert await read_one_more(model) == "again"
    assert calls.started == [(0, 1), (0, 2), (0, 3), (1, 1)]
    assert [(c.index, c.attempt, type(c.error).__name__) for c in calls.finished] == [
        (0, 1, "ModelCallError"),
        (0, 2, "ModelCallError"),
        (0, 3, "NoneType"),
        (1, 1, "NoneType"),
    ]
    assert len(model.requests) == 4
    # a refused try is a request of the run, without tokens
    assert (meter.usage.requests, meter.usage.total_tokens, meter.usage.complete) == (4, 20, True)


async def read_one_more(model: ScriptedChatModel) -> str:
    model.add_reply("again", usage=TEN)
    return await read(model)


async def test_an_error_the_policy_does_not_retry_fails_at_once() -> None:
    model = ScriptedChatModel()
    model.add_error(ModelCallError("HTTP 400: bad request", status=400))
    with UsageMeter(retry=NOW), pytest.raises(ModelCallError, match="HTTP 400"):
        await read(model)
    assert len(model.requests) == 1


async def test_the_budget_is_checked_before_each_try() -> None:
    model = ScriptedChatModel()
    for _ in range(5):
        model.add_error(refused())
    meter = UsageMeter(UsageLimits(max_requests=2), retry=RetryPolicy(tries=5, backoff=0))
    with meter, pytest.raises(UsageLimitError, match="max_requests=2"):
        await read(model)
    assert len(model.requests) == 2  # the third try was never made


async def test_the_last_try_s_error_is_raised_when_tries_run_out() -> None:
    model = ScriptedChatModel()
    for n in range(3):
        model.add_error(ModelCallError(f"HTTP 503: try {n}", status=503))
    with (
        UsageMeter(retry=RetryPolicy(tries=3, backoff=0)),
        pytest.raises(ModelCallError, match="try 2"),
    ):
        await read(model)
    assert len(model.requests) == 3


async def test_a_stream_that_breaks_once_open_is_not_tried_again() -> None:
    model = ScriptedChatModel()
    model.add_reply("he", error=ModelCallError("broke off", status=None), error_after=1)
    model.add_reply("never read")
    with UsageMeter(retry=NOW), pytest.raises(ModelCallError, match="broke off"):
        await read(model)
    assert len(model.requests) == 1


async def test_each_try_goes_through_the_limiter_and_its_retry_after() -> None:
    clock = ManualClock()
    limit = RateLimit(concurrency=1, adaptive=False, clock=clock)
    model = ScriptedChatModel()
    model.add_error(refused(retry_after=3.0))
    model.add_reply("hello")
    meter = UsageMeter(rate_limit=limit, retry=RetryPolicy(backoff=0.5, jitter=0, clock=clock))
    got: list[str] = []

    async def run() -> None:
        with meter:
            got.append(await read(model))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await clock.wait_for_sleepers(1)
        assert clock.sleepers == [3.0]  # the retry waits for the Retry-After, not 0.5 s
        clock.advance(2.9)
        assert len(model.requests) == 1 and limit.admitted == 1
        clock.advance(0.1)
    assert got == ["hello"] and len(model.requests) == 2
    assert (limit.admitted, limit.refused, limit.in_flight) == (2, 1, 0)


async def test_the_limiter_holds_a_call_for_as_long_as_its_stream_is_open() -> None:
    limit = RateLimit(concurrency=1, adaptive=False)
    model = ScriptedChatModel()
    model.add_reply("one")
    meter = UsageMeter(rate_limit=limit)
    with meter:
        async with stream_chat(model, REQUEST) as deltas:
            assert limit.in_flight == 1
            assert "".join([d.content async for d in deltas]) == "one"
        assert limit.in_flight == 0


# -- the OpenAI adapter over HTTP --------------------------------------------------------------


async def test_the_adapter_keeps_the_server_s_retry_after_on_the_error() -> None:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            server.add_error(429, "slow down", headers={"retry-after-ms": "1500"})
            with pytest.raises(ModelCallError) as info:
                await read(model)
            server.add_error(503, headers={"retry-after": "7"})
            with pytest.raises(ModelCallError) as second:
                await read(model)
            server.add_error(500)
            with pytest.raises(ModelCallError) as third:
                await read(model)
    assert (info.value.status, info.value.retry_after) == (429, 1.5)
    assert (second.value.status, second.value.retry_after) == (503, 7.0)
    assert third.value.retry_after is None


async def test_with_toolloop_s_tries_the_client_s_own_retries_are_off() -> None:
    """Under a run's retry policy each try is toolloop's (so a limiter sees every 429):
    the client, which would retry twice, makes one request a try."""
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel("m", base_url=server.base_url, max_retries=2) as model:
            server.add_error(429, headers={"retry-after-ms": "1"})
            with UsageMeter(retry=RetryPolicy(tries=1)), pytest.raises(ModelCallError):
                await read(model)
            assert len(server.requests) == 1
            server.add_error(429, headers={"retry-after-ms": "1"})
            server.add_reply("hello")
            limit = RateLimit(concurrency=4)
            with anyio.fail_after(30), UsageMeter(rate_limit=limit, retry=NOW):
                assert await read(model) == "hello"
            assert len(server.requests) == 3 and limit.refused == 1
            server.add_error(429, headers={"retry-after-ms": "1"})
            server.add_reply("the client's own retry")
            with anyio.fail_after(30):  # no policy of toolloop's: the client retries
                assert await read(model) == "the client's own retry"
            assert len(server.requests) == 5
