"""FakeOpenAIServer, driven by the real `openai.AsyncOpenAI` client over real HTTP."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

import toolloop.testing
from toolloop.testing import (
    FakeErrorReply,
    FakeOpenAIServer,
    FakeReply,
    FakeToolCall,
    RecordedRequest,
)

pytestmark = [
    pytest.mark.anyio,
    # On trio, a stream read to `data: [DONE]` leaves the client's inner async generators
    # (openai `AsyncStream._iter_events`, `SSEDecoder.aiter_bytes`, httpx2
    # `Response.aiter_bytes`, httpcore2 `PoolByteStream.__aiter__`) suspended, and trio
    # warns when they are collected. The client's doing, not the server's.
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


@asynccontextmanager
async def serving(
    server: FakeOpenAIServer | None = None, *, max_retries: int = 0
) -> AsyncIterator[tuple[FakeOpenAIServer, openai.AsyncOpenAI]]:
    async with server or FakeOpenAIServer() as running:
        async with openai.AsyncOpenAI(
            base_url=running.base_url, api_key="test", max_retries=max_retries
        ) as client:
            yield running, client


async def stream_chunks(
    client: openai.AsyncOpenAI, *, model: str = "test-model", **kwargs: Any
) -> list[ChatCompletionChunk]:
    stream = await client.chat.completions.create(
        model=model, messages=MESSAGES, stream=True, **kwargs
    )
    return [chunk async for chunk in stream]


def joined_content(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


# -- streaming -----------------------------------------------------------------------------


async def test_streamed_content_reassembles() -> None:
    async with serving() as (server, client):
        server.add_reply('{"next_action": "response"}', chunk_size=3, delay=0.001)
        chunks = await stream_chunks(client)

    assert joined_content(chunks) == '{"next_action": "response"}'
    first, *middle, last = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    assert [len(chunk.choices[0].delta.content or "") for chunk in middle] == [3] * 9
    assert last.choices[0].finish_reason == "stop"
    assert last.choices[0].delta.content is None
    assert all(chunk.choices[0].finish_reason is None for chunk in chunks[:-1])
    assert {chunk.id for chunk in chunks} == {first.id}
    assert first.id.startswith("chatcmpl-")
    assert {chunk.model for chunk in chunks} == {"test-model"}  # echoes the request
    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert abs(first.created - time.time()) < 60
    record = server.streams[0]
    assert record.completed
    assert not record.client_disconnected
    assert record.chunks_sent == record.chunks_planned == len(chunks) + 1  # + [DONE]
    assert record.content_sent == '{"next_action": "response"}'


async def test_explicit_chunks_and_usage_chunk() -> None:
    async with serving() as (server, client):
        server.add_reply(chunks=["{", '"a"', ": 1", "}"])
        chunks = await stream_chunks(client, stream_options={"include_usage": True})

    assert [chunk.choices[0].delta.content for chunk in chunks[1:5]] == ["{", '"a"', ": 1", "}"]
    *others, usage_chunk = chunks
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens >= 1
    assert usage_chunk.usage.total_tokens == (
        usage_chunk.usage.prompt_tokens + usage_chunk.usage.completion_tokens
    )
    assert all(chunk.usage is None for chunk in others)
    assert others[-1].choices[0].finish_reason == "stop"


async def test_a_reply_may_script_its_usage_or_report_none() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}
    async with serving() as (server, client):
        server.add_reply("hi", usage=usage)
        server.add_reply("hi", usage=False)
        scripted = await stream_chunks(client, stream_options={"include_usage": True})
        omitted = await stream_chunks(client, stream_options={"include_usage": True})
    assert scripted[-1].usage is not None and scripted[-1].usage.total_tokens == 107
    assert all(chunk.usage is None and chunk.choices for chunk in omitted)
    assert server.streams[1].completed


async def test_a_server_that_never_reports_usage() -> None:
    async with serving(FakeOpenAIServer(report_usage=False)) as (server, client):
        server.add_reply("hi")
        server.add_reply("hi", usage={"prompt_tokens": 1, "completion_tokens": 1})
        none = await stream_chunks(client, stream_options={"include_usage": True})
        given = await stream_chunks(client, stream_options={"include_usage": True})
    assert all(chunk.usage is None for chunk in none)
    assert given[-1].usage is not None and given[-1].usage.completion_tokens == 1


async def test_tool_call_deltas_reassemble() -> None:
    calls = [
        {"name": "search", "arguments": '{"q": "x", "limit": 10}'},
        {"name": "fetch", "arguments": '{"url": "https://example.com"}', "id": "call_fixed"},
    ]
    async with serving() as (server, client):
        server.add_reply(tool_calls=calls, chunk_size=5)
        chunks = await stream_chunks(client)

    assembled: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = assembled.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            if delta.id:
                assert delta.type == "function"
                entry["id"] = delta.id
            if delta.function is not None:
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
    assert [assembled[i]["name"] for i in (0, 1)] == ["search", "fetch"]
    assert [json.loads(assembled[i]["arguments"]) for i in (0, 1)] == [
        {"q": "x", "limit": 10},
        {"url": "https://example.com"},
    ]
    assert assembled[0]["id"].startswith("call_")
    assert assembled[1]["id"] == "call_fixed"
    assert chunks[0].choices[0].delta.content is None
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    argument_deltas = [
        delta.function.arguments
        for chunk in chunks
        for delta in chunk.choices[0].delta.tool_calls or []
        if delta.function is not None and delta.function.name is None
    ]
    assert argument_deltas  # the arguments came in pieces
    assert all(len(piece or "") <= 5 for piece in argument_deltas)


async def test_finish_reason_length() -> None:
    async with serving() as (server, client):
        server.add_reply('{"next_act', finish_reason="length")
        server.add_reply("cut", finish_reason="length")
        chunks = await stream_chunks(client)
        completion = await client.chat.completions.create(model="m", messages=MESSAGES)

    assert chunks[-1].choices[0].finish_reason == "length"
    assert joined_content(chunks) == '{"next_act'
    assert completion.choices[0].finish_reason == "length"


async def test_token_rate_and_first_delay_pace_the_stream() -> None:
    async with serving() as (server, client):
        server.add_reply("abcdefgh" * 2, chunk_size=4, tokens_per_second=100, first_delay=0.05)
        start = time.monotonic()
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        arrivals = [time.monotonic() - start async for _ in stream]

    assert arrivals[0] >= 0.045  # time to first token
    assert arrivals[-1] >= 0.045 + 5 * 0.01 * 0.9  # 4 content pieces + finish, 10 ms each
    assert server.streams[0].content_sent == "abcdefgh" * 2


# -- non-streamed --------------------------------------------------------------------------


async def test_non_streamed_completion() -> None:
    async with serving() as (server, client):
        server.add_reply("hello there")
        server.add_reply(tool_calls=[FakeToolCall("search", '{"q": "x"}')])
        completion = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)
        with_tools = await client.chat.completions.create(model="gpt-x", messages=MESSAGES)

    assert completion.object == "chat.completion"
    assert completion.model == "gpt-x"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens > 0
    tool_calls = with_tools.choices[0].message.tool_calls
    assert tool_calls is not None
    assert with_tools.choices[0].message.content is None
    assert with_tools.choices[0].finish_reason == "tool_calls"
    [call] = tool_calls
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("search", '{"q": "x"}')
    assert server.streams == []


async def test_models_list() -> None:
    server = FakeOpenAIServer(models=["small", "large"])
    async with serving(server) as (_, client):
        page = await client.models.list()
        model = await client.models.retrieve("large")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nope")

    assert [model.id for model in page.data] == ["small", "large"]
    assert model.id == "large"


# -- errors and retries --------------------------------------------------------------------


async def test_429_then_success_through_the_client_retries() -> None:
    async with serving(max_retries=2) as (server, client):
        server.add_error(429, "slow down", headers={"retry-after-ms": "1"})
        server.add_reply("after the retry")
        with anyio.fail_after(30):  # a hang guard
            completion = await client.chat.completions.create(model="m", messages=MESSAGES)

    assert completion.choices[0].message.content == "after the retry"
    assert [request.headers["x-stainless-retry-count"] for request in server.requests] == [
        "0",
        "1",
    ]
    assert server.pending_replies == 0


async def test_500_without_retries_raises_internal_server_error() -> None:
    async with serving(max_retries=0) as (server, client):
        server.add_error(500, "the model fell over")
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)

    assert caught.value.status_code == 500
    assert caught.value.body == {
        "message": "the model fell over",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert len(server.requests) == 1


async def test_custom_error_body_and_headers() -> None:
    async with serving() as (server, client):
        server.add_error(400, body={"detail": "bad"}, headers={"x-extra": "1"})
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=MESSAGES)

    assert caught.value.body == {"detail": "bad"}
    assert caught.value.response.headers["x-extra"] == "1"


async def test_empty_queue_answers_500_that_is_not_retried() -> None:
    async with serving(max_retries=2) as (server, client):
        with pytest.raises(openai.InternalServerError, match="no scripted reply left"):
            await client.chat.completions.create(model="m", messages=MESSAGES)

    assert len(server.requests) == 1


async def test_reject_response_formats() -> None:
    schema: dict[str, object] = {
        "type": "object",
        "properties": {"next_action": {"type": "string"}},
    }
    server = FakeOpenAIServer(reject_response_formats={"json_schema"})
    async with serving(server) as (_, client):
        server.add_reply('{"next_action": "response"}')
        with pytest.raises(openai.InternalServerError, match="json_schema"):
            await client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "plan", "schema": schema},
                },
            )
        assert server.pending_replies == 1  # a rejected request takes no reply
        completion = await client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            extra_body={"response_format": {"type": "json_object", "schema": schema}},
        )

    assert completion.choices[0].message.content == '{"next_action": "response"}'
    assert server.requests[1].body["response_format"] == {"type": "json_object", "schema": schema}


# -- responder -----------------------------------------------------------------------------


async def test_responder_answers_from_the_request() -> None:
    def responder(request: RecordedRequest) -> FakeReply | FakeErrorReply | str:
        response_format = request.body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            return FakeErrorReply(400, "no json_schema here")
        if request.stream:
            return FakeReply(content="streamed", chunk_size=2)
        return "plain"

    async with serving(FakeOpenAIServer(responder=responder)) as (server, client):
        server.add_reply("queued first")
        queued = await client.chat.completions.create(model="m", messages=MESSAGES)
        plain = await client.chat.completions.create(model="m", messages=MESSAGES)
        streamed = await stream_chunks(client)
        with pytest.raises(openai.BadRequestError, match="no json_schema here"):
            await client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                response_format={"type": "json_schema", "json_schema": {"name": "x"}},
            )

    assert queued.choices[0].message.content == "queued first"
    assert plain.choices[0].message.content == "plain"
    assert joined_content(streamed) == "streamed"


async def test_async_responder_and_responder_errors() -> None:
    async def responder(request: RecordedRequest) -> FakeReply:
        await anyio.lowlevel.checkpoint()
        if request.body["model"] == "boom":
            raise ValueError("responder bug")
        return FakeReply(content=request.body["model"])

    async with serving(FakeOpenAIServer(responder=responder), max_retries=2) as (server, client):
        completion = await client.chat.completions.create(model="echo", messages=MESSAGES)
        with pytest.raises(openai.InternalServerError, match="responder bug"):
            await client.chat.completions.create(model="boom", messages=MESSAGES)

    assert completion.choices[0].message.content == "echo"
    assert len(server.requests) == 2  # the responder's error is not retried


# -- connections going away ----------------------------------------------------------------


async def test_server_disconnect_mid_stream_raises_api_connection_error() -> None:
    async with serving() as (server, client):
        server.add_reply("abcdefghijklmnop", chunk_size=1, disconnect_after=5)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        received: list[ChatCompletionChunk] = []

        async def read_all() -> None:
            async for chunk in stream:
                received.append(chunk)

        with pytest.raises(openai.APIConnectionError) as caught:
            await read_all()
        record = await server.wait_stream_ended(0)

    # The client's httpx2 reads a chunked body cut short: h11 says "peer closed connection
    # without sending complete message body (incomplete chunked read)"; openai wraps it.
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)
    assert len(received) == 5
    assert joined_content(received) == "abcd"
    assert record.server_disconnected
    assert not record.client_disconnected
    assert not record.completed
    assert record.chunks_sent == 5


async def test_server_disconnect_on_a_non_streamed_request() -> None:
    async with serving() as (server, client):
        server.add_reply("never sent", disconnect_after=0)
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="m", messages=MESSAGES)


async def test_client_closing_the_stream_early_is_seen_by_the_server() -> None:
    async with serving() as (server, client):
        server.add_reply("x" * 200, chunk_size=1, delay=0.005)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        async with stream:
            count = 0
            async for _ in stream:
                count += 1
                if count == 3:
                    break
        closed_at = time.monotonic()
        record = await server.wait_disconnected(0, timeout=2)

    assert record.client_disconnected
    assert not record.completed
    assert record.disconnected_at is not None
    assert record.disconnected_at - closed_at < 0.5
    assert 3 <= record.chunks_sent < record.chunks_planned
    assert record.chunks_planned == 203  # role + 200 content + finish + [DONE]


async def test_client_going_away_during_a_long_delay_is_seen_at_once() -> None:
    async with serving() as (server, client):
        server.add_reply("abc", chunk_size=1, delay=30)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        first = await stream.__anext__()
        assert first.choices[0].delta.role == "assistant"
        await stream.close()
        closed_at = time.monotonic()
        record = await server.wait_disconnected(0, timeout=2)

    assert record.disconnected_at is not None
    assert record.disconnected_at - closed_at < 0.5
    assert record.chunks_sent == 1
    assert record.content_sent == ""


async def test_wait_for_a_stream_that_has_not_started_yet() -> None:
    async with serving() as (server, client):
        server.add_reply("hello", delay=0.01)
        async with anyio.create_task_group() as task_group:

            async def consume() -> None:
                await stream_chunks(client)

            task_group.start_soon(consume)
            record = await server.wait_stream_ended(0, timeout=5)
        assert record.completed
        with pytest.raises(AssertionError, match="without the client going away"):
            await server.wait_disconnected(0, timeout=1)
        with pytest.raises(TimeoutError, match="did not end"):
            await server.wait_stream_ended(1, timeout=0.05)


async def test_concurrent_streams_are_recorded_apart() -> None:
    async def responder(request: RecordedRequest) -> FakeReply:
        await anyio.sleep(0.01 * (5 - int(request.body["model"])))  # finish out of order
        return FakeReply(content=f"reply {request.body['model']}", chunk_size=2, delay=0.002)

    results: dict[str, str] = {}
    async with serving(FakeOpenAIServer(responder=responder)) as (server, client):

        async def ask(model: str) -> None:
            results[model] = joined_content(await stream_chunks(client, model=model))

        async with anyio.create_task_group() as task_group:
            for number in range(5):
                task_group.start_soon(ask, str(number))

    assert results == {str(number): f"reply {number}" for number in range(5)}
    assert len({request.connection for request in server.requests}) == 5
    for record in server.streams:
        model = server.requests[record.request_index].body["model"]
        assert record.content_sent == f"reply {model}"
        assert record.completed


# -- requests, connections, lifecycle ------------------------------------------------------


async def test_requests_are_recorded_and_connections_kept_alive() -> None:
    async with serving() as (server, client):
        server.add_reply("one")
        server.add_reply("two")
        await client.chat.completions.create(model="m1", messages=MESSAGES, temperature=0.5)
        await stream_chunks(client)

    first, second = server.requests
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer test"
    assert first.headers["content-type"] == "application/json"
    assert first.body == {"model": "m1", "messages": MESSAGES, "temperature": 0.5}
    assert json.loads(first.raw_body) == first.body
    assert not first.stream
    assert second.stream
    assert second.body["model"] == "test-model"
    assert first.connection == second.connection  # the pooled connection was reused
    assert first.received_at <= second.received_at
    assert server.streams[0].request_index == 1


async def test_exit_leaves_no_task_and_drops_open_streams() -> None:
    before = len(anyio.get_running_tasks())
    server = FakeOpenAIServer()
    with anyio.fail_after(15):  # the open stream's next chunk was 30 s away: a hang guard
        async with server:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
            server.add_reply("abc", chunk_size=1, delay=30)
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            await stream.__anext__()
            idle = await anyio.connect_tcp("127.0.0.1", server.port)  # an idle keep-alive
    try:
        assert len(anyio.get_running_tasks()) == before
        record = server.streams[0]
        assert record.server_disconnected
        assert record.chunks_sent == 1
        with pytest.raises(openai.APIConnectionError):
            await stream.__anext__()
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await idle.receive()  # the server closed the idle connection
    finally:
        await stream.close()
        await idle.aclose()
        await client.close()


# -- raw HTTP ------------------------------------------------------------------------------


async def raw_exchange(port: int, request: bytes, *, responses: int = 1) -> list[bytes]:
    """Send raw bytes; read `responses` Content-Length-framed responses (head + body)."""
    answers: list[bytes] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as sock:
        await sock.send(request)
        buffer = bytearray()
        while len(answers) < responses:
            while (end := buffer.find(b"\r\n\r\n")) < 0:
                buffer += await sock.receive()
            head = bytes(buffer[:end]).decode()
            if head.startswith("HTTP/1.1 100"):
                del buffer[: end + 4]
                answers.append(head.encode())
                continue
            length = int(head.lower().split("content-length: ")[1].split("\r\n")[0])
            while len(buffer) < end + 4 + length:
                buffer += await sock.receive()
            answers.append(bytes(buffer[: end + 4 + length]))
            del buffer[: end + 4 + length]
    return answers


def body_of(answer: bytes) -> Any:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


async def test_unknown_path_is_404_in_openai_shape_and_bad_request_is_400() -> None:
    async with FakeOpenAIServer() as server:
        [not_found] = await raw_exchange(server.port, b"GET /v1/nope HTTP/1.1\r\nhost: x\r\n\r\n")
        [bad] = await raw_exchange(server.port, b"NONSENSE\r\n\r\n")
        [not_json] = await raw_exchange(
            server.port,
            b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc",
        )

    assert not_found.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert body_of(not_found) == {
        "error": {
            "message": "Invalid URL (GET /v1/nope)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert bad.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"connection: close" in bad
    assert set(body_of(bad)["error"]) == {"message", "type", "param", "code"}
    assert not_json.startswith(b"HTTP/1.1 400 ")
    assert "parse the JSON body" in body_of(not_json)["error"]["message"]


async def test_chunked_request_body_expect_continue_and_keep_alive() -> None:
    body = json.dumps({"model": "m", "messages": []}).encode()
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked
    )
    models = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n"
    async with FakeOpenAIServer() as server:
        server.add_reply("ok")
        continue_head, answer, listing = await raw_exchange(
            server.port, request + models, responses=3
        )

    assert continue_head.startswith(b"HTTP/1.1 100 Continue")
    assert body_of(answer)["choices"][0]["message"]["content"] == "ok"
    assert body_of(listing)["data"][0]["id"] == "fake-model"
    assert server.requests[0].body == {"model": "m", "messages": []}
    assert server.requests[0].connection == server.requests[1].connection


# -- many chunks (their speed is measured in benchmarks/bench_planner.py) ------------------


async def test_many_small_chunks_all_arrive_in_order() -> None:
    async with serving() as (server, client):
        server.add_reply("x" * 2000, chunk_size=1)
        with anyio.fail_after(60):  # a hang guard
            chunks = await stream_chunks(client)

    assert len(chunks) == 2002
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "x" * 2000


async def test_the_server_alone_sends_2000_chunks() -> None:
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    async with FakeOpenAIServer() as server:
        server.add_reply("x" * 2000, chunk_size=1)
        with anyio.fail_after(60):  # a hang guard
            async with await anyio.connect_tcp("127.0.0.1", server.port) as sock:
                await sock.send(request)
                received = bytearray()
                while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                    received += await sock.receive()

    assert received.count(b"data: ") == 2003


# -- specs and surface ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": "ab", "chunks": ("a", "c")}, "do not join"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"tokens_per_second": 10, "delay": 0.5}, "not both"),
        ({"tokens_per_second": 0}, "tokens_per_second"),
        ({"delay": -1}, "delays"),
        ({"disconnect_after": -1}, "disconnect_after"),
    ],
)
def test_fake_reply_rejects_contradictions(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FakeReply(**kwargs)


def test_fake_reply_pieces() -> None:
    reply = FakeReply("abcdefg", chunk_size=3, tokens_per_second=50)
    assert reply.content_pieces() == ["abc", "def", "g"]
    assert reply.delay == pytest.approx(0.02)
    assert dataclasses.replace(reply, content="xy").delay == reply.delay
    assert FakeReply(chunks=("a", "bc")).content == "abc"
    # role chunk, 2 content chunks, finish chunk: 3 delays after the first
    assert FakeReply("abcdefgh", delay=0.1, first_delay=1).duration() == pytest.approx(1.3)
    assert FakeReply(tool_calls=(FakeToolCall("f"),)).effective_finish_reason == "tool_calls"
    with pytest.raises(ValueError, match="4xx or 5xx"):
        FakeErrorReply(200)


def test_testing_all_is_sorted_and_complete() -> None:
    names = toolloop.testing.__all__
    assert names == sorted(names)
    public = {name for name in vars(toolloop.testing) if not name.startswith("_")}
    assert public - {"annotations"} == set(names)
