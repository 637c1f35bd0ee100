"""The status agent's structured answer: StatusAgent(response_format=...) gives
structured_response, written by its conversation step through the strategies every product
takes; an answer that fails is sent back with its errors, every try is a model call of the
run, and a stored run keeps it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from toolloop.errors import ResponseFormatError, StructuredOutputError
from toolloop.kernel import ProviderStrategy, ToolStrategy
from toolloop.status_agent import StatusAgent, StatusView
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


class Forecast(BaseModel):
    """The weather in a city."""

    city: str
    sunny: bool


VERDICT = {
    "title": "Verdict",
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}


def weather(city: str) -> dict[str, Any]:
    """The weather in a city.

    Args:
        city: the city.
    """
    return {"city": city, "sky": "clear"}


def analyze(view: StatusView) -> str:
    return "the user wants the weather"


def no_plan(view: StatusView) -> list[str]:
    return []


def one_step(view: StatusView) -> list[str]:
    return ["look up the weather"]


def decide(view: StatusView) -> dict[str, Any]:
    if view.records:
        return {"action": "finish", "answer": "Sunny."}
    call = {"tool_name": "weather", "arguments": {"city": "Lisbon"}, "purpose": "weather"}
    return {"action": "call_tools", "tool_calls": [call]}


def reflect(view: StatusView) -> dict[str, Any]:
    return {"verdict": "finish", "note": "done", "answer": "It is sunny in Lisbon."}


def call(name: str, args: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args)}


def agent(model: ScriptedChatModel, response_format: Any, *, plan: Any = one_step) -> StatusAgent:
    return StatusAgent(
        model=model,
        tools=[weather],
        analyze=analyze,
        plan=plan,
        decide=decide,
        reflect=reflect,
        response_format=response_format,
    )


async def test_the_conversation_writes_a_structured_answer() -> None:
    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": True})], usage={"total_tokens": 6}
    )
    result = await agent(model, Forecast, plan=no_plan).run("Sunny in Lisbon?")
    assert result.stop_reason == "answered"
    assert result.structured_response == Forecast(city="Lisbon", sunny=True)
    assert result.text is not None and json.loads(result.text) == {"city": "Lisbon", "sunny": True}
    assert result.usage.requests == 1 and result.usage.total_tokens == 6
    (request,) = model.requests
    assert request.tool_choice == {"type": "function", "function": {"name": "Forecast"}}
    assert request.tools is not None
    assert [t["function"]["name"] for t in request.tools] == ["Forecast"]


async def test_after_the_tools_a_failing_answer_is_sent_back_and_every_try_counted() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Forecast", {"city": "Lisbon"})], usage={"total_tokens": 4})
    model.add_reply(
        tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": True})],
        usage={"total_tokens": 5},
    )
    result = await agent(model, ToolStrategy(Forecast)).run("Sunny in Lisbon?")
    assert result.structured_response == Forecast(city="Lisbon", sunny=True)
    assert [r.result for r in result.records] == [{"city": "Lisbon", "sky": "clear"}]
    assert result.usage.requests == 2 and result.usage.total_tokens == 9
    nodes = [t.node for t in result.state.history]
    assert nodes[-2:] == ["reflection", "conversation"]  # the reflection's finish went there
    context = json.loads(model.requests[0].messages[-1]["content"])
    assert context["answer_so_far"] == "It is sunny in Lisbon."
    told = model.requests[1].messages[-1]
    assert told["role"] == "tool" and "does not fit Forecast" in told["content"]
    assert "sunny" in told["content"]


async def test_a_json_schema_through_the_provider_and_retries_that_run_out() -> None:
    model = ScriptedChatModel(['{"ok": true}'])
    result = await agent(model, ProviderStrategy(VERDICT), plan=no_plan).run("judge")
    assert result.structured_response == {"ok": True}
    structured = model.requests[0].structured_output
    assert structured is not None and structured.name == "Verdict"
    assert structured.schema == VERDICT

    model = ScriptedChatModel(["yes", '{"ok": "yes"}'])
    failing = agent(model, ProviderStrategy(VERDICT, retries=1))
    with pytest.raises(StructuredOutputError, match="failed to fit 'Verdict' 2 times") as info:
        await failing.run("judge", run_id="judged")
    state = info.value.state
    assert [r.record.tool_name for r in state.records] == ["weather"]  # the records are kept
    assert state.usage.requests == 2
    assert "the answer does not fit Verdict" in str(info.value)
    stored = await failing.store.get("judged")
    assert stored is not None and stored.status == "failed"


async def test_a_stored_run_keeps_its_structured_answer() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Forecast", {"city": "Porto", "sunny": False})])
    made = agent(model, Forecast)
    result = await made.run("Sunny in Porto?", run_id="porto")
    again = await made.recover("porto")
    assert again.structured_response == result.structured_response
    assert again.structured_response == Forecast(city="Porto", sunny=False)
    assert len(model.requests) == 1  # nothing ran again


async def test_a_response_format_needs_the_model_and_a_schema() -> None:
    with pytest.raises(ValueError, match="give model="):
        StatusAgent(
            analyze=analyze,
            plan=no_plan,
            decide=decide,
            reflect=reflect,
            converse=analyze,
            response_format=Forecast,
        )
    with pytest.raises(ValueError, match="no converse="):
        StatusAgent(model=ScriptedChatModel(), converse=analyze, response_format=Forecast)
    with pytest.raises(ResponseFormatError, match="schema of an object"):
        StatusAgent(model=ScriptedChatModel(), response_format={"type": "array"})
