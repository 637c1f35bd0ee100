"""A local OpenAI-compatible HTTP server for tests, written on anyio alone.

`FakeOpenAIServer` listens on 127.0.0.1 (a free port) and answers the real `openai` client
like the OpenAI API does: `POST /v1/chat/completions` streamed as Server-Sent Events
(`data: {chat.completion.chunk}` ... `data: [DONE]`, chunked transfer encoding) or as one
`chat.completion`, and `GET /v1/models`. Replies are scripted (a queue, or a responder
callback), and every request and every stream is recorded, including whether the client
went away before the stream ended.

HTTP/1.1 only, keep-alive, request bodies framed by `Content-Length` or chunked; runs on
asyncio and trio. Nothing is left running after `async with` exits.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio import CancelScope
from anyio.abc import SocketAttribute, SocketStream

from ._http import (
    DISCONNECTS,
    MAX_HEAD,
    BadRequest,
    Connection,
    RecordedRequest,
    read_request,
    request_id,
    response_head,
    send_json,
    send_response,
)
from ._openai_replies import (
    FakeErrorReply,
    FakeRawReply,
    FakeReply,
    FakeToolCall,
    FinishReason,
    StreamEvent,
    completion,
    error_body,
    fake_tool_calls,
    stream_events,
)
from ._stream_record import StreamProgress

__all__ = ["FakeOpenAIServer", "RecordedRequest", "Responder", "StreamRecord"]

Reply = FakeReply | FakeErrorReply | FakeRawReply | str
"""What a responder returns; a plain `str` is `FakeReply(content=...)`."""
Queued = FakeReply | FakeErrorReply | FakeRawReply

Responder = Callable[["RecordedRequest"], "Reply | Awaitable[Reply]"]


@dataclass(eq=False, kw_only=True)
class StreamRecord(StreamProgress):
    """What happened to one streamed reply (`server.streams[i]`), updated as it goes.

    A chunk counts as sent once the socket accepted it (the client may not have read it).
    Every SSE event counts: the role chunk, content and tool-call chunks, the finish chunk,
    the usage chunk and `data: [DONE]`. Times are `time.monotonic()`.
    """

    client_disconnected: bool = False
    """The client closed the connection before the stream was complete."""
    server_disconnected: bool = False
    """The server dropped the connection: `disconnect_after`, or the server was shut down."""
    disconnected_at: float | None = None
    ended: anyio.Event = field(default_factory=anyio.Event, repr=False)
    """Set when the stream ends, whichever way."""

    def _end(self, *, client_gone: bool = False, server_gone: bool = False) -> None:
        if self.ended.is_set():
            return
        now = time.monotonic()
        self.ended_at = now
        if client_gone:
            self.client_disconnected = True
            self.disconnected_at = now
        elif server_gone:
            self.server_disconnected = True
            self.disconnected_at = now
        else:
            self.completed = True
        self.ended.set()


class FakeOpenAIServer:
    """A local OpenAI-compatible server that the real `openai` client talks to.

    ```python
    async with FakeOpenAIServer() as server:
        server.add_reply(content='{"next_action": "response"}', chunk_size=3)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
    ```

    Each `POST /v1/chat/completions` takes the next queued reply (`add_reply`,
    `add_error`); when the queue is empty the `responder` is asked (sync or async, given
    the `RecordedRequest`, returning a `FakeReply`, a `FakeErrorReply` or a `str`), and
    without a responder the server answers HTTP 500 with `x-should-retry: false` and a
    message saying that no reply was scripted. A `response_format` whose `type` is in
    `reject_response_formats` is answered with `reject_status` (500 by default, as
    llama-cpp-python does for `json_schema`) without taking a reply. The `model` of an
    answer echoes the request's.

    What happened is kept in `requests` (every request, in arrival order) and `streams`
    (one `StreamRecord` per streamed reply); `wait_stream_ended` and `wait_disconnected`
    wait for a stream to end. Leaving `async with` closes every connection and cancels
    every task of the server.

    Usage is reported as the OpenAI API does: in a last chunk of its own (no `choices`)
    when a stream asks with `stream_options={"include_usage": true}`, and on every
    completion; `report_usage=False` makes the server one that never reports it (a
    reply's own `usage=` still wins).
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        reject_response_formats: Collection[str] = (),
        reject_status: int = 500,
        models: Sequence[str] = ("fake-model",),
        host: str = "127.0.0.1",
        port: int = 0,
        report_usage: bool = True,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self._report_usage = report_usage
        self.streams: list[StreamRecord] = []
        self._responder = responder
        self._reject_formats = frozenset(reject_response_formats)
        self._reject_status = reject_status
        self._models = tuple(models)
        self._host = host
        self._port = port
        self._queue: deque[Queued] = deque()
        self._connections = 0
        self._exit_stack: AsyncExitStack | None = None
        self._stream_added: anyio.Event | None = None

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> FakeOpenAIServer:
        if self._exit_stack is not None:
            raise RuntimeError("FakeOpenAIServer is already running")
        async with AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host=self._host, local_port=self._port)
            await stack.enter_async_context(listener)
            self._port = listener.extra(SocketAttribute.local_port)
            self._stream_added = anyio.Event()
            task_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(task_group.cancel_scope.cancel)
            task_group.start_soon(listener.serve, self._serve_connection)
            self._exit_stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening, drop every connection and end every task of the server."""
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            await stack.aclose()

    @property
    def port(self) -> int:
        if self._exit_stack is None and not self._port:
            raise RuntimeError("FakeOpenAIServer is not running; use `async with` first")
        return self._port

    @property
    def base_url(self) -> str:
        """The `base_url` for `openai.AsyncOpenAI`, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"http://{self._host}:{self.port}/v1"

    # -- scripting -----------------------------------------------------------------------

    def add_reply(
        self,
        content: str | None = None,
        *,
        tool_calls: Sequence[FakeToolCall | Mapping[str, str]] = (),
        chunks: Sequence[str] | None = None,
        chunk_size: int = 4,
        tokens_per_second: float | None = None,
        delay: float = 0.0,
        first_delay: float = 0.0,
        finish_reason: FinishReason | None = None,
        disconnect_after: int | None = None,
        garbled_event: int | None = None,
        usage: Mapping[str, Any] | Literal[False] | None = None,
        gates: Mapping[int, anyio.Event] | None = None,
    ) -> FakeReply:
        """Queue a completion (see `FakeReply`); tool calls may be dicts with `name`,
        `arguments` and optionally `id`."""
        reply = FakeReply(
            content=content,
            tool_calls=fake_tool_calls(tool_calls),
            chunks=None if chunks is None else tuple(chunks),
            chunk_size=chunk_size,
            tokens_per_second=tokens_per_second,
            delay=delay,
            first_delay=first_delay,
            finish_reason=finish_reason,
            disconnect_after=disconnect_after,
            garbled_event=garbled_event,
            usage=usage,
            gates=dict(gates or {}),
        )
        self._queue.append(reply)
        return reply

    def add_error(
        self,
        status: int = 500,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> FakeErrorReply:
        """Queue an HTTP error answer (see `FakeErrorReply`)."""
        reply = FakeErrorReply(
            status=status,
            message=message,
            type=type,
            code=code,
            body=body,
            headers=dict(headers or {}),
        )
        self._queue.append(reply)
        return reply

    def add_raw(
        self,
        body: Sequence[bytes | str] | bytes | str,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        end: Literal["close", "hold", "drop"] = "close",
    ) -> FakeRawReply:
        """Queue a response sent exactly as given (see `FakeRawReply`): `body` in pieces,
        each written on its own; `headers` (`content-type: text/event-stream` when none);
        `end`: how the body ends (`"hold"`: never, `"drop"`: the connection just closes)."""
        pieces = (body,) if isinstance(body, (bytes, str)) else tuple(body)
        reply = FakeRawReply(
            body=pieces,
            status=status,
            headers=dict(headers) if headers is not None else {"content-type": "text/event-stream"},
            delay=delay,
            end=end,
        )
        self._queue.append(reply)
        return reply

    @property
    def pending_replies(self) -> int:
        """How many queued replies no request has taken yet."""
        return len(self._queue)

    # -- waiting -------------------------------------------------------------------------

    async def wait_stream_ended(self, index: int = -1, *, timeout: float = 5.0) -> StreamRecord:
        """Wait until `streams[index]` has ended (completed, or either side went away).

        A non-negative `index` may name a stream that has not started yet; a negative one
        counts from the streams there are now.
        """
        try:
            with anyio.fail_after(timeout):
                record = await self._stream_at(index)
                await record.ended.wait()
        except TimeoutError:
            raise TimeoutError(
                f"stream {index} of FakeOpenAIServer did not end within {timeout} s "
                f"({len(self.streams)} streams so far)"
            ) from None
        return record

    async def wait_disconnected(self, index: int = -1, *, timeout: float = 5.0) -> StreamRecord:
        """Wait until the client has gone away from `streams[index]`.

        Raises `AssertionError` if that stream ended another way (it was sent completely
        first, or the server dropped it), `TimeoutError` if it had not ended in time.
        """
        record = await self.wait_stream_ended(index, timeout=timeout)
        if not record.client_disconnected:
            raise AssertionError(
                f"stream {index} ended without the client going away first: {record}"
            )
        return record

    async def _stream_at(self, index: int) -> StreamRecord:
        if index < 0:
            if -index > len(self.streams):
                raise IndexError(
                    f"no stream {index}: FakeOpenAIServer has {len(self.streams)} streams"
                )
            return self.streams[index]
        while len(self.streams) <= index:
            assert self._stream_added is not None, "FakeOpenAIServer is not running"
            await self._stream_added.wait()
        return self.streams[index]

    def _add_stream(self, record: StreamRecord) -> None:
        self.streams.append(record)
        if self._stream_added is not None:
            self._stream_added.set()
        self._stream_added = anyio.Event()

    # -- HTTP ----------------------------------------------------------------------------

    async def _serve_connection(self, stream: SocketStream) -> None:
        connection = Connection(stream, self._connections)
        self._connections += 1
        try:
            while await self._serve_request(connection):
                pass
        except DISCONNECTS:
            pass
        finally:
            await anyio.aclose_forcefully(stream)

    async def _serve_request(self, connection: Connection) -> bool:
        """Read and answer one request; return whether to keep the connection open."""
        try:
            request = await read_request(connection)
        except BadRequest as exc:
            await send_json(connection, exc.status, error_body(exc.status, exc.message), close=True)
            return False
        index = len(self.requests)
        self.requests.append(request)
        keep_alive = request.headers.get("connection", "").lower() != "close"
        if request.method == "POST" and request.path == "/v1/chat/completions":
            return await self._chat_completions(connection, request, index) and keep_alive
        if request.method == "GET" and request.path == "/v1/models":
            await send_json(connection, 200, self._models_body(), close=not keep_alive)
            return keep_alive
        if request.method == "GET" and request.path.startswith("/v1/models/"):
            model = request.path.removeprefix("/v1/models/")
            if model in self._models:
                await send_json(connection, 200, _model(model), close=not keep_alive)
                return keep_alive
            message = f"The model '{model}' does not exist"
            body = error_body(404, message, code="model_not_found")
            await send_json(connection, 404, body, close=not keep_alive)
            return keep_alive
        body = error_body(404, f"Invalid URL ({request.method} {request.path})")
        await send_json(connection, 404, body, close=not keep_alive)
        return keep_alive

    def _models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [_model(model) for model in self._models]}

    # -- chat completions ----------------------------------------------------------------

    async def _chat_completions(
        self, connection: Connection, request: RecordedRequest, index: int
    ) -> bool:
        body = request.body
        if not isinstance(body, dict):
            message = (
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload.)"
            )
            await send_json(connection, 400, error_body(400, message))
            return True
        response_format = body.get("response_format")
        if isinstance(response_format, dict):
            format_type = response_format.get("type")
            if format_type in self._reject_formats:
                message = (
                    f"response_format type {format_type!r} is not supported by this server "
                    "(FakeOpenAIServer(reject_response_formats=...))"
                )
                status = self._reject_status
                await send_json(connection, status, error_body(status, message))
                return True
        reply = await self._next_reply(request, index)
        if isinstance(reply, FakeRawReply):
            return await self._raw(connection, reply, index)
        if isinstance(reply, FakeReply) and reply.usage is None and not self._report_usage:
            reply = dataclasses.replace(reply, usage=False)
        if isinstance(reply, FakeErrorReply):
            await send_response(
                connection,
                reply.status,
                reply.body_bytes(),
                {"content-type": "application/json"}
                | {k.lower(): v for k, v in reply.headers.items()},
            )
            return True
        model = body.get("model")
        model = model if isinstance(model, str) else self._models[0]
        if body.get("stream"):
            return await self._stream(connection, reply, body, model, index)
        await anyio.sleep(reply.duration())
        if reply.disconnect_after is not None:
            return False
        await send_json(connection, 200, completion(reply, body, model))
        return True

    async def _next_reply(self, request: RecordedRequest, index: int) -> Queued:
        if self._queue:
            return self._queue.popleft()
        if self._responder is None:
            return FakeErrorReply(
                500,
                f"FakeOpenAIServer has no scripted reply left for request #{index} "
                f"({request.method} {request.path}); queue one with add_reply() / "
                "add_error(), or pass responder=",
                headers={"x-should-retry": "false"},
            )
        try:
            reply = self._responder(request)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            return FakeErrorReply(
                500,
                f"FakeOpenAIServer's responder raised {exc!r} on request #{index}",
                headers={"x-should-retry": "false"},
            )
        if isinstance(reply, str):
            return FakeReply(content=reply)
        if not isinstance(reply, (FakeReply, FakeErrorReply, FakeRawReply)):
            return FakeErrorReply(
                500,
                f"FakeOpenAIServer's responder returned {reply!r}; expected a FakeReply, "
                "a FakeErrorReply, a FakeRawReply or a str",
                headers={"x-should-retry": "false"},
            )
        return reply

    async def _raw(self, connection: Connection, reply: FakeRawReply, index: int) -> bool:
        """Send `reply` byte for byte, each piece as one chunk; recorded as a stream."""
        pieces = reply.pieces()
        headers = {k.lower(): v for k, v in reply.headers.items()}
        headers.pop("content-length", None)
        headers.pop("transfer-encoding", None)
        head = response_head(
            reply.status,
            {"x-request-id": request_id(), **headers, "transfer-encoding": "chunked"},
        )
        events = [StreamEvent(piece, reply.delay if i else 0.0) for i, piece in enumerate(pieces)]
        if reply.end == "close":
            return await self._send_stream(connection, head, events, None, index, empty=not pieces)
        # the body's end is never sent: dropped at once, or held until the client goes
        return await self._send_stream(
            connection, head, events, len(events), index, hold=reply.end == "hold"
        )

    async def _stream(
        self,
        connection: Connection,
        reply: FakeReply,
        body: Mapping[str, Any],
        model: str,
        index: int,
    ) -> bool:
        events = stream_events(reply, body, model)
        head = response_head(
            200,
            {
                "content-type": "text/event-stream; charset=utf-8",
                "transfer-encoding": "chunked",
                "cache-control": "no-cache",
                "x-request-id": request_id(),
            },
        )
        return await self._send_stream(connection, head, events, reply.disconnect_after, index)

    async def _send_stream(
        self,
        connection: Connection,
        head: bytes,
        events: list[StreamEvent],
        disconnect_after: int | None,
        index: int,
        *,
        empty: bool = False,
        hold: bool = False,
    ) -> bool:
        record = StreamRecord(
            request_index=index,
            chunks_planned=len(events),
            started_at=time.monotonic(),
        )
        self._add_stream(record)
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(_watch_for_eof, connection, record, task_group.cancel_scope)
                try:
                    await connection.send(head + (b"0\r\n\r\n" if empty else b""))
                    await _send_events(connection, record, events, disconnect_after)
                    if hold:
                        await record.ended.wait()  # the EOF watcher sees the client go
                except DISCONNECTS:
                    record._end(client_gone=True)
                task_group.cancel_scope.cancel()
        finally:
            record._end(server_gone=True)  # disconnect_after, or the server is shutting down
        return record.completed


