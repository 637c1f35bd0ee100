"""The OpenAI adapter: the one module of toolloop that imports ``openai``.

It speaks to OpenAI and to every OpenAI-compatible server (vLLM, llama.cpp, Ollama) through
the official ``AsyncOpenAI`` client, which runs on asyncio and trio alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import openai
from openai import AsyncOpenAI

from .._errors import ModelCallError, ModelOutputError
from .._secrets import MIN_SECRET_CHARS, REDACTED, register_secret, scrub
from ._chat import ChatDelta, ChatRequest, StructuredOutputMode, ToolCallDelta
from ._settings import ModelSettings, check_settings, merge_settings
from ._usage import Usage

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


def _refuses_stream_options(exc: BaseException | None) -> bool:
    """Whether a server refused the request for its ``stream_options`` (older servers)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 422):
        return False
    said = f"{exc.message} {exc.body}".lower()
    return "stream_options" in said or "include_usage" in said


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


def _call_error(
    exc: openai.OpenAIError, base_url: str, *, streaming: bool = False, secret: str | None = None
) -> ModelCallError:
    error = _described(exc, base_url, streaming=streaming)
    said = scrub(str(error))  # a server may echo the key (e.g. in a 401's message)
    if secret and len(secret) >= MIN_SECRET_CHARS:  # this model's own key, whatever its length
        said = said.replace(secret, REDACTED)
    if said != str(error):
        return ModelCallError(said, status=error.status)
    return error


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


class _Deltas:
    """The chunks of an OpenAI stream as :class:`ChatDelta` (no async generator, so an
    early exit leaves nothing to finalize)."""

    __slots__ = ("_base_url", "_secret", "_stream")

    def __init__(
        self, stream: openai.AsyncStream[Any], base_url: str, secret: str | None = None
    ) -> None:
        self._stream = stream
        self._base_url = base_url
        self._secret = secret

    def __aiter__(self) -> _Deltas:
        return self

    async def __anext__(self) -> ChatDelta:
        while True:
            try:
                chunk = await self._stream.__anext__()
            except openai.OpenAIError as exc:
                raise _call_error(exc, self._base_url, streaming=True, secret=self._secret) from exc
            except ValueError as exc:  # an SSE data line that is not JSON
                raise ModelOutputError(
                    f"the model server at {self._base_url} sent a stream event that is not "
                    f"JSON ({scrub(str(exc))[:200]}); the stream was dropped: try again, or "
                    "check what stands between toolloop and the server (a proxy?)"
                ) from exc
            reported = getattr(chunk, "usage", None)
            usage = Usage.from_openai(reported) if reported is not None else None
            if not chunk.choices:  # e.g. the usage chunk
                if usage is None:
                    continue
                return ChatDelta(usage=usage)
            choice = chunk.choices[0]
            delta = choice.delta
            calls: tuple[ToolCallDelta, ...] = ()
            if delta.tool_calls:
                calls = tuple(
                    ToolCallDelta(
                        index=c.index,
                        id=c.id,
                        name=c.function.name if c.function else None,
                        arguments=(c.function.arguments or "") if c.function else "",
                    )
                    for c in delta.tool_calls
                )
            return ChatDelta(
                content=delta.content or "",
                tool_calls=calls,
                finish_reason=choice.finish_reason,
                usage=usage,
            )


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
        max_retries: the client's own retries of 429/5xx and connection errors.
        timeout: seconds for a request (the client's timeout).
        settings: settings for every call (:class:`~toolloop.models.ModelSettings`:
            ``top_p``, ``seed``, ``stop``, ``reasoning_effort``, ``extra_body``, ...); a
            request's own settings override them key by key.
        stream_usage: ask for the usage in a last chunk of every stream
            (``stream_options={"include_usage": true}``). A server that refuses the
            request for it (HTTP 400 or 422 naming ``stream_options``) is asked again
            without, and from then on; ``False`` never asks. Without it a call's usage is
            unknown.

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
        params: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "stream": True,
        }
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

    async def _open(self, request: ChatRequest) -> openai.AsyncStream[Any]:
        try:
            return await self._open_once(request)
        except ModelCallError as exc:
            if not (self.stream_usage and _refuses_stream_options(exc.__cause__)):
                raise
        # a server that does not take stream_options: ask without, from now on (the usage
        # of its calls is unknown)
        self.stream_usage = False
        return await self._open_once(request)

    async def _open_once(self, request: ChatRequest) -> openai.AsyncStream[Any]:
        params = self._params(request)
        if request.structured_output is None:
            try:
                return cast("openai.AsyncStream[Any]", await _create(self.client, params))
            except openai.OpenAIError as exc:
                raise _call_error(exc, self.base_url, secret=self._secret) from exc
        modes = [self._settled] if self._settled is not None else self._modes
        refusals: list[str] = []
        for i, mode in enumerate(modes):
            last = i == len(modes) - 1
            try:
                stream = await self._create_probing(
                    {**params, "response_format": _response_format(mode, request)},
                    probing=not last,
                )
            except openai.APIStatusError as exc:
                if last or not _is_refusal(exc):
                    if refusals and _is_refusal(exc):
                        raise ModelCallError(
                            f"the model server at {self.base_url} refused every structured "
                            f"output mode: {'; '.join(refusals)}; then HTTP {exc.status_code}: "
                            f"{exc.message}",
                            status=exc.status_code,
                        ) from exc
                    raise _call_error(exc, self.base_url, secret=self._secret) from exc
                refusals.append(f"{mode}: HTTP {exc.status_code}")
                continue
            except openai.OpenAIError as exc:
                raise _call_error(exc, self.base_url, secret=self._secret) from exc
            self._settled = mode
            return cast("openai.AsyncStream[Any]", stream)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create_probing(self, params: dict[str, Any], *, probing: bool) -> Any:
        """Make the request. While probing (another mode is left to try) a refusal must move
        on at once, so the first attempt is made without the client's retries; an answer
        that is not a refusal but that the client would retry (429, 503, a connection that
        failed) is then retried as the client would have."""
        if not probing:
            return await _create(self.client, params)
        retries = self.client.max_retries
        try:
            return await _create(self.client.with_options(max_retries=0), params)
        except openai.APIStatusError as exc:
            if _is_refusal(exc) or retries < 1 or not _retryable(exc):
                raise  # a refusal moves on to the next mode at once; the rest is an error
            await anyio.sleep(_retry_delay(exc))
        except openai.APIConnectionError:
            if retries < 1:
                raise
            await anyio.sleep(_RETRY_DELAY)
        return await _create(self.client.with_options(max_retries=retries - 1), params)

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
