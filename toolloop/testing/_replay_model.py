"""The model of a replay: a :class:`~toolloop.models.ChatModel` that answers each request
with the recorded reply, streamed in pieces, after its referee has checked the request.

The reply goes out as a real model's would: the reasoning, the text cut into deltas, each
tool call's header then its arguments in pieces, the refusal, the finish reason and the
usage, so the code paths that read a stream as it comes (the loop's short-circuit, its
streaming dispatch) run as they did. A reply the run closed early (the short-circuit) is
given as far as it was read: reading past it is a divergence.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.lowlevel

from .. import _errors
from .._errors import ModelCallError, UsageLimitError
from ..models import ChatDelta, ChatModel, ChatRequest, ReasoningField, ToolCallDelta
from ._recording import RecordedModelCall

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

__all__ = ["ReplayModel", "recorded_deltas", "recorded_exception"]

_REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking", "think_tags")


class _Referee(Protocol):
    """What the model asks of its replay."""

    def model_call(self, request: ChatRequest) -> RecordedModelCall | ChatModel:
        """The recorded reply to give, or the live model to ask (re-asked); raises when
        the request diverges."""
        ...

    def read_past(self, call: RecordedModelCall) -> BaseException:
        """The error for a run that reads past a reply recorded as closed early."""
        ...


class ReplayModel:
    """A chat model that gives a recording's replies back, in order.

    Made by a :class:`~toolloop.testing.Replay` (``replay.model``): each request is checked
    against the recorded one first (see ``compare_requests``), and a request past the
    recording, or re-asked (``reask_from``), goes where the replay says.

    Args:
        referee: the replay that owns it.
        chunk_size: characters per text delta (and per piece of a tool call's arguments).
    """

    def __init__(self, referee: _Referee, *, chunk_size: int = 16) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self._referee = referee
        self.chunk_size = chunk_size
        self.requests: list[ChatRequest] = []
        """Every request the run made, in order."""

    def stream(self, request: ChatRequest) -> AbstractAsyncContextManager[AsyncIterator[ChatDelta]]:
        """The recorded reply to ``request``, streamed."""
        return _ReplayStream(self, request)


class _ReplayStream:
    """The context manager and iterator of one replayed reply (no async generator: an
    early exit leaves nothing to finalize)."""

    __slots__ = ("_call", "_deltas", "_live", "_live_stream", "_model", "_request", "_sent")

    def __init__(self, model: ReplayModel, request: ChatRequest) -> None:
        self._model = model
        self._request = request
        self._call: RecordedModelCall | None = None
        self._deltas: list[ChatDelta] = []
        self._sent = 0
        self._live: AbstractAsyncContextManager[AsyncIterator[ChatDelta]] | None = None
        self._live_stream: AsyncIterator[ChatDelta] | None = None

    async def __aenter__(self) -> AsyncIterator[ChatDelta]:
        await anyio.lowlevel.checkpoint()
        model = self._model
        model.requests.append(self._request)
        try:
            answer = model._referee.model_call(self._request)
        except Exception:
            await anyio.lowlevel.checkpoint()  # inside replay(): the run is being stopped
            raise
        if not isinstance(answer, RecordedModelCall):  # re-asked: the live model answers
            self._live = answer.stream(self._request)
            self._live_stream = await self._live.__aenter__()
            return self._live_stream
        self._call = answer
        self._deltas = recorded_deltas(answer, model.chunk_size)
        failure = _failure_of(answer)
        if failure is not None and not self._deltas:
            await _fail(failure)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._live is not None:
            await self._live.__aexit__(*exc_info)

    def __aiter__(self) -> _ReplayStream:
        return self

    async def __anext__(self) -> ChatDelta:
        call = self._call
        assert call is not None
        await anyio.lowlevel.checkpoint()
        sent = self._sent
        if sent < len(self._deltas):
            self._sent = sent + 1
            return self._deltas[sent]
        failure = _failure_of(call)
        if failure is not None:
            await _fail(failure)
        if call.closed_early and call.error is None:
            error = self._model._referee.read_past(call)
            await anyio.lowlevel.checkpoint()  # inside replay(): the run is being stopped
            raise error
        raise StopAsyncIteration


def recorded_deltas(call: RecordedModelCall, chunk_size: int = 16) -> list[ChatDelta]:
    """The deltas of a recorded reply, as a model would stream them: reasoning, text,
    tool calls (a header, then the arguments in pieces), refusal, finish reason, usage
    (when the server reported it: an unknown usage is not sent)."""
    out: list[ChatDelta] = []
    field: ReasoningField = "reasoning_content"
    if call.reasoning_field in _REASONING_FIELDS:
        field = call.reasoning_field  # type: ignore[assignment]  # one of the four
    out.extend(
        ChatDelta(reasoning=piece, reasoning_field=field)
        for piece in _split(call.reasoning or "", chunk_size)
    )
    out.extend(ChatDelta(content=piece) for piece in _split(call.text, chunk_size))
    for index, tool_call in enumerate(call.tool_calls):
        raw_id = tool_call.get("id")
        header = ToolCallDelta(
            index=index,
            id=raw_id if isinstance(raw_id, str) else None,
            name=str(tool_call.get("name") or ""),
        )
        out.append(ChatDelta(tool_calls=(header,)))
        arguments = tool_call.get("arguments")
        text = arguments if isinstance(arguments, str) else ""
        out.extend(
            ChatDelta(tool_calls=(ToolCallDelta(index=index, arguments=piece),))
            for piece in _split(text, chunk_size)
        )
    if call.refusal:
        out.append(ChatDelta(refusal=call.refusal))
    if call.finish_reason is not None:
        out.append(ChatDelta(finish_reason=call.finish_reason))
    usage = call.usage
    if usage is not None and usage.unreported_requests == 0 and not call.closed_early:
        out.append(ChatDelta(usage=usage))
    return out


def _failure_of(call: RecordedModelCall) -> BaseException | None:
    """What the replayed call raises, after its deltas: the recorded error (``None``: it
    did not fail, or its failure was the run's own doing, which the run does again)."""
    error = call.error
    if error is None:
        return None
    name, _, message = error.partition(": ")
    if name == UsageLimitError.__name__:  # the run's budget closed it: the meter does it again
        return None
    return recorded_exception(name, message, default=ModelCallError)


class _Cancelled(BaseException):
    """A recorded cancellation: the replay waits for the run's own to come."""


def recorded_exception(
    type_name: str, message: str, *, default: type[Exception] = Exception
) -> BaseException:
    """An exception like the one recorded: the built-in or toolloop class of that name
    when there is one (so that code catching it by class still does), else a class of
    that name made for it (under ``default``). A recorded cancellation gives a marker: the
    replay then waits for the run's own cancellation, as it came when recorded."""
    if type_name in ("CancelledError", "Cancelled"):
        return _Cancelled(message)
    known = getattr(builtins, type_name, None) or getattr(_errors, type_name, None)
    if isinstance(known, type) and issubclass(known, Exception):
        try:
            return known(message)
        except Exception:  # a class that wants other arguments
            pass
    return _made_class(type_name, default)(message)


_MADE: dict[tuple[str, type[Exception]], type[Exception]] = {}


def _made_class(name: str, base: type[Exception]) -> type[Exception]:
    found = _MADE.get((name, base))
    if found is None:
        safe = name if name.isidentifier() else "RecordedError"
        found = type(safe, (base,), {"__module__": "toolloop.testing"})
        _MADE[(name, base)] = found
    return found


async def _fail(failure: BaseException) -> None:
    if isinstance(failure, _Cancelled):
        await anyio.sleep_forever()  # the cancellation that cut it comes again
    raise failure


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