async def _send_events(
    connection: Connection,
    record: StreamRecord,
    events: list[StreamEvent],
    disconnect_after: int | None,
) -> None:
    limit = len(events) if disconnect_after is None else min(disconnect_after, len(events))
    # paced against a schedule, so the overshoot of each sleep does not add up
    due = anyio.current_time()
    for number, event in enumerate(events[:limit], start=1):
        if event.gate is not None and not event.gate.is_set():
            record.held.set()
            await event.gate.wait()
            due = anyio.current_time()
        if event.delay > 0:
            due += event.delay
            await anyio.sleep_until(due)
        frame = b"%x\r\n%s\r\n" % (len(event.data), event.data)
        if number == len(events) and disconnect_after is None:
            frame += b"0\r\n\r\n"
        await connection.send(frame)
        record.chunks_sent = number
        if event.content:
            record._content.append(event.content)
    if disconnect_after is None:
        record._end()


async def _watch_for_eof(connection: Connection, record: StreamRecord, scope: CancelScope) -> None:
    """Read while the stream is sent, so a client that goes away is seen at once."""
    try:
        while len(connection.buffer) <= MAX_HEAD:
            await connection.fill()
        await anyio.sleep_forever()
    except DISCONNECTS:
        record._end(client_gone=True)
        scope.cancel()


def _model(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "toolloop"}
