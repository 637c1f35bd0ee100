"""JSON Schema's own dialects, where Python's differ: ECMA-262 regular expressions for
``pattern`` and ``patternProperties``, and numbers that JSON can hold.

JSON Schema says a ``pattern`` is an ECMA-262 regular expression. Python's ``re`` is another
dialect: its ``$`` also matches before a final newline, so ``^[a-z/]+$`` lets
``"etc/passwd\\n"`` through. ``regress`` (a Rust implementation of ECMA-262 regular
expressions) is used instead, by the fast path and by ``jsonschema`` alike. And JSON has no
NaN and no infinities, so neither is a ``number`` (nor an ``integer``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import regress
from jsonschema import _types

__all__ = [
    "ECMAValidator",
    "check_patterns",
    "ecma_search",
    "is_json_integer",
    "is_json_number",
]


@functools.lru_cache(maxsize=1024)
def ecma_search(pattern: str) -> Callable[[str], bool]:
    """A test of whether ``pattern`` (ECMA-262) matches anywhere in a string.

    Raises:
        ValueError: ``pattern`` is no ECMA-262 regular expression.
    """
    try:
        compiled = regress.Regex(pattern, "u")
    except regress.RegressError as exc:
        raise ValueError(f"{pattern!r} is no ECMA-262 regular expression: {exc}") from exc

    def search(text: str) -> bool:
        return compiled.find(text) is not None

    return search


def is_json_number(value: Any) -> bool:
    """A number JSON can hold: not a bool, not NaN, not an infinity."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) or _types.is_number(None, value)


def is_json_integer(value: Any) -> bool:
    """An integer JSON can hold (``1.0`` counts, as JSON Schema says)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return isinstance(value, int)


def check_patterns(schema: Any) -> None:
    """Compile every ``pattern`` and ``patternProperties`` key in ``schema``.

    Raises:
        ValueError: one is no ECMA-262 regular expression.
    """
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                ecma_search(node["pattern"])
            for key in node.get("patternProperties") or ():
                if isinstance(key, str):
                    ecma_search(key)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if isinstance(instance, str) and not ecma_search(pattern)(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        search = ecma_search(pattern)
        for key, value in instance.items():
            if search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    # as jsonschema's, with patternProperties matched as ECMA-262
    if not isinstance(instance, dict):
        return
    known = schema.get("properties", {})
    patterns = [ecma_search(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in known and not any(s(k) for s in patterns)]
    if isinstance(additional, dict):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(e) for e in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield jsonschema.ValidationError(
            f"Additional properties are not allowed ({listed} {verb} unexpected)"
        )


_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {
        "number": lambda checker, value: is_json_number(value),
        "integer": lambda checker, value: is_json_integer(value),
    }
)

ECMAValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
    type_checker=_TYPES,
)
"""Draft 2020-12 with ECMA-262 patterns and JSON's numbers: the reference validator."""
