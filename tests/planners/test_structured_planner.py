"""StructuredPlanner over real HTTP: the real `openai` client against FakeOpenAIServer."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from toolloop import ModelOutputError, ToolExecutionRecord
from toolloop.models import OpenAIChatModel
from toolloop.planners import PLANNER_SYSTEM_PROMPT, PlannerContext, StructuredPlanner
from toolloop.testing import FakeOpenAIServer
from toolloop.tools import ToolRegistry

pytestmark = [
    pytest.mark.anyio,
    # on trio the openai client leaves its inner async generators to the garbage collector
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


async def get_weather(city: str, days: int = 3) -> dict[str, Any]:
    """The forecast for a city.

    Args:
        city: the city's name.
        days: how many days ahead.
    """
    return {"city": city, "days": days}


async def find_fare(origin: str, destination: str) -> float:
    """The cheapest fare.

    Args:
        origin: where from.
        destination: where to.
    """
    return 1.0


def tag(labels: dict[str, Any]) -> None:
    """Tag something with free-form labels.

    Args:
        labels: anything.
    """


TOOLS = ToolRegistry([get_weather, find_fare]).specs()


def context(**kwargs: Any) -> PlannerContext:
    kwargs.setdefault("user_input", "Weather in Lisbon?")
    kwargs.setdefault("available_tools", TOOLS)
    return PlannerContext(**kwargs)


def command(purpose: str, tool: str = "get_weather", **kwargs: Any) -> dict[str, Any]:
    return {
        "purpose": purpose,
        "tool_name": tool,
        "tool_kwargs": kwargs,
        "todo_suggestion": f"after {purpose}",
    }


def plan_text(next_action: str, *commands: dict[str, Any]) -> str:
    return json.dumps({"next_action": next_action, "execution_commands": list(commands)})


RESPONSE = plan_text("response")
# a response plan that takes a while to stream: the decision is in its third SSE event
SLOW_RESPONSE_CHUNKS = [
    '{"next_action": "',
    "re",
    'sponse", "execution_commands": [',
    *[" "] * 60,
    "]}",
]


@asynccontextmanager
async def serving(
    server: FakeOpenAIServer | None = None, **options: Any
) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with server or FakeOpenAIServer() as running:
        async with OpenAIChatModel("fake-model", base_url=running.base_url, max_retries=0) as model:
            yield running, model


def body(server: FakeOpenAIServer, index: int = 0) -> dict[str, Any]:
    value = server.requests[index].body
    assert isinstance(value, dict)
    return value


# -- the request ---------------------------------------------------------------------------


async def test_the_request_asks_for_the_strict_plan_schema() -> None:
    async with serving() as (server, model):
        server.add_reply(RESPONSE)
        await StructuredPlanner(model, max_tokens=321).plan(context())
    sent = body(server)
    assert sent["stream"] is True
    assert sent["max_tokens"] == 321
    assert sent["temperature"] == 0.0
    response_format = sent["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "plan"
    assert response_format["json_schema"]["strict"] is True
    schema = response_format["json_schema"]["schema"]
    # next_action first, so the decision is the first thing the model writes
    assert list(schema["properties"]) == ["next_action", "execution_commands"]
    assert schema["properties"]["next_action"]["enum"] == ["execute", "response"]
    assert schema["required"] == ["next_action", "execution_commands"]
    assert schema["additionalProperties"] is False
    variants = schema["properties"]["execution_commands"]["items"]["anyOf"]
    by_tool = {v["properties"]["tool_name"]["enum"][0]: v for v in variants}
    assert set(by_tool) == {"get_weather", "find_fare"}
    weather = by_tool["get_weather"]
    assert weather["required"] == ["purpose", "tool_name", "tool_kwargs", "todo_suggestion"]
    assert weather["additionalProperties"] is False
    kwargs = weather["properties"]["tool_kwargs"]
    assert kwargs["required"] == ["city", "days"]  # strict: every property required ...
    assert kwargs["properties"]["days"]["anyOf"][1] == {"type": "null"}  # ... optional: nullable
    assert kwargs["additionalProperties"] is False
    assert "default" not in json.dumps(kwargs)


async def test_the_messages_carry_the_planner_context() -> None:
    done = ToolExecutionRecord(
        purpose="weather in Porto",
        tool_name="get_weather",
        kwargs={"city": "Porto"},
        success=True,
        result={"sky": "cloudy"},
    )
    failed = ToolExecutionRecord(
        purpose="fare", tool_name="find_fare", success=False, error="no such city"
    )
    async with serving() as (server, model):
        server.add_reply(RESPONSE)
        server.add_reply(RESPONSE)
        planner = StructuredPlanner(model)
        await planner.plan(
            context(
                user_extra_requirement="be brief",
                done_plans=[done, failed],
                last_round_result=[failed],
                round_index=1,
                max_rounds=4,
            )
        )
        await planner.plan(context(round_index=3, max_rounds=4))
    system, user = body(server)["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert system["content"].startswith(PLANNER_SYSTEM_PROMPT)
    assert '"next_action"' in system["content"]  # the schema is spelled out too
    assert "This is the last round" not in system["content"]
    data = json.loads(user["content"])
    assert data["user_input"] == "Weather in Lisbon?"
    assert data["user_extra_requirement"] == "be brief"
    assert [t["name"] for t in data["available_tools"]] == ["get_weather", "find_fare"]
    assert data["done_plans"][0]["result"] == {"sky": "cloudy"}
    assert data["done_plans"][1]["error"] == "no such city"
    assert data["last_round_result"] == [data["done_plans"][1]]
    assert (data["round_index"], data["max_rounds"]) == (1, 4)
    assert (
        'This is the last round: answer with next_action "response".'
        in (body(server, 1)["messages"][0]["content"])
    )


async def test_a_free_form_parameter_makes_the_schema_loose() -> None:
    tools = ToolRegistry([get_weather, tag]).specs()
    async with serving() as (server, model):
        server.add_reply(RESPONSE)
        await StructuredPlanner(model).plan(context(available_tools=tools))
    json_schema = body(server)["response_format"]["json_schema"]
    assert json_schema["strict"] is False
    items = json_schema["schema"]["properties"]["execution_commands"]["items"]
    assert items["properties"]["tool_name"]["enum"] == ["get_weather", "tag"]
    assert items["properties"]["tool_kwargs"] == {"type": "object"}


async def test_a_server_that_refuses_json_schema_gets_the_schema_another_way() -> None:
    server = FakeOpenAIServer(reject_response_formats={"json_schema"})
    async with serving(server) as (server, model):
        server.add_reply(RESPONSE)
        reply = await StructuredPlanner(model).plan(context())
    assert reply.short_circuited
    response_format = body(server, 1)["response_format"]
    assert response_format["type"] == "json_object"
    assert list(response_format["schema"]["properties"]) == ["next_action", "execution_commands"]


# -- reading the plan ----------------------------------------------------------------------


async def test_an_execute_plan_is_read_to_its_end() -> None:
    text = plan_text(
        "execute",
        command("Lisbon", city="Lisbon", days=None),  # a strict schema makes omitted args null
        command("fare", "find_fare", origin="Madrid", destination="Lisbon"),
    )
    async with serving() as (server, model):
        server.add_reply(text, chunk_size=7)
        server.add_reply(RESPONSE)
        planner = StructuredPlanner(model)
        reply = await planner.plan(context())
        await planner.plan(context())
    assert not reply.short_circuited
    assert reply.chars_read == len(text)
    assert reply.decided_after is not None
    commands = reply.output["execution_commands"]
    assert commands[0]["tool_kwargs"] == {"city": "Lisbon"}  # the null is dropped
    assert commands[1] == command("fare", "find_fare", origin="Madrid", destination="Lisbon")
    # read to [DONE]: the stream completed and the connection was reused
    assert server.streams[0].completed and not server.streams[0].client_disconnected
    assert server.requests[1].connection == server.requests[0].connection


async def test_a_response_short_circuits_at_its_first_character() -> None:
    async with serving() as (server, model):
        reply_spec = server.add_reply(chunks=SLOW_RESPONSE_CHUNKS, delay=0.01)
        full = reply_spec.duration()
        started = time.monotonic()
        reply = await StructuredPlanner(model).plan(context())
        took = time.monotonic() - started
        record = await server.wait_disconnected(0, timeout=2)
    assert reply.short_circuited
    assert reply.output == {"next_action": "response", "execution_commands": []}
    assert reply.chars_read == len('{"next_action": "re')
    assert reply.decided_after is not None and reply.decided_after <= took
    assert full > 0.6
    # early, as the server saw it: it was still sending when the client hung up (the time
    # it saves is measured in benchmarks/bench_planner.py)
    assert not record.completed
    assert record.chunks_sent < record.chunks_planned // 2
    assert record.content_sent.startswith('{"next_action": "re')


async def test_without_short_circuit_the_whole_plan_is_read() -> None:
    async with serving() as (server, model):
        reply_spec = server.add_reply(chunks=SLOW_RESPONSE_CHUNKS, delay=0.005)
        started = time.monotonic()
        reply = await StructuredPlanner(model, short_circuit=False).plan(context())
        took = time.monotonic() - started
    assert not reply.short_circuited
    assert reply.output == {"next_action": "response", "execution_commands": []}
    assert reply.chars_read == len("".join(SLOW_RESPONSE_CHUNKS))
    assert took >= reply_spec.duration()
    assert server.streams[0].completed


async def test_a_plan_in_a_fence_after_some_words() -> None:
    text = "Here is the plan:\n```json\n" + plan_text("execute", command("a", city="A")) + "\n```"
    async with serving() as (server, model):
        server.add_reply(text, chunk_size=5)
        reply = await StructuredPlanner(model).plan(context())
    assert reply.output["execution_commands"] == [command("a", city="A")]


async def test_a_model_that_rambles_after_the_plan_is_cut_off() -> None:
    text = plan_text("execute", command("a", city="A")) + " and that is my plan, I think" * 5
    async with serving() as (server, model):
        server.add_reply(text, chunk_size=2, delay=0.002)
        reply = await StructuredPlanner(model).plan(context())
        record = await server.wait_disconnected(0, timeout=2)
    assert reply.output["execution_commands"] == [command("a", city="A")]
    assert record.chunks_sent < record.chunks_planned


# -- streaming dispatch --------------------------------------------------------------------


async def test_commands_are_handed_over_as_their_objects_close() -> None:
    commands = [command(f"city {i}", city=f"C{i}", days=None) for i in range(3)]
    text = plan_text("execute", *commands)
    handed: list[tuple[int, Any, float]] = []

    def dispatch(index: int, raw: Any) -> None:
        handed.append((index, raw, time.monotonic()))

    async with serving() as (server, model):
        server.add_reply(text, chunk_size=6, delay=0.005)
        reply = await StructuredPlanner(model).plan_streaming(context(), dispatch)
        record = await server.wait_stream_ended(0)
    assert [i for i, _, _ in handed] == [0, 1, 2]
    assert [raw for _, raw, _ in handed] == reply.output["execution_commands"]
    assert handed[0][1]["tool_kwargs"] == {"city": "C0"}  # cleaned like the final output
    assert record.ended_at is not None
    assert handed[0][2] < handed[1][2] < handed[2][2] < record.ended_at


@pytest.mark.parametrize("next_action", ["response", "dance"])
async def test_a_plan_that_does_not_execute_hands_nothing_over(next_action: str) -> None:
    text = plan_text(next_action, command("a", city="A"), command("b", city="B"))
    handed: list[int] = []
    async with serving() as (server, model):
        server.add_reply(text, chunk_size=9)
        planner = StructuredPlanner(model, short_circuit=False)
        reply = await planner.plan_streaming(context(), lambda i, raw: handed.append(i))
    assert handed == []
    assert reply.output["next_action"] == next_action  # the loop's normalization decides


# -- output that cannot be used ------------------------------------------------------------


@pytest.mark.parametrize("next_action", ["dance", "Execute", ""])
async def test_a_next_action_off_the_schema_is_passed_on(next_action: str) -> None:
    text = plan_text(next_action, command("a", city="A"))
    async with serving() as (server, model):
        server.add_reply(text, chunk_size=3)
        reply = await StructuredPlanner(model).plan(context())
    assert not reply.short_circuited
    assert reply.output == json.loads(text)


async def test_malformed_json_is_a_model_output_error() -> None:
    async with serving() as (server, model):
        server.add_reply('{"next_action": "execute", "execution_commands": [}', chunk_size=4)
        with pytest.raises(ModelOutputError) as info:
            await StructuredPlanner(model).plan(context())
    assert str(info.value) == (
        "malformed JSON from the model: expected a JSON value at offset 50 (inside "
        "execution_commands), got '}'"
    )


async def test_a_plan_cut_at_the_token_limit_says_so() -> None:
    cut = plan_text("execute", command("a", city="Lisbon"))[:60]
    async with serving() as (server, model):
        server.add_reply(cut, finish_reason="length")
        server.add_reply(cut, finish_reason="stop")
        planner = StructuredPlanner(model)
        with pytest.raises(ModelOutputError, match="ended early") as info:
            await planner.plan(context())
        assert "(the model hit its token limit, max_tokens=1024: raise max_tokens)" in str(
            info.value
        )
        with pytest.raises(ModelOutputError, match="ended early") as info:
            await planner.plan(context())
        assert "hit its token limit" not in str(info.value)


async def test_an_empty_answer_is_a_model_output_error() -> None:
    async with serving() as (server, model):
        server.add_reply("")
        with pytest.raises(ModelOutputError, match=r"no text .*a JSON object, was expected"):
            await StructuredPlanner(model).plan(context())
