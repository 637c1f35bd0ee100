from __future__ import annotations

import jsonschema
import pytest
from pydantic import BaseModel

from toolloop.errors import ToolDefinitionError, ToolNotFoundError
from toolloop.tools import Tool, ToolRegistry, tool


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    name: str
    home: Address


def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


def register(person: Person, note: str | None = None) -> str:
    """Register a person.

    Args:
        person: who.
        note: why.
    """
    return person.name


@tool(name="echo", description="Echo it.")
async def echo(text: str) -> str:
    return text


def test_built_from_tools_and_functions() -> None:
    registry = ToolRegistry([add, echo, register])
    assert len(registry) == 3
    assert registry.names == ["add", "echo", "register"]
    assert [t.name for t in registry] == registry.names
    assert "add" in registry
    assert "nope" not in registry
    assert registry.get("echo") is echo
    assert isinstance(registry.get("add"), Tool)
    assert repr(registry) == "ToolRegistry(['add', 'echo', 'register'])"
    assert len(ToolRegistry(registry)) == 3  # a registry is an iterable of tools
    assert len(ToolRegistry()) == 0


def test_duplicate_names() -> None:
    with pytest.raises(ToolDefinitionError, match="two tools are named 'add'"):
        ToolRegistry([add, Tool.from_function(add)])
    ToolRegistry([add, Tool.from_function(add, name="add2")])


def test_bad_function_is_a_definition_error() -> None:
    def untyped(a):  # type: ignore[no-untyped-def]
        return a

    with pytest.raises(ToolDefinitionError, match="no type annotation for parameter 'a'"):
        ToolRegistry([untyped])


def test_unknown_tool_lists_available_ones() -> None:
    registry = ToolRegistry([add, echo])
    with pytest.raises(ToolNotFoundError) as info:
        registry.get("ehco")
    assert str(info.value) == (
        "no tool named 'ehco'; available tools: 'add', 'echo'; did you mean 'echo'?"
    )
    with pytest.raises(ToolNotFoundError, match="no tools are available"):
        ToolRegistry().get("x")


def test_unknown_tool_message_truncates_many_names() -> None:
    many = [Tool.from_function(add, name=f"tool_{i}") for i in range(50)]
    with pytest.raises(ToolNotFoundError) as info:
        ToolRegistry(many).get("zzz")
    message = str(info.value)
    assert "'tool_19'" in message
    assert "'tool_20'" not in message
    assert "… (30 more)" in message


def test_specs_and_openai_tools() -> None:
    registry = ToolRegistry([add, register])
    specs = registry.specs()
    assert specs[0] == {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer", "default": 1},
            },
            "required": ["a"],
            "additionalProperties": False,
        },
    }
    openai = registry.openai_tools()
    assert openai == [{"type": "function", "function": spec} for spec in specs]


def test_nested_model_schemas_stay_valid() -> None:
    spec = ToolRegistry([register]).specs()[0]
    params = spec["parameters"]
    assert params["properties"]["person"]["$ref"] == "#/$defs/Person"
    assert set(params["$defs"]) == {"Person", "Address"}
    jsonschema.Draft202012Validator.check_schema(params)
    validator = jsonschema.Draft202012Validator(params)
    good = {"person": {"name": "Ada", "home": {"street": "s", "city": "c"}}}
    assert validator.is_valid(good)
    assert not validator.is_valid({"person": {"name": "Ada", "home": {"street": "s"}}})
