"""The agent end to end through OpenAIChatModel and the real openai client, over HTTP to
FakeOpenAIServer: streamed tool calls, concurrent tools, todos, structured output, errors."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from toolloop.agents import AgentModelError, ToolMessage, create_agent
from toolloop.agents.middleware import TodoListMiddleware
from toolloop.models import OpenAIChatModel
from toolloop.testing import FakeOpenAIServer

pytestmark = [
    pytest.mark.anyio,
    # on trio the openai client leaves its inner async generators to the garbage collector
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


class Trip(BaseModel):
    city: str
    eur: float


class BothAtOnce:
    """The two weather calls wait for each other: they finish only if they run at once."""

    def __init__(self) -> None:
        self.arrived = 0
        self.both = anyio.Event()


together = BothAtOnce()


async def get_weather(city: str) -> dict[str, Any]:
    """The forecast for a city.

    Args:
        city: the city's name.
    """
    together.arrived += 1
    if together.arrived % 2 == 0:
        together.both.set()
    with anyio.fail_after(30):  # a hang guard: in series, the first call would wait here
        await together.both.wait()
    return {"city": city, "sky": "sunny"}


async def test_tools_todos_and_a_structured_answer_over_http() -> None:
    todos = json.dumps({"todos": [{"content": "check the weather", "status": "in_progress"}]})
    async with FakeOpenAIServer() as server:
        server.add_reply(
            content="Let me check.",
            tool_calls=[
                {"name": "write_todos", "arguments": todos, "id": "call_t"},
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}', "id": "call_a"},
                {"name": "get_weather", "arguments": '{"city": "Porto"}', "id": "call_b"},
            ],
            chunk_size=5,
        )
        server.add_reply(
            tool_calls=[{"name": "Trip", "arguments": '{"city": "Lisbon", "eur": 89.5}'}],
            chunk_size=3,
        )
        async with OpenAIChatModel("fake-model", base_url=server.base_url, max_retries=0) as model:
            agent = create_agent(
                model,
                [get_weather],
                middleware=[TodoListMiddleware()],
                response_format=Trip,
                system_prompt="You plan trips.",
            )
            together.arrived, together.both = 0, anyio.Event()
            result = await agent.run("Where should I go this weekend?")

        assert result.structured_response == Trip(city="Lisbon", eur=89.5)
        assert [t.content for t in result.todos] == ["check the weather"]
        answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolMessage)}
        assert json.loads(answers["call_a"].content) == {"city": "Lisbon", "sky": "sunny"}
        assert json.loads(answers["call_b"].content) == {"city": "Porto", "sky": "sunny"}
        assert together.both.is_set()  # the two calls ran at once (each waited for the other)

        assert len(server.requests) == 2
        first, second = (r.body for r in server.requests)
        assert isinstance(first, dict) and isinstance(second, dict)
        assert first["stream"] is True
        assert first["tool_choice"] == "required"
        assert [t["function"]["name"] for t in first["tools"]] == [
            "get_weather",
            "write_todos",
            "Trip",
        ]
        assert first["messages"][0]["role"] == "system"
        assert first["messages"][0]["content"].startswith("You plan trips.\n\n## Your todo list")
        # the second request carries the whole exchange, ids matching
        roles = [m["role"] for m in second["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "tool", "tool"]
        assistant = second["messages"][2]
        assert assistant["content"] == "Let me check."
        assert [c["id"] for c in assistant["tool_calls"]] == ["call_t", "call_a", "call_b"]
        assert [m["tool_call_id"] for m in second["messages"][3:]] == ["call_t", "call_a", "call_b"]


async def test_a_server_error_is_a_clear_exception() -> None:
    async with FakeOpenAIServer() as server:
        server.add_error(503, "overloaded")
        async with OpenAIChatModel("fake-model", base_url=server.base_url, max_retries=0) as model:
            with pytest.raises(AgentModelError, match="HTTP 503") as info:
                await create_agent(model).run("hi")
    assert [m.role for m in info.value.state.messages] == ["user"]
