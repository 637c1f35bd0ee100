"""Reading the chat-completions JSON of every OpenAI-compatible server, exactly as sent.

A streamed ``chat.completion.chunk`` or a whole ``chat.completion`` becomes
:class:`~toolloop.models.ChatDelta` values. What servers differ in, read here and nowhere
else:

- content as a string, or as a list of parts (Mistral: ``{"type": "text"}`` parts, and
  ``{"type": "thinking", "thinking": [...]}`` parts that are reasoning);
- reasoning in ``reasoning_content`` (DeepSeek, Qwen, GLM, xAI, older vLLM) or ``reasoning``
  (Groq, OpenRouter, Ollama, Cerebras, newer vLLM), OpenRouter's ``reasoning_details``
  items, a leading ``<think>...</think>`` block of the content (a server that runs a
  thinking model without a reasoning parser) and Gemini's ``<thought>...</thought>`` one;
- ``refusal`` (OpenAI);
- tool-call pieces with or without ``index``, with ids that are empty in follow-up pieces,
  arguments given as an object instead of text, and Gemini's ``extra_content`` (its thought
  signature), kept to be sent back;
- usage in ``usage`` or Groq's ``x_groq.usage``, in the usage chunk or in an error chunk;
- an error sent inside the stream (``{"error": {...}}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._chat import ChatDelta, ReasoningField, ToolCallDelta
from ._usage import Usage

__all__ = ["StreamFailure", "WireReader"]

_OPEN, _CLOSE = "<think>", "</think>"


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """An error the server sent as JSON (inside a stream, or as a 200 body)."""

    message: str
    code: int | None = None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:  # some servers send the arguments as an object
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _content(value: Any) -> tuple[str, str]:
    """The text and the thinking of a message's content (a string, or a list of parts)."""
    if isinstance(value, str):
        return value, ""
    if not isinstance(value, list):
        return "", ""
    text: list[str] = []
    thinking: list[str] = []
    for part in value:
        if isinstance(part, str):
            text.append(part)
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            text.append(_text(part.get("text")))
        elif kind == "thinking":
            inner = part.get("thinking")
            if isinstance(inner, str):
                thinking.append(inner)
            elif isinstance(inner, list):
                thinking.extend(
                    _text(piece.get("text")) for piece in inner if isinstance(piece, Mapping)
                )
    return "".join(text), "".join(thinking)


def _details_text(details: tuple[Mapping[str, Any], ...]) -> str:
    return "".join(_text(item.get("text")) or _text(item.get("summary")) for item in details)


def _tool_calls(raw: Any, *, whole: bool) -> tuple[ToolCallDelta, ...]:
    if not isinstance(raw, list):
        return ()
    calls: list[ToolCallDelta] = []
    for position, call in enumerate(raw):
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        index = call.get("index")
        extra = call.get("extra_content")
        calls.append(
            ToolCallDelta(
                index=position if whole else index if _is_index(index) else None,
                id=_text(call.get("id")) or None,
                name=_text(function.get("name")) or None,
                arguments=_arguments(function.get("arguments")),
                extra=None if extra is None else {"extra_content": extra},
            )
        )
    return tuple(calls)


def _usage(data: Mapping[str, Any]) -> Usage | None:
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        groq = data.get("x_groq")  # Groq's older place for it
        usage = groq.get("usage") if isinstance(groq, Mapping) else None
    return Usage.from_openai(usage) if isinstance(usage, Mapping) else None


def _failure(data: Mapping[str, Any]) -> StreamFailure | None:
    error = data.get("error")
    if error is None or error == {}:
        return None
    message: Any = error
    code: Any = None
    if isinstance(error, Mapping):
        message = error.get("message") or error.get("type") or json.dumps(error, default=str)
        code = error.get("code")
        if not _is_index(code):
            code = error.get("status") if _is_index(error.get("status")) else None
    return StreamFailure(str(message), code)


