"""The OpenAI adapter: the one module of toolloop that imports ``openai``.

It speaks to OpenAI and to every OpenAI-compatible server (vLLM, llama.cpp, Ollama) through
the official ``AsyncOpenAI`` client, which runs on asyncio and trio alike.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import openai
from openai import AsyncOpenAI

from .._errors import ModelCallError, ModelOutputError
from .._secrets import MIN_SECRET_CHARS, REDACTED, register_secret, scrub
from ..ratelimit import retry_after_from_headers
from ._chat import ChatDelta, ChatRequest, StructuredOutputMode
from ._settings import ModelSettings, check_settings, merge_settings
from ._sse import SSEDecoder
from ._usage import current_meter
from ._wire import StreamFailure, WireReader

__all__ = ["OpenAIChatModel"]

_CLOSE_TIMEOUT = 2.0
_RETRY_DELAY = 0.5  # the client's first backoff
_MAX_RETRY_AFTER = 60.0
_FALLBACK_STATUSES = frozenset({400, 404, 415, 422, 500, 501})
"""Statuses a server may refuse a structured-output mode with; 415 and 501 are refusals
whatever they say, the others only when their message says what was refused."""
_REFUSAL_WORDS = re.compile(
    r"response[ _-]?format|json[ _-]?(?:schema|object)|\bschema\b|grammar|structured"
    r"|not supported|unsupported|not implemented",
    re.IGNORECASE,
)


def _is_refusal(exc: openai.APIStatusError) -> bool:
    """Whether the answer says this structured-output mode is unsupported (a transient
    error, an outage, a wrong key or model is none: those must not downgrade the mode)."""
    if exc.status_code in (415, 501):
        return True
    if exc.status_code not in _FALLBACK_STATUSES or _refuses_stream_options(exc):
        return False  # refusing stream_options is no verdict on the mode
    return bool(_REFUSAL_WORDS.search(f"{exc.message} {exc.body}"))


def _refuses_stream_options(exc: BaseException) -> bool:
    """Whether a server refused the request for its ``stream_options`` (older servers)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 422):
        return False
    said = f"{exc.message} {exc.body}".lower()
    return "stream_options" in said or "include_usage" in said


_REFUSE_REASONING = ("groq.com",)
"""Hosts that answer HTTP 400 to an assistant message with a reasoning field ("property
'reasoning_content' is unsupported"): Groq has no reasoning round trip."""
_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details")


