from __future__ import annotations

import enum
import functools
import threading
import time
from typing import Annotated, Any, Literal, Optional
from unittest import mock

import anyio
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, field_validator

from toolloop.errors import ToolArgumentsError, ToolDefinitionError, ToolTimeoutError
from toolloop.tools import Tool, _function, async_call_tool, tool

pytestmark = pytest.mark.anyio


class Point(BaseModel):
    x: int
    y: int = 0


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Even(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("n must be even")
        return value


class NotJson:
    pass


async def search(
    query: str,
    limit: int = 10,
    mode: Literal["fast", "deep"] = "fast",
    near: Optional[Point] = None,  # noqa: UP045 - Optional is what is being tested
    tags: list[str] | None = None,
    ratio: float = 0.5,
) -> dict[str, Any]:
    """Search the web for pages.

    Everything after the first paragraph stays out of the description.

    Args:
        query: What to look for,
            on two lines.
        limit (int): At most this many results.
        mode: How hard to look.

    Returns:
        The arguments as received.
    """
    return {
        "query": query,
        "limit": limit,
        "mode": mode,
        "near": near,
        "tags": tags,
        "ratio": ratio,
    }


# --- schema from a typed function ---------------------------------------------------


def test_schema_from_typed_function() -> None:
    t = Tool.from_function(search)
    assert t.name == "search"
    assert t.description == "Search the web for pages."
    params = t.parameters
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    assert params["additionalProperties"] is False
    assert "title" not in params
    props = params["properties"]
    assert list(props) == ["query", "limit", "mode", "near", "tags", "ratio"]
    assert props["query"] == {"type": "string", "description": "What to look for, on two lines."}
    assert props["limit"] == {
        "type": "integer",
        "default": 10,
        "description": "At most this many results.",
    }
    assert props["mode"]["enum"] == ["fast", "deep"]
    assert props["mode"]["description"] == "How hard to look."
    assert props["near"]["anyOf"] == [{"$ref": "#/$defs/Point"}, {"type": "null"}]
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert params["$defs"]["Point"]["required"] == ["x"]
    jsonschema.Draft202012Validator.check_schema(params)


def test_enum_and_annotated_descriptions() -> None:
    def paint(
        color: Color,
        size: Annotated[int, Field(ge=1, description="from the annotation")],
    ) -> str:
        """Paint.

        Args:
            color: the color.
            size: from the docstring (the annotation wins).
        """
        return color.value * size

    t = Tool.from_function(paint)
    props = t.parameters["properties"]
    assert props["size"]["description"] == "from the annotation"
    assert props["size"]["minimum"] == 1
    assert t.parameters["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert props["color"]["description"] == "the color."


def test_docstring_without_args_and_no_docstring() -> None:
    def nodoc(a: int) -> int:
        return a

    def args_only(a: int) -> int:
        """Args:
        a: the a.
        """
        return a

    assert Tool.from_function(nodoc).description == ""
    only = Tool.from_function(args_only)
    assert only.description == ""
    assert only.parameters["properties"]["a"]["description"] == "the a."


def test_name_and_description_overrides_and_decorator() -> None:
    @tool
    def plain(a: int) -> int:
        """Plain."""
        return a + 1

    @tool(name="renamed", description="Custom.", timeout=2, thread=True)
    def other(a: int) -> int:
        return a

    assert isinstance(plain, Tool)
    assert plain.name == "plain"
    assert plain(1) == 2  # still callable like the function
    assert (other.name, other.description, other.timeout, other.thread) == (
        "renamed",
        "Custom.",
        2.0,
        True,
    )
    assert repr(other) == "Tool(name='renamed', timeout=2.0, thread=True)"
    assert plain.spec() == {
        "name": "plain",
        "description": "Plain.",
        "parameters": plain.parameters,
    }
    assert plain.openai_tool() == {"type": "function", "function": plain.spec()}


def test_methods_partials_and_parameter_names_like_basemodel_attributes() -> None:
    class Box:
        def __init__(self) -> None:
            self.scale = 3

        def grow(self, json: int, schema: str = "s") -> str:
            """Grow it."""
            return f"{json * self.scale}{schema}"

    grow = Tool.from_function(Box().grow)
    assert list(grow.parameters["properties"]) == ["json", "schema"]
    assert grow.validate({"json": 2}) == {"json": 2}
    assert grow(2) == "6s"

    def add(a: int, b: int) -> int:
        return a + b

    part = Tool.from_function(functools.partial(add, b=1), name="inc")
    assert part.parameters["required"] == ["a"]
    assert Tool.from_function(functools.partial(add, b=1)).name == "add"
    with pytest.raises(ToolDefinitionError, match="pass name="):
        Tool.from_function(_Callable())
    assert Tool.from_function(_Callable(), name="call").validate({"a": 1}) == {"a": 1}


class _Callable:
    def __call__(self, a: int) -> int:
        return a


async def test_conversion_by_pydantic() -> None:
    got = await async_call_tool(
        Tool.from_function(search),
        {"query": "q", "limit": 3.0, "near": {"x": 1}, "ratio": 1},
    )
    assert got["limit"] == 3
    assert type(got["limit"]) is int
    assert got["near"] == Point(x=1, y=0)
    assert type(got["ratio"]) is float
    assert got["mode"] == "fast"  # default applied by Python


def _plain_parameters(
    a: str,
    b: int = 0,
    c: float = 0.0,
    d: bool = False,
    e: Optional[int] = None,  # noqa: UP045
) -> None:
    """Parameters of plain types."""


_CHECKED_FAST = Tool.from_function(_plain_parameters)
with mock.patch.object(_function, "_PLAIN", ()):  # no plain type: pydantic converts every call
    _CHECKED_BY_PYDANTIC = Tool.from_function(_plain_parameters)

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4))


