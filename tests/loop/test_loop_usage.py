"""The loop's usage and budgets, over real HTTP (FakeOpenAIServer, OpenAIChatModel): summed
per round and per run, on the events, in traces and spans; usage_limits before each call and
while a stream runs, ending as the caller chose, with the records kept."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from toolloop import PlannerError, StructuredPlanner, ToolCallingPlanner, async_plan_and_execute
from toolloop.checkpoints import MemoryCheckpointStore
from toolloop.errors import UsageLimitError
from toolloop.flow import FlowEvent
from toolloop.kernel import RunFinished
from toolloop.loop import (
    PlanDecided,
    async_recover_plan_and_execute,
    stream_plan_and_execute,
)
from toolloop.models import OpenAIChatModel, UsageLimits
from toolloop.testing import FakeOpenAIServer, ScriptedPlanner
from toolloop.tracing import TraceRecorder, read_trace

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


async def get_weather(city: str) -> dict[str, str]:
    """The forecast for a city.

    Args:
        city: the city's name.
    """
    return {"city": city, "sky": "sunny"}


def plan(*cities: str) -> str:
    return json.dumps(
        {
            "next_action": "execute",
            "execution_commands": [
                {
                    "purpose": f"weather in {city}",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": city},
                    "todo_suggestion": "",
                }
                for city in cities
            ],
        }
    )


RESPONSE = '{"next_action": "response", "execution_commands": []}'


def used(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


@asynccontextmanager
async def serving(**server: Any) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with FakeOpenAIServer(**server) as fake:
        async with OpenAIChatModel(
            "fake-model", base_url=fake.base_url, api_key="test", max_retries=0
        ) as model:
            yield fake, model


async def test_usage_is_summed_per_round_and_per_run() -> None:
    events: list[FlowEvent] = []
    async with serving() as (server, model):
        server.add_reply(plan("Lisbon"), usage=used(100, 20))
        server.add_reply(plan("Porto"), usage=used(150, 20))
        server.add_reply(RESPONSE, usage=used(200, 5))
        result = await async_plan_and_execute(
            "Weather?",
            tools=[get_weather],
            planner=StructuredPlanner(model, short_circuit=False),
            on_event=events.append,
        )
    usage = result.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        3,
        450,
        45,
        495,
    )
    assert usage.complete
    per_round = [e.usage for e in events if isinstance(e, PlanDecided)]
    assert [u.total_tokens if u else None for u in per_round] == [120, 170, 205]
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert finished[0].usage == usage


async def test_a_short_circuited_plan_and_a_silent_server_count_as_unknown() -> None:
    async with serving(report_usage=False) as (server, model):
        server.add_reply(plan("Lisbon"))
        server.add_reply(RESPONSE, chunk_size=2)  # the planner hangs up after "r"
        result = await async_plan_and_execute(
            "Weather?", tools=[get_weather], planner=StructuredPlanner(model)
        )
    usage = result.usage
    assert (usage.requests, usage.unreported_requests, usage.total_tokens) == (2, 2, None)
    assert not usage.complete


async def test_a_scripted_planner_makes_no_counted_call() -> None:
    planner = ScriptedPlanner([{"next_action": "response"}])
    events: list[FlowEvent] = []
    result = await async_plan_and_execute("?", planner=planner, on_event=events.append)
    assert result.usage.requests == 0
    assert [e.usage for e in events if isinstance(e, PlanDecided | RunFinished)] == [None, None]


@pytest.mark.parametrize("streaming", [False, True])
async def test_max_requests_finishes_with_the_records_so_far(streaming: bool) -> None:
    async with serving() as (server, model):
        server.add_reply(plan("Lisbon"), usage=used(10, 10))
        server.add_reply(plan("Porto"), usage=used(10, 10))
        result = await async_plan_and_execute(
            "Weather?",
            tools=[get_weather],
            planner=StructuredPlanner(model),
            streaming_dispatch=streaming,
            usage_limits=UsageLimits(max_requests=2),
            on_usage_limit="finish",
        )
        asked = len(server.requests)
    assert asked == 2  # the third planner call was never made
    assert result.stop_reason == "usage_limit"
    assert [r.kwargs["city"] for r in result.done_plans] == ["Lisbon", "Porto"]
    assert result.rounds == 2
    assert result.usage.requests == 2
    assert result.action_results == {
        "weather in Lisbon": {"city": "Lisbon", "sky": "sunny"},
        "weather in Porto": {"city": "Porto", "sky": "sunny"},
    }


async def test_a_budget_passed_raises_with_the_records_kept() -> None:
    async with serving() as (server, model):
        server.add_reply(plan("Lisbon"), usage=used(90, 30))
        server.add_reply(plan("Porto"), usage=used(90, 30))
        with pytest.raises(UsageLimitError) as info:
            await async_plan_and_execute(
                "Weather?",
                tools=[get_weather],
                planner=StructuredPlanner(model),
                usage_limits=UsageLimits(max_total_tokens=100),
            )
        asked = len(server.requests)
    error = info.value
    assert asked == 1 and error.limit == "max_total_tokens"
    assert [r.kwargs["city"] for r in error.done_plans] == ["Lisbon"]
    assert error.usage.total_tokens == 120
    assert error.state.stop_reason == "usage_limit"


async def test_a_plan_that_streams_past_the_budget_is_closed() -> None:
    long_plan = plan(*[f"City{i}" for i in range(40)])
    async with serving() as (server, model):
        server.add_reply(long_plan, chunk_size=4)
        result = await async_plan_and_execute(
            "Weather?",
            tools=[get_weather],
            planner=StructuredPlanner(model),
            streaming_dispatch=True,
            usage_limits=UsageLimits(max_output_tokens=150),
            on_usage_limit="finish",
        )
        record = await server.wait_stream_ended(0)
    assert record.client_disconnected and not record.completed
    assert result.stop_reason == "usage_limit"
    # the commands complete before the budget was passed ran, or were cancelled: each has
    # one record, none ran twice, none is lost
    cities = [r.kwargs["city"] for r in result.done_plans]
    assert cities == [f"City{i}" for i in range(len(cities))]
    assert 0 < len(cities) < 40
    assert result.usage.unreported_requests == 1


async def test_a_plan_closed_by_the_budget_raises_with_the_estimate() -> None:
    async with serving() as (server, model):
        server.add_reply(plan(*[f"City{i}" for i in range(40)]), chunk_size=4)
        with pytest.raises(UsageLimitError) as info:
            await async_plan_and_execute(
                "Weather?",
                tools=[get_weather],
                planner=StructuredPlanner(model),
                usage_limits=UsageLimits(max_output_tokens=150),
            )
    error = info.value
    assert error.limit == "max_output_tokens" and error.estimated
    assert error.usage.requests == 1 and error.usage.output_tokens == 151
    assert "an estimated 151 output tokens" in str(error)


async def test_the_tool_calling_planner_is_counted_too() -> None:
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[{"name": "get_weather", "arguments": '{"city": "Faro"}'}],
            usage=used(30, 8),
        )
        server.add_reply("Sunny.", usage=used(50, 2))
        result = await async_plan_and_execute(
            "Faro?", tools=[get_weather], planner=ToolCallingPlanner(model)
        )
    assert (result.usage.requests, result.usage.total_tokens) == (2, 90)


async def test_usage_goes_into_the_trace_and_back(tmp_path: Path) -> None:
    recorder = TraceRecorder()
    async with serving() as (server, model):
        server.add_reply(plan("Lisbon"), usage=used(100, 20))
        server.add_reply(RESPONSE, usage=used(120, 4))
        async with stream_plan_and_execute(
            "Weather?",
            tools=[get_weather],
            planner=StructuredPlanner(model, short_circuit=False),
            on_event=recorder,
            engine_events=False,
        ) as run:
            async for _ in run:
                pass
    recorder.write(tmp_path / "run.jsonl")
    trace = read_trace(tmp_path / "run.jsonl")
    finished = [e for e in trace.events if isinstance(e, RunFinished)]
    assert finished[0].usage == run.result.usage
    assert finished[0].usage is not None and finished[0].usage.total_tokens == 244


async def test_a_resumed_durable_run_counts_its_earlier_model_calls_in_its_budget() -> None:
    store = MemoryCheckpointStore()
    async with serving() as (server, model):
        server.add_reply(plan("Lisbon"), usage=used(10, 10))
        server.add_error(500, "the model is down")
        with pytest.raises(PlannerError):
            await async_plan_and_execute(
                "Weather?",
                tools=[get_weather],
                planner=StructuredPlanner(model),
                store=store,
                run_id="budget",
            )
        server.add_reply(plan("Porto"), usage=used(10, 10))
        server.add_reply(RESPONSE, usage=used(10, 1))
        result = await async_recover_plan_and_execute(
            "budget",
            store=store,
            tools=[get_weather],
            planner=StructuredPlanner(model),
            usage_limits=UsageLimits(max_requests=2),
            on_usage_limit="finish",
        )
        asked = len(server.requests)
    # one request before the resume and one after: the budget of two is spent, so the
    # answer round is never asked for (without the earlier call it would have been)
    assert asked == 3
    assert result.stop_reason == "usage_limit"
    assert [r.kwargs["city"] for r in result.done_plans] == ["Lisbon", "Porto"]
    assert result.usage.requests == 2
