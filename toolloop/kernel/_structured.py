"""Structured output of a run's answer, for every product: a schema, two ways to get the
model to fill it, and the one-shot answer that retries.

- :class:`ToolStrategy`: the schema becomes a tool; the model gives its answer by calling
  it. Works with every model that calls tools.
- :class:`ProviderStrategy`: the provider is asked for JSON that fits the schema (its
  ``json_schema`` response format); the answer's text is the JSON.

Either way the answer is validated; one that fails is shown its errors and the model tries
again, ``retries`` times, before :class:`~toolloop.errors.StructuredOutputError`. The
middleware agent does it within its own turns (its conversation is the retry's); an answer
asked for once, at the end of a run (the loop's final answer, the status agent's), is
:func:`ask_structured`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pydantic

from .._errors import ModelOutputError, ResponseFormatError, StructuredOutputError
from ..models import (
    ChatModel,
    ChatReply,
    ChatRequest,
    ModelSettings,
    ReplyReader,
    StructuredOutput,
    Usage,
    parse_tool_arguments,
    stream_chat,
)
from ..tools import ArgumentsSchema, Tool, describe_pydantic_error

__all__ = [
    "OutputSchema",
    "ProviderStrategy",
    "ResponseFormat",
    "StructuredAnswer",
    "ToolStrategy",
    "ask_structured",
    "output_schema",
]

Schema: TypeAlias = "type[pydantic.BaseModel] | Mapping[str, Any]"


class OutputSchema:
    """A schema to validate answers with: a pydantic model, or a JSON schema (dict).

    Raises:
        ResponseFormatError: ``schema`` is neither, or is no valid JSON schema.
    """

    __slots__ = ("_check", "description", "model", "name", "schema")

    def __init__(self, schema: Schema, *, name: str | None = None) -> None:
        if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
            self.model: type[pydantic.BaseModel] | None = schema
            self.schema: dict[str, Any] = schema.model_json_schema()
            default_name = schema.__name__
            self.description = (schema.__doc__ or "").strip()
            self._check: ArgumentsSchema | None = None
        elif isinstance(schema, Mapping):
            self.model = None
            self.schema = dict(schema)
            default_name = str(schema.get("title") or "final_answer")
            self.description = str(schema.get("description") or "")
            try:
                self._check = ArgumentsSchema(self.schema, owner="the response format")
            except ValueError as exc:
                raise ResponseFormatError(str(exc)) from exc
        else:
            raise ResponseFormatError(
                "response_format is a pydantic model class, a JSON schema (dict), "
                f"ToolStrategy(...) or ProviderStrategy(...); got {type(schema).__name__}"
            )
        self.name = name or default_name

    def parse(self, value: Any) -> Any:
        """The validated answer: a model instance, or the JSON value itself.

        Raises:
            ValueError: the value does not fit; the message lists every violation.
        """
        if self.model is not None:
            try:
                return self.model.model_validate(value)
            except pydantic.ValidationError as exc:
                problems = "; ".join(
                    describe_pydantic_error(e) for e in exc.errors(include_url=False)
                )
                raise ValueError(f"the answer does not fit {self.name}: {problems}") from None
        assert self._check is not None
        if not self._check.is_valid(value):
            violations = self._check.violations(value)
            if violations:
                raise ValueError(f"the answer does not fit {self.name}: " + "; ".join(violations))
        return value

    def parse_json(self, text: str) -> Any:
        """Parse JSON text, then validate it (``ValueError`` if either fails)."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            shown = text if len(text) <= 200 else text[:200] + "..."
            raise ValueError(f"the answer is not JSON ({exc}): {shown!r}") from None
        return self.parse(value)

    def restore(self, value: Any) -> Any:
        """An answer read back from a store (its JSON data) as :meth:`parse` gives it: a
        model instance again for a pydantic schema; anything that no longer fits stays as
        it is."""
        if self.model is None or value is None or isinstance(value, self.model):
            return value
        try:
            return self.model.model_validate(value)
        except pydantic.ValidationError:
            return value


class _Strategy:
    """What both strategies say when an answer fails."""

    __slots__ = ()
    output: OutputSchema
    retries: int

    def gave_up(self, failures: int, error: str) -> StructuredOutputError:
        """The error after ``failures`` answers that failed, ``error`` the last one's."""
        return StructuredOutputError(
            f"the model's final answer failed to fit {self.output.name!r} {failures} times "
            f"(retries={self.retries}); the last time: {error}"
        )


