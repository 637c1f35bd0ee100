"""What the incremental JSON reader reports, and helpers to act on it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

__all__ = [
    "Done",
    "JSONEvent",
    "JSONPath",
    "StringDelta",
    "ValueDone",
    "format_json_path",
    "remaining_choices",
    "settle_choice",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").fullmatch

JSONPath: TypeAlias = tuple[str | int, ...]
"""Where a value sits: object keys and array indexes from the top, ``()`` for the top."""


@dataclass(frozen=True, slots=True)
class StringDelta:
    """New characters of the string value at ``path``, already unescaped; never empty.

    Joined in order, the deltas of one path give the string's value.
    """

    path: JSONPath
    text: str
    kind: ClassVar[Literal["string_delta"]] = "string_delta"


@dataclass(frozen=True, slots=True)
class ValueDone:
    """The value at ``path`` is complete; ``value`` is its Python value (as `json.loads`).

    Object and array values are the very objects that end up in the top-level value: they
    are complete and the reader no longer changes them, but they are not copies.
    """

    path: JSONPath
    value: Any
    kind: ClassVar[Literal["value_done"]] = "value_done"


@dataclass(frozen=True, slots=True)
class Done:
    """The top-level value is complete (it follows the `ValueDone` of path ``()``)."""

    value: Any
    kind: ClassVar[Literal["done"]] = "done"


JSONEvent: TypeAlias = StringDelta | ValueDone | Done
"""What `JSONStreamReader.feed` reports, told apart by ``kind``."""


def format_json_path(path: JSONPath) -> str:
    """Write a path for people: ``execution_commands[1].tool_kwargs``; ``$`` for the top."""
    parts: list[str] = []
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER(step):
            parts.append(f".{step}" if parts else step)
        else:
            parts.append(f"[{step!r}]")
    return "".join(parts) or "$"


def remaining_choices(prefix: str, choices: Sequence[str]) -> list[str]:
    """The choices that start with ``prefix``, in their order.

    Empty means the string can no longer become any of the choices: the consumer may stop
    reading and report the model's output as unusable.
    """
    return [choice for choice in choices if choice.startswith(prefix)]


def settle_choice(prefix: str, choices: Sequence[str], *, complete: bool = False) -> str | None:
    """The one choice a string can still become, from the ``prefix`` streamed so far.

    Returns None while several choices remain, and also when none does; tell the two apart
    with `remaining_choices` (empty when none fits). With ``complete=True`` (the string is
    finished, e.g. on its `ValueDone`) only an exact match counts.

    A choice settled early is the answer *if the rest of the document is valid*; the
    string's `ValueDone` confirms it (its value may still differ, e.g. ``"rx"`` with
    choices ``["response"]``).

    Example:
        >>> settle_choice("r", ["execute", "response"])
        'response'
        >>> settle_choice("", ["execute", "response"]) is None
        True
    """
    if complete:
        return prefix if prefix in choices else None
    found: str | None = None
    for choice in choices:
        if choice.startswith(prefix):
            if found is not None and choice != found:
                return None
            found = choice
    return found
