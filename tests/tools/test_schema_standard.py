"""Arguments are checked as JSON Schema says, not as Python would: ``pattern`` is an
ECMA-262 regular expression (``$`` does not match before a final newline), and NaN and the
infinities are no JSON numbers. The fast path and the reference validator agree on every
generated schema and instance."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.runner import Executor, ToolCommand
from toolloop.tools import ArgumentsSchema, Tool
from toolloop.tools._ecma import ECMAValidator

pytestmark = pytest.mark.anyio

PATH = {
    "type": "object",
    "properties": {"path": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$"}},
    "required": ["path"],
}


@pytest.mark.parametrize(
    ("value", "ok"),
    [("etc/passwd", True), ("etc/passwd\n", False), ("../x\nrm -rf", False), ("", False)],
)
def test_pattern_follows_ecma_262(value: str, ok: bool) -> None:
    schema = ArgumentsSchema(PATH, owner="tool 'read'")
    assert schema.is_valid({"path": value}) is ok
    assert ECMAValidator(PATH).is_valid({"path": value}) is ok
    if not ok and value:
        [said] = schema.violations({"path": value})
        assert said.startswith("at 'path': expected a string matching")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("kind", ["number", "integer"])
def test_nan_and_infinity_are_no_numbers(value: float, kind: str) -> None:
    schema = {"type": "object", "properties": {"x": {"type": kind}}}
    assert not ArgumentsSchema(schema, owner="t").is_valid({"x": value})
    assert not ECMAValidator(schema).is_valid({"x": value})


async def test_the_tool_does_not_run_with_such_arguments() -> None:
    ran: list[str] = []

    def read(path: str) -> str:
        ran.append(path)
        return "contents"

    tool = Tool(name="read", description="Read a file.", parameters=PATH, function=read)
    weight = Tool(
        name="weigh",
        description="Weigh.",
        parameters={"type": "object", "properties": {"kg": {"type": "number"}}},
        function=lambda kg: kg,
    )
    records = await Executor([tool, weight]).run(
        [
            ToolCommand(tool_name="read", tool_kwargs={"path": "etc/passwd\n"}),
            ToolCommand(tool_name="weigh", tool_kwargs={"kg": math.nan}),
            ToolCommand(tool_name="read", tool_kwargs={"path": "etc/passwd"}),
        ]
    )
    assert [r.success for r in records] == [False, False, True]
    assert ran == ["etc/passwd"]


def test_a_pattern_that_is_not_ecma_262_is_a_definition_error() -> None:
    with pytest.raises(ValueError, match="no ECMA-262 regular expression"):
        ArgumentsSchema(
            {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?P<n>a)"}}},
            owner="t",
        )


PATTERNS = [
    "^[A-Za-z0-9_./-]+$",
    "^\\d{3}$",
    "^a|b$",
    "^[^\\n]*$",
    "\\bcat\\b",
    "^\\w+$",
    "^.$",
    "[\\u00e9]",
    "^(ab)+$",
]
_text = st.one_of(
    st.sampled_from(["abc", "a/b.c", "123", "1234", "cat", "a cat!", "é", "\n", "ab\n", "abab"]),
    st.text(alphabet="ab/.1\n é_-", max_size=6),
)
_numbers = st.one_of(
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([math.nan, math.inf, -math.inf, 1.0, 2.5]),
    st.booleans(),
)
_property_schemas = st.one_of(
    st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(PATTERNS)),
    st.builds(
        lambda lo, hi: {"type": "number", "minimum": lo, "maximum": hi},
        st.integers(-3, 0),
        st.integers(0, 3),
    ),
    st.just({"type": "integer"}),
    st.just({"type": ["number", "null"]}),
)
_schemas = st.builds(
    lambda props, extra: {
        "type": "object",
        "properties": props,
        **({"patternProperties": {extra: {"type": "number"}}} if extra else {}),
    },
    st.dictionaries(st.sampled_from(["a", "b", "c"]), _property_schemas, max_size=3),
    st.one_of(st.none(), st.sampled_from(["^x\\d$", "^[yz]+$"])),
)
_instances = st.dictionaries(
    st.sampled_from(["a", "b", "c", "x1", "x1\n", "yz", "w"]),
    st.one_of(_text, _numbers, st.none()),
    max_size=4,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(schema=_schemas, instance=_instances)
def test_the_fast_path_agrees_with_the_reference(schema: dict[str, Any], instance: Any) -> None:
    checked = ArgumentsSchema(schema, owner="t")
    assert checked.is_valid(instance) is ECMAValidator(schema).is_valid(instance)