def _takes_reasoning(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return not any(host == name or host.endswith("." + name) for name in _REFUSE_REASONING)


def _without_reasoning(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` without the reasoning it carries (its fields, and thinking parts)."""
    if message.get("role") != "assistant":
        return message
    content = message.get("content")
    thinking = isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("type") == "thinking" for part in content
    )
    if not thinking and not any(key in message for key in _REASONING_KEYS):
        return message
    out = {key: value for key, value in message.items() if key not in _REASONING_KEYS}
    if thinking:
        assert isinstance(content, list)
        out["content"] = "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return out


_ORDER: tuple[StructuredOutputMode, ...] = ("json_schema", "json_object_schema", "json_object")


def _response_format(mode: StructuredOutputMode, request: ChatRequest) -> dict[str, Any]:
    so = request.structured_output
    assert so is not None
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": so.name, "schema": so.schema, "strict": so.strict},
        }
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": so.schema}
    return {"type": "json_object"}


def _clean(text: str, secret: str | None) -> str:
    said = scrub(text)  # a server may echo the key (e.g. in a 401's message)
    if secret and len(secret) >= MIN_SECRET_CHARS:  # this model's own key, whatever its length
        said = said.replace(secret, REDACTED)
    return said


def _call_error(
    exc: openai.OpenAIError, base_url: str, *, streaming: bool = False, secret: str | None = None
) -> ModelCallError:
    """The error to raise for ``exc``, scrubbed of secrets. Raise it outside the ``except``
    block that caught ``exc`` (and never ``from exc``): the client's exception keeps what the
    server said, key included, in its ``args``, ``message`` and ``body``."""
    error = _described(exc, base_url, streaming=streaming)
    request_id = getattr(exc, "request_id", None)
    retry_after = None
    if isinstance(exc, openai.APIStatusError):
        retry_after = retry_after_from_headers(exc.response.headers)
    return ModelCallError(
        _clean(str(error), secret),
        status=error.status,
        request_id=request_id if isinstance(request_id, str) else None,
        retry_after=retry_after,
    )


def _described(exc: openai.OpenAIError, base_url: str, *, streaming: bool) -> ModelCallError:
    if isinstance(exc, openai.APIStatusError):
        return ModelCallError(
            f"the model server at {base_url} answered HTTP {exc.status_code}: {exc.message}",
            status=exc.status_code,
        )
    if isinstance(exc, openai.APITimeoutError):
        return ModelCallError(f"the model server at {base_url} did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f" ({cause})" if cause else ""
        if streaming:
            return ModelCallError(
                f"the model server at {base_url} broke off the stream before its end{detail}; "
                "try again"
            )
        return ModelCallError(
            f"the connection to the model server at {base_url} failed{detail}; is it running?"
        )
    return ModelCallError(f"the model call failed: {type(exc).__name__}: {exc}")


async def _create(client: AsyncOpenAI, params: dict[str, Any]) -> Any:
    # the parameters are built at run time, so the client's typed overloads cannot be used
    create: Any = client.chat.completions.create
    return await create(**params)


def _retryable(exc: openai.APIStatusError) -> bool:
    """Whether the client would retry this answer (its rules: ``x-should-retry``, 408, 409,
    429, 5xx)."""
    flag = exc.response.headers.get("x-should-retry")
    if flag in ("true", "false"):
        return flag == "true"
    return exc.status_code in (408, 409, 429) or exc.status_code >= 500


def _retry_delay(exc: openai.APIStatusError) -> float:
    """The wait the server asked for (``retry-after-ms``, ``retry-after`` in seconds), else
    the client's first backoff."""
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if 0 < wait <= _MAX_RETRY_AFTER:
            return wait
    return _RETRY_DELAY


_MAX_JSON_BODY = 32 * 1024 * 1024
_MAX_SHOWN = 300  # characters of a server's words quoted in an error (scrubbed first)
_DRAIN_PIECES = 8  # pieces read after the reply's end, so the connection can be reused
_DRAIN_TIMEOUT = 2.0
"""Seconds the rest of a body may take once the reply has ended (its finish reason, or
``[DONE]``): a server that keeps the body open, or drops it without its last chunk, ends
the reply there instead of failing it."""


class _AllModesRefused(Exception):
    """The server refused every structured-output mode (turned into a ModelCallError)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Deltas:
    """The reply's body as :class:`ChatDelta` values, read from the HTTP response itself: a
    Server-Sent Events stream, or one JSON completion when a server (or a proxy) answers
    ``stream: true`` with a plain body, whatever its content type says (the first byte
    tells). No async generator, so an early exit leaves nothing to finalize."""

    __slots__ = (
        "_base_url",
        "_body",
        "_buffer",
        "_drained",
        "_failure",
        "_json",
        "_queue",
        "_request_id",
        "_secret",
        "_sse",
        "_state",
        "_wire",
    )

    def __init__(
        self, stream: openai.AsyncStream[Any], base_url: str, secret: str | None = None
    ) -> None:
        response = stream.response
        self._body: AsyncIterator[bytes] = response.aiter_bytes()
        self._base_url = base_url
        self._secret = secret
        self._request_id: str | None = response.headers.get("x-request-id")
        self._json: bool | None = None  # the first byte that is not blank tells
        self._sse = SSEDecoder()
        self._buffer = bytearray()
        self._wire = WireReader()
        self._queue: deque[ChatDelta] = deque()
        self._failure: Exception | None = None
        # 0: reading; 1: the reply has ended (a finish reason, or [DONE]), only its usage and
        # the body's end may follow; 2: done
        self._state = 0
        self._drained = 0

    def __aiter__(self) -> _Deltas:
        return self

    async def __anext__(self) -> ChatDelta:
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._failure is not None:
                failure, self._failure = self._failure, None
                self._state = 2
                raise failure
            if self._state == 2:
                raise StopAsyncIteration
            if self._state == 1:
                await self._drain()
            else:
                await self._read()

    async def _drain(self) -> None:
        """After the reply's end: read what is left of the body, briefly. A body that stays
        open or breaks now ends the reply (it is whole); it does not fail it."""
        piece: bytes | None = None
        with anyio.move_on_after(_DRAIN_TIMEOUT):
            try:
                piece = await self._body.__anext__()
            except Exception:  # the end, or a broken connection: nothing of the reply is lost
                piece = None
        self._drained += 1
        if piece is not None and self._json is False:
            self._feed(piece)  # e.g. the usage chunk after the finish
        if piece is None or self._drained > _DRAIN_PIECES:
            if self._json is False:
                self._events(self._sse.close())
                self._queue.extend(self._wire.end())
            self._state = 2

    async def _read(self) -> None:
        """Read one piece of the body, queueing what it completes."""
        failure: Exception | None = None
        try:
            piece = await self._body.__anext__()
        except StopAsyncIteration:
            piece = None
        except Exception as exc:  # the transport broke (the client's own error types)
            failure = self._broken(exc)
            piece = None
        if failure is not None:  # raised outside the except block: nothing foreign chained
            self._failure = failure
            return
        if self._json is None and piece:
            head = piece.lstrip()
            if head:
                self._json = head.startswith(b"{")
        if self._json:
            self._collect(piece)
        elif piece is None:
            self._events(self._sse.close())
            self._queue.extend(self._wire.end())
            self._state = 2
        else:
            self._feed(piece)

    def _feed(self, piece: bytes) -> None:
        try:
            events = self._sse.feed(piece)
        except ValueError as exc:  # one event of tens of megabytes: no chat chunk is
            self._failure = ModelOutputError(
                f"the model server at {self._base_url} sent {exc}; the stream was dropped"
            )
            return
        self._events(events)

    def _collect(self, piece: bytes | None) -> None:
        """A JSON body: kept until it ends, then read as one completion."""
        if piece is not None:
            self._buffer += piece
            if len(self._buffer) > _MAX_JSON_BODY:
                self._failure = ModelOutputError(
                    f"the model server at {self._base_url} answered with a body of over "
                    f"{_MAX_JSON_BODY // 2**20} MiB that is no stream; it was dropped"
                )
            return
        self._state = 2
        try:
            data = json.loads(self._buffer)
        except ValueError as exc:
            shown = self._shown(self._buffer[: _MAX_SHOWN * 4].decode("utf-8", "replace"))
            self._failure = ModelOutputError(
                f"the model server at {self._base_url} answered a streamed request with a "
                f"body that is neither a stream nor JSON ({exc}): {shown!r}"
            )
            return
        deltas, failure = self._wire.completion(data)
        self._queue.extend(deltas)
        if failure is not None:
            self._failure = self._server_error(failure)

    def _events(self, events: Sequence[Any]) -> None:
        for event in events:
            if self._state == 2 or self._failure is not None:
                return
            data = event.data
            if data.strip() == "[DONE]":
                self._state = 1
                continue
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                self._failure = ModelOutputError(
                    f"the model server at {self._base_url} sent a stream event that is not "
                    f"JSON ({self._shown(str(exc))}); the stream was dropped: try again, or "
                    "check what stands between toolloop and the server (a proxy?)"
                )
                return
            delta, failure = self._wire.chunk(chunk)
            if delta is not None:
                self._queue.append(delta)
                if delta.finish_reason is not None and self._state == 0:
                    self._state = 1  # the reply has ended: its usage may still follow
            if failure is not None:
                self._failure = self._server_error(failure)
                return

    def _shown(self, text: str) -> str:
        """``text`` as an error may quote it: scrubbed of secrets first, then cut (a key cut
        in two would no longer be found)."""
        said = _clean(text, self._secret)
        return said if len(said) <= _MAX_SHOWN else said[:_MAX_SHOWN] + "…"

    def _server_error(self, failure: StreamFailure) -> ModelCallError:
        code = f" ({failure.code})" if failure.code is not None else ""
        return ModelCallError(
            _clean(
                f"the model server at {self._base_url} sent an error inside its reply{code}: "
                f"{self._shown(failure.message)}",
                self._secret,
            ),
            status=failure.code if failure.code is not None and failure.code >= 400 else None,
            request_id=self._request_id,
        )

    def _broken(self, exc: Exception) -> ModelCallError:
        if "timeout" in type(exc).__name__.lower():
            said = f"the model server at {self._base_url} did not answer in time (mid-reply)"
        else:
            said = (
                f"the model server at {self._base_url} broke off the stream before its end "
                f"({type(exc).__name__}: {self._shown(str(exc))}); try again"
            )
        return ModelCallError(_clean(said, self._secret), request_id=self._request_id)


class OpenAIChatModel:
    """A :class:`~toolloop.models.ChatModel` on the official ``openai`` client.

    Args:
        model: the model's name on the server.
        client: an ``AsyncOpenAI`` to use; made from ``base_url`` and ``api_key`` if omitted.
        base_url: e.g. ``http://127.0.0.1:8000/v1`` for a local OpenAI-compatible server.
        api_key: the API key; ``OPENAI_API_KEY`` when omitted, and a placeholder when that
            is unset too (local servers accept anything).
        structured_output: how to ask for JSON that fits a schema; ``"auto"`` tries
            ``json_schema``, then ``json_object`` with the schema, then plain
            ``json_object``, moving on when a server refuses the request (HTTP 400, 404,
            415, 422, 500 or 501), and keeps the first that works.
        max_retries: the client's own retries of 429/5xx and connection errors. In a run
            given a ``model_retry`` or a ``model_rate_limit``, toolloop makes each try
            itself (admitted by the limiter, counted, told), and the client's retries are
            off (see :class:`~toolloop.ratelimit.RetryPolicy`).
        timeout: seconds for a request (the client's timeout).
        settings: settings for every call (:class:`~toolloop.models.ModelSettings`:
            ``top_p``, ``seed``, ``stop``, ``reasoning_effort``, ``extra_body``, ...); a
            request's own settings override them key by key.
        stream_usage: ask for the usage in a last chunk of every stream
            (``stream_options={"include_usage": true}``). A server that refuses the
            request for it (HTTP 400 or 422 naming ``stream_options``) is asked again
            without, and from then on; ``False`` never asks. Without it a call's usage is
            unknown.
        send_reasoning: whether the reasoning of earlier replies goes back to the server in
            the assistant messages of later requests, where it came from
            (``reasoning_content``, ``reasoning``, ``reasoning_details``, Mistral's thinking
            parts): DeepSeek's thinking mode answers a tool-call turn without it with HTTP
            400, GLM and OpenRouter's reasoning models want it back. ``None`` (the default):
            yes, except to servers known to refuse it (Groq, by its host). Gemini's thought
            signatures (``extra_content``) always go back: it refuses a function-call turn
            without them.

    Raises:
        ValueError: an unknown ``structured_output`` mode or model setting.
    """

    def __init__(
        self,
        model: str,
        *,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        structured_output: StructuredOutputMode | Sequence[StructuredOutputMode] | str = "auto",
        max_retries: int | None = None,
        timeout: float | None = None,
        settings: ModelSettings | None = None,
        stream_usage: bool = True,
        send_reasoning: bool | None = None,
    ) -> None:
        self.model = model
        self.settings: ModelSettings = check_settings(settings, "OpenAIChatModel")
        self.stream_usage = stream_usage
        options: dict[str, Any] = {}
        if max_retries is not None:
            options["max_retries"] = max_retries
        if timeout is not None:
            options["timeout"] = timeout
        if client is None:
            # the key: given, else OPENAI_API_KEY, else a placeholder local servers accept
            key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
            client = AsyncOpenAI(base_url=base_url, api_key=key, **options)
        elif options:
            client = client.with_options(**options)
        # the key is never in an error (this model's are scrubbed of it, whatever its shape),
        # nor, when it cannot be mistaken for ordinary words, in any trace, span or log
        given = getattr(client, "api_key", None)
        self._secret: str | None = (
            given if isinstance(given, str) and given != "not-needed" else None
        )
        register_secret(self._secret)
        self.client = client
        self._single: tuple[AsyncOpenAI, AsyncOpenAI] | None = None  # (client, no retries)
        self.send_reasoning: bool = (
            send_reasoning if send_reasoning is not None else _takes_reasoning(self.base_url)
        )
        if structured_output == "auto":
            self._modes: list[StructuredOutputMode] = list(_ORDER)
        elif isinstance(structured_output, str):
            if structured_output not in _ORDER:
                raise ValueError(
                    f"structured_output must be 'auto' or one of {list(_ORDER)}, got "
                    f"{structured_output!r}"
                )
            self._modes = [structured_output]
        else:
            self._modes = list(structured_output)
            unknown = [m for m in self._modes if m not in _ORDER]
            if not self._modes or unknown:
                raise ValueError(
                    f"structured_output must be 'auto', one of {list(_ORDER)} or a non-empty "
                    f"list of them, got {structured_output!r}"
                )
        self._settled: StructuredOutputMode | None = (
            self._modes[0] if len(self._modes) == 1 else None
        )

    @property
    def base_url(self) -> str:
        return str(self.client.base_url).rstrip("/")

    @property
    def structured_output_mode(self) -> StructuredOutputMode | None:
        """The mode that worked (or was configured); ``None`` until a server has answered."""
        return self._settled

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        messages: list[Mapping[str, Any]] = list(request.messages)
        if not self.send_reasoning:
            messages = [_without_reasoning(message) for message in messages]
        params: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        if request.tools:
            params["tools"] = request.tools
            if request.tool_choice is not None:
                params["tool_choice"] = request.tool_choice
        own: dict[str, Any] = {}
        if request.max_tokens is not None:
            own["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            own["temperature"] = request.temperature
        settings = merge_settings(self.settings, own, request.settings)
        extra_body = settings.pop("extra_body", None)
        if not request.tools:
            settings.pop("parallel_tool_calls", None)  # servers refuse it without tools
        params.update(settings)
        params.update(request.extra)
        if extra_body:
            params["extra_body"] = dict(extra_body)
        return params

    def _client_for_call(self) -> AsyncOpenAI:
        """The client of this call: without its own retries when toolloop makes the tries
        (the run's meter has a limiter or a retry policy), so that every answer, a 429
        first, reaches the limiter and the policy."""
        meter = current_meter()
        if meter is None or not meter.makes_tries:
            return self.client
        single = self._single
        if single is None or single[0] is not self.client:
            single = (self.client, self.client.with_options(max_retries=0))
            self._single = single
        return single[1]

    async def _open(self, request: ChatRequest) -> openai.AsyncStream[Any]:
        """Open the stream. A failure is a scrubbed :class:`ModelCallError`, raised outside
        any ``except`` block: nothing of the client's exception, which may hold the key in
        its ``args``, ``message`` and ``body``, is in its chain."""
        client = self._client_for_call()
        outcome = await self._attempt(client, request)
        if (
            isinstance(outcome, openai.OpenAIError)
            and self.stream_usage
            and _refuses_stream_options(outcome)
        ):
            # a server that does not take stream_options: ask without, from now on (the
            # usage of its calls is unknown)
            self.stream_usage = False
            outcome = await self._attempt(client, request)
        if isinstance(outcome, openai.OpenAIError):
            raise _call_error(outcome, self.base_url, secret=self._secret)
        if isinstance(outcome, _AllModesRefused):
            raise ModelCallError(_clean(str(outcome), self._secret), status=outcome.status)
        return outcome

    async def _attempt(
        self, client: AsyncOpenAI, request: ChatRequest
    ) -> openai.AsyncStream[Any] | openai.OpenAIError | _AllModesRefused:
        try:
            return await self._open_once(client, request)
        except (openai.OpenAIError, _AllModesRefused) as exc:
            return exc

    async def _open_once(
        self, client: AsyncOpenAI, request: ChatRequest
    ) -> openai.AsyncStream[Any]:
        """Open the stream (the client's errors pass through, unscrubbed: see ``_open``)."""
        params = self._params(request)
        if request.structured_output is None:
            return cast("openai.AsyncStream[Any]", await _create(client, params))
        modes = [self._settled] if self._settled is not None else self._modes
        refusals: list[str] = []
        for i, mode in enumerate(modes):
            last = i == len(modes) - 1
            try:
                stream = await self._create_probing(
                    client,
                    {**params, "response_format": _response_format(mode, request)},
                    probing=not last,
                )
            except openai.APIStatusError as exc:
                if last or not _is_refusal(exc):
                    if refusals and _is_refusal(exc):
                        status, said = exc.status_code, exc.message
                        break
                    raise
                refusals.append(f"{mode}: HTTP {exc.status_code}")
                continue
            self._settled = mode
            return cast("openai.AsyncStream[Any]", stream)
        else:  # pragma: no cover
            raise AssertionError("unreachable")
        raise _AllModesRefused(
            f"the model server at {self.base_url} refused every structured output mode: "
            f"{'; '.join(refusals)}; then HTTP {status}: {said}",
            status,
        )

    async def _create_probing(
        self, client: AsyncOpenAI, params: dict[str, Any], *, probing: bool
    ) -> Any:
        """Make the request. While probing (another mode is left to try) a refusal must move
        on at once, so the first attempt is made without the client's retries; an answer
        that is not a refusal but that the client would retry (429, 503, a connection that
        failed) is then retried as the client would have."""
        if not probing:
            return await _create(client, params)
        retries = client.max_retries
        try:
            return await _create(client.with_options(max_retries=0), params)
        except openai.APIStatusError as exc:
            if _is_refusal(exc) or retries < 1 or not _retryable(exc):
                raise  # a refusal moves on to the next mode at once; the rest is an error
            delay = _retry_delay(exc)
        except openai.APIConnectionError:
            if retries < 1:
                raise
            delay = _RETRY_DELAY
        # waited outside the except block: a cancellation while waiting must not carry the
        # server's answer (which may echo the key) as its context
        await anyio.sleep(delay)
        return await _create(client.with_options(max_retries=retries - 1), params)

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        """Stream the answer; leaving the block closes the HTTP connection."""
        stream = await self._open(request)
        try:
            yield _Deltas(stream, self.base_url, self._secret)
        finally:
            # shielded: a cancelled caller must still hang up, so the server stops generating
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await stream.close()

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.close()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