@settings(max_examples=300, deadline=None)
@given(arguments=st.dictionaries(st.sampled_from("abcdef"), _json_scalars, max_size=6))
def test_arguments_of_exactly_their_plain_types_pass_as_pydantic_passes_them(
    arguments: dict[str, Any],
) -> None:
    # the fast path (a value of exactly its parameter's plain type passes the schema check
    # and the conversion without a call) comes to what the plain path comes to
    try:
        expected: Any = _CHECKED_BY_PYDANTIC.validate(arguments)
    except ToolArgumentsError as exc:
        expected = exc
    try:
        got: Any = _CHECKED_FAST.validate(arguments)
    except ToolArgumentsError as exc:
        got = exc
    if isinstance(expected, ToolArgumentsError):
        assert isinstance(got, ToolArgumentsError), (arguments, got)
        assert str(got) == str(expected)
    else:
        assert got == expected
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}


async def test_plain_values_pass_unchanged_and_enum_converted() -> None:
    def f(a: str, b: Optional[int] = None, c: Literal["x", "y"] = "x") -> Any:  # noqa: UP045
        return (a, b, c)

    t = Tool.from_function(f)
    args = {"a": "s", "b": None, "c": "y"}
    assert t.validate(args) == args
    assert await async_call_tool(t, {"a": "s", "b": 2.0}) == ("s", 2, "x")

    def g(color: Color) -> Color:
        return color

    assert await async_call_tool(Tool.from_function(g), {"color": "red"}) is Color.RED


# --- explicit tools -----------------------------------------------------------------


async def test_explicit_tool_gets_kwargs_as_they_are() -> None:
    seen: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> str:
        seen.append(kwargs)
        return "ok"

    t = Tool(
        name="record",
        description="Records.",
        parameters={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        },
        function=record,
    )
    assert await async_call_tool(t, {"n": 2.0, "extra": [1]}) == "ok"
    assert seen == [{"n": 2.0, "extra": [1]}]
    with pytest.raises(ToolArgumentsError, match="missing required argument 'n'"):
        await async_call_tool(t, {})
    assert len(seen) == 1


