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

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import jsonschema.exceptions

from ._compile import Check, compile_schema
from ._ecma import ECMAValidator, check_patterns

__all__ = ["ArgumentsSchema", "compile_schema", "describe_value", "format_path"]


_Validator = ECMAValidator
_MAX_VIOLATIONS = 10
_MAX_VALUE_CHARS = 200


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

    __slots__ = ("_validator", "is_valid", "schema")

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
        check_patterns(schema)  # ECMA-262, as JSON Schema says (ValueError if one is not)
        self.schema: Mapping[str, Any] = schema
        self._validator = _Validator(schema)
        check = compile_schema(schema)
        self.is_valid: Check = self._validator.is_valid if check is None else check
        """``is_valid(instance)``: whether ``instance`` fits the schema (the compiled fast
        path when there is one, else ``jsonschema``)."""

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


_PHRASES = {
    "minimum": "a number >= {value}",
    "maximum": "a number <= {value}",
    "exclusiveMinimum": "a number > {value}",
    "exclusiveMaximum": "a number < {value}",
    "minLength": "a string of at least {value} characters",
    "maxLength": "a string of at most {value} characters",
    "minItems": "at least {value} items",
    "maxItems": "at most {value} items",
    "pattern": "a string matching {value!r}",
    "not": "a value that does not match the excluded form",
    "multipleOf": "multipleOf {value!r}",
    "uniqueItems": "uniqueItems {value!r}",
    "minProperties": "minProperties {value!r}",
    "maxProperties": "maxProperties {value!r}",
}
"""What a keyword whose value reads as it is asks for, in words."""


def _expected(keyword: str, value: Any) -> str | None:
    """What a keyword asks for, in words (``None``: use jsonschema's own message)."""
    if keyword == "type":
        return value if isinstance(value, str) else " or ".join(value)
    if keyword == "enum":
        return f"one of {_quoted(value)}"
    if keyword == "const":
        return _truncate(repr(value), 60)
    phrase = _PHRASES.get(keyword)
    return None if phrase is None else phrase.format(value=value)
