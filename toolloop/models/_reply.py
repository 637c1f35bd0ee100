"""A whole reply, read from a stream of deltas: text, reasoning, refusal, tool calls, how it
ended, usage; and the assistant message that sends it back in the next request.

Every product reads a model's stream through :class:`ReplyReader`, so what a reply says is
read once, the same way, whatever reads it (the planners, the agents, the final answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._errors import ModelRefusalError
from ._chat import ChatDelta, ReasoningField
from ._tool_calls import StreamedToolCall, ToolCallReader
from ._usage import Usage

__all__ = [
    "ChatReply",
    "Reasoning",
    "ReplyReader",
    "ReplyToolCall",
    "assistant_message",
]


class Reasoning(BaseModel):
    """What a model reasoned before its answer, as its server sent it.

    ``text`` is for people (events, traces, the viewer); ``field`` and ``details`` are how
    the reasoning goes back to the server in the next request (see
    :func:`assistant_message`).
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    field: ReasoningField | None = None
    """Where it came from (``reasoning_content``, ``reasoning``, Mistral's ``thinking``
    parts, a leading ``<think>`` block); ``None`` when only ``details`` carried it."""
    details: list[dict[str, Any]] = Field(default_factory=list)
    """OpenRouter's ``reasoning_details`` items, as sent (signatures, encrypted blocks)."""


@dataclass(frozen=True, slots=True)
class ReplyToolCall:
    """One tool call of a reply: its id as sent (``None`` when the server gave none), the
    tool's name, the arguments' text as written, and fields to send back (``extra``)."""

    id: str | None
    name: str
    arguments: str
    extra: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ChatReply:
    """A model's whole reply."""

    text: str
    reasoning: Reasoning | None
    refusal: str | None
    tool_calls: tuple[ReplyToolCall, ...]
    finish_reason: str | None
    """The last finish reason sent; ``None`` when the server never said one (Snowflake
    Cortex ends its streams without)."""
    usage: Usage | None
    extra: Mapping[str, Any] | None = None
    deltas: int = 0
    """How many deltas said something (text, reasoning, refusal, tool calls, a finish)."""

    @property
    def cut_off(self) -> bool:
        """The token limit ended the reply (``finish_reason == "length"``)."""
        return self.finish_reason == "length"

    @property
    def empty(self) -> bool:
        """Nothing to act on: no text, no tool call, no refusal."""
        return not (self.text or self.tool_calls or self.refusal)

    def why_empty(self) -> str:
        """A sentence on an empty reply: what came, and what to try."""
        if self.deltas == 0:
            return (
                "the model's reply was empty: its stream carried no output at all (no text, no "
                "tool call, no finish reason); try again, or check the server and the model name"
            )
        if self.cut_off:
            what = "while it was still reasoning" if self.reasoning else "before any output"
            return (
                f"the model's reply was cut off by its token limit {what}: it has no text and "
                "no tool call; raise max_tokens"
            )
        return (
            "the model's reply had no text and no tool call "
            f"(finish_reason={self.finish_reason!r}"
            f"{', only reasoning' if self.reasoning else ''})"
        )

    def refused(self) -> ModelRefusalError:
        """The error for a refusal (``refusal`` must be set)."""
        said = self.refusal or ""
        shown = said if len(said) <= 300 else said[:300] + "…"
        return ModelRefusalError(f"the model refused to answer: {shown!r}", refusal=said)

    def message(self, *, content_if_empty: str | None = "") -> dict[str, Any]:
        """This reply as the assistant message of the next request (see
        :func:`assistant_message`)."""
        return assistant_message(
            self.text,
            self.tool_calls,
            self.reasoning,
            extra=self.extra,
            content_if_empty=content_if_empty,
        )


