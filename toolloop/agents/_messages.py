"""The conversation: typed messages (OpenAI roles), tool calls, and their OpenAI form.

Messages are frozen pydantic models told apart by ``role``, so a state holding them is
JSON-ready (a paused run's snapshot) and loads back as the same types. An agent accepts
messages as these models, as OpenAI-style dicts, or a plain string (a user message).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter

from ..models import Reasoning, ReplyToolCall, assistant_message
from ..runner import json_safe

__all__ = [
    "AssistantMessage",
    "Message",
    "MessageLike",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "add_messages",
    "as_message",
    "as_messages",
    "content_text",
    "last_assistant",
    "new_id",
    "pending_tool_calls",
    "to_openai",
]


def new_id(prefix: str = "msg") -> str:
    """A fresh id, e.g. ``msg_1f3a...`` (messages) or ``call_...`` (tool calls)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class ToolCall(BaseModel):
    """One tool call of an assistant message.

    When the model's arguments were not a JSON object, ``args`` is empty, ``error`` says
    what was wrong and ``raw_arguments`` keeps what it wrote: the call is answered with that
    error and the tool never runs.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    raw_arguments: str | None = None
    extra: dict[str, Any] | None = None
    """Fields of the call its server requires back in the next request, as it sent them
    (Gemini's ``extra_content``, with its thought signature)."""


class SystemMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system"] = "system"
    content: str
    id: str | None = None


class UserMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["user"] = "user"
    content: str | list[dict[str, Any]]
    """Text, or OpenAI content parts (text, images)."""
    name: str | None = None
    id: str | None = None


class AssistantMessage(BaseModel):
    """What the model said: text and/or tool calls, with what it reasoned before (when its
    server sent it), a refusal, and why the reply ended. ``id`` lets an update replace it.

    The reasoning goes back to the server with the message in later requests, where the
    server sent it (see :func:`~toolloop.models.assistant_message`).
    """

    model_config = ConfigDict(frozen=True)

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    id: str | None = None
    reasoning: Reasoning | None = None
    """What the model reasoned before it answered (its text, and how its server sends it
    back)."""
    refusal: str | None = None
    """What the model said when it refused to answer (OpenAI's ``refusal``)."""
    finish_reason: str | None = None
    """Why the reply ended (``"stop"``, ``"tool_calls"``, ``"length"``: cut off by the token
    limit), when the server said; ``None`` for messages not read from a model."""
    extra: dict[str, Any] | None = None
    """Fields of the message its server requires back, as sent (Gemini's ``extra_content``)."""


class ToolMessage(BaseModel):
    """The answer to one tool call (``tool_call_id``): its result, or an error."""

    model_config = ConfigDict(frozen=True)

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    name: str = ""
    """The tool's name."""
    status: Literal["success", "error"] = "success"
    id: str | None = None
    _value: tuple[Any] | None = PrivateAttr(default=None)
    # the tool's value as it returned it, for the call's record (never sent, never saved)


Message: TypeAlias = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any message of the conversation."""

MessageLike: TypeAlias = "Message | Mapping[str, Any] | str"
"""A message, an OpenAI-style message dict, or a string (a user message)."""

_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)
_MODELS = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def content_text(value: Any) -> str:
    """A tool's result as message text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(json_safe(value), ensure_ascii=False)


def _openai_tool_calls(calls: Any) -> list[ToolCall]:
    out: list[ToolCall] = []
    for call in calls or ():
        if isinstance(call, ToolCall):
            out.append(call)
            continue
        function = call.get("function") or {}
        name = function.get("name", call.get("name", ""))
        raw = function.get("arguments", call.get("args", {}))
        call_id = call.get("id") or new_id("call")
        if isinstance(raw, Mapping):
            out.append(ToolCall(id=call_id, name=name, args=dict(raw)))
            continue
        try:
            args = json.loads(raw) if raw and raw.strip() else {}
        except (TypeError, ValueError):
            args = None
        if isinstance(args, dict):
            out.append(ToolCall(id=call_id, name=name, args=args))
        else:
            out.append(
                ToolCall(
                    id=call_id,
                    name=name,
                    error="the arguments are not a JSON object",
                    raw_arguments=str(raw),
                )
            )
    return out


def as_message(value: MessageLike) -> Message:
    """A message from a message, an OpenAI-style dict, or a string (a user message).

    Raises:
        ValueError: a dict that is no message (the message says what is wrong).
    """
    if isinstance(value, _MODELS):
        return value
    if isinstance(value, str):
        return UserMessage(content=value)
    if isinstance(value, Mapping):
        data = dict(value)
        if data.get("role") == "assistant":
            if data.get("content") is None:
                data["content"] = ""
            if "tool_calls" in data:
                data["tool_calls"] = _openai_tool_calls(data["tool_calls"])
        return _MESSAGE.validate_python(data)
    raise TypeError(
        f"a message is a str, a dict with a 'role', or a toolloop.agents message; got "
        f"{type(value).__name__}"
    )


def as_messages(value: MessageLike | Iterable[MessageLike]) -> list[Message]:
    """Messages from one message-like value or a sequence of them."""
    if isinstance(value, (str, Mapping, *_MODELS)):
        return [as_message(value)]
    return [as_message(v) for v in value]


def add_messages(messages: list[Message], new: Iterable[MessageLike]) -> None:
    """Append ``new`` to ``messages``; a message whose ``id`` is already there replaces it."""
    for item in new:
        message = as_message(item)
        if message.id is not None:
            for i in range(len(messages) - 1, -1, -1):
                if messages[i].id == message.id:
                    messages[i] = message
                    break
            else:
                messages.append(message)
        else:
            messages.append(message)


def last_assistant(messages: Sequence[Message]) -> int:
    """The index of the last assistant message, ``-1`` if there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            return i
    return -1


def pending_tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The calls of the last assistant message that no later tool message answers yet."""
    i = last_assistant(messages)
    if i < 0:
        return []
    message = messages[i]
    assert isinstance(message, AssistantMessage)
    if not message.tool_calls:
        return []
    answered = {m.tool_call_id for m in messages[i + 1 :] if isinstance(m, ToolMessage)}
    if not answered:
        return list(message.tool_calls)
    return [call for call in message.tool_calls if call.id not in answered]


def _arguments(call: ToolCall) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.args, ensure_ascii=False)


def to_openai(message: Message) -> dict[str, Any]:
    """The message in the OpenAI Chat Completions format."""
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if isinstance(message, AssistantMessage):
        return assistant_message(
            message.content,
            [ReplyToolCall(c.id, c.name, _arguments(c), c.extra) for c in message.tool_calls],
            message.reasoning,
            extra=message.extra,
            content_if_empty=None,
        )
    if isinstance(message, UserMessage):
        user: dict[str, Any] = {"role": "user", "content": message.content}
        if message.name is not None:
            user["name"] = message.name
        return user
    return {"role": "system", "content": message.content}
