"""A chat model that follows a script, offline: the :class:`~toolloop.models.ChatModel` seam
without HTTP.

`ScriptedChatModel` answers each ``stream(request)`` with the next scripted reply (content
cut into deltas, tool-call deltas, a finish reason, pauses between deltas, or an exception
at open or mid-stream), records every request, and records for every stream how much the
consumer read and whether it left before the end.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from .._errors import ModelCallError
from ..models import ChatDelta, ChatRequest, ToolCallDelta, Usage
from ._openai_replies import FakeToolCall, fake_tool_calls
from ._stream_record import StreamProgress

__all__ = ["ScriptedChatModel", "ScriptedChatReply", "ScriptedChatStream"]


@dataclass(frozen=True)
class ScriptedChatReply:
    """One scripted answer of :class:`ScriptedChatModel`.

    The content is cut into deltas: the explicit ``chunks`` if given (their concatenation is
    the content), else ``chunk_size`` characters per delta (``None``: the whole content in
    one delta). Each tool call gives a delta with its id and name, then its arguments in
    ``chunk_size`` pieces (a call without an id gets ``call_<turn>_<i>``: the request it
    answers, its place in the reply). A last delta carries ``finish_reason`` (``"tool_calls"`` when
    there are tool calls and none is given, else ``"stop"``).

    Timing: ``first_delay`` seconds before the first delta, ``delay`` before every delta.

    ``gates``: order without time. The stream waits before the delta at each index (the
    count of deltas handed over before it; before the scripted ``error`` too, when it comes
    there) until that index's :class:`anyio.Event` is set, so a test decides when the rest
    of the reply comes; :meth:`tool_call_end` is the index right after a tool call is
    complete. The stream's record tells when it waits (:attr:`ScriptedChatStream.held`).

    ``error``: raised when the stream is opened (``error_after`` is ``None``), or after
    ``error_after`` deltas were handed over, instead of the rest (a stream cut mid-way;
    without ``error``, a :class:`~toolloop.ModelCallError` saying so).

    ``usage``: reported in a last delta of its own, after the finish delta, as OpenAI's
    ``include_usage`` does (``None``: no usage is reported, it is unknown). A dict takes
    OpenAI's names (``prompt_tokens``, ``completion_tokens``, ``total_tokens``).
    """

    content: str = ""
    chunks: tuple[str, ...] | None = None
    chunk_size: int | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    finish_reason: str | None = None
    delay: float = 0.0
    first_delay: float = 0.0
    error: BaseException | None = None
    error_after: int | None = None
    usage: Usage | Mapping[str, int] | None = None
    reasoning: str = ""
    """What a thinking model reasons before its answer: streamed first, in ``chunk_size``
    pieces, as ``reasoning_content`` (DeepSeek's field)."""
    refusal: str | None = None
    """A refusal (OpenAI's ``refusal``), streamed after the content."""
    gates: Mapping[int, anyio.Event] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.usage is not None and not isinstance(self.usage, Usage):
            object.__setattr__(self, "usage", Usage.from_openai(dict(self.usage)))
        if self.chunks is not None:
            joined = "".join(self.chunks)
            if self.content and self.content != joined:
                raise ValueError(
                    "ScriptedChatReply got both `content` and `chunks`, and the chunks do not "
                    "join to the content; give only one of them"
                )
            object.__setattr__(self, "content", joined)
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1 or None, got {self.chunk_size}")
        if self.delay < 0 or self.first_delay < 0:
            raise ValueError("ScriptedChatReply delays must be >= 0")
        if self.error_after is not None:
            if self.error_after < 0:
                raise ValueError(f"error_after must be >= 0, got {self.error_after}")
            if self.error is None:
                cut = ModelCallError(
                    f"ScriptedChatModel: the stream was cut after {self.error_after} deltas "
                    "(scripted)"
                )
                object.__setattr__(self, "error", cut)

    def tool_call_end(self, index: int) -> int:
        """The index of the delta right after the last piece of tool call ``index``: a
        gate there holds the stream once that call is complete, before the next one
        starts (or the reply ends).

        Raises:
            IndexError: the reply has no such tool call.
        """
        if not 0 <= index < len(self.tool_calls):
            raise IndexError(f"the reply has {len(self.tool_calls)} tool calls, not {index + 1}")
        at = len(_split(self.reasoning, self.chunk_size))
        if self.chunks is not None:
            at += len([c for c in self.chunks if c])
        else:
            at += len(_split(self.content, self.chunk_size))
        for call in self.tool_calls[: index + 1]:
            at += 1 + len(_split(call.arguments, self.chunk_size))
        return at

    def deltas(self, turn: int = 0) -> list[ChatDelta]:
        """Every delta of the reply, in order (the finish delta last).

        A tool call the script gave no id gets ``call_<turn>_<i>`` (``turn``: the request
        it answers, ``i``: its place in the reply), so no two calls of a model's replies
        share an id unless the script says so."""
        out: list[ChatDelta] = [
            ChatDelta(reasoning=piece, reasoning_field="reasoning_content")
            for piece in _split(self.reasoning, self.chunk_size)
        ]
        if self.chunks is not None:
            pieces = [c for c in self.chunks if c]
        else:
            pieces = _split(self.content, self.chunk_size)
        out.extend(ChatDelta(content=piece) for piece in pieces)
        for index, call in enumerate(self.tool_calls):
            header = ToolCallDelta(
                index=index, id=call.id or f"call_{turn}_{index}", name=call.name
            )
            out.append(ChatDelta(tool_calls=(header,)))
            out.extend(
                ChatDelta(tool_calls=(ToolCallDelta(index=index, arguments=piece),))
                for piece in _split(call.arguments, self.chunk_size)
            )
        if self.refusal:
            out.append(ChatDelta(refusal=self.refusal))
        finish = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        out.append(ChatDelta(finish_reason=finish))
        if isinstance(self.usage, Usage):
            out.append(ChatDelta(usage=self.usage))
        return out


ScriptedItem = ScriptedChatReply | str | BaseException
"""A scripted answer: a reply, a plain content string, or an exception raised at open."""

ChatResponder = Callable[[ChatRequest], "ScriptedItem | Awaitable[ScriptedItem]"]


@dataclass(eq=False, kw_only=True)
class ScriptedChatStream(StreamProgress):
    """What happened to one stream of :class:`ScriptedChatModel` (``model.streams[i]``):
    its pieces are deltas, handed to the consumer."""

    reply: ScriptedChatReply
    failed: bool = False
    """The scripted ``error`` was raised mid-stream."""
    closed: bool = False
    """The consumer left the ``async with`` block."""
    closed_early: bool = False
    """The consumer left before every delta was handed over (it stopped reading, raised or
    was cancelled): an HTTP model would have closed the connection mid-stream."""


class ScriptedChatModel:
    """A :class:`~toolloop.models.ChatModel` that answers from a script, without HTTP.

    ```python
    model = ScriptedChatModel()
    model.add_reply('{"next_action": "response", "execution_commands": []}', chunk_size=4)
    planner = StructuredPlanner(model)
    ```

    Each ``stream(request)`` takes the next scripted answer (``replies``, then
    :meth:`add_reply` / :meth:`add_error`, in order); when none is left the ``responder`` is
    asked (sync or async, given the :class:`~toolloop.models.ChatRequest`), and without one
    opening the stream raises :class:`~toolloop.ModelCallError`. Every request is kept in
    ``requests`` (also those whose stream failed to open), every opened stream in
    ``streams``.

    Args:
        replies: answers to queue: a :class:`ScriptedChatReply`, a content string (one
            delta), or an exception to raise when the stream is opened.
        responder: asked when the queue is empty.
    """

    def __init__(
        self,
        replies: Iterable[ScriptedItem] = (),
        *,
        responder: ChatResponder | None = None,
    ) -> None:
        self.requests: list[ChatRequest] = []
        self.streams: list[ScriptedChatStream] = []
        self._queue: deque[ScriptedItem] = deque(replies)
        self._responder = responder

    def add_reply(
        self,
        content: str = "",
        *,
        chunks: Sequence[str] | None = None,
        chunk_size: int | None = None,
        tool_calls: Sequence[FakeToolCall | Mapping[str, str]] = (),
        finish_reason: str | None = None,
        delay: float = 0.0,
        first_delay: float = 0.0,
        error: BaseException | None = None,
        error_after: int | None = None,
        usage: Usage | Mapping[str, int] | None = None,
        reasoning: str = "",
        refusal: str | None = None,
        gates: Mapping[int, anyio.Event] | None = None,
    ) -> ScriptedChatReply:
        """Queue a reply (see :class:`ScriptedChatReply`); tool calls may be dicts with
        ``name``, ``arguments`` and optionally ``id``."""
        reply = ScriptedChatReply(
            content=content,
            chunks=None if chunks is None else tuple(chunks),
            chunk_size=chunk_size,
            tool_calls=fake_tool_calls(tool_calls),
            finish_reason=finish_reason,
            delay=delay,
            first_delay=first_delay,
            error=error,
            error_after=error_after,
            usage=usage,
            reasoning=reasoning,
            refusal=refusal,
            gates=dict(gates or {}),
        )
        self._queue.append(reply)
        return reply

    def add_error(self, error: BaseException) -> None:
        """Queue an exception to raise when the next stream is opened."""
        self._queue.append(error)

    @property
    def pending_replies(self) -> int:
        """How many queued answers no request has taken yet."""
        return len(self._queue)

    def stream(self, request: ChatRequest) -> _Stream:
        """Start streaming the next scripted answer to ``request``."""
        return _Stream(self, request)

    async def _next(self, request: ChatRequest) -> ScriptedChatReply:
        index = len(self.requests)
        self.requests.append(request)
        item: ScriptedItem
        if self._queue:
            item = self._queue.popleft()
        elif self._responder is not None:
            answer = self._responder(request)
            item = await answer if inspect.isawaitable(answer) else answer
        else:
            raise ModelCallError(
                f"ScriptedChatModel has no scripted reply left for request #{index}; queue "
                "one with add_reply() / add_error(), or pass responder="
            )
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, str):
            item = ScriptedChatReply(content=item)
        if item.error is not None and item.error_after is None:
            raise item.error
        return item


