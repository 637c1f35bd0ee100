"""Scripted replies for `FakeOpenAIServer`, and the OpenAI payloads built from them.

A `FakeReply` is what the fake model "generates"; a `FakeErrorReply` is an HTTP error the
server answers instead. The private builders turn a reply into the exact JSON the OpenAI
API sends: `chat.completion.chunk` objects for a stream, one `chat.completion` otherwise
(shapes checked against `openai/types/chat/chat_completion_chunk.py`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FakeErrorReply", "FakeRawReply", "FakeReply", "FakeToolCall", "FinishReason"]

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]

_ERROR_TYPES: Mapping[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass(frozen=True)
class FakeToolCall:
    """One function call the fake model makes; `arguments` is streamed in pieces."""

    name: str
    arguments: str = "{}"
    id: str | None = None
    """The tool-call id; a realistic `call_...` id is made up when None."""


def fake_tool_calls(calls: Iterable[FakeToolCall | Mapping[str, str]]) -> tuple[FakeToolCall, ...]:
    """`calls` as `FakeToolCall`s: each one as it is, or made of a dict with `name`,
    `arguments` and optionally `id`."""
    return tuple(call if isinstance(call, FakeToolCall) else FakeToolCall(**call) for call in calls)


@dataclass(frozen=True)
class FakeReply:
    """A scripted completion, streamed or not depending on the request's `stream`.

    Content is cut into pieces: the explicit `chunks` if given (their concatenation is the
    content), else `chunk_size` characters per delta. Tool-call arguments are cut into
    `chunk_size` pieces too. `tokens_per_second` paces the stream at that rate (one piece
    is one "token"; it sets `delay` to `1 / tokens_per_second`).

    Timing of a stream: headers at once, `first_delay` before the first chunk (time to first
    token), `delay` before each later chunk up to the one carrying `finish_reason`; the usage
    chunk and `data: [DONE]` follow at once. A non-streamed reply is answered after the
    time the stream would have taken.

    `disconnect_after=n`: the server sends the first `n` SSE events (role chunk, content
    and tool-call chunks, finish chunk, usage chunk and `[DONE]` all count), then closes
    the connection without ending the HTTP response. On a non-streamed request it closes
    the connection without answering.

    `garbled_event=n`: the `n`-th SSE event (counted from 0) is sent as a `data:` line that
    is not JSON, as a broken proxy or server might.

    `usage`: what the reply reports as its usage when asked (`stream_options.include_usage`
    on a stream; always on a completion): `None` counts about four characters a token,
    a dict is sent as it is, `False` reports none (as servers that do not support
    `include_usage`).

    `gates`: order without time. A stream waits before the SSE event at each index (counted
    from 0, the role chunk first) until that index's `anyio.Event` is set, so a test decides
    when the rest comes; `tool_call_end(i)` is the index right after tool call `i` is
    complete. The stream's record tells when it waits (`StreamRecord.held`).
    """

    content: str | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    chunks: tuple[str, ...] | None = None
    chunk_size: int = 4
    tokens_per_second: float | None = None
    delay: float = 0.0
    first_delay: float = 0.0
    finish_reason: FinishReason | None = None
    """None: `"tool_calls"` when the reply has tool calls, else `"stop"`."""
    disconnect_after: int | None = None
    garbled_event: int | None = None
    usage: Mapping[str, Any] | Literal[False] | None = field(default=None, hash=False)
    gates: Mapping[int, Any] = field(default_factory=dict, hash=False, compare=False)
    """SSE event index → the `anyio.Event` the stream waits for before sending it."""

    def __post_init__(self) -> None:
        if self.chunks is not None:
            joined = "".join(self.chunks)
            if self.content is not None and self.content != joined:
                raise ValueError(
                    "FakeReply got both `content` and `chunks`, and the chunks do not join to "
                    "the content; give only one of them"
                )
            object.__setattr__(self, "content", joined)
        if self.chunk_size < 1:
            raise ValueError(f"FakeReply.chunk_size must be >= 1, got {self.chunk_size}")
        if self.tokens_per_second is not None:
            if self.tokens_per_second <= 0:
                raise ValueError(
                    f"FakeReply.tokens_per_second must be > 0, got {self.tokens_per_second}"
                )
            if self.delay and self.delay != 1.0 / self.tokens_per_second:
                raise ValueError("give FakeReply either `tokens_per_second` or `delay`, not both")
            object.__setattr__(self, "delay", 1.0 / self.tokens_per_second)
        if self.delay < 0 or self.first_delay < 0:
            raise ValueError("FakeReply delays must be >= 0")
        if self.disconnect_after is not None and self.disconnect_after < 0:
            raise ValueError(
                f"FakeReply.disconnect_after must be >= 0, got {self.disconnect_after}"
            )

    @property
    def effective_finish_reason(self) -> FinishReason:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def content_pieces(self) -> list[str]:
        """The content deltas, in order (empty when there is no content)."""
        if self.chunks is not None:
            return list(self.chunks)
        return _split(self.content or "", self.chunk_size)

    def argument_pieces(self, call: FakeToolCall) -> list[str]:
        return _split(call.arguments, self.chunk_size)

    def tool_call_end(self, index: int) -> int:
        """The index of the SSE event right after the last piece of tool call `index`: a
        gate there holds the stream once that call is complete.

        Raises:
            IndexError: the reply has no such tool call.
        """
        if not 0 <= index < len(self.tool_calls):
            raise IndexError(f"the reply has {len(self.tool_calls)} tool calls, not {index + 1}")
        at = 1 + len(self.content_pieces())  # the role chunk, the content
        for call in self.tool_calls[: index + 1]:
            at += 1 + len(self.argument_pieces(call))
        return at

    def duration(self) -> float:
        """Seconds the reply takes to stream (a non-streamed reply waits as long)."""
        paced = 2 + len(self.content_pieces())  # + the role chunk and the finish chunk
        paced += sum(1 + len(self.argument_pieces(call)) for call in self.tool_calls)
        return self.first_delay + self.delay * (paced - 1)


@dataclass(frozen=True)
class FakeErrorReply:
    """An HTTP error answer, by default in OpenAI's shape.

    The body is `{"error": {"message", "type", "param", "code"}}` unless `body` is given
    (a JSON-able value, or `str`/`bytes` sent as they are). Header tips for the `openai`
    client's retries: `retry-after-ms: 1` makes its backoff ~1 ms (`retry-after: 0` does
    *not*: zero is ignored and the default 0.5 s+ backoff applies); `x-should-retry: false`
    stops it from retrying.
    """

    status: int = 500
    message: str | None = None
    type: str | None = None
    code: str | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"FakeErrorReply.status must be 4xx or 5xx, got {self.status}")

    def body_bytes(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        if self.body is not None:
            return _dumps(self.body)
        return _dumps(error_body(self.status, self.message, type=self.type, code=self.code))


@dataclass(frozen=True)
class FakeRawReply:
    """A response sent exactly as given, byte for byte: its status, its headers, and its body
    in pieces, each written to the socket on its own (as one chunk of a chunked body), so a
    piece boundary inside a JSON line is kept. For responses shaped like what a real
    provider sends (toolloop's own suite replays such recordings through every product).

    ``delay`` seconds pass before each piece after the first. Strings are sent as UTF-8.
    ``end``: how the body ends after its last piece: ``"close"`` (the chunked body's end, as
    servers do), ``"hold"`` (never: the connection stays open until the client goes, as a
    proxy that keeps it) or ``"drop"`` (the connection is closed without the body's end).
    """

    body: tuple[bytes | str, ...]
    status: int = 200
    headers: Mapping[str, str] = field(
        default_factory=lambda: {"content-type": "text/event-stream"}, hash=False
    )
    delay: float = 0.0
    end: Literal["close", "hold", "drop"] = "close"

    def __post_init__(self) -> None:
        if isinstance(self.body, (bytes, str)):
            object.__setattr__(self, "body", (self.body,))
        if not 100 <= self.status <= 599:
            raise ValueError(f"FakeRawReply.status must be an HTTP status, got {self.status}")
        if self.delay < 0:
            raise ValueError("FakeRawReply.delay must be >= 0")

    def pieces(self) -> list[bytes]:
        """The body's pieces as bytes (empty pieces left out: they would end the body)."""
        out = [p.encode() if isinstance(p, str) else bytes(p) for p in self.body]
        return [p for p in out if p]


def error_body(
    status: int, message: str | None, *, type: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object for an HTTP status."""
    default_type, default_code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {
        "error": {
            "message": message or f"Fake error with status {status}",
            "type": type or default_type,
            "param": None,
            "code": code if code is not None else default_code,
        }
    }


@dataclass(frozen=True)
class StreamEvent:
    """One SSE event of a planned stream, framed as bytes (`data: ...\\n\\n`)."""

    data: bytes
    delay: float
    content: str = ""
    gate: Any = None
    """An `anyio.Event` to wait for before this event is sent."""


@dataclass(frozen=True)
class _Meta:
    completion_id: str
    created: int
    model: str
    fingerprint: str

    def chunk(self, choices: list[dict[str, Any]], **more: Any) -> bytes:
        """The SSE event of a `chat.completion.chunk` of this completion (`more` last)."""
        return _sse(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "service_tier": "default",
                "system_fingerprint": self.fingerprint,
                "choices": choices,
                **more,
            }
        )


def new_meta(model: str) -> _Meta:
    return _Meta(
        completion_id="chatcmpl-" + uuid.uuid4().hex[:29],
        created=int(time.time()),
        model=model,
        fingerprint="fp_" + uuid.uuid4().hex[:10],
    )


def stream_events(reply: FakeReply, request: Mapping[str, Any], model: str) -> list[StreamEvent]:
    """Every SSE event of the streamed reply, `data: [DONE]` included."""
    meta = new_meta(model)
    stream_options = request.get("stream_options")
    include_usage = (
        isinstance(stream_options, Mapping)
        and bool(stream_options.get("include_usage"))
        and reply.usage is not False
    )
    usage_field: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: Mapping[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return meta.chunk([choice], **usage_field)

    events: list[StreamEvent] = []

    def add(data: bytes, content: str = "") -> None:
        events.append(
            StreamEvent(data, reply.delay if events else reply.first_delay, content=content)
        )

    role_content = "" if reply.content is not None or not reply.tool_calls else None
    add(chunk({"role": "assistant", "content": role_content, "refusal": None}))
    for piece in reply.content_pieces():
        add(chunk({"content": piece}), content=piece)
    for index, call in enumerate(reply.tool_calls):
        header = {
            "index": index,
            "id": call.id or _call_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        add(chunk({"tool_calls": [header]}))
        for piece in reply.argument_pieces(call):
            add(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    add(chunk({}, reply.effective_finish_reason))
    if include_usage:
        events.append(StreamEvent(meta.chunk([], usage=usage(reply, request)), 0.0))
    events.append(StreamEvent(b"data: [DONE]\n\n", 0.0))
    if reply.garbled_event is not None and 0 <= reply.garbled_event < len(events):
        kept = events[reply.garbled_event]
        events[reply.garbled_event] = StreamEvent(
            b'data: {"choices": [{"delta": oops\n\n', kept.delay
        )
    for at, gate in reply.gates.items():
        if 0 <= at < len(events):
            events[at] = dataclasses.replace(events[at], gate=gate)
    return events


def completion(reply: FakeReply, request: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The `chat.completion` object of a non-streamed reply."""
    meta = new_meta(model)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content is not None or not reply.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or _call_id(),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return {
        "id": meta.completion_id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.effective_finish_reason,
            }
        ],
        "usage": usage(reply, request) if reply.usage is not False else None,
        "service_tier": "default",
        "system_fingerprint": meta.fingerprint,
    }


def usage(reply: FakeReply, request: Mapping[str, Any]) -> dict[str, Any]:
    """The reply's scripted usage, or a rough token count: about four characters a token."""
    if isinstance(reply.usage, Mapping):
        return dict(reply.usage)
    prompt_chars = len(json.dumps(request.get("messages", []), ensure_ascii=False))
    completion_chars = len(reply.content or "") + sum(
        len(call.name) + len(call.arguments) for call in reply.tool_calls
    )
    prompt_tokens = max(1, math.ceil(prompt_chars / 4))
    completion_tokens = math.ceil(completion_chars / 4)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(value: Any) -> bytes:
    return b"data: " + _dumps(value) + b"\n\n"
