"""Replies cut off by the token limit are said out loud: the tool-calling planner's note or
error, the final answer's ``finish_reason`` (FakeOpenAIServer, the real openai client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from toolloop import (
    LoopResult,
    ModelOutputError,
    PlannerError,
    ToolCallingPlanner,
    async_plan_and_execute,
    final_answer,
    stream_final_answer,
)
from toolloop.loop import PlanDecided
from toolloop.models import OpenAIChatModel
from toolloop.testing import FakeOpenAIServer

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


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            yield server, model


async def test_a_cut_text_reply_is_the_response_with_a_note() -> None:
    async with serving() as (server, model):
        server.add_reply("The weather in Lisbon is", finish_reason="length")
        events: list[object] = []
        result = await async_plan_and_execute(
            "Lisbon?",
            tools=[get_weather],
            planner=ToolCallingPlanner(model, max_tokens=6),
            on_event=events.append,
        )
    assert result.stop_reason == "answered"
    assert result.planner_text == "The weather in Lisbon is"
    assert result.notes == [
        "round 0: the model's reply was cut off by its token limit (max_tokens=6) after 24 "
        "characters: its text is incomplete and was taken as the response; raise max_tokens"
    ]
    decided = [e for e in events if isinstance(e, PlanDecided)]
    assert decided[0].notes == [result.notes[0].removeprefix("round 0: ")]


async def test_a_cut_tool_call_is_a_failed_record_and_a_note() -> None:
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Porto"}'},
                {"name": "get_weather", "arguments": '{"city": "Lis'},
            ],
            finish_reason="length",
        )
        server.add_reply("done")
        result = await async_plan_and_execute(
            "Weather?", tools=[get_weather], planner=ToolCallingPlanner(model, max_tokens=20)
        )
    assert [r.success for r in result.done_plans] == [True, False]
    assert "tool_kwargs must be an object" in (result.done_plans[1].error or "")
    assert result.notes == [
        "round 0: the model's reply was cut off by its token limit (max_tokens=20) after 30 "
        "characters: its last tool call ('get_weather') is cut; raise max_tokens"
    ]


async def test_on_cutoff_error_makes_a_cut_reply_a_planner_error() -> None:
    async with serving() as (server, model):
        server.add_reply("The weather in", finish_reason="length")
        with pytest.raises(PlannerError) as info:
            await async_plan_and_execute(
                "Lisbon?",
                tools=[get_weather],
                planner=ToolCallingPlanner(model, on_cutoff="error", settings={"max_tokens": 4}),
            )
    cause = info.value.__cause__
    assert isinstance(cause, ModelOutputError)
    assert "cut off by its token limit (max_tokens=4)" in str(cause)
    assert info.value.round_index == 0


async def test_a_reply_that_stops_gets_no_note() -> None:
    async with serving() as (server, model):
        server.add_reply("Sunny.")
        result = await async_plan_and_execute(
            "Lisbon?", tools=[get_weather], planner=ToolCallingPlanner(model)
        )
    assert result.notes == []


def test_on_cutoff_must_be_note_or_error() -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="on_cutoff must be 'note' or 'error'"):
        ToolCallingPlanner(model, on_cutoff="ignore")  # type: ignore[arg-type]


EMPTY = LoopResult.build("Lisbon?", [], rounds=0, stop_reason="answered")


async def test_the_final_answer_says_it_was_cut_off() -> None:
    async with serving() as (server, model):
        server.add_reply("Pack sunglasses, because", finish_reason="length")
        answer = await final_answer(model, EMPTY, max_tokens=5)
        server.add_reply("Pack sunglasses, because", finish_reason="length")
        async with stream_final_answer(model, EMPTY, max_tokens=5) as text:
            before = text.finish_reason  # not known before the end
            pieces = [piece async for piece in text]
    assert before is None
    assert answer == "Pack sunglasses, because"
    assert (answer.finish_reason, answer.cut_off) == ("length", True)
    assert answer.usage is not None and answer.usage.output_tokens == 6
    assert "".join(pieces) == answer
    assert (text.finish_reason, text.cut_off) == ("length", True)
    assert text.usage == answer.usage


async def test_a_final_answer_that_ends_normally() -> None:
    async with serving() as (server, model):
        server.add_reply("Yes.")
        answer = await final_answer(model, EMPTY)
    assert isinstance(answer, str) and answer.upper() == "YES."
    assert (answer.finish_reason, answer.cut_off) == ("stop", False)