@dataclass(frozen=True)
class ToolStrategy(_Strategy):
    """Structured output through a tool the model calls with its answer.

    Args:
        schema: a pydantic model class or a JSON schema of an object.
        tool_name: the tool's name; the schema's name by default.
        retries: how many times an answer that fails the schema is sent back.

    Raises:
        ResponseFormatError: the schema is no schema, or not one of an object.
        ToolDefinitionError: ``tool_name`` is no usable tool name.
    """

    schema: Schema
    tool_name: str | None = None
    retries: int = 2
    output: OutputSchema = field(init=False, repr=False, compare=False)
    tool: Tool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        output = OutputSchema(self.schema, name=self.tool_name)
        if output.schema.get("type") != "object":
            raise ResponseFormatError(
                f"ToolStrategy needs the schema of an object (the tool's arguments); "
                f"{output.name!r} is of type {output.schema.get('type')!r}: use "
                "ProviderStrategy, or wrap the value in an object"
            )
        description = output.description or f"Give your final answer as {output.name}."
        tool = Tool(
            name=output.name,
            description=description,
            parameters=output.schema,
            function=_answered_by_the_run,
        )
        object.__setattr__(self, "output", output)
        object.__setattr__(self, "tool", tool)

    def ask_for_the_call(self) -> str:
        """What a reply that did not call the tool is told."""
        return f"Give your final answer by calling the {self.tool.name!r} tool."

    def fix_the_call(self, error: str) -> str:
        """What a call whose arguments failed is answered."""
        return f"{error}. Fix the arguments and call {self.tool.name!r} again."

    def called_too_often(self, times: int) -> str:
        """What each call of a reply that called the tool ``times`` times is answered."""
        return (
            f"{self.tool.name!r} was called {times} times in one reply; call it once, with "
            "your one final answer"
        )


@dataclass(frozen=True)
class ProviderStrategy(_Strategy):
    """Structured output through the provider's ``json_schema`` response format.

    Args:
        schema: a pydantic model class or a JSON schema.
        name: the schema's name for the provider; the schema's own by default.
        strict: ask the provider to enforce the schema (OpenAI's strict mode needs every
            property required and ``additionalProperties: false``).
        retries: how many times an answer that fails the schema is sent back.

    Raises:
        ResponseFormatError: the schema is no schema.
    """

    schema: Schema
    name: str | None = None
    strict: bool = False
    retries: int = 2
    output: OutputSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", OutputSchema(self.schema, name=self.name))

    def structured_output(self) -> StructuredOutput:
        """What a request asks the provider for."""
        output = self.output
        return StructuredOutput(output.schema, name=output.name, strict=self.strict)

    def answer_again(self, error: str) -> str:
        """What a reply whose text failed is told."""
        return (
            f"{error}. Answer again with only the JSON value, fitting the schema "
            f"{self.output.name!r}."
        )


ResponseFormat: TypeAlias = "ToolStrategy | ProviderStrategy | Schema"
"""What ``response_format=`` takes, in every product; a bare schema means
:class:`ToolStrategy`."""


def output_schema(response_format: ResponseFormat | None) -> ToolStrategy | ProviderStrategy | None:
    """The strategy for a ``response_format`` argument.

    Raises:
        ResponseFormatError: it is no schema (or, as a :class:`ToolStrategy`, not one of an
            object).
    """
    if response_format is None or isinstance(response_format, (ToolStrategy, ProviderStrategy)):
        return response_format
    return ToolStrategy(response_format)


def _answered_by_the_run(**kwargs: Any) -> Any:  # pragma: no cover - never called
    raise RuntimeError("the structured-output tool is answered by the run, never run")


@dataclass(frozen=True, slots=True)
class StructuredAnswer:
    """A structured answer that fits: what :func:`ask_structured` gives.

    Attributes:
        value: the validated answer (a model instance for a pydantic schema).
        text: its JSON text, as the model wrote it (the reply, or the tool call's
            arguments).
        reply: the last reply (its ``finish_reason``, ``reasoning``).
        usage: every try's usage, summed (a try whose usage was not reported counts as
            unknown).
        tries: how many model calls it took.
    """

    value: Any
    text: str
    reply: ChatReply
    usage: Usage
    tries: int


