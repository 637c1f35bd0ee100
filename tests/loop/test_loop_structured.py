"""The loop's structured final answer: final_answer(response_format=...) and a run's
answer_with=AnswerWith(model, response_format=...), through the strategies the middleware
agent takes; an answer that fails is sent back with its errors, every try is a model call of
the run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from toolloop import LoopResult, ToolExecutionRecord, async_plan_and_execute, final_answer
from toolloop.checkpoints import MemoryCheckpointStore
from toolloop.errors import (
    ResponseFormatError,
    StructuredOutputError,
    UsageLimitError,
)
from toolloop.kernel import ProviderStrategy, ToolStrategy
from toolloop.loop import AnswerWith, async_recover_plan_and_execute, stream_final_answer
from toolloop.models import OpenAIChatModel, UsageLimits
from toolloop.testing import FakeOpenAIServer, ScriptedChatModel, ScriptedPlanner

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


class Forecast(BaseModel):
    """The weather in a city."""

    city: str
    sunny: bool


VERDICT = {
    "title": "Verdict",
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def weather(city: str) -> dict[str, Any]:
    """The weather in a city.

    Args:
        city: the city.
    """
    return {"city": city, "sky": "clear"}


PLAN = [
    {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": "weather", "tool_name": "weather", "tool_kwargs": {"city": "Lisbon"}}
        ],
    },
    {"next_action": "response"},
]


def call(name: str, args: Any) -> dict[str, str]:
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}


def done() -> LoopResult:
    record = ToolExecutionRecord(
        purpose="weather", tool_name="weather", kwargs={}, success=True, result="sunny"
    )
    return LoopResult.build("Sunny in Lisbon?", [record], rounds=1, stop_reason="answered")


async def test_final_answer_with_a_pydantic_model_through_a_tool() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": True})])
    answer = await final_answer(model, done(), response_format=Forecast)
    assert answer.structured_response == Forecast(city="Lisbon", sunny=True)
    assert json.loads(answer) == {"city": "Lisbon", "sunny": True}  # the text is its JSON
    assert answer.tries == 1
    (request,) = model.requests
    assert request.tool_choice == {"type": "function", "function": {"name": "Forecast"}}
    assert request.tools is not None
    assert [t["function"]["name"] for t in request.tools] == ["Forecast"]
    assert "<action_results>" in request.messages[-1]["content"]  # the loop's prompt


async def test_an_answer_that_fails_is_sent_back_with_what_was_expected_and_what_came() -> None:
    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": "very"})],
        usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    )
    model.add_reply("It is sunny.", usage={"total_tokens": 7})  # no call at all
    model.add_reply(
        tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": True})],
        usage={"total_tokens": 9},
    )
    answer = await final_answer(model, done(), response_format=Forecast)
    assert answer.structured_response == Forecast(city="Lisbon", sunny=True)
    assert answer.tries == 3 and len(model.requests) == 3
    assert answer.usage is not None and answer.usage.requests == 3
    assert answer.usage.total_tokens == 12 + 7 + 9
    assert answer.run_usage is not None and answer.run_usage.requests == 3
    second = model.requests[1].messages
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"]
    told = second[-1]
    assert told["role"] == "tool" and told["tool_call_id"] == second[-2]["tool_calls"][0]["id"]
    assert "does not fit Forecast" in told["content"] and "sunny" in told["content"]
    assert "call 'Forecast' again" in told["content"]
    third = model.requests[2].messages
    assert third[-2] == {"role": "assistant", "content": "It is sunny."}
    assert third[-1] == {
        "role": "user",
        "content": "Give your final answer by calling the 'Forecast' tool.",
    }


async def test_final_answer_with_a_json_schema_through_the_provider() -> None:
    model = ScriptedChatModel(["not json", '{"ok": "yes"}', '{"ok": true}'])
    answer = await final_answer(model, done(), response_format=ProviderStrategy(VERDICT))
    assert answer.structured_response == {"ok": True} and answer.tries == 3
    structured = model.requests[0].structured_output
    assert structured is not None and structured.name == "Verdict"
    assert structured.schema == VERDICT and model.requests[0].tools is None
    feedback = model.requests[1].messages[-1]
    assert feedback["role"] == "user" and feedback["content"].startswith("the answer is not JSON")
    feedback = model.requests[2].messages[-1]
    assert "does not fit Verdict" in feedback["content"] and "'yes'" in feedback["content"]


async def test_retries_run_out_with_a_structured_output_error() -> None:
    model = ScriptedChatModel(["{}", "[]"])
    with pytest.raises(StructuredOutputError, match=r"failed to fit 'Verdict' 2 times") as info:
        await final_answer(model, done(), response_format=ProviderStrategy(VERDICT, retries=1))
    assert "(retries=1)" in str(info.value) and len(model.requests) == 2


async def test_a_structured_answer_is_not_streamed() -> None:
    streamed = stream_final_answer(
        ScriptedChatModel(),
        done(),
        response_format=Forecast,  # type: ignore[arg-type]
    )
    with pytest.raises(TypeError, match="use final_answer"):
        await streamed.__aenter__()
    with pytest.raises(ResponseFormatError, match="schema of an object"):
        await final_answer(ScriptedChatModel(), done(), response_format={"type": "array"})
    with pytest.raises(ResponseFormatError, match="pydantic model class"):
        AnswerWith(ScriptedChatModel(), response_format=42)  # type: ignore[arg-type]


async def test_a_run_answers_with_a_structured_response() -> None:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Forecast", {"city": "Lisbon"})], usage={"total_tokens": 4})
    model.add_reply(
        tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": True})],
        usage={"total_tokens": 5},
    )
    result = await async_plan_and_execute(
        "Sunny in Lisbon?",
        tools=[weather],
        planner=ScriptedPlanner(PLAN),
        answer_with=AnswerWith(model, response_format=Forecast),
    )
    assert result.structured_response == Forecast(city="Lisbon", sunny=True)
    assert result.text is not None and json.loads(result.text)["sunny"] is True
    assert result.usage.requests == 2 and result.usage.total_tokens == 9  # both tries
    assert "'sunny'" in model.requests[1].messages[-1]["content"]  # what was missing


async def test_a_run_whose_answer_never_fits_keeps_its_records() -> None:
    model = ScriptedChatModel(['{"ok": 1}'] * 3)
    with pytest.raises(StructuredOutputError, match="3 times") as info:
        await async_plan_and_execute(
            "judge",
            tools=[weather],
            planner=ScriptedPlanner(PLAN),
            answer_with=AnswerWith(model, response_format=ProviderStrategy(VERDICT)),
        )
    error = info.value
    assert [r.result for r in error.done_plans] == [{"city": "Lisbon", "sky": "clear"}]
    assert error.state is not None and error.state.usage.requests == 3


async def test_the_budget_holds_for_every_try() -> None:
    model = ScriptedChatModel(['{"ok": 1}', '{"ok": true}'])
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await async_plan_and_execute(
            "judge",
            planner=ScriptedPlanner([{"next_action": "response"}]),
            answer_with=AnswerWith(model, response_format=ProviderStrategy(VERDICT)),
            usage_limits=UsageLimits(max_requests=1),
        )
    assert len(model.requests) == 1  # the retry was refused before it was made
    model = ScriptedChatModel(['{"ok": 1}', '{"ok": true}'])
    with pytest.raises(UsageLimitError):
        await final_answer(
            model,
            done(),
            response_format=VERDICT | {"title": "V"},
            usage_limits=UsageLimits(max_requests=1),
        )


async def test_a_durable_run_keeps_its_structured_response() -> None:
    store = MemoryCheckpointStore()
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("Forecast", {"city": "Lisbon", "sunny": False})])
    answer_with = AnswerWith(model, response_format=ToolStrategy(Forecast))
    result = await async_plan_and_execute(
        "Sunny in Lisbon?",
        tools=[weather],
        planner=ScriptedPlanner(PLAN),
        answer_with=answer_with,
        store=store,
        run_id="forecast",
    )
    assert result.structured_response == Forecast(city="Lisbon", sunny=False)
    again = await async_recover_plan_and_execute(
        "forecast", planner=ScriptedPlanner([]), store=store, answer_with=answer_with
    )
    assert again.structured_response == Forecast(city="Lisbon", sunny=False)
    data = await async_recover_plan_and_execute(
        "forecast", planner=ScriptedPlanner([]), store=store
    )
    assert data.structured_response == {"city": "Lisbon", "sunny": False}
    assert len(model.requests) == 1  # nothing ran again


async def test_the_provider_is_sent_the_json_schema() -> None:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            server.add_reply(content='{"city": "Lisbon"}')
            server.add_reply(content='{"city": "Lisbon", "sunny": true}')
            answer = await final_answer(
                model, done(), response_format=ProviderStrategy(Forecast, strict=True)
            )
    assert answer.structured_response == Forecast(city="Lisbon", sunny=True)
    first, second = (r.body for r in server.requests)
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Forecast", "schema": Forecast.model_json_schema(), "strict": True},
    }
    assert second["messages"][-2] == {"role": "assistant", "content": '{"city": "Lisbon"}'}
    assert "sunny" in second["messages"][-1]["content"]
