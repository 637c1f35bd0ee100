"""Structured output of the final answer: a schema, and two ways to get the model to fill it.

- :class:`ToolStrategy`: the schema becomes a tool; the model gives its answer by calling
  it. Works with every model that calls tools.
- :class:`ProviderStrategy`: the provider is asked for JSON that fits the schema (its
  ``json_schema`` response format); the answer's text is the JSON.

Either way the answer is validated; one that fails is shown its errors and the model tries
again, ``retries`` times, before :class:`~toolloop.agents.StructuredOutputError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pydantic

from ..tools import ArgumentsSchema, Tool, describe_pydantic_error
from ._errors import AgentDefinitionError

__all__ = [
    "OutputSchema",
    "ProviderStrategy",
    "ResponseFormat",
    "ToolStrategy",
    "output_schema",
]

Schema: TypeAlias = "type[pydantic.BaseModel] | Mapping[str, Any]"


class OutputSchema:
    """A schema to validate answers with: a pydantic model, or a JSON schema (dict)."""

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
                raise AgentDefinitionError(str(exc)) from exc
        else:
            raise AgentDefinitionError(
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


@dataclass(frozen=True)
class ToolStrategy:
    """Structured output through a tool the model calls with its answer.

    Args:
        schema: a pydantic model class or a JSON schema of an object.
        tool_name: the tool's name; the schema's name by default.
        retries: how many times an answer that fails the schema is sent back.
    """

    schema: Schema
    tool_name: str | None = None
    retries: int = 2
    output: OutputSchema = field(init=False, repr=False, compare=False)
    tool: Tool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        output = OutputSchema(self.schema, name=self.tool_name)
        if output.schema.get("type") != "object":
            raise AgentDefinitionError(
                f"ToolStrategy needs the schema of an object (the tool's arguments); "
                f"{output.name!r} is of type {output.schema.get('type')!r}: use "
                "ProviderStrategy, or wrap the value in an object"
            )
        description = output.description or f"Give your final answer as {output.name}."
        tool = Tool(
            name=output.name,
            description=description,
            parameters=output.schema,
            function=_answered_by_the_agent,
        )
        object.__setattr__(self, "output", output)
        object.__setattr__(self, "tool", tool)


@dataclass(frozen=True)
class ProviderStrategy:
    """Structured output through the provider's ``json_schema`` response format.

    Args:
        schema: a pydantic model class or a JSON schema.
        name: the schema's name for the provider; the schema's own by default.
        strict: ask the provider to enforce the schema (OpenAI's strict mode needs every
            property required and ``additionalProperties: false``).
        retries: how many times an answer that fails the schema is sent back.
    """

    schema: Schema
    name: str | None = None
    strict: bool = False
    retries: int = 2
    output: OutputSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", OutputSchema(self.schema, name=self.name))


ResponseFormat: TypeAlias = "ToolStrategy | ProviderStrategy | Schema"
"""What ``create_agent(response_format=...)`` takes; a bare schema means
:class:`ToolStrategy`."""


def output_schema(response_format: ResponseFormat | None) -> ToolStrategy | ProviderStrategy | None:
    """The strategy for a ``response_format`` argument."""
    if response_format is None or isinstance(response_format, (ToolStrategy, ProviderStrategy)):
        return response_format
    return ToolStrategy(response_format)


def _answered_by_the_agent(**kwargs: Any) -> Any:  # pragma: no cover - never called
    raise RuntimeError("the structured-output tool is answered by the agent, never run")
