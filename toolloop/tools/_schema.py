"""A tool's argument schema: checked once, compiled once, applied on every call.

``jsonschema`` (Draft 2020-12) is the authority. It is accurate but slow (about 10 µs for
a small object schema), and a tool loop validates every call, so the common subset of the
vocabulary (what pydantic generates: ``type``, ``properties``, ``required``, ``enum``,
``anyOf``, ``$ref`` into ``$defs`` ...) is compiled into plain Python predicates that answer
valid/invalid in about a microsecond. When the predicate says *invalid*, ``jsonschema``
runs to explain why; a schema using a keyword outside the subset is validated by
``jsonschema`` alone. Property tests keep the two in agreement.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import jsonschema
import jsonschema.exceptions

__all__ = ["ArgumentsSchema", "compile_schema", "describe_value", "format_path"]

Check = Callable[[Any], bool]

_Validator = jsonschema.Draft202012Validator
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_MAX_VIOLATIONS = 10
_MAX_VALUE_CHARS = 200

# Keywords that assert something in Draft 2020-12 but that the compiled fast path does
# not implement: a schema using one of them is validated by jsonschema alone.
_SUPPORTED = frozenset(
    {
        "$ref",
        "additionalProperties",
        "allOf",
        "anyOf",
        "const",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "format",  # an annotation: jsonschema asserts it only with a format checker
        "items",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "not",
        "oneOf",
        "pattern",
        "prefixItems",
        "properties",
        "required",
        "type",
    }
)
_UNSUPPORTED = (frozenset(_Validator.VALIDATORS) - _SUPPORTED) | {
    "$id",
    "$anchor",
    "$dynamicAnchor",
}


class ArgumentsSchema:
    """The JSON schema of one tool's arguments, checked and compiled at construction.

    Args:
        schema: a JSON schema (Draft 2020-12) describing a JSON object.
        owner: who the schema belongs to, for messages (e.g. ``"tool 'search'"``).
        trusted: the schema was generated (by pydantic), so it is not checked again.

    Raises:
        ValueError: the schema is not a valid JSON schema, or a ``$ref`` in it does not
            resolve. (The tool turns this into a ``ToolDefinitionError``.)
    """

    __slots__ = ("_check", "_validator", "schema")

    def __init__(self, schema: Mapping[str, Any], *, owner: str, trusted: bool = False) -> None:
        try:
            if not trusted:  # pydantic's own schemas need no check (it costs ~1 ms)
                _Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            path = format_path(exc.absolute_path)
            where = f" at {path!r}" if path else ""
            raise ValueError(
                f"the parameters schema of {owner} is not a valid JSON schema{where}: "
                f"{_truncate(exc.message)}"
            ) from exc
        self.schema: Mapping[str, Any] = schema
        self._validator = _Validator(schema)
        self._check: Check | None = compile_schema(schema)

    def is_valid(self, instance: Any) -> bool:
        """Whether ``instance`` fits the schema (the fast path when there is one)."""
        if self._check is not None:
            return self._check(instance)
        return bool(self._validator.is_valid(instance))

    def violations(self, instance: Any) -> list[str]:
        """Every way ``instance`` fails the schema, one readable line each (slow path)."""
        messages: dict[str, None] = {}
        for error in self._validator.iter_errors(instance):
            messages[_describe_error(error)] = None
        lines = list(messages)
        if len(lines) > _MAX_VIOLATIONS:
            more = len(lines) - _MAX_VIOLATIONS
            lines = [*lines[:_MAX_VIOLATIONS], f"and {more} more"]
        return lines


# --- the compiled fast path ------------------------------------------------------------


class _Unsupported(Exception):
    """The schema uses something the fast path does not implement."""


def compile_schema(schema: Mapping[str, Any] | bool) -> Check | None:
    """A fast predicate equivalent to ``Draft202012Validator(schema).is_valid``.

    Returns ``None`` when the schema uses a keyword the compiler does not implement.
    Raises ``ValueError`` when a local ``$ref`` does not resolve.
    """
    try:
        return _Compiler(schema).compile(schema)
    except _Unsupported:
        return None


def _always(instance: Any) -> bool:
    return True


def _never(instance: Any) -> bool:
    return False


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, numbers.Number)


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


_TYPES: dict[str, Check] = {
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "integer": _is_integer,
    "null": lambda x: x is None,
    "number": _is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}

_TRUE, _FALSE = object(), object()


def _unbool(x: Any) -> Any:
    if x is True:
        return _TRUE
    if x is False:
        return _FALSE
    return x


def _equal(a: Any, b: Any) -> bool:
    """JSON equality as jsonschema applies it (``True`` is not ``1``, ``1.0`` is ``1``)."""
    if a is b:
        return True
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    if isinstance(a, Sequence) and isinstance(b, Sequence):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return len(a) == len(b) and all(k in b and _equal(v, b[k]) for k, v in a.items())
    return bool(_unbool(a) == _unbool(b))


class _Compiler:
    def __init__(self, root: Mapping[str, Any] | bool) -> None:
        self._root = root
        self._refs: dict[str, Check] = {}

    def compile(self, schema: Any) -> Check:
        if schema is True:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, Mapping):
            raise _Unsupported
        if not _UNSUPPORTED.isdisjoint(schema):
            raise _Unsupported
        if schema.get("$schema", _DIALECT) != _DIALECT:
            raise _Unsupported
        checks: list[Check] = []
        types = schema.get("type")
        object_keys = {"properties", "required", "additionalProperties"}
        object_keys |= {"minProperties", "maxProperties"}
        if types == "object" and not object_keys.isdisjoint(schema):
            checks.append(self._object(schema, strict=True))
        else:
            if types is not None:
                checks.append(self._type(types))
            if not object_keys.isdisjoint(schema):
                checks.append(self._object(schema, strict=False))
        if "enum" in schema:
            checks.append(self._enum(schema["enum"]))
        if "const" in schema:
            const = schema["const"]
            checks.append(lambda x: _equal(const, x))
        if not {"items", "prefixItems", "minItems", "maxItems"}.isdisjoint(schema):
            checks.append(self._array(schema))
        if not {"minLength", "maxLength", "pattern"}.isdisjoint(schema):
            checks.append(self._string(schema))
        bounds = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
        if not bounds.isdisjoint(schema):
            checks.append(self._number(schema))
        if "$ref" in schema:
            checks.append(self._ref(schema["$ref"]))
        if "allOf" in schema:
            subs = [self.compile(s) for s in schema["allOf"]]
            checks.append(lambda x: all(c(x) for c in subs))
        if "anyOf" in schema:
            any_subs = [self.compile(s) for s in schema["anyOf"]]
            checks.append(lambda x: any(c(x) for c in any_subs))
        if "oneOf" in schema:
            one_subs = [self.compile(s) for s in schema["oneOf"]]
            checks.append(lambda x: sum(1 for c in one_subs if c(x)) == 1)
        if "not" in schema:
            negated = self.compile(schema["not"])
            checks.append(lambda x: not negated(x))
        return _all(checks)

    def _type(self, types: str | list[str]) -> Check:
        if isinstance(types, str):
            return _TYPES[types]
        preds = [_TYPES[t] for t in types]
        return lambda x: any(p(x) for p in preds)

    def _object(self, schema: Mapping[str, Any], *, strict: bool) -> Check:
        props = {k: self.compile(v) for k, v in schema.get("properties", {}).items()}
        required = tuple(schema.get("required", ()))
        extra = schema.get("additionalProperties")
        additional = None if extra is None else self.compile(extra)
        low = schema.get("minProperties", 0)
        high = schema.get("maxProperties")

        def check(x: Any) -> bool:
            if not isinstance(x, dict):
                return not strict
            for key in required:
                if key not in x:
                    return False
            if len(x) < low or (high is not None and len(x) > high):
                return False
            for key, value in x.items():
                sub = props.get(key)
                if sub is None:
                    if additional is not None and not additional(value):
                        return False
                elif not sub(value):
                    return False
            return True

        return check

    def _enum(self, values: list[Any]) -> Check:
        if all(type(v) is str for v in values):
            strings = frozenset(values)
            return lambda x: isinstance(x, str) and x in strings
        return lambda x: any(_equal(v, x) for v in values)

    def _array(self, schema: Mapping[str, Any]) -> Check:
        prefix = [self.compile(s) for s in schema.get("prefixItems", ())]
        items = self.compile(schema["items"]) if "items" in schema else None
        low = schema.get("minItems", 0)
        high = schema.get("maxItems")
        n_prefix = len(prefix)

        def check(x: Any) -> bool:
            if not isinstance(x, list):
                return True
            if len(x) < low or (high is not None and len(x) > high):
                return False
            for sub, value in zip(prefix, x, strict=False):
                if not sub(value):
                    return False
            if items is not None:
                for value in x[n_prefix:]:
                    if not items(value):
                        return False
            return True

        return check

    def _string(self, schema: Mapping[str, Any]) -> Check:
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        try:
            pattern = re.compile(schema["pattern"]) if "pattern" in schema else None
        except re.error:
            raise _Unsupported from None

        def check(x: Any) -> bool:
            if not isinstance(x, str):
                return True
            if len(x) < low or (high is not None and len(x) > high):
                return False
            return pattern is None or pattern.search(x) is not None

        return check

    def _number(self, schema: Mapping[str, Any]) -> Check:
        minimum = schema.get("minimum")
        maximum = schema.get("maximum")
        ex_minimum = schema.get("exclusiveMinimum")
        ex_maximum = schema.get("exclusiveMaximum")

        def check(x: Any) -> bool:
            if not _is_number(x):
                return True
            if minimum is not None and x < minimum:
                return False
            if maximum is not None and x > maximum:
                return False
            if ex_minimum is not None and x <= ex_minimum:
                return False
            return not (ex_maximum is not None and x >= ex_maximum)

        return check

    def _ref(self, ref: str) -> Check:
        found = self._refs.get(ref)
        if found is not None:
            return found
        target = _resolve(self._root, ref)
        cell: list[Check] = []

        def check(x: Any) -> bool:
            return cell[0](x)

        self._refs[ref] = check
        cell.append(self.compile(target))
        return check


def _all(checks: list[Check]) -> Check:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda x: first(x) and second(x)
    return lambda x: all(c(x) for c in checks)


def _resolve(root: Any, ref: str) -> Any:
    """Follow a local JSON-pointer ``$ref`` (``#/$defs/Name``) from the root schema."""
    if not ref.startswith("#"):
        raise ValueError(
            f"$ref {ref!r} is not a local reference; only '#/...' references are "
            "supported: put the referenced schema under '$defs'"
        )
    pointer = unquote(ref[1:])
    if pointer and not pointer.startswith("/"):
        raise _Unsupported  # an anchor ('#name'): leave it to jsonschema
    node = root
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(f"$ref {ref!r} does not resolve inside the schema") from None
    return node


# --- messages ---------------------------------------------------------------------------


def _truncate(text: str, limit: int = _MAX_VALUE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def describe_value(value: Any) -> str:
    """``'ten' (str)``: a short repr and the type, for 'got ...' in messages."""
    if value is None:
        return "None"
    return f"{_truncate(repr(value))} ({type(value).__name__})"


def format_path(path: Sequence[str | int]) -> str:
    """``filters[0].name`` for the path ``("filters", 0, "name")``; ``""`` for the root."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _quoted(values: Sequence[Any], limit: int = 20) -> str:
    shown = ", ".join(_truncate(repr(v), 60) for v in values[:limit])
    if len(values) > limit:
        shown += f", … ({len(values) - limit} more)"
    return shown


def _branch_name(schema: Any) -> str:
    if isinstance(schema, Mapping):
        if "type" in schema:
            types = schema["type"]
            return types if isinstance(types, str) else " or ".join(types)
        if "$ref" in schema:
            return str(schema["$ref"]).rsplit("/", 1)[-1]
        if "const" in schema:
            return repr(schema["const"])
        if "enum" in schema:
            return f"one of {_quoted(schema['enum'])}"
    return "another form"


def _describe_error(error: jsonschema.exceptions.ValidationError) -> str:
    path = format_path(error.absolute_path)
    where = f"at {path!r}: " if path else ""
    noun = "property" if path else "argument"
    keyword, instance = error.validator, error.instance
    value: Any = error.validator_value
    got = describe_value(instance)
    if keyword == "required" and isinstance(instance, dict):
        missing = [name for name in value if name not in instance]
        return f"{where}missing required {noun} {_quoted(missing)}"
    if keyword == "additionalProperties" and isinstance(instance, dict):
        known = list(error.schema.get("properties", {})) if isinstance(error.schema, dict) else []
        extra = [name for name in instance if name not in known]
        accepted = f" (accepted: {_quoted(known)})" if known else f" ({noun}s are not accepted)"
        return f"{where}unexpected {noun} {_quoted(extra)}{accepted}"
    if keyword in ("anyOf", "oneOf") and error.context:
        # A branch whose type fits the value had the right shape: explain why it failed.
        branches: dict[Any, list[jsonschema.exceptions.ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        shaped = [
            errors
            for errors in branches.values()
            if not any(e.validator == "type" and not e.relative_path for e in errors)
        ]
        if shaped:
            inner = min(shaped, key=len)
            return "; ".join(dict.fromkeys(_describe_error(e) for e in inner))
        if keyword == "oneOf" and len(error.context) < len(value):
            return f"{where}matches more than one of its allowed forms, got {got}"
        names = list(dict.fromkeys(_branch_name(branch) for branch in value))
        return f"{where}expected {' or '.join(names)}, got {got}"
    expected = _expected(str(keyword), value)
    if expected is None:
        return f"{where}{_truncate(error.message)}"
    return f"{where}expected {expected}, got {got}"


def _expected(keyword: str, value: Any) -> str | None:
    """What a keyword asks for, in words (``None``: use jsonschema's own message)."""
    if keyword == "type":
        return value if isinstance(value, str) else " or ".join(value)
    if keyword == "enum":
        return f"one of {_quoted(value)}"
    if keyword == "const":
        return _truncate(repr(value), 60)
    comparisons = {
        "minimum": ">=",
        "maximum": "<=",
        "exclusiveMinimum": ">",
        "exclusiveMaximum": "<",
    }
    if keyword in comparisons:
        return f"a number {comparisons[keyword]} {value}"
    if keyword == "minLength":
        return f"a string of at least {value} characters"
    if keyword == "maxLength":
        return f"a string of at most {value} characters"
    if keyword == "minItems":
        return f"at least {value} items"
    if keyword == "maxItems":
        return f"at most {value} items"
    if keyword == "pattern":
        return f"a string matching {value!r}"
    if keyword == "not":
        return "a value that does not match the excluded form"
    if keyword in ("multipleOf", "uniqueItems", "minProperties", "maxProperties"):
        return f"{keyword} {value!r}"
    return None
