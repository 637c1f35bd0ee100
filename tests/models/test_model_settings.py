"""Model settings: given to the model, to a planner, to one call; merged and sent as the
OpenAI API takes them (FakeOpenAIServer, the real openai client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from toolloop import LoopResult, StructuredPlanner, ToolCallingPlanner, final_answer
from toolloop.errors import ModelCallError
from toolloop.models import ChatRequest, ModelSettings, OpenAIChatModel, StructuredOutput
from toolloop.planners import PlannerContext
from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

MESSAGES = [{"role": "user", "content": "hi"}]


@asynccontextmanager
async def serving(
    settings: ModelSettings | None = None, **kwargs: Any
) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model",
            base_url=server.base_url,
            api_key="test",
            max_retries=0,
            settings=settings,
            **kwargs,
        ) as model:
            yield server, model


async def drain(model: OpenAIChatModel, request: ChatRequest) -> None:
    async with model.stream(request) as deltas:
        async for _ in deltas:
            pass


async def test_the_model_settings_are_sent_with_every_call() -> None:
    settings: ModelSettings = {
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["\n\n"],
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "logit_bias": {"50256": -100},
        "reasoning_effort": "low",
        "user": "u-1",
        "max_tokens": 64,
        "extra_body": {"top_k": 20, "min_p": 0.05},
    }
    async with serving(settings) as (server, model):
        for _ in range(2):
            server.add_reply("ok")
            await drain(model, ChatRequest(messages=MESSAGES))
    for request in server.requests:
        body = request.body
        for key, value in settings.items():
            if key != "extra_body":
                assert body[key] == value, key
        assert (body["top_k"], body["min_p"]) == (20, 0.05)  # extra_body: into the JSON as is
        assert "extra_body" not in body


async def test_a_call_overrides_the_model_key_by_key_and_merges_extra_body() -> None:
    async with serving({"temperature": 0.3, "seed": 1, "extra_body": {"top_k": 20}}) as (
        server,
        model,
    ):
        server.add_reply("ok")
        request = ChatRequest(
            messages=MESSAGES,
            temperature=0.0,
            max_tokens=10,
            settings={"seed": 2, "max_tokens": 20, "extra_body": {"min_p": 0.1}},
        )
        await drain(model, request)
    body = server.requests[0].body
    # the request's fields override the model's, its settings override both
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.0, 2, 20)
    assert (body["top_k"], body["min_p"]) == (20, 0.1)


async def test_parallel_tool_calls_is_sent_only_with_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with serving({"parallel_tool_calls": False}) as (server, model):
        server.add_reply("a")
        server.add_reply("b")
        await drain(model, ChatRequest(messages=MESSAGES))
        await drain(model, ChatRequest(messages=MESSAGES, tools=tools))
    assert "parallel_tool_calls" not in server.requests[0].body
    assert server.requests[1].body["parallel_tool_calls"] is False


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_unknown_setting_is_refused_at_once_naming_it() -> None:
    bad: Any = {"temprature": 0.2, "top_p": 0.5}
    with pytest.raises(ValueError, match=r"unknown model settings \['temprature'\]") as info:
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", settings=bad)
    assert "extra_body" in str(info.value)
    with pytest.raises(ValueError, match="StructuredPlanner: unknown model settings"):
        StructuredPlanner(OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1"), settings=bad)
    with pytest.raises(TypeError, match="extra_body must be a dict"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", settings={"extra_body": 3})  # type: ignore[arg-type]


async def test_usage_can_be_left_out_of_the_request() -> None:
    async with serving(stream_usage=False) as (server, model):
        server.add_reply("ok")
        async with model.stream(ChatRequest(messages=MESSAGES)) as deltas:
            seen = [delta async for delta in deltas]
    assert "stream_options" not in server.requests[0].body
    assert all(delta.usage is None for delta in seen)


async def test_the_planners_and_the_final_answer_pass_their_settings() -> None:
    context = PlannerContext(
        user_input="?",
        available_tools=[
            {"name": "f", "description": "", "parameters": {"type": "object", "properties": {}}}
        ],
    )
    async with serving({"seed": 1}) as (server, model):
        server.add_reply('{"next_action": "response", "execution_commands": []}')
        await StructuredPlanner(model, max_tokens=2048, settings={"top_p": 0.5}).plan(context)
        server.add_reply("no tool")
        await ToolCallingPlanner(model, settings={"seed": 3, "max_tokens": 99}).plan(context)
        server.add_reply("the answer")
        result = LoopResult.build("?", [], rounds=0, stop_reason="answered")
        answer = await final_answer(model, result, settings={"stop": "END"})
    structured, tool_calling, final = (r.body for r in server.requests)
    assert (structured["max_tokens"], structured["top_p"], structured["seed"]) == (2048, 0.5, 1)
    assert (tool_calling["max_tokens"], tool_calling["seed"]) == (99, 3)
    assert (final["stop"], final["seed"]) == ("END", 1)
    assert answer == "the answer" and answer.finish_reason == "stop" and not answer.cut_off


async def test_a_server_that_refuses_stream_options_is_asked_without() -> None:
    def responder(request: Any) -> Any:
        if "stream_options" in request.body:
            return FakeErrorReply(
                400, "Unrecognized request argument supplied: stream_options", headers={}
            )
        return FakeReply(content="ok")

    async with FakeOpenAIServer(responder=responder) as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            for _ in range(2):
                async with model.stream(ChatRequest(messages=MESSAGES)) as deltas:
                    assert "".join([d.content async for d in deltas]) == "ok"
            assert model.stream_usage is False
    asked = ["stream_options" in r.body for r in server.requests]
    assert asked == [True, False, False]  # refused once, then never asked again


async def test_refusing_stream_options_is_no_verdict_on_the_structured_output_mode() -> None:
    def responder(request: Any) -> Any:
        if "stream_options" in request.body:
            return FakeErrorReply(400, "stream_options is not supported by this server")
        return FakeReply(content='{"a": 1}')

    async with FakeOpenAIServer(responder=responder) as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            request = ChatRequest(
                messages=MESSAGES, structured_output=StructuredOutput({"type": "object"})
            )
            await drain(model, request)
            assert model.structured_output_mode == "json_schema"  # not downgraded
    formats = [r.body["response_format"]["type"] for r in server.requests]
    assert formats == ["json_schema", "json_schema"]


async def test_another_bad_request_is_not_mistaken_for_it() -> None:
    async with serving() as (server, model):
        server.add_error(400, "messages: too long")
        with pytest.raises(ModelCallError, match="too long"):
            await drain(model, ChatRequest(messages=MESSAGES))
        assert model.stream_usage is True
    assert len(server.requests) == 1
