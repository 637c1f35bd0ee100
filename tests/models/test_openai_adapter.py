"""OpenAIChatModel over real HTTP: the real `openai` client against FakeOpenAIServer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import pytest

from toolloop import ModelCallError, ModelOutputError
from toolloop.models import ChatDelta, ChatModel, ChatRequest, OpenAIChatModel, StructuredOutput
from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply, RecordedRequest

pytestmark = [
    pytest.mark.anyio,
    # on trio the openai client leaves its inner async generators to the garbage collector
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
STRUCTURED = ChatRequest(messages=MESSAGES, structured_output=StructuredOutput(SCHEMA, name="out"))
BODY = '{"answer": "42"}'


@asynccontextmanager
async def serving(
    server: FakeOpenAIServer | None = None, **options: Any
) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    options.setdefault("max_retries", 0)
    async with server or FakeOpenAIServer() as running:
        async with OpenAIChatModel("fake-model", base_url=running.base_url, **options) as model:
            yield running, model


async def read_all(model: ChatModel, request: ChatRequest = STRUCTURED) -> list[ChatDelta]:
    async with model.stream(request) as deltas:
        return [delta async for delta in deltas]


async def read_into(model: ChatModel, got: list[ChatDelta]) -> None:
    async with model.stream(STRUCTURED) as deltas:
        async for delta in deltas:
            got.append(delta)


def content(deltas: list[ChatDelta]) -> str:
    return "".join(d.content for d in deltas)


def formats(server: FakeOpenAIServer) -> list[Any]:
    return [r.body.get("response_format") for r in server.requests]


def format_types(server: FakeOpenAIServer) -> list[str]:
    return [
        "json_object_schema" if "schema" in f else f["type"]
        for f in formats(server)
        if isinstance(f, dict)
    ]


def test_is_a_chat_model() -> None:
    assert isinstance(OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1"), ChatModel)


def test_structured_output_must_be_a_known_mode() -> None:
    with pytest.raises(ValueError, match="structured_output must be 'auto' or one of"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", structured_output="xml")


# -- the request ---------------------------------------------------------------------------


async def test_the_request_is_streamed_with_its_parameters() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    request = ChatRequest(
        messages=MESSAGES,
        tools=tools,
        tool_choice="required",
        max_tokens=77,
        temperature=0.25,
        extra={"seed": 7, "top_p": 0.5},
    )
    async with serving() as (server, model):
        server.add_reply("hello")
        assert content(await read_all(model, request)) == "hello"
    body = server.requests[0].body
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    assert body["messages"] == MESSAGES
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.25
    assert body["tools"] == tools
    assert body["tool_choice"] == "required"
    assert (body["seed"], body["top_p"]) == (7, 0.5)
    assert "response_format" not in body


async def test_optional_parameters_are_left_out() -> None:
    async with serving() as (server, model):
        server.add_reply("x")
        await read_all(model, ChatRequest(messages=MESSAGES, tool_choice="auto"))
    body = server.requests[0].body
    for key in ("max_tokens", "temperature", "tools", "tool_choice", "response_format"):
        assert key not in body


async def test_json_schema_is_asked_first() -> None:
    async with serving() as (server, model):
        server.add_reply(BODY)
        assert model.structured_output_mode is None
        assert content(await read_all(model)) == BODY
        assert model.structured_output_mode == "json_schema"
    assert formats(server) == [
        {"type": "json_schema", "json_schema": {"name": "out", "schema": SCHEMA, "strict": True}}
    ]


# -- the deltas ----------------------------------------------------------------------------


async def test_content_deltas_and_the_finish_reason() -> None:
    async with serving() as (server, model):
        server.add_reply(BODY, chunk_size=3, finish_reason="length")
        deltas = await read_all(model)
    assert content(deltas) == BODY
    assert [d.content for d in deltas if d.content][:2] == ['{"a', "nsw"]
    # the finish delta, then the usage the adapter asked for (include_usage) in one of its own
    assert deltas[-2].finish_reason == "length"
    assert [d.finish_reason for d in deltas[:-2]] == [None] * (len(deltas) - 2)
    usage = deltas[-1].usage
    assert usage is not None and deltas[-1].content == "" and deltas[-1].finish_reason is None
    assert (usage.requests, usage.output_tokens) == (1, 4)  # the fake counts 4 chars a token
    assert usage.total_tokens == (usage.input_tokens or 0) + 4
    assert server.requests[0].body["stream_options"] == {"include_usage": True}
    assert server.streams[0].completed


async def test_tool_call_deltas() -> None:
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}', "id": "call_1"},
                {"name": "noop", "arguments": "{}"},
            ],
            chunk_size=5,
        )
        deltas = await read_all(model, ChatRequest(messages=MESSAGES))
    calls = [call for d in deltas for call in d.tool_calls]
    first = [c for c in calls if c.index == 0]
    assert (first[0].id, first[0].name) == ("call_1", "get_weather")
    assert "".join(c.arguments for c in first) == '{"city": "Lisbon"}'
    assert all(c.name is None for c in first[1:])
    second = [c for c in calls if c.index == 1]
    assert second[0].name == "noop" and second[0].id
    assert deltas[-2].finish_reason == "tool_calls"


# -- falling back when a server refuses a structured-output mode ---------------------------


async def test_a_server_refusing_json_schema_gets_json_object_with_the_schema() -> None:
    # llama-cpp-python answers HTTP 500 to json_schema and enforces {"type": "json_object",
    # "schema": ...} with a grammar; the probe does not retry the refusal
    server = FakeOpenAIServer(reject_response_formats={"json_schema"})
    async with serving(server, max_retries=2) as (server, model):
        server.add_reply(BODY)
        server.add_reply(BODY)
        assert content(await read_all(model)) == BODY
        assert model.structured_output_mode == "json_object_schema"
        assert format_types(server) == ["json_schema", "json_object_schema"]
        assert formats(server)[1] == {"type": "json_object", "schema": SCHEMA}
        # remembered: the next request goes straight there
        assert content(await read_all(model)) == BODY
    assert format_types(server) == ["json_schema", "json_object_schema", "json_object_schema"]


async def test_a_server_refusing_schemas_gets_plain_json_object() -> None:
    def responder(request: RecordedRequest) -> FakeReply | FakeErrorReply:
        response_format = request.body["response_format"]
        if response_format["type"] != "json_object" or "schema" in response_format:
            return FakeErrorReply(400, "schemas are not supported")
        return FakeReply(BODY)

    async with serving(FakeOpenAIServer(responder=responder)) as (server, model):
        assert content(await read_all(model)) == BODY
        assert model.structured_output_mode == "json_object"
        assert content(await read_all(model)) == BODY
    assert format_types(server) == [
        "json_schema",
        "json_object_schema",
        "json_object",
        "json_object",
    ]
    assert formats(server)[2] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, "response_format json_schema is unknown here"),
        (415, None),  # Unsupported Media Type: a refusal whatever it says
        (422, "Unsupported parameter: 'response_format'"),
        (501, None),  # Not Implemented
    ],
)
async def test_other_refusal_statuses_fall_back(status: int, message: str | None) -> None:
    async with serving() as (server, model):
        server.add_error(status, message)
        server.add_reply(BODY)
        await read_all(model)
    assert format_types(server) == ["json_schema", "json_object_schema"]


async def test_a_transient_error_while_probing_is_retried_and_never_downgrades() -> None:
    async with serving(max_retries=2) as (server, model):
        server.add_error(500, "upstream timed out, try again")  # says nothing of the mode
        server.add_reply(BODY)
        assert content(await read_all(model)) == BODY
        assert model.structured_output_mode == "json_schema"  # not downgraded
    assert format_types(server) == ["json_schema", "json_schema"]


async def test_an_outage_is_reported_as_an_outage() -> None:
    async with serving(max_retries=1) as (server, model):
        for _ in range(6):
            server.add_error(503, "service unavailable")
        with pytest.raises(ModelCallError, match="answered HTTP 503") as info:
            await read_all(model)
        assert model.structured_output_mode is None  # nothing was learned of the modes
    assert "refused every structured output mode" not in str(info.value)
    assert set(format_types(server)) == {"json_schema"}


async def test_a_stream_line_that_is_not_json_is_a_model_output_error() -> None:
    async with serving() as (server, model):
        server.add_reply(BODY, chunk_size=2, garbled_event=3)
        with pytest.raises(ModelOutputError, match="stream event that is not JSON"):
            await read_all(model)


async def test_a_configured_mode_is_the_only_one_sent() -> None:
    async with serving(structured_output="json_object_schema") as (server, model):
        assert model.structured_output_mode == "json_object_schema"
        server.add_reply(BODY)
        await read_all(model)
        server.add_error(500, "no grammar for you")
        with pytest.raises(ModelCallError, match="answered HTTP 500") as info:
            await read_all(model)
    assert info.value.status == 500
    assert format_types(server) == ["json_object_schema", "json_object_schema"]


async def test_a_list_of_modes_is_tried_in_its_order() -> None:
    server = FakeOpenAIServer(reject_response_formats={"json_schema"})
    async with serving(server, structured_output=["json_schema", "json_object"]) as (server, model):
        server.add_reply(BODY)
        await read_all(model)
        assert model.structured_output_mode == "json_object"
    assert format_types(server) == ["json_schema", "json_object"]


async def test_refusing_every_mode_names_them() -> None:
    server = FakeOpenAIServer(reject_response_formats={"json_schema", "json_object"})
    async with serving(server) as (server, model):
        with pytest.raises(ModelCallError) as info:
            await read_all(model)
        assert model.structured_output_mode is None
    message = str(info.value)
    assert "refused every structured output mode" in message
    assert "json_schema: HTTP 500; json_object_schema: HTTP 500; then HTTP 500" in message
    assert "not supported by this server" in message
    assert info.value.status == 500
    assert format_types(server) == ["json_schema", "json_object_schema", "json_object"]


async def test_an_error_that_is_no_refusal_does_not_fall_back() -> None:
    async with serving() as (server, model):
        server.add_error(401, "Incorrect API key provided")
        with pytest.raises(ModelCallError, match=r"HTTP 401.*Incorrect API key") as info:
            await read_all(model)
    assert info.value.status == 401
    assert len(server.requests) == 1


# -- retries, errors, connections ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "json_schema"])
async def test_a_rate_limit_is_retried_by_the_client(mode: str) -> None:
    # while probing modes too: a 429 is no refusal, the request is retried as it is
    async with serving(max_retries=2, structured_output=mode) as (server, model):
        server.add_error(429, headers={"retry-after-ms": "1"})
        server.add_error(503, headers={"retry-after-ms": "1"})
        server.add_reply(BODY)
        with anyio.fail_after(30):  # a hang guard (the client's own backoff is under 20 s)
            assert content(await read_all(model)) == BODY
        assert model.structured_output_mode == "json_schema"
    assert format_types(server) == ["json_schema"] * 3


async def test_retries_run_out() -> None:
    async with serving(max_retries=1) as (server, model):
        for _ in range(2):
            server.add_error(429, "slow down", headers={"retry-after-ms": "1"})
        with pytest.raises(ModelCallError, match=r"HTTP 429.*slow down") as info:
            await read_all(model)
    assert info.value.status == 429
    assert len(server.requests) == 2  # one try and one retry, not more


async def test_no_retries_with_max_retries_0() -> None:
    async with serving(max_retries=0) as (server, model):
        server.add_error(429, headers={"retry-after-ms": "1"})
        with pytest.raises(ModelCallError) as info:
            await read_all(model)
    assert info.value.status == 429
    assert len(server.requests) == 1


async def test_a_stream_cut_mid_way_is_a_model_call_error() -> None:
    async with serving() as (server, model):
        server.add_reply(BODY, chunk_size=2, disconnect_after=3)
        got: list[ChatDelta] = []
        with pytest.raises(ModelCallError, match="broke off the stream before its end"):
            await read_into(model, got)
    assert content(got) == BODY[:4]
    assert server.streams[0].server_disconnected


async def test_a_server_that_is_not_there() -> None:
    async with FakeOpenAIServer() as server:
        base_url = server.base_url
    # the port is free again: nothing listens there
    async with OpenAIChatModel("m", base_url=base_url, max_retries=0) as model:
        with pytest.raises(ModelCallError, match=r"connection .* failed .*is it running\?"):
            await read_all(model)


async def test_the_client_timeout() -> None:
    async with serving(timeout=0.2) as (server, model):
        server.add_reply(BODY, first_delay=60.0)
        # the client's 0.2 s ends it, not the server's 60 s (the guard only catches a hang)
        with anyio.fail_after(30), pytest.raises(ModelCallError, match="did not answer in time"):
            await read_all(model)


# -- closing the stream --------------------------------------------------------------------


async def test_leaving_the_block_closes_the_connection() -> None:
    async with serving() as (server, model):
        server.add_reply("x" * 200, chunk_size=1, delay=0.005)
        async with model.stream(STRUCTURED) as deltas:
            async for delta in deltas:
                if delta.content:
                    break
        record = await server.wait_disconnected(0, timeout=2)
    assert record.client_disconnected and not record.completed
    assert record.chunks_sent < record.chunks_planned // 2


async def test_a_cancelled_reader_still_closes_the_connection() -> None:
    async with serving() as (server, model):
        server.add_reply("x" * 200, chunk_size=1, delay=0.01)
        with anyio.move_on_after(0.1) as scope:
            await read_all(model)
        assert scope.cancelled_caught
        record = await server.wait_disconnected(0, timeout=2)
    assert record.chunks_sent < record.chunks_planned // 2


async def test_a_given_client_gets_the_options() -> None:
    import openai

    async with FakeOpenAIServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k")
        model = OpenAIChatModel("m", client=client, max_retries=0, timeout=5)
        assert model.client.max_retries == 0
        assert model.client.timeout == 5
        assert model.base_url.startswith(server.base_url)
        server.add_reply(json.dumps({"answer": "a"}))
        async with model:
            assert json.loads(content(await read_all(model))) == {"answer": "a"}
        await client.close()


# -- what the body is, read from the body itself -----------------------------------------------

COMPLETION = json.dumps(
    {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 1}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
)


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
async def test_a_plain_json_body_to_a_streamed_request_is_read_as_the_reply(
    content_type: str | None,
) -> None:
    """A server or a proxy that answers ``stream: true`` with one completion (whatever its
    content type says): its tool call and usage are read, not an empty answer."""
    headers = {} if content_type is None else {"content-type": content_type}
    async with serving(api_key="k") as (server, model):
        server.add_raw([COMPLETION[:40], COMPLETION[40:]], headers=headers)
        deltas = await read_all(model, ChatRequest(messages=MESSAGES))
    calls = [c for d in deltas for c in d.tool_calls]
    assert [(c.id, c.name, c.arguments) for c in calls] == [("call_1", "add", '{"a": 1}')]
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["tool_calls"]
    usage = [d.usage for d in deltas if d.usage is not None]
    assert usage and usage[-1].total_tokens == 8


async def test_a_body_that_is_neither_a_stream_nor_json_is_a_model_output_error() -> None:
    async with serving(api_key="k") as (server, model):
        server.add_raw(["{not json at all"], headers={"content-type": "application/json"})
        with pytest.raises(ModelOutputError, match="neither a stream nor JSON"):
            await read_all(model, ChatRequest(messages=MESSAGES))


async def test_reasoning_goes_back_except_to_a_server_that_refuses_it() -> None:
    """Groq answers HTTP 400 to an assistant message with a reasoning field: by its host
    the reasoning is left out; everywhere else it goes back where it came from."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
                {"type": "text", "text": "Hello"},
            ],
            "reasoning_content": "hmm",
            "reasoning_details": [{"type": "reasoning.text", "text": "hmm"}],
        },
        {"role": "user", "content": "and?"},
    ]
    groq = OpenAIChatModel("m", base_url="https://api.groq.com/openai/v1", api_key="k")
    here = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    told = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k", send_reasoning=False)
    assert (groq.send_reasoning, here.send_reasoning, told.send_reasoning) == (False, True, False)
    request = ChatRequest(messages=history)
    assert here._params(request)["messages"] == history
    for model in (groq, told):
        sent = model._params(request)["messages"][1]
        assert sent == {"role": "assistant", "content": "Hello"}
    for model in (groq, here, told):
        await model.aclose()