def _choice(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    for choice in choices:
        if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
            return choice
    first = choices[0]
    return first if isinstance(first, Mapping) else None


_TAGS = (("<think>", "</think>"), ("<thought>", "</thought>"))


class _ThinkSplitter:
    """Moves a ``<think>...</think>`` block (Gemini's: ``<thought>...</thought>``) at the very
    start of the content to the reasoning, across pieces (a tag may be split between two
    of them)."""

    __slots__ = ("_buffer", "_close", "_state")

    def __init__(self) -> None:
        # 0: nothing but whitespace yet, 1: inside the block, 2: plain text, 3: right after
        # the block (whitespace before the answer is dropped)
        self._state = 0
        self._buffer = ""
        self._close = ""

    def feed(self, text: str) -> tuple[str, str]:
        """The content and the reasoning in ``text``."""
        if self._state == 2 or not text:
            return text, ""
        if self._state == 3:  # just after the block: the blank lines before the answer go
            text = text.lstrip()
            if text:
                self._state = 2
            return text, ""
        self._buffer += text
        if self._state == 0:
            head = self._buffer.lstrip()
            if not head or any(len(head) < len(o) and o.startswith(head) for o, _ in _TAGS):
                return "", ""  # not decided yet
            opened = next(((o, c) for o, c in _TAGS if head.startswith(o)), None)
            if opened is None:
                self._state = 2
                text, self._buffer = self._buffer, ""
                return text, ""
            self._state = 1
            self._close = opened[1]
            self._buffer = head[len(opened[0]) :]
        close = self._close
        end = self._buffer.find(close)
        if end >= 0:
            reasoning, rest = self._buffer[:end], self._buffer[end + len(close) :].lstrip()
            self._state, self._buffer = (2 if rest else 3), ""
            return rest, reasoning
        keep = next(
            (n for n in range(len(close) - 1, 0, -1) if self._buffer.endswith(close[:n])), 0
        )
        reasoning = self._buffer[: len(self._buffer) - keep]
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return "", reasoning

    def end(self) -> tuple[str, str]:
        """What is held back when the reply ends (or turns to tool calls): undecided text,
        or an unclosed block; what follows is plain text."""
        rest, self._buffer = self._buffer, ""
        state, self._state = self._state, 2
        if state == 1:
            return "", rest  # cut off while thinking
        return rest, ""


def _message_extra(value: Any) -> dict[str, Any] | None:
    """A message's ``extra_content`` to send back: Gemini's thought signature, without the
    ``thought`` flag it puts on the deltas of its thoughts (a marker, not for the server)."""
    if not isinstance(value, Mapping):
        return None
    google = value.get("google")
    if isinstance(google, Mapping) and "thought" in google:
        google = {k: v for k, v in google.items() if k != "thought"}
        value = (
            {**value, "google": google}
            if google
            else {k: v for k, v in value.items() if k != "google"}
        )
    return {"extra_content": dict(value)} if value else None


class WireReader:
    """The deltas of one reply, from its chunks (or its whole completion)."""

    __slots__ = ("_think",)

    def __init__(self) -> None:
        self._think = _ThinkSplitter()

    def chunk(self, data: Any) -> tuple[ChatDelta | None, StreamFailure | None]:
        """One streamed chunk: its delta (``None``: nothing in it) and an error it carries."""
        if not isinstance(data, Mapping):
            return None, StreamFailure(f"a stream event that is no JSON object: {data!r}")
        failure = _failure(data)
        usage = _usage(data)
        choice = _choice(data)
        if choice is None:
            return (None if usage is None else ChatDelta(usage=usage)), failure
        message = choice.get("delta")
        if not isinstance(message, Mapping):
            message = choice.get("message")  # a few servers stream whole messages
        delta = self._delta(
            message if isinstance(message, Mapping) else {},
            choice.get("finish_reason"),
            usage,
            whole=False,
        )
        return delta, failure

    def completion(self, data: Any) -> tuple[list[ChatDelta], StreamFailure | None]:
        """A whole ``chat.completion`` (a server that answered ``stream: true`` with one)."""
        if not isinstance(data, Mapping):
            return [], StreamFailure(f"a body that is no JSON object: {data!r}")
        failure = _failure(data)
        choice = _choice(data)
        usage = _usage(data)
        deltas: list[ChatDelta] = []
        if choice is not None:
            message = choice.get("message")
            deltas.append(
                self._delta(
                    message if isinstance(message, Mapping) else {},
                    choice.get("finish_reason"),
                    None,
                    whole=True,
                )
            )
        deltas.extend(self.end())
        if usage is not None:
            deltas.append(ChatDelta(usage=usage))
        return deltas, failure

    def end(self) -> list[ChatDelta]:
        """What the reply still holds back when it ends (an unclosed ``<think>`` block)."""
        text, reasoning = self._think.end()
        if not (text or reasoning):
            return []
        return [
            ChatDelta(
                content=text,
                reasoning=reasoning,
                reasoning_field="think_tags" if reasoning else None,
            )
        ]

    def _delta(
        self,
        message: Mapping[str, Any],
        finish: Any,
        usage: Usage | None,
        *,
        whole: bool,
    ) -> ChatDelta:
        text, thinking = _content(message.get("content"))
        field: ReasoningField | None = None
        reasoning = _text(message.get("reasoning_content"))
        if reasoning:
            field = "reasoning_content"
        else:
            reasoning = _text(message.get("reasoning"))
            field = "reasoning" if reasoning else None
        if thinking:
            reasoning, field = reasoning + thinking, field or "thinking"
        tagged = ""
        if text:
            text, tagged = self._think.feed(text)
        calls = _tool_calls(message.get("tool_calls"), whole=whole)
        if calls or finish:  # no more text before this: what was held back is let go
            held, unclosed = self._think.end()
            text, tagged = held + text, tagged + unclosed
        if tagged:
            reasoning, field = reasoning + tagged, field or "think_tags"
        raw_details = message.get("reasoning_details")
        details: tuple[Mapping[str, Any], ...] = ()
        if isinstance(raw_details, list):
            details = tuple(item for item in raw_details if isinstance(item, Mapping))
            if details and not reasoning:
                reasoning = _details_text(details)
        extra = _message_extra(message.get("extra_content"))
        return ChatDelta(
            content=text,
            tool_calls=calls,
            finish_reason=finish if isinstance(finish, str) and finish else None,
            usage=usage,
            reasoning=reasoning,
            reasoning_field=field if reasoning else None,
            reasoning_details=details,
            refusal=_text(message.get("refusal")),
            extra=extra,
        )
