"""Any Python value as JSON data, whatever it is: the one way tool results and arguments
become JSON for a prompt, a log, a trace or a journal.

Tools return what they like: bytes that are not UTF-8, a dict that contains itself, a
datetime, a NaN, a value nested a thousand levels deep. Serializers raise on each of those
(``json.dumps``, pydantic's ``to_jsonable_python``), and a run that folds such a result into
its next prompt would die of it. :func:`json_safe` never raises: it keeps what JSON can say
and says what it could not, in place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import reprlib
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel

__all__ = ["MAX_JSON_DEPTH", "flat_json_within", "json_safe", "nesting_depth", "short_repr"]

MAX_JSON_DEPTH = 64
"""Containers nested deeper than this are cut (and say so) by :func:`json_safe`; tool
arguments nested deeper are refused before the tool runs."""

_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxstring = 120
_REPR.maxother = 120
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8


def short_repr(value: Any, limit: int = 120) -> str:
    """A bounded ``repr`` (depth, length): safe on cycles and deep nesting."""
    if type(value) is str:  # a short string is its own repr (as the bounded repr says it)
        text = repr(value)
        if len(text) <= _REPR.maxstring and len(text) <= limit:
            return text
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # a __repr__ that raises
        text = f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nesting_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int | None:
    """How deep ``value``'s dicts and lists nest (a scalar: 0), without recursion; ``None``
    when it contains itself. Stops counting past ``limit`` (returns ``limit + 1``)."""
    if type(value) is dict:  # the common case: flat arguments of scalars and strings
        for item in value.values():
            kind = type(item)
            if not (kind is str or kind is int or kind is float or kind is bool or item is None):
                break
        else:
            return 1
    deepest = 0
    stack: list[tuple[Any, int, tuple[int, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if id(item) in path:
            return None
        depth += 1
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        inner = (*path, id(item))
        stack.extend((child, depth, inner) for child in children)
    return deepest


def json_safe(value: Any, *, max_depth: int = MAX_JSON_DEPTH, max_string: int | None = None) -> Any:
    """``value`` as JSON data that ``json.dumps(..., allow_nan=False)`` always accepts.

    Kept: strings, ints, bools, ``None``, finite floats, dicts (keys made strings), lists
    (tuples and sets too). Said as text: non-finite floats (``"nan"``, ``"inf"``), bytes (as
    UTF-8, undecodable bytes escaped), dates and times (ISO 8601), decimals, UUIDs, paths
    and enums; pydantic models and dataclasses become their fields; anything else its
    bounded ``repr``. A container met again inside itself becomes ``"<cycle>"``; one nested
    deeper than ``max_depth`` is cut with a note. With ``max_string``, a longer string keeps
    its first ``max_string`` characters and says how long it was (before anything else
    reads it: a 20 MB result costs a slice, not a scan). Never raises.
    """
    if type(value) is dict and max_depth > 0:  # the common case: one flat object
        for key, item in value.items():
            kind = type(item)
            if type(key) is not str:
                break
            if kind is str:
                if max_string is not None and len(item) > max_string:
                    break
            elif kind is float:
                if not math.isfinite(item):
                    break
            elif kind is not int and kind is not bool and item is not None:
                break
        else:
            return dict(value)
    return _safe(value, max_depth, set(), max_string)


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… (cut: {len(text):,} characters in all)"


def _safe(value: Any, depth: int, path: set[int], limit: int | None) -> Any:
    kind = type(value)
    if kind is str:
        return _cut(value, limit)
    if kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (dict, list, tuple, set, frozenset, Mapping)):
        if id(value) in path:
            return "<cycle>"
        if depth <= 0:
            return f"<{kind.__name__} nested too deep: cut>"
        path.add(id(value))
        try:
            if isinstance(value, Mapping):
                return {
                    (k if type(k) is str else _key(k)): _safe(v, depth - 1, path, limit)
                    for k, v in value.items()
                }
            return [_safe(v, depth - 1, path, limit) for v in value]
        except Exception as exc:  # a mapping or iterable whose access raises
            return f"<{kind.__name__}: reading it raised {type(exc).__name__}>"
        finally:
            path.discard(id(value))
    return _scalar(value, depth, path, limit)


def _scalar(value: Any, depth: int, path: set[int], limit: int | None) -> Any:
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, str):
        return _cut(str(value), limit)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value[: limit * 4]) if limit is not None else bytes(value)
        return _cut(data.decode("utf-8", errors="backslashreplace"), limit)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return _safe(value.value, depth, path, limit)
    if isinstance(value, (Decimal, uuid.UUID, PurePath)):
        return str(value)
    if isinstance(value, BaseModel):
        if id(value) in path or depth <= 0:
            return "<cycle>" if id(value) in path else f"<{type(value).__name__}: cut>"
        path.add(id(value))
        try:
            cls = type(value)
            return {
                name: _safe(getattr(value, name, None), depth - 1, path, limit)
                for name in (*cls.model_fields, *cls.model_computed_fields)
            }
        finally:
            path.discard(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if id(value) in path or depth <= 0:
            return "<cycle>" if id(value) in path else f"<{type(value).__name__}: cut>"
        path.add(id(value))
        try:
            return {f.name: _safe(getattr(value, f.name, None), depth - 1, path, limit)
                    for f in dataclasses.fields(value)}  # fmt: skip
        finally:
            path.discard(id(value))
    return short_repr(value, 2000)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (int, float, bool)) or key is None:
        return "null" if key is None else str(key).lower() if isinstance(key, bool) else str(key)
    return short_repr(key)


def flat_json_within(value: dict[Any, Any], limit: int) -> bool:
    """Whether ``value`` is one flat object (string keys; strings, bools, ``None``, floats,
    ints of at most 18 digits) whose JSON (``ensure_ascii=False``, as results and arguments
    are written) is surely at most ``limit`` long, in characters or in UTF-8 bytes: each
    character of a key or a string counted six times (the longest JSON escape, more than
    its UTF-8 bytes), and 32 more for each member (its quotes, colon and comma, and a
    number as long as it can be written: a float's repr is at most 24 characters).
    ``False`` says nothing."""
    chars = 0
    for key, item in value.items():
        kind = type(item)
        if kind is str:
            chars += len(item)
        elif kind is int:
            if not -(10**18) < item < 10**18:
                return False
        elif kind is not float and kind is not bool and item is not None:
            return False
        if type(key) is not str:
            return False
        chars += len(key)
    return 6 * chars + 32 * len(value) + 2 <= limit