def _sse_reply(text: str = "Hello world") -> list[str]:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    return [f"data: {json.dumps(chunk)}\n\n", "data: [DONE]\n\n"]


@pytest.mark.parametrize("end", ["hold", "drop"])
async def test_a_whole_reply_ends_when_the_body_stays_open_or_breaks_after_it(
    end: Literal["hold", "drop"],
) -> None:
    """The reply ended (its finish reason, [DONE]): a proxy that keeps the body open, or
    drops it without its last chunk, does not make a whole reply fail or hang."""
    async with serving(api_key="k", timeout=60) as (server, model):
        server.add_raw(_sse_reply(), end=end)
        with anyio.fail_after(30):  # a hang guard: the drain gives up after 2 s
            deltas = await read_all(model, ChatRequest(messages=MESSAGES))
    assert content(deltas) == "Hello world"
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["stop"]


async def test_a_stream_labelled_json_is_read_as_the_stream_it_is() -> None:
    async with serving(api_key="k") as (server, model):
        server.add_raw(_sse_reply("Hi"), headers={"content-type": "application/json"})
        deltas = await read_all(model, ChatRequest(messages=MESSAGES))
    assert content(deltas) == "Hi"


async def test_an_error_quoting_the_key_is_scrubbed_before_it_is_cut() -> None:
    key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    said = "x" * 290 + key  # the key straddles where the quote is cut
    error = {"error": {"message": said, "code": 500}}
    async with serving(api_key=key) as (server, model):
        server.add_raw(["data: " + json.dumps(error) + "\n\n"])
        with pytest.raises(ModelCallError) as info:
            await read_all(model, ChatRequest(messages=MESSAGES))
    assert key[:8] not in str(info.value)


async def test_a_cancelled_retry_wait_does_not_carry_the_server_s_answer() -> None:
    """While probing structured-output modes, a 429 is waited out as the client would: a
    run cancelled in that wait must not chain the 429 (which echoed the key)."""
    import traceback

    key = "hunter2-pw-xyz"
    async with serving(api_key=key, max_retries=2) as (server, model):
        server.add_error(429, f"rate limited for key {key}", headers={"retry-after": "30"})
        with pytest.raises(TimeoutError) as info:
            with anyio.fail_after(0.5):
                await read_all(model)
    assert key not in "".join(traceback.format_exception(info.value))
