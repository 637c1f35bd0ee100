"""The seam between toolloop and a chat model: a request, a stream of deltas, a protocol.

Planners and the final answer talk to :class:`ChatModel` only; the OpenAI adapter is the
one module that imports ``openai``, and test doubles implement the same protocol, so the
whole loop runs offline in tests and a new provider is one module.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ._settings import ModelSettings

if TYPE_CHECKING:
    from ._usage import Usage

__all__ = [
    "ChatDelta",
    "ChatModel",
    "ChatRequest",
    "ReasoningField",
    "StructuredOutput",
    "StructuredOutputMode",
    "ToolCallDelta",
]

StructuredOutputMode = Literal["json_schema", "json_object_schema", "json_object"]
"""How a server is asked for JSON that fits a schema:

- ``json_schema``: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
  (OpenAI, vLLM, llama.cpp's ``llama-server``);
- ``json_object_schema``: ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's
  server, which enforces it with a grammar);
- ``json_object``: plain JSON mode; the schema is only described in the prompt.
"""


@dataclass(frozen=True)
class StructuredOutput:
    """Ask for JSON that fits ``schema``."""

    schema: dict[str, Any]
    name: str = "output"
    strict: bool = True


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion request, independent of any provider's client."""

    messages: list[dict[str, Any]]
    structured_output: StructuredOutput | None = None
    tools: list[dict[str, Any]] | None = None
    """Tools in the OpenAI Chat Completions format (``{"type": "function", ...}``)."""
    tool_choice: Any = None
    """``"auto"``, ``"required"``, ``"none"`` or ``{"type": "function", "function": {...}}``."""
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Provider-specific parameters, passed through as they are."""
    settings: ModelSettings | None = None
    """This call's settings: they override the model's own and ``max_tokens`` /
    ``temperature`` above, key by key."""

    def summary(self) -> dict[str, Any]:
        """What matters of this request to tell it apart from another, as JSON data: how
        many messages and their digest, the tools offered (names, and their schemas'
        digest), ``tool_choice``, the
        structured output asked for (its name and its schema's digest) and the settings
        (``max_tokens``, ``temperature``, ``settings``; ``extra`` left out: it may carry a
        provider's credentials). A trace keeps it on each ``ModelCallFinished``; a replay
        compares it with the request the code makes now."""
        out: dict[str, Any] = {
            "messages": len(self.messages),
            "digest": _digest(self.messages),
        }
        if self.tools:
            out["tools"] = [_tool_name(tool) for tool in self.tools]
            out["schemas"] = _digest(self.tools)
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        if self.structured_output is not None:
            out["structured_output"] = {
                "name": self.structured_output.name,
                "digest": _digest(self.structured_output.schema),
            }
        settings: dict[str, Any] = {}
        if self.max_tokens is not None:
            settings["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            settings["temperature"] = self.temperature
        if self.settings:
            settings.update({k: v for k, v in self.settings.items() if k != "extra_body"})
        if settings:
            out["settings"] = settings
        return out


def _digest(value: Any) -> str:
    """A short digest of JSON-like data (keys sorted; what JSON cannot say, as text)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        if isinstance(tool.get("name"), str):
            return str(tool["name"])
    return "?"


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed tool call: ``index`` ties the pieces of one call together
    (``None`` when the server leaves it out; the pieces then follow each other)."""

    index: int | None
    id: str | None = None
    """The call's id, on the piece that carries it (``None``: this piece has none)."""
    name: str | None = None
    arguments: str = ""
    extra: Mapping[str, Any] | None = None
    """Fields of the call the server requires back in the next request, as sent (e.g.
    Gemini's ``extra_content`` with its thought signature)."""


ReasoningField = Literal["reasoning_content", "reasoning", "thinking", "think_tags"]
"""Where a reply's reasoning came from: the ``reasoning_content`` field (DeepSeek, Qwen, GLM,
xAI, older vLLM), the ``reasoning`` field (Groq, OpenRouter, Ollama, Cerebras, newer vLLM),
``thinking`` parts of a content list (Mistral), or a leading ``<think>`` block of the text
(a server without a reasoning parser)."""


@dataclass(frozen=True)
class ChatDelta:
    """A piece of a streamed answer."""

    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None
    """The call's usage so far, when the server reports it (usually in a last delta of its
    own); the last one of a stream is the call's."""
    reasoning: str = ""
    """A piece of the model's reasoning (its thinking before the answer), apart from the
    content."""
    reasoning_field: ReasoningField | None = None
    """Where ``reasoning`` came from, when this delta has some."""
    reasoning_details: tuple[Mapping[str, Any], ...] = ()
    """Structured reasoning items as sent (OpenRouter's ``reasoning_details``: text,
    summaries, encrypted blocks with their signatures), to be sent back unchanged."""
    refusal: str = ""
    """A piece of a refusal (the model declined to answer: OpenAI's ``refusal``)."""
    extra: Mapping[str, Any] | None = None
    """Fields of the message the server requires back in the next request, as sent (e.g.
    Gemini's ``extra_content``)."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that streams.

    ``stream(request)`` is an async context manager yielding an async iterator of
    :class:`ChatDelta`; leaving the context closes the stream (for an HTTP model: the
    connection is closed, so the server stops generating).
    """

    def stream(self, request: ChatRequest) -> AbstractAsyncContextManager[AsyncIterator[ChatDelta]]:
        """Start streaming an answer to ``request``."""
        ...