async def test_explicit_tool_with_lambda_returning_coroutine() -> None:
    async def inner(**kwargs: Any) -> int:
        return len(kwargs)

    t = Tool(
        name="lam",
        description="",
        parameters={"type": "object"},
        function=lambda **kw: inner(**kw),
    )
    assert await async_call_tool(t, {"a": 1, "b": 2}) == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "bad name"}, "tool name 'bad name' is not usable"),
        ({"name": "x" * 65}, "is not usable"),
        ({"parameters": {"type": "array"}}, "must be a JSON schema of an object"),
        ({"parameters": {"type": "object", "properties": 3}}, "not a valid JSON schema"),
        (
            {"parameters": {"type": "object", "properties": {"a": {"type": "bogus"}}}},
            "not a valid JSON schema at 'properties.a.type'",
        ),
        (
            {"parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}}},
            "does not resolve",
        ),
        (
            {"parameters": {"type": "object", "$ref": "https://example.com/s.json"}},
            "not a local reference",
        ),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -1.0}, "timeout must be a positive number"),
        ({"function": 3}, "function must be callable"),
        ({"description": None}, "description must be a str"),
    ],
)
def test_bad_explicit_definitions(kwargs: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {
        "name": "t",
        "description": "d",
        "parameters": {"type": "object"},
        "function": lambda **kw: None,
    }
    with pytest.raises(ToolDefinitionError, match=match):
        Tool(**{**base, **kwargs})


def test_bad_function_definitions() -> None:
    def star(*items: int) -> None: ...
    def kw(**options: int) -> None: ...
    def untyped(a, b: int) -> None: ...  # type: ignore[no-untyped-def]
    def posonly(a: int, /) -> None: ...
    def weird(a: NotJson) -> None: ...
    def unresolvable(a: Undefined) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    async def asyn(a: int) -> None: ...

    cases: list[tuple[Any, str]] = [
        (star, r"tool 'star' .*takes \*items.*replace \*items with explicit typed parameters"),
        (kw, r"takes \*\*options"),
        (untyped, r"no type annotation for parameter 'a'; annotate it"),
        (posonly, "positional-only parameter 'a'"),
        (weird, "parameter 'a' has the type .*NotJson.*no JSON schema"),
        (unresolvable, "cannot read the type hints of tool 'unresolvable'.*Undefined"),
    ]
    for function, match in cases:
        with pytest.raises(ToolDefinitionError, match=match):
            Tool.from_function(function)
    with pytest.raises(ToolDefinitionError, match="thread=True runs a sync function"):
        Tool.from_function(asyn, thread=True)
    with pytest.raises(ToolDefinitionError, match="is not usable"):
        Tool.from_function(lambda: None)


# --- validation ---------------------------------------------------------------------


class _Flag:
    def __init__(self) -> None:
        self.called = False


async def test_invalid_arguments_do_not_call_the_function() -> None:
    flag = _Flag()

    async def find(query: str, limit: int = 5, where: Point | None = None) -> str:
        flag.called = True
        return query

    t = Tool.from_function(find)
    cases: list[tuple[Any, str]] = [
        (
            {"query": "q", "limit": "ten"},
            "arguments for tool 'find' do not fit its schema: "
            "at 'limit': expected integer, got 'ten' (str)",
        ),
        ({}, "missing required argument 'query'"),
        (
            {"query": "q", "other": 1},
            "unexpected argument 'other' (accepted: 'query', 'limit', 'where')",
        ),
        ({"query": "q", "where": {"x": "a"}}, "at 'where.x': expected integer, got 'a' (str)"),
        ({"query": "q", "where": {}}, "at 'where': missing required property 'x'"),
        ({"query": "q", "where": 3}, "at 'where': expected Point or null, got 3 (int)"),
        ({"query": True}, "at 'query': expected string, got True (bool)"),
        ([1, 2], "must be a JSON object (argument names to values), got [1, 2] (list)"),
        (None, "must be a JSON object"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ToolArgumentsError) as info:
            await async_call_tool(t, kwargs)
        assert expected in str(info.value)
    assert not flag.called


def test_violation_messages_list_every_violation_and_truncate_values() -> None:
    def f(a: int, b: str) -> None: ...

    t = Tool.from_function(f)
    with pytest.raises(ToolArgumentsError) as info:
        t.validate({"a": "x" * 1000, "b": 2})
    message = str(info.value)
    assert "at 'a': expected integer, got 'xxxx" in message
    assert "… (1002 chars) (str)" in message
    assert "at 'b': expected string, got 2 (int)" in message
    assert len(message) < 400


def test_constraint_messages() -> None:
    t = Tool(
        name="c",
        description="",
        parameters={
            "type": "object",
            "properties": {
                "n": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
                "s": {"type": "string", "minLength": 2, "pattern": "^a"},
                "xs": {"type": "array", "maxItems": 1},
                "k": {"const": "K"},
                "m": {"type": "integer", "multipleOf": 3},
            },
        },
        function=lambda **kw: None,
    )
    cases = [
        ({"n": -1}, "at 'n': expected a number >= 0, got -1 (int)"),
        ({"n": 10}, "at 'n': expected a number < 10, got 10 (int)"),
        ({"s": "a"}, "at 's': expected a string of at least 2 characters, got 'a' (str)"),
        ({"s": "bb"}, "at 's': expected a string matching '^a', got 'bb' (str)"),
        ({"xs": [1, 2]}, "at 'xs': expected at most 1 items, got [1, 2] (list)"),
        ({"k": "L"}, "at 'k': expected 'K', got 'L' (str)"),
        ({"m": 4}, "at 'm': expected multipleOf 3, got 4 (int)"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ToolArgumentsError) as info:
            t.validate(kwargs)
        assert str(info.value).endswith(expected), str(info.value)


async def test_pydantic_conversion_failure_is_an_arguments_error() -> None:
    flag = _Flag()

    def check(value: Even) -> int:
        flag.called = True
        return value.n

    t = Tool.from_function(check)
    with pytest.raises(
        ToolArgumentsError, match=r"at 'value.n': Value error, n must be even, got 3"
    ):
        await async_call_tool(t, {"value": {"n": 3}})
    assert not flag.called
    assert await async_call_tool(t, {"value": {"n": 4}}) == 4


# --- running ------------------------------------------------------------------------


async def test_exceptions_propagate_unchanged() -> None:
    def boom(a: int) -> None:
        raise ValueError(f"bad {a}")

    with pytest.raises(ValueError, match="bad 1"):
        await async_call_tool(Tool.from_function(boom), {"a": 1})


async def test_timeout_really_cancels() -> None:
    cancelled = _Flag()

    @tool(timeout=0.05)
    async def sleepy() -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            cancelled.called = True
            raise

    with (
        anyio.fail_after(5),  # a hang guard: the tool alone sleeps 10 s
        pytest.raises(
            ToolTimeoutError, match=r"tool 'sleepy' did not finish within 0.05 s; it was cancelled"
        ),
    ):
        await async_call_tool(sleepy, {})
    assert cancelled.called


async def test_effective_timeout_is_the_smaller() -> None:
    @tool(timeout=5)
    async def sleepy() -> None:
        await anyio.sleep(10)

    with pytest.raises(ToolTimeoutError, match=r"within 0\.05 s"):
        await async_call_tool(sleepy, {}, timeout=0.05)

    @tool(timeout=0.05)
    async def sleepy2() -> None:
        await anyio.sleep(10)

    with pytest.raises(ToolTimeoutError, match=r"within 0\.05 s"):
        await async_call_tool(sleepy2, {}, timeout=5)

    @tool
    async def quick() -> str:
        return "done"

    assert await async_call_tool(quick, {}, timeout=5) == "done"


async def test_sync_inline_and_in_thread() -> None:
    loop_thread = threading.get_ident()

    def where() -> int:
        return threading.get_ident()

    inline = Tool.from_function(where, thread=False)  # the opt-out, for quick pure functions
    threaded = Tool.from_function(where)  # a sync tool runs in a worker thread by default
    assert await async_call_tool(inline, {}) == loop_thread
    assert await async_call_tool(threaded, {}) != loop_thread


async def test_thread_tool_timeout_abandons_the_thread() -> None:
    release = threading.Event()

    @tool(thread=True, timeout=0.05)
    def blocking() -> None:
        release.wait(60)

    start = time.monotonic()
    try:
        with pytest.raises(ToolTimeoutError):
            await async_call_tool(blocking, {})
        assert time.monotonic() - start < 30  # the 0.05 s timeout, not the thread's 60 s
    finally:
        release.set()


async def test_async_tool_object_is_still_callable() -> None:
    t = Tool.from_function(search)
    assert (await t("q"))["query"] == "q"


# --- property: called iff jsonschema says valid -------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-5, 5)
    | st.sampled_from(["", "a", "fast", "deep"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "y", "z"]), children, max_size=3)
    ),
    max_leaves=6,
)
_kwargs = st.dictionaries(
    st.sampled_from(["query", "limit", "mode", "near", "tags", "ratio", "other"]),
    _json_values,
    max_size=5,
)
_SEARCH = Tool.from_function(search)
_SEARCH_VALIDATOR = jsonschema.Draft202012Validator(_SEARCH.parameters)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kwargs=_kwargs)
async def test_called_iff_jsonschema_says_valid(kwargs: dict[str, Any]) -> None:
    calls: list[dict[str, Any]] = []

    async def spy(**arguments: Any) -> str:
        calls.append(arguments)
        return "ok"

    spied = Tool(
        name="search",
        description="",
        parameters=_SEARCH.parameters,
        function=spy,
    )
    valid = _SEARCH_VALIDATOR.is_valid(kwargs)
    for t in (_SEARCH, spied):
        try:
            await async_call_tool(t, kwargs)
        except ToolArgumentsError:
            assert not valid
        else:
            assert valid
    assert len(calls) == (1 if valid else 0)