def assistant_message(
    text: str,
    tool_calls: Sequence[ReplyToolCall] = (),
    reasoning: Reasoning | None = None,
    *,
    extra: Mapping[str, Any] | None = None,
    content_if_empty: str | None = "",
) -> dict[str, Any]:
    """An assistant message in the chat-completions format, with its reasoning where its
    server sent it: ``reasoning_content`` or ``reasoning`` as that field, Mistral's thinking
    as a ``thinking`` part before the text, ``reasoning_details`` as received; each tool
    call's and the message's ``extra`` fields (Gemini's thought signatures) as received. A
    leading ``<think>`` block is not sent back. The model adapter leaves out what its server
    must not get (:class:`~toolloop.models.OpenAIChatModel`'s ``send_reasoning``).

    ``content_if_empty``: the content when there is no text (``""``; ``None`` for a null).
    """
    content: Any = text if text else content_if_empty
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None and reasoning.text:
        if reasoning.field in ("reasoning_content", "reasoning"):
            message[reasoning.field] = reasoning.text
        elif reasoning.field == "thinking":
            parts: list[dict[str, Any]] = [
                {"type": "thinking", "thinking": [{"type": "text", "text": reasoning.text}]}
            ]
            if text:
                parts.append({"type": "text", "text": text})
            message["content"] = parts
    if reasoning is not None and reasoning.details:
        message["reasoning_details"] = [dict(item) for item in reasoning.details]
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
                **(call.extra or {}),
            }
            for call in tool_calls
        ]
    if extra:
        message.update(extra)
    return message


class ReplyReader:
    """Reads a reply delta by delta; :meth:`reply` is the whole of it so far."""

    __slots__ = (
        "_details",
        "_extra",
        "_field",
        "_reasoning",
        "_refusal",
        "_text",
        "deltas",
        "finish_reason",
        "tools",
        "usage",
    )

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._field: ReasoningField | None = None
        self._details: list[dict[str, Any]] = []
        self._refusal: list[str] = []
        self._extra: dict[str, Any] | None = None
        self.tools = ToolCallReader()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.deltas = 0

    def feed(self, delta: ChatDelta) -> None:
        """Take one delta in."""
        if delta.content:
            self._text.append(delta.content)
        if delta.reasoning:
            self._reasoning.append(delta.reasoning)
            if self._field is None:
                self._field = delta.reasoning_field
        if delta.reasoning_details:
            _merge_details(self._details, delta.reasoning_details)
        if delta.refusal:
            self._refusal.append(delta.refusal)
        if delta.tool_calls:
            self.tools.feed(delta.tool_calls)
        if delta.extra:
            self._extra = {**(self._extra or {}), **delta.extra}
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage = delta.usage  # cumulative: the last one counts
        if (
            delta.content
            or delta.reasoning
            or delta.reasoning_details
            or delta.refusal
            or delta.tool_calls
            or delta.finish_reason is not None
        ):
            self.deltas += 1  # one that says something (not usage or extra alone)

    @property
    def text(self) -> str:
        return "".join(self._text)

    def reasoning(self) -> Reasoning | None:
        """The reasoning so far, ``None`` when there is none."""
        if not (self._reasoning or self._details):
            return None
        return Reasoning(
            text="".join(self._reasoning), field=self._field, details=list(self._details)
        )

    def reply(self) -> ChatReply:
        """The reply as read so far."""
        return ChatReply(
            text=self.text,
            reasoning=self.reasoning(),
            refusal="".join(self._refusal) if self._refusal else None,
            tool_calls=tuple(_call(call) for call in self.tools.calls),
            finish_reason=self.finish_reason,
            usage=self.usage,
            extra=self._extra,
            deltas=self.deltas,
        )


def _call(call: StreamedToolCall) -> ReplyToolCall:
    return ReplyToolCall(call.id, call.name, "".join(call.arguments), call.extra)


def _merge_details(into: list[dict[str, Any]], pieces: Sequence[Mapping[str, Any]]) -> None:
    """OpenRouter streams ``reasoning_details`` items in pieces that share an ``index``: the
    text of a piece is appended to its item, its other fields (signature, format) set."""
    for piece in pieces:
        index = piece.get("index")
        target = next(
            (item for item in into if index is not None and item.get("index") == index), None
        )
        if target is None:
            into.append(dict(piece))
            continue
        for key, value in piece.items():
            if key in ("text", "summary", "data") and isinstance(value, str):
                target[key] = str(target.get(key) or "") + value
            elif value is not None:
                target[key] = value