class _Stream:
    """The context manager and the iterator of one scripted stream (no async generator, so
    an early exit leaves nothing to finalize)."""

    __slots__ = ("_deltas", "_model", "_record", "_request")

    def __init__(self, model: ScriptedChatModel, request: ChatRequest) -> None:
        self._model = model
        self._request = request
        self._record: ScriptedChatStream | None = None
        self._deltas: list[ChatDelta] = []

    async def __aenter__(self) -> AsyncIterator[ChatDelta]:
        if self._record is not None:
            raise RuntimeError("a stream is opened once: call model.stream(request) again")
        await anyio.lowlevel.checkpoint()
        model = self._model
        reply = await model._next(self._request)
        self._deltas = reply.deltas(len(model.requests) - 1)
        self._record = ScriptedChatStream(
            request_index=len(model.requests) - 1,
            reply=reply,
            chunks_planned=len(self._deltas),
            started_at=time.monotonic(),
        )
        model.streams.append(self._record)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        record = self._record
        assert record is not None
        record.closed = True
        if record.ended_at is None:
            record.closed_early = True
            record.ended_at = time.monotonic()

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> ChatDelta:
        record = self._record
        if record is None or record.closed:
            raise RuntimeError("read a scripted stream inside its `async with` block")
        reply = record.reply
        sent = record.chunks_sent
        total = len(self._deltas)
        gate = reply.gates.get(sent) if reply.gates else None
        if gate is not None and not gate.is_set():  # before whatever comes next
            record.held.set()
            await gate.wait()
        if reply.error is not None and sent == min(reply.error_after or 0, total):
            record.failed = True
            record.ended_at = time.monotonic()
            raise reply.error
        if sent >= total:
            raise StopAsyncIteration
        pause = reply.delay + (reply.first_delay if sent == 0 else 0.0)
        if pause > 0:
            await anyio.sleep(pause)
        else:
            await anyio.lowlevel.checkpoint()
        delta = self._deltas[sent]
        record.chunks_sent = sent + 1
        if delta.content:
            record._content.append(delta.content)
        if sent + 1 == total and reply.error is None:
            record.completed = True
            record.ended_at = time.monotonic()
        return delta


def _split(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    if size is None:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]
