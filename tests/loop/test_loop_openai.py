"""The loop with StructuredPlanner on OpenAIChatModel, over real HTTP (FakeOpenAIServer)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from toolloop import (
    ExecutionTimeoutError,
    ModelCallError,
    ModelOutputError,
    PlannerError,
)
from toolloop.flow import FlowEvent
from toolloop.loop import LoopResult, PlanDecided, async_plan_and_execute
from toolloop.models import OpenAIChatModel
from toolloop.planners import StructuredPlanner
from toolloop.runner import ToolCallStarted
from toolloop.testing import FakeOpenAIServer

pytestmark = [
    pytest.mark.anyio,
    # on trio the openai client leaves its inner async generators to the garbage collector
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


class Tools:
    """Tools that note when each call starts and ends, and how many run at once."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.started: list[float] = []
        self.finished: dict[str, float] = {}
        self.running = 0
        self.peak = 0

    async def _enter(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        self.started.append(time.monotonic())
        self.running += 1
        self.peak = max(self.peak, self.running)

    def _exit(self, key: str) -> None:
        self.running -= 1
        self.finished[key] = time.monotonic()

    async def get_weather(self, city: str, days: int = 3, wait: float = 0.0) -> dict[str, Any]:
        """The forecast for a city.

        Args:
            city: the city's name.
            days: how many days ahead.
            wait: seconds the forecast takes.
        """
        await self._enter(city=city, days=days)
        try:
            await anyio.sleep(wait)
        finally:
            self._exit(city)
        return {"city": city, "days": days, "sky": "sunny"}

    async def find_fare(self, origin: str, destination: str) -> float:
        """The cheapest fare, in EUR.

        Args:
            origin: where from.
            destination: where to.
        """
        await self._enter(origin=origin, destination=destination)
        self._exit(destination)
        return 42.0

    @property
    def all(self) -> list[Any]:
        return [self.get_weather, self.find_fare]


def weather(city: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "purpose": f"weather in {city}",
        "tool_name": "get_weather",
        "tool_kwargs": {"city": city, "days": None, "wait": None, **kwargs},
        "todo_suggestion": "compare",
    }


def fare(destination: str) -> dict[str, Any]:
    return {
        "purpose": f"fare to {destination}",
        "tool_name": "find_fare",
        "tool_kwargs": {"origin": "Madrid", "destination": destination},
        "todo_suggestion": "answer",
    }


def plan_text(next_action: str, *commands: dict[str, Any]) -> str:
    return json.dumps({"next_action": next_action, "execution_commands": list(commands)})


RESPONSE = plan_text("response")


@asynccontextmanager
async def serving(
    server: FakeOpenAIServer | None = None, **options: Any
) -> AsyncIterator[tuple[FakeOpenAIServer, StructuredPlanner]]:
    options.setdefault("max_retries", 0)
    async with server or FakeOpenAIServer() as running:
        async with OpenAIChatModel("fake-model", base_url=running.base_url, **options) as model:
            yield running, StructuredPlanner(model)


async def run(
    planner: StructuredPlanner, tools: Tools, events: list[FlowEvent] | None = None, **kwargs: Any
) -> LoopResult:
    return await async_plan_and_execute(
        "Where is it sunny, and what does it cost to go?",
        tools=tools.all,
        planner=planner,
        on_event=None if events is None else events.append,
        **kwargs,
    )


def user_data(server: FakeOpenAIServer, index: int) -> dict[str, Any]:
    body = server.requests[index].body
    assert isinstance(body, dict)
    data = json.loads(body["messages"][1]["content"])
    assert isinstance(data, dict)
    return data


# -- rounds --------------------------------------------------------------------------------


async def test_rounds_of_execute_plans_then_a_short_circuited_response() -> None:
    tools = Tools()
    events: list[FlowEvent] = []
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon"), weather("Porto")), chunk_size=9)
        server.add_reply(plan_text("execute", fare("Lisbon")), chunk_size=9)
        server.add_reply(RESPONSE + " " * 100, chunk_size=1, delay=0.002)
        result = await run(planner, tools, events)
        await server.wait_disconnected(2, timeout=2)

    assert result.stop_reason == "answered"
    assert result.rounds == 2
    assert [r.purpose for r in result.done_plans] == [
        "weather in Lisbon",
        "weather in Porto",
        "fare to Lisbon",
    ]
    assert all(r.success for r in result.done_plans)
    first = result.done_plans[0]
    # the nulls a strict schema makes the model write are dropped: the defaults apply
    assert first.kwargs == {"city": "Lisbon"}
    assert first.result == {"city": "Lisbon", "days": 3, "sky": "sunny"}
    assert first.todo_suggestion == first.next == "compare"
    assert result.action_results == {
        "weather in Lisbon": {"city": "Lisbon", "days": 3, "sky": "sunny"},
        "weather in Porto": {"city": "Porto", "days": 3, "sky": "sunny"},
        "fare to Lisbon": 42.0,
    }
    decided = [e for e in events if isinstance(e, PlanDecided)]
    assert [e.short_circuited for e in decided] == [False, False, True]
    assert [e.next_action for e in decided] == ["execute", "execute", "response"]
    # each round's request carries what came before
    assert len(server.requests) == 3
    second, third = user_data(server, 1), user_data(server, 2)
    assert [r["purpose"] for r in second["done_plans"]] == ["weather in Lisbon", "weather in Porto"]
    assert second["last_round_result"] == second["done_plans"]
    assert [r["purpose"] for r in third["last_round_result"]] == ["fare to Lisbon"]
    assert (second["round_index"], third["round_index"]) == (1, 2)
    assert server.streams[2].chunks_sent < server.streams[2].chunks_planned // 2


async def test_max_rounds_stops_before_another_request() -> None:
    tools = Tools()
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon")))
        result = await run(planner, tools, max_turns=1)
    assert result.stop_reason == "max_turns"
    assert len(server.requests) == 1
    assert (
        'This is the last round: answer with next_action "response".'
        in (server.requests[0].body["messages"][0]["content"])
    )


# -- streaming dispatch --------------------------------------------------------------------


def slow_plan(server: FakeOpenAIServer, waits: list[float]) -> float:
    """A plan of one get_weather per wait, streamed in ~0.4 s; its duration."""
    commands = [weather(f"C{i}", wait=wait) for i, wait in enumerate(waits)]
    reply = server.add_reply(plan_text("execute", *commands), chunk_size=16, delay=0.01)
    server.add_reply(RESPONSE)
    return reply.duration()


async def test_streaming_dispatch_starts_tools_while_the_plan_streams() -> None:
    tools = Tools()
    events: list[FlowEvent] = []
    waits = [0.15, 0.1, 0.05, 0.0]  # the first finishes last
    async with serving() as (server, planner):
        slow_plan(server, waits)
        result = await run(planner, tools, events, streaming_dispatch=True)
        stream = server.streams[0]
    assert stream.completed and stream.ended_at is not None
    # the first tool started before the planner had read the whole plan (in order, not by
    # the clock: the plan is decided only once its stream is read to the end)
    kinds = [e.kind for e in events]
    decided = kinds.index("plan_decided")
    assert kinds.index("tool_call_started") < decided
    # yet the records are in the planner's order
    assert [r.kwargs["city"] for r in result.done_plans] == ["C0", "C1", "C2", "C3"]
    assert [r.kwargs["wait"] for r in result.done_plans] == waits
    assert all(r.success for r in result.done_plans)
    assert [e.index for e in events if isinstance(e, ToolCallStarted)] == [0, 1, 2, 3]


async def test_without_streaming_dispatch_no_tool_starts_before_the_stream_ends() -> None:
    tools = Tools()
    async with serving() as (server, planner):
        slow_plan(server, [0.0, 0.0, 0.0])
        result = await run(planner, tools, streaming_dispatch=False)
        stream = server.streams[0]
    assert stream.ended_at is not None
    assert len(tools.started) == 3
    # the plan's JSON closed 10 ms before the stream's end; the server notes that end just
    # after its last write, which a fast client may beat by a few microseconds
    assert min(tools.started) >= stream.ended_at - 0.003
    assert [r.kwargs["city"] for r in result.done_plans] == ["C0", "C1", "C2"]


async def test_streaming_dispatch_keeps_the_concurrency_limit() -> None:
    tools = Tools()
    async with serving() as (server, planner):
        commands = [weather(f"C{i}", wait=0.03) for i in range(6)]
        server.add_reply(plan_text("execute", *commands), chunk_size=40)
        server.add_reply(RESPONSE)
        result = await run(planner, tools, streaming_dispatch=True, concurrency=2)
    assert tools.peak == 2
    assert [r.kwargs["city"] for r in result.done_plans] == [f"C{i}" for i in range(6)]
    assert all(r.success for r in result.done_plans)


# -- server errors -------------------------------------------------------------------------


async def test_a_rate_limit_is_retried() -> None:
    tools = Tools()
    async with serving(max_retries=2) as (server, planner):
        server.add_error(429, headers={"retry-after-ms": "1"})
        server.add_reply(plan_text("execute", weather("Lisbon")))
        server.add_error(429, headers={"retry-after-ms": "1"})
        server.add_reply(RESPONSE)
        result = await run(planner, tools)
    assert [r.purpose for r in result.done_plans] == ["weather in Lisbon"]
    assert len(server.requests) == 4


async def test_a_server_error_keeps_the_records_of_earlier_rounds() -> None:
    tools = Tools()
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon")))
        server.add_error(500, "the model crashed")
        with pytest.raises(PlannerError, match="in round 1") as info:
            await run(planner, tools)
    cause = info.value.__cause__
    assert isinstance(cause, ModelCallError)
    assert cause.status == 500
    assert "the model crashed" in str(cause)
    assert [r.purpose for r in info.value.done_plans] == ["weather in Lisbon"]


@pytest.mark.parametrize("streaming_dispatch", [False, True])
async def test_a_stream_cut_mid_way_keeps_the_records(streaming_dispatch: bool) -> None:
    tools = Tools()
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon")))
        text = plan_text("execute", weather("Porto"), weather("Faro"))
        # the role chunk, the chunks up to the end of Porto's command, two more; then cut
        sent = 1 + (text.index("}, {") + 1 + 3) // 4 + 2
        server.add_reply(text, chunk_size=4, delay=0.001, disconnect_after=sent)
        with pytest.raises(PlannerError) as info:
            await run(planner, tools, streaming_dispatch=streaming_dispatch)
    assert isinstance(info.value.__cause__, ModelCallError)
    assert "broke off the stream" in str(info.value.__cause__)
    purposes = [r.purpose for r in info.value.done_plans]
    assert purposes[0] == "weather in Lisbon"
    if streaming_dispatch:
        # the command complete before the cut was started, and has its record
        assert purposes == ["weather in Lisbon", "weather in Porto"]
    else:
        assert purposes == ["weather in Lisbon"]
    assert "Faro" not in [c.get("city") for c in tools.calls]


async def test_malformed_json_is_a_planner_error() -> None:
    async with serving() as (server, planner):
        server.add_reply('{"next_action": "execute", "execution_commands": [}')
        with pytest.raises(PlannerError) as info:
            await run(planner, Tools())
    cause = info.value.__cause__
    assert isinstance(cause, ModelOutputError)
    assert "malformed JSON from the model: expected a JSON value at offset 50" in str(cause)
    assert "ModelOutputError: malformed JSON" in str(info.value)


async def test_a_plan_cut_at_the_token_limit_is_a_planner_error() -> None:
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon"))[:50], finish_reason="length")
        with pytest.raises(PlannerError) as info:
            await run(planner, Tools())
    cause = info.value.__cause__
    assert isinstance(cause, ModelOutputError)
    assert "the model hit its token limit, max_tokens=1024: raise max_tokens" in str(cause)


async def test_no_server_is_a_planner_error() -> None:
    async with FakeOpenAIServer() as server:
        base_url = server.base_url
    async with OpenAIChatModel("m", base_url=base_url, max_retries=0) as model:
        with pytest.raises(PlannerError) as info:
            await run(StructuredPlanner(model), Tools())
    cause = info.value.__cause__
    assert isinstance(cause, ModelCallError)
    assert "is it running?" in str(cause)
    assert cause.status is None


# -- plans that break the schema -----------------------------------------------------------


@pytest.mark.parametrize("streaming_dispatch", [False, True])
async def test_an_unknown_next_action_ends_gracefully(streaming_dispatch: bool) -> None:
    tools = Tools()
    async with serving() as (server, planner):
        server.add_reply(plan_text("dance", weather("Lisbon")), chunk_size=5)
        result = await run(planner, tools, streaming_dispatch=streaming_dispatch)
    assert result.stop_reason == "answered"
    assert result.done_plans == []
    assert tools.calls == []
    assert any(
        "next_action must be 'execute' or 'response', got 'dance'" in n for n in result.notes
    )


@pytest.mark.parametrize("streaming_dispatch", [False, True])
async def test_commands_that_cannot_run_become_failed_records(streaming_dispatch: bool) -> None:
    tools = Tools()
    commands: list[dict[str, Any]] = [
        {"purpose": "unknown", "tool_name": "teleport", "tool_kwargs": {}},
        {"purpose": "wrong type", "tool_name": "get_weather", "tool_kwargs": {"city": 12}},
        {"purpose": "missing", "tool_name": "get_weather", "tool_kwargs": {"days": 2}},
        {"purpose": "extra", "tool_name": "get_weather", "tool_kwargs": {"city": "A", "x": 1}},
        {"purpose": "not an object", "tool_name": "get_weather", "tool_kwargs": [1]},
        {"purpose": "no tool name", "tool_kwargs": {}},
        weather("Lisbon"),
    ]
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", *commands), chunk_size=16)
        server.add_reply(RESPONSE)
        result = await run(planner, tools, streaming_dispatch=streaming_dispatch)
    records = {r.purpose: r for r in result.done_plans}
    assert list(records) == [
        "unknown",
        "wrong type",
        "missing",
        "extra",
        "not an object",
        "weather in Lisbon",
    ]
    assert [r.success for r in records.values()] == [False] * 5 + [True]
    assert "teleport" in (records["unknown"].error or "")
    assert "tool_kwargs must be an object" in (records["not an object"].error or "")
    for bad in ("wrong type", "missing", "extra"):
        assert records[bad].error
    # only the valid call ran
    assert tools.calls == [{"city": "Lisbon", "days": 3}]
    assert any("no tool_name" in n for n in result.notes)
    # the planner sees the errors in the next round
    errors = [r.get("error") for r in user_data(server, 1)["last_round_result"]]
    assert errors[:5] == [r.error for r in list(records.values())[:5]]


# -- timeouts ------------------------------------------------------------------------------


async def test_the_run_timeout_cancels_a_slow_stream() -> None:
    async with serving() as (server, planner):
        # a stream of ~150 chunks 0.1 s apart: the 2 s timeout falls early in it, however
        # busy the machine (the request must reach the server first)
        server.add_reply(plan_text("execute", weather("Lisbon")), chunk_size=1, delay=0.1)
        with anyio.fail_after(60), pytest.raises(ExecutionTimeoutError):  # a hang guard
            await run(planner, Tools(), timeout=2.0)
        record = await server.wait_disconnected(0, timeout=30)
    # the proof: the server saw the client go long before the end of its stream
    assert record.chunks_sent < record.chunks_planned // 2


async def test_the_run_timeout_finishes_with_the_records_so_far() -> None:
    tools = Tools()
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", weather("Lisbon")))
        # round 1: one command streams at once, then the plan crawls while its tool runs
        text = plan_text("execute", weather("Porto", wait=5.0), weather("Faro"))
        cut = text.index("}, {") + 2
        server.add_reply(chunks=[text[:cut], *[" "] * 100, text[cut:]], delay=0.05)
        result = await run(
            planner, tools, timeout=0.4, on_timeout="finish", streaming_dispatch=True
        )
        record = await server.wait_disconnected(1, timeout=2)
    assert result.stop_reason == "timeout"
    assert [r.purpose for r in result.done_plans] == ["weather in Lisbon", "weather in Porto"]
    porto = result.done_plans[1]
    assert not porto.success and "cancelled" in (porto.error or "")
    assert record.client_disconnected


async def test_the_planner_timeout_closes_the_stream() -> None:
    async with serving() as (server, planner):
        server.add_reply(RESPONSE, first_delay=60.0)
        with pytest.raises(PlannerError, match=r"did not finish within 2\.0 s") as info:
            await run(planner, Tools(), model_timeout=2.0)
        cause = info.value.__cause__  # a model call that failed, as in every product
        assert isinstance(cause, ModelCallError) and "(model_timeout)" in str(cause)
        await server.wait_disconnected(0, timeout=30)


@pytest.mark.parametrize("streaming_dispatch", [False, True])
async def test_the_per_round_command_limit_is_the_same_when_streamed(
    streaming_dispatch: bool,
) -> None:
    tools = Tools()
    commands = [
        {"purpose": "not an object", "tool_name": "get_weather", "tool_kwargs": "Lisbon"},
        weather("A"),
        weather("B"),
    ]
    async with serving() as (server, planner):
        server.add_reply(plan_text("execute", *commands), chunk_size=16)
        server.add_reply(RESPONSE)
        result = await run(planner, tools, streaming_dispatch=streaming_dispatch, max_commands=2)
    assert [r.purpose for r in result.done_plans] == [
        "not an object",
        "weather in A",
        "weather in B",
    ]
    assert [r.success for r in result.done_plans] == [False, True, False]
    assert "more than 2 commands" in (result.done_plans[2].error or "")
    assert tools.calls == [{"city": "A", "days": 3}]
