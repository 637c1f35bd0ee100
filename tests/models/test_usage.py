"""Usage: read from the stream, summed, unknown where unreported; limits before a call and
while a stream runs (ScriptedChatModel offline, FakeOpenAIServer over HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from toolloop.errors import UsageLimitError
from toolloop.models import (
    ChatDelta,
    ChatRequest,
    OpenAIChatModel,
    Usage,
    UsageLimits,
    UsageMeter,
    current_meter,
    stream_chat,
)
from toolloop.testing import FakeOpenAIServer, ScriptedChatModel

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}])
TEN = {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}


async def read(model: Any) -> str:
    async with stream_chat(model, REQUEST) as deltas:
        return "".join([d.content async for d in deltas])


def test_usage_adds_up_and_unknown_stays_unknown() -> None:
    a = Usage.from_openai(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }
    )
    assert (a.requests, a.input_tokens, a.output_tokens, a.total_tokens) == (1, 10, 5, 15)
    assert (a.cached_tokens, a.reasoning_tokens, a.complete) == (4, 2, True)
    unknown = Usage.unknown()
    assert unknown.input_tokens is None and unknown.total_tokens is None
    total = a + unknown + Usage.from_openai({"prompt_tokens": 1, "completion_tokens": 1})
    assert (total.requests, total.unreported_requests, total.complete) == (3, 1, False)
    assert (total.input_tokens, total.output_tokens, total.total_tokens) == (11, 6, 17)
    assert total.cached_tokens == 4  # reported by one request only: still known
    assert (Usage() + unknown).input_tokens is None
    only_unknown = Usage() + unknown + unknown
    assert (only_unknown.requests, only_unknown.total_tokens) == (2, None)  # not zero


def test_usage_from_odd_payloads_keeps_what_it_cannot_read_unknown() -> None:
    odd = Usage.from_openai({"prompt_tokens": "12", "completion_tokens": True, "total_tokens": -5})
    assert (odd.requests, odd.input_tokens, odd.output_tokens, odd.total_tokens) == (
        1,
        None,
        None,
        None,
    )
    assert Usage.from_openai(None).requests == 1


def test_limits_must_not_be_negative() -> None:
    with pytest.raises(ValidationError, match="max_total_tokens must be 0 or more"):
        UsageLimits(max_total_tokens=-1)


async def test_a_meter_counts_the_calls_made_while_it_is_active() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage=TEN)
    model.add_reply("b")  # reports nothing
    model.add_reply("c", usage=TEN)
    meter = UsageMeter()
    assert current_meter() is None
    with meter.active():
        assert current_meter() is meter
        assert await read(model) == "a"
        async with anyio.create_task_group() as tg:  # tasks of the run are counted too
            tg.start_soon(read, model)
    assert current_meter() is None
    await read(model)  # outside: not counted
    used = meter.usage
    assert (used.requests, used.unreported_requests, used.total_tokens) == (2, 1, 10)


async def test_the_usage_since_a_mark_keeps_unknown_apart_from_zero() -> None:
    meter = UsageMeter()
    meter.add(Usage.from_openai(TEN))
    mark = meter.calls
    assert meter.since(mark) is None
    meter.add(Usage.unknown())
    since = meter.since(mark)
    assert since is not None and (since.requests, since.total_tokens) == (1, None)
    assert meter.usage.total_tokens == 10


async def test_max_requests_is_checked_before_the_call() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage=TEN)
    model.add_reply("b", usage=TEN)
    meter = UsageMeter(UsageLimits(max_requests=1))
    with meter.active():
        await read(model)
        with pytest.raises(UsageLimitError, match="max_requests=1") as info:
            await read(model)
    assert len(model.requests) == 1  # the second call was never made
    assert info.value.limit == "max_requests"
    assert "on_usage_limit='finish'" in str(info.value)


async def test_a_token_budget_already_spent_stops_the_next_call() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage=TEN)
    meter = UsageMeter(UsageLimits(max_total_tokens=10))
    with meter.active():
        await read(model)
        with pytest.raises(UsageLimitError, match="max_total_tokens=10"):
            await read(model)
    assert len(model.requests) == 1


async def test_a_stream_that_passes_the_output_budget_is_closed() -> None:
    model = ScriptedChatModel()
    model.add_reply("x" * 100, chunk_size=1, usage={"prompt_tokens": 5, "completion_tokens": 100})
    meter = UsageMeter(UsageLimits(max_output_tokens=20))
    with meter.active(), pytest.raises(UsageLimitError, match="the stream was closed") as info:
        await read(model)
    stream = model.streams[0]
    assert stream.closed_early
    assert stream.chunks_sent == 21  # one delta past the budget, then no more was read
    assert info.value.limit == "max_output_tokens"
    assert meter.usage.requests == 1 and meter.usage.unreported_requests == 1


async def test_the_error_of_a_closed_stream_carries_the_estimate_that_tripped_it() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage={"prompt_tokens": 5, "completion_tokens": 4})
    model.add_reply("x" * 100, chunk_size=1, usage={"prompt_tokens": 7, "completion_tokens": 100})
    meter = UsageMeter(UsageLimits(max_output_tokens=20))
    with meter.active():
        await read(model)
        with pytest.raises(UsageLimitError) as info:
            await read(model)
    error = info.value
    # 4 reported before, and 17 deltas of the reply in progress (a token each): 21 > 20
    assert error.estimated
    assert (error.usage.requests, error.usage.output_tokens) == (2, 21)
    assert error.usage.input_tokens == 5  # the reply in progress reported none yet
    assert error.usage.unreported_requests == 1  # its count is not the server's
    assert "an estimated 21 output tokens" in str(error)
    assert "a token a delta" in str(error)
    # the run's own count is unchanged: the closed call's usage stays unknown
    used = meter.usage
    assert (used.requests, used.output_tokens, used.unreported_requests) == (2, 4, 1)


class CountingAsItGoes:
    """A model whose server reports the usage so far with every delta."""

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        async def deltas() -> AsyncIterator[ChatDelta]:
            for n in range(1, 11):
                yield ChatDelta(
                    content="x", usage=Usage(requests=1, input_tokens=8, output_tokens=n)
                )

        yield deltas()


async def test_a_count_the_server_reports_as_it_streams_is_not_an_estimate() -> None:
    meter = UsageMeter(UsageLimits(max_output_tokens=5))
    with meter.active(), pytest.raises(UsageLimitError) as info:
        await read(CountingAsItGoes())
    error = info.value
    assert not error.estimated
    assert (error.usage.input_tokens, error.usage.output_tokens) == (8, 6)
    assert error.usage.unreported_requests == 0
    assert "6 output tokens with the reply in progress, as the server counted" in str(error)


async def test_a_total_budget_passed_by_an_estimate_says_so() -> None:
    model = ScriptedChatModel()
    model.add_reply("y" * 50, chunk_size=1)
    meter = UsageMeter(UsageLimits(max_total_tokens=30))
    with meter.active(), pytest.raises(UsageLimitError) as info:
        await read(model)
    error = info.value
    assert error.estimated and error.limit == "max_total_tokens"
    assert (error.usage.output_tokens, error.usage.total_tokens) == (31, 31)
    assert "an estimated 31 tokens in all" in str(error)


async def test_the_budget_counts_what_earlier_calls_used() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage={"prompt_tokens": 5, "completion_tokens": 15})
    model.add_reply("y" * 10, chunk_size=1)
    meter = UsageMeter(UsageLimits(max_output_tokens=20))
    with meter.active():
        await read(model)
        with pytest.raises(UsageLimitError):
            await read(model)
    assert model.streams[1].chunks_sent == 6  # 15 + 6 > 20


async def test_a_real_stream_past_its_budget_is_hung_up() -> None:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            server.add_reply("z" * 400, chunk_size=2)
            meter = UsageMeter(UsageLimits(max_total_tokens=30))
            with meter.active(), pytest.raises(UsageLimitError):
                await read(model)
            record = await server.wait_stream_ended(0)
    assert record.client_disconnected and not record.completed


async def test_usage_over_http_is_reported_or_unknown() -> None:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            server.add_reply("hello there", usage={"prompt_tokens": 9, "completion_tokens": 3})
            server.add_reply("hello there", usage=False)
            meter = UsageMeter()
            with meter.active():
                await read(model)
                await read(model)
    used = meter.usage
    assert (used.requests, used.input_tokens, used.output_tokens, used.total_tokens) == (
        2,
        9,
        3,
        12,
    )
    assert used.unreported_requests == 1


def test_a_meter_is_active_in_its_block_and_nested_blocks_restore_it() -> None:
    outer, other = UsageMeter(), UsageMeter()
    assert current_meter() is None
    with outer.active() as active:
        assert active is outer and current_meter() is outer
        with other.active():
            assert current_meter() is other
        with outer.active():  # the same meter again, nested: still right on the way out
            assert current_meter() is outer
        assert current_meter() is outer
    assert current_meter() is None
    with outer:
        assert current_meter() is outer
        with pytest.raises(RuntimeError, match="active already"), outer:
            pass  # pragma: no cover - refused on entry
        assert current_meter() is outer
    assert current_meter() is None