async def test_abandoned_thread_tools_do_not_hold_later_calls_back() -> None:
    import threading

    release = threading.Event()
    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens = limiter.total_tokens
    limiter.total_tokens = 2  # the shared pool is small: abandoned threads would fill it

    @tool(thread=True, timeout=0.05)
    def stuck() -> None:
        release.wait(60)

    @tool(thread=True, timeout=30)
    def fresh() -> str:
        return "ran"

    try:
        for _ in range(4):  # each times out, its thread abandoned (still blocked)
            with pytest.raises(ToolTimeoutError):
                await async_call_tool(stuck, {})
        assert await async_call_tool(fresh, {}) == "ran"
    finally:
        release.set()
        limiter.total_tokens = tokens


def _plain_typed(city: str, days: int = 3, ok: bool = False, note: str | None = None) -> str:
    """A typed tool of plain parameters.

    Args:
        city: a name.
        days: how many.
        ok: a flag.
        note: maybe a note.
    """
    return city


def _mixed_typed(city: str, tags: list[str], ratio: float = 1.0) -> str:
    """A typed tool with a parameter pydantic builds anew.

    Args:
        city: a name.
        tags: labels.
        ratio: a number.
    """
    return city


_EXPLICIT_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["q"],
    "additionalProperties": False,
}
_argument_values = (
    st.none()
    | st.booleans()
    | st.integers(-2, 5)
    | st.floats(allow_nan=True)
    | st.text(max_size=3)
    | st.lists(st.text(max_size=2), max_size=2)
)
_arguments = st.dictionaries(
    st.sampled_from(["city", "days", "ok", "note", "tags", "ratio", "q", "n", "other"]),
    _argument_values,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(kwargs=_arguments)
def test_validate_in_one_pass_is_the_full_check_and_conversion(kwargs: dict[str, Any]) -> None:
    """Arguments of plain types are taken in one pass: the same answer (the arguments to
    call with, or the error) as the schema check and the conversion."""
    tools = [
        Tool.from_function(_plain_typed),
        Tool.from_function(_mixed_typed),
        Tool(name="explicit", description="d", parameters=_EXPLICIT_SCHEMA, function=len),
    ]
    for fast in tools:
        slow = Tool(name="x", description="d", parameters={"type": "object"}, function=len)
        slow.__dict__.update(fast.__dict__)
        slow._plain = None  # the full path only
        try:
            expected: Any = slow.validate(dict(kwargs))
        except ToolArgumentsError as exc:
            expected = str(exc)
        try:
            got: Any = fast.validate(dict(kwargs))
        except ToolArgumentsError as exc:
            got = str(exc)
        assert got == expected, (fast.name, kwargs)


def test_plain_arguments_are_taken_in_one_pass() -> None:
    plain = Tool.from_function(_plain_typed)
    assert plain._plain == {"city": str, "days": int, "ok": bool}  # note: not one type
    assert plain._required == ("city",)
    assert Tool.from_function(_mixed_typed)._plain is None  # tags are built anew
    explicit = Tool(name="e", description="d", parameters=_EXPLICIT_SCHEMA, function=len)
    assert explicit._plain == {"q": str}  # n has a minimum: checked in full
