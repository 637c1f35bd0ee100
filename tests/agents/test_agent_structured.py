"""Structured output of the final answer: through an output tool or the provider's
json_schema, from a pydantic model or a JSON schema, retried when it fails validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from toolloop.agents import (
    AgentDefinitionError,
    ProviderStrategy,
    StructuredOutputError,
    ToolMessage,
    ToolStrategy,
    UserMessage,
    create_agent,
)
from toolloop.errors import ToolDefinitionError
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: float


SCHEMA = {
    "title": "Verdict",
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "why": {"type": "string"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def call(name: str, args: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args)}


def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "celsius": 21.0}


async def test_tool_strategy_with_a_pydantic_model() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("get_weather", {"city": "Lisbon"})])
    model.add_reply(tool_calls=[call("Weather", {"city": "Lisbon", "celsius": 21})])
    result = await create_agent(model, [get_weather], response_format=Weather).run("weather?")
    assert result.structured_response == Weather(city="Lisbon", celsius=21.0)
    last = result.messages[-1]
    assert isinstance(last, ToolMessage)
    assert last.content.startswith("Returned the structured response: ")
    first = model.requests[0]
    assert first.tool_choice == "required"
    assert first.tools is not None
    assert [t["function"]["name"] for t in first.tools] == ["get_weather", "Weather"]
    assert first.tools[1]["function"]["description"] == "The weather in a city."


async def test_tool_strategy_with_a_json_schema() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Verdict", {"ok": True, "why": "fine"})])
    result = await create_agent(model, response_format=SCHEMA).run("judge")
    assert result.structured_response == {"ok": True, "why": "fine"}


async def test_an_answer_that_fails_validation_is_sent_back_and_retried() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Weather", {"city": "Lisbon", "celsius": "warm"})])
    model.add_reply("It is warm in Lisbon.")  # no call at all
    model.add_reply(
        tool_calls=[
            call("Weather", {"city": "Lisbon", "celsius": 20}),
            call("Weather", {"city": "Lisbon", "celsius": 22}),
        ]
    )
    model.add_reply(tool_calls=[call("Weather", {"city": "Lisbon", "celsius": 21})])
    agent = create_agent(model, response_format=ToolStrategy(Weather, retries=3))
    result = await agent.run("weather?")
    assert result.structured_response == Weather(city="Lisbon", celsius=21)
    assert len(model.requests) == 4
    errors = [m for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert "'celsius'" in errors[0].content
    assert all("called 2 times" in m.content for m in errors[1:])
    nudges = [m for m in result.messages if isinstance(m, UserMessage)][1:]
    assert [m.content for m in nudges] == ["Give your final answer by calling the 'Weather' tool."]


async def test_retries_run_out_with_a_clear_error() -> None:
    model = ScriptedChatModel()
    for _ in range(3):
        model.add_reply(tool_calls=[call("Weather", {"city": "Lisbon"})])
    agent = create_agent(model, response_format=ToolStrategy(Weather, retries=2))
    with pytest.raises(StructuredOutputError, match=r"failed to fit 'Weather' 3 times") as info:
        await agent.run("weather?")
    assert len(model.requests) == 3
    assert len(info.value.state.messages) == 7  # user + 3 x (assistant, error answer)
    assert info.value.trace


async def test_provider_strategy() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("get_weather", {"city": "Porto"})])
    model.add_reply('{"city": "Porto", "celsius": 19.5}')
    agent = create_agent(model, [get_weather], response_format=ProviderStrategy(Weather))
    result = await agent.run("weather?")
    assert result.structured_response == Weather(city="Porto", celsius=19.5)
    structured = model.requests[0].structured_output
    assert structured is not None
    assert structured.name == "Weather"
    assert structured.schema == Weather.model_json_schema()
    assert structured.strict is False
    assert model.requests[0].tool_choice == "auto"


async def test_provider_strategy_retries_json_that_does_not_fit() -> None:
    model = ScriptedChatModel(["not json", '{"city": "Porto"}', '{"city": "Porto", "celsius": 1}'])
    agent = create_agent(model, response_format=ProviderStrategy(SCHEMA | {"title": "V"}))
    with pytest.raises(StructuredOutputError):
        await agent.run("judge")

    model = ScriptedChatModel(["not json", '{"city": "Porto", "celsius": 1}'])
    result = await create_agent(model, response_format=ProviderStrategy(Weather)).run("w?")
    assert result.structured_response == Weather(city="Porto", celsius=1)
    feedback = result.messages[2]
    assert isinstance(feedback, UserMessage)
    assert isinstance(feedback.content, str)
    assert feedback.content.startswith("the answer is not JSON")


async def test_response_formats_that_cannot_work_are_refused_when_built() -> None:
    model = ScriptedChatModel()
    with pytest.raises(AgentDefinitionError, match="schema of an object"):
        create_agent(model, response_format={"type": "array", "items": {"type": "string"}})
    with pytest.raises(AgentDefinitionError, match="has the name of a tool"):
        create_agent(model, [get_weather], response_format=ToolStrategy(Weather, "get_weather"))
    with pytest.raises(AgentDefinitionError, match="pydantic model class, a JSON schema"):
        create_agent(model, response_format=42)  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="not a valid JSON schema"):
        create_agent(model, response_format={"type": "object", "properties": {"x": {"type": 3}}})
    with pytest.raises(ToolDefinitionError):
        create_agent(model, response_format=ToolStrategy(SCHEMA, tool_name="no spaces allowed"))
    # any schema works with the provider's json_schema
    create_agent(model, response_format=ProviderStrategy({"type": "array"}))
