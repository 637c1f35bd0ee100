"""The compiled fast path must agree with jsonschema, the authority, on every instance."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.tools._schema import ArgumentsSchema, compile_schema

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 1.5, -2.0, 3.0])
    | st.sampled_from(["", "a", "ab", "abc", "b"])
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3)
    ),
    max_leaves=8,
)

_types = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])
_plain_leaf_schemas: st.SearchStrategy[Any] = st.one_of(
    st.booleans(),
    st.fixed_dictionaries({"type": _types | st.lists(_types, min_size=1, max_size=3, unique=True)}),
    st.fixed_dictionaries({"enum": st.lists(_scalars, min_size=1, max_size=4)}),
    st.fixed_dictionaries({"const": _scalars}),
    st.fixed_dictionaries(
        {}, optional={"minimum": st.integers(-2, 2), "maximum": st.integers(-2, 2)}
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "exclusiveMinimum": st.integers(-2, 2),
            "exclusiveMaximum": st.sampled_from([0, 1.5]),
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "minLength": st.integers(0, 2),
            "maxLength": st.integers(0, 2),
            "pattern": st.sampled_from(["^a", "b", "^$"]),
        },
    ),
    st.just({"format": "email"}),
)
_leaf_schemas = _plain_leaf_schemas | st.just({"$ref": "#/$defs/Thing"})


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(names, children, max_size=3),
                "required": st.lists(names, max_size=2, unique=True),
                "additionalProperties": children,
                "minProperties": st.integers(0, 2),
                "maxProperties": st.integers(0, 3),
            },
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "properties": st.dictionaries(names, children, max_size=2),
                "required": st.lists(names, max_size=2, unique=True),
            },
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.just("array"),
                "items": children,
                "prefixItems": st.lists(children, min_size=1, max_size=2),
                "minItems": st.integers(0, 2),
                "maxItems": st.integers(0, 3),
            },
        ),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"not": children}),
    )


schemas = st.recursive(_leaf_schemas, _compound, max_leaves=6)
things = st.recursive(_plain_leaf_schemas, _compound, max_leaves=4)  # $ref-free: no cycles


@settings(max_examples=400, deadline=None)
@given(schema=schemas, thing=things, instances=st.lists(json_values, min_size=1, max_size=8))
def test_fast_path_agrees_with_jsonschema(schema: Any, thing: Any, instances: list[Any]) -> None:
    root = dict(schema) if isinstance(schema, dict) else {"allOf": [schema]}
    root["$defs"] = {"Thing": thing}
    check = compile_schema(root)
    assert check is not None  # everything generated is in the compiled subset
    validator = jsonschema.Draft202012Validator(root)
    for instance in instances:
        assert check(instance) == validator.is_valid(instance), (root, instance)


def test_recursive_refs() -> None:
    tree = {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["children"],
            }
        },
    }
    check = compile_schema(tree)
    assert check is not None
    assert check({"children": [{"children": []}]})
    assert not check({"children": [{"kids": []}]})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
        {"type": "array", "uniqueItems": True},
        {"type": "integer", "multipleOf": 2},
        {"$id": "https://example.com/x", "type": "object"},
        {"if": {"type": "string"}, "then": {"minLength": 1}},
    ],
)
def test_unsupported_keywords_fall_back_to_jsonschema(schema: dict[str, Any]) -> None:
    assert compile_schema(schema) is None
    checked = ArgumentsSchema(schema, owner="tool 't'")
    validator = jsonschema.Draft202012Validator(schema)
    for instance in [{"a": 1}, {"a": "x"}, [1, 1], [1, 2], 3, 4, "", "s"]:
        assert checked.is_valid(instance) == validator.is_valid(instance)


def test_bad_schema_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        ArgumentsSchema({"type": "object", "required": "a"}, owner="tool 't'")


def test_many_violations_are_capped() -> None:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(15)},
    }
    lines = ArgumentsSchema(schema, owner="tool 't'").violations({f"p{i}": "x" for i in range(15)})
    assert len(lines) == 11
    assert lines[-1] == "and 5 more"


_plain_objects = st.fixed_dictionaries(
    {"type": st.just("object")},
    optional={
        "properties": st.dictionaries(
            st.sampled_from(["a", "b", "c"]),
            st.fixed_dictionaries({"type": _types}, optional={"description": st.just("x")})
            | _plain_leaf_schemas,
            max_size=3,
        ),
        "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True),
        "additionalProperties": st.booleans() | _plain_leaf_schemas,
        "title": st.just("T"),
        "minProperties": st.integers(0, 3),
    },
)


@settings(max_examples=400, deadline=None)
@given(schema=_plain_objects, instances=st.lists(json_values, min_size=1, max_size=8))
def test_values_of_the_plain_types_fit_the_schema(schema: Any, instances: list[Any]) -> None:
    from toolloop.tools._compile import plain_properties

    plain = plain_properties(schema)
    if "minProperties" in schema:
        assert plain is None  # it asserts more than the properties' types
        return
    assert plain is not None
    types, required = plain
    validator = jsonschema.Draft202012Validator(schema)
    for instance in [*instances, dict.fromkeys(required, "a")]:
        if (
            isinstance(instance, dict)
            and all(type(v) is types.get(k) for k, v in instance.items())
            and all(name in instance for name in required)
        ):
            assert validator.is_valid(instance), (schema, instance)
