"""The fast path of argument checks: a JSON schema compiled into plain Python predicates.

Covers the vocabulary pydantic generates; :func:`compile_schema` answers ``None`` for a
schema outside it, which ``jsonschema`` then validates alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import jsonschema

from ._ecma import ecma_search, is_json_integer, is_json_number

__all__ = ["Check", "compile_schema", "plain_properties"]

Check = Callable[[Any], bool]
_Validator = jsonschema.Draft202012Validator
_DIALECT = "https://json-schema.org/draft/2020-12/schema"

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


# --- the plainest schemas: a type per property -------------------------------------------

_PLAIN_TYPES: dict[str, type] = {"string": str, "integer": int, "boolean": bool, "null": type(None)}
"""JSON types whose Python values of exactly one type all fit them (not ``number``: a float
may be NaN)."""
_NOTES = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
    | {"$comment"}
)
"""Keywords that assert nothing (annotations)."""
_OBJECT_KEYS = _NOTES | {"type", "properties", "required", "additionalProperties", "$defs"}


def plain_properties(schema: Mapping[str, Any]) -> tuple[dict[str, type], tuple[str, ...]] | None:
    """For an object schema that asserts nothing but its properties' types and the required
    names: the properties that ask only for one plain JSON type (a string, an integer, a
    boolean, null), each with the Python type of the values that surely fit it, and the
    required names. An object whose every value is of exactly its property's type here
    and that has every required name fits the schema. ``None``: the schema asserts more.
    """
    if schema.get("type") != "object" or not _OBJECT_KEYS.issuperset(schema):
        return None
    required = schema.get("required", ())
    properties = schema.get("properties", {})
    if not isinstance(required, (list, tuple)) or not isinstance(properties, Mapping):
        return None
    if not all(type(name) is str for name in required):
        return None
    plain: dict[str, type] = {}
    for name, sub in properties.items():
        if isinstance(sub, Mapping) and _NOTES.issuperset(k for k in sub if k != "type"):
            named = sub.get("type")
            kind = _PLAIN_TYPES.get(named) if type(named) is str else None
            if kind is not None:
                plain[name] = kind
    return plain, tuple(required)


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


_is_number = is_json_number  # no NaN, no infinity: JSON has none
_is_integer = is_json_integer


_TYPES: dict[str, Check] = {
    "array": lambda x: isinstance(x, list),
    "boolean": lambda x: isinstance(x, bool),
    "integer": _is_integer,
    "null": lambda x: x is None,
    "number": _is_number,
    "object": lambda x: isinstance(x, dict),
    "string": lambda x: isinstance(x, str),
}

_EXACT: dict[Check, type] = {
    _TYPES["array"]: list,
    _TYPES["boolean"]: bool,
    _TYPES["integer"]: int,
    _TYPES["null"]: type(None),
    _TYPES["number"]: int,
    _TYPES["object"]: dict,
    _TYPES["string"]: str,
}
"""The check of a schema that is one type, by the type of the values it surely accepts
(a float must still be finite, a subclass is still checked): a value of exactly that type
fits without the call."""

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
        exact = {k: _EXACT[c] for k, c in props.items() if c in _EXACT}
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
                if type(value) is exact.get(key):  # e.g. a str where a string is asked
                    continue
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
            pattern = ecma_search(schema["pattern"]) if "pattern" in schema else None
        except (ValueError, TypeError):
            raise _Unsupported from None

        def check(x: Any) -> bool:
            if not isinstance(x, str):
                return True
            if len(x) < low or (high is not None and len(x) > high):
                return False
            return pattern is None or pattern(x)

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