async def ask_structured(
    model: ChatModel,
    messages: Sequence[Mapping[str, Any]],
    strategy: ToolStrategy | ProviderStrategy,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    settings: ModelSettings | None = None,
) -> StructuredAnswer:
    """Ask ``model`` for an answer that fits ``strategy``'s schema: an answer that fails is
    sent back with its errors (what was expected, what came), up to ``strategy.retries``
    times. Every call is one of the run's (:func:`~toolloop.models.stream_chat`): counted,
    and held to its budget.

    Raises:
        StructuredOutputError: every try failed (the message says how the last one did).
        ModelRefusalError: the model refused (not retried).
        ModelOutputError: a reply with nothing in it (an empty stream, or one the token
            limit cut off while the model was reasoning).
        ModelCallError: the model could not be reached or answered an error.
    """
    conversation = [dict(m) for m in messages]
    usage: Usage | None = None
    failures = 0
    while True:
        reply = await _reply(model, conversation, strategy, max_tokens, temperature, settings)
        call = reply.usage if reply.usage is not None else Usage.unknown()
        usage = call if usage is None else usage + call
        if reply.refusal is not None and not reply.text and not reply.tool_calls:
            raise reply.refused()
        if reply.empty:
            raise ModelOutputError(reply.why_empty())
        try:
            value, text = _read(strategy, reply, conversation)
        except ValueError as exc:
            error = str(exc)
            if reply.cut_off:
                error += " (the reply was cut off by its token limit: raise max_tokens)"
            failures += 1
            if failures > strategy.retries:
                raise strategy.gave_up(failures, error) from None
            continue
        return StructuredAnswer(value, text, reply, usage, failures + 1)


async def _reply(
    model: ChatModel,
    conversation: list[dict[str, Any]],
    strategy: ToolStrategy | ProviderStrategy,
    max_tokens: int | None,
    temperature: float | None,
    settings: ModelSettings | None,
) -> ChatReply:
    request = ChatRequest(
        messages=list(conversation),
        structured_output=strategy.structured_output()
        if isinstance(strategy, ProviderStrategy)
        else None,
        tools=[strategy.tool.openai_tool()] if isinstance(strategy, ToolStrategy) else None,
        # the one tool, by name: some servers (llama.cpp) do not force a call on "required"
        tool_choice={"type": "function", "function": {"name": strategy.tool.name}}
        if isinstance(strategy, ToolStrategy)
        else None,
        max_tokens=max_tokens,
        temperature=temperature,
        settings=settings,
    )
    reader = ReplyReader()
    async with stream_chat(model, request) as deltas:
        async for delta in deltas:
            reader.feed(delta)
    return reader.reply()


def _read(
    strategy: ToolStrategy | ProviderStrategy,
    reply: ChatReply,
    conversation: list[dict[str, Any]],
) -> tuple[Any, str]:
    """The answer in ``reply`` and its text; or ``ValueError``, once the reply and what it is
    told were added to ``conversation`` for the next try."""
    if isinstance(strategy, ProviderStrategy):
        try:
            return strategy.output.parse_json(reply.text), reply.text
        except ValueError as exc:
            conversation.append(reply.message())
            conversation.append({"role": "user", "content": strategy.answer_again(str(exc))})
            raise
    name = strategy.tool.name
    ids = [call.id or f"call_{len(conversation)}_{k}" for k, call in enumerate(reply.tool_calls)]
    sent = reply.message()
    if reply.tool_calls:
        for part, call_id in zip(sent["tool_calls"], ids, strict=True):
            part["id"] = call_id
    conversation.append(sent)
    ours = [k for k, call in enumerate(reply.tool_calls) if call.name == name]
    answers: list[tuple[str, str]] = []  # (call id, what it is answered)
    error: str | None = None
    value: Any = None
    text = ""
    if not ours:
        error = f"the model answered without calling {name!r}"
        if reply.text:
            error += f": {reply.text[:200]!r}"
    elif len(ours) > 1:
        error = strategy.called_too_often(len(ours))
        answers = [(ids[k], error) for k in ours]
    else:
        k = ours[0]
        text = reply.tool_calls[k].arguments
        try:
            args = parse_tool_arguments(text)
            if not isinstance(args, dict):
                shown = text if len(text) <= 200 else text[:200] + "..."
                raise ValueError(f"the arguments are not a JSON object: {shown!r}")
            value = strategy.output.parse(args)
        except ValueError as exc:
            error = str(exc)
            answers = [(ids[k], strategy.fix_the_call(error))]
        else:
            answers = [(ids[k], "Returned the structured response.")]
    for k, call in enumerate(reply.tool_calls):  # every call is answered
        if call.name != name:
            answers.append((ids[k], f"{call.name!r} is not available here; call {name!r}"))
    for call_id, said in answers:
        conversation.append({"role": "tool", "tool_call_id": call_id, "content": said})
    if error is not None:
        if not ours:
            conversation.append({"role": "user", "content": strategy.ask_for_the_call()})
        raise ValueError(error)
    return value, text
