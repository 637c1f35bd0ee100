"""What a model is shown of a tool's result: whole, or its head and a handle to the rest.

A result longer than a run's ``max_result_chars`` (as text: a string as it is, anything
else as JSON) is shown as its first ``max_result_chars`` characters and a line saying how
much was shown and the handle the built-in ``read_result`` tool reads the rest by (the run
kernel keeps the result whole: see ``toolloop.kernel.ResultKept``). Every prompt of every
product shows results through :func:`shown_result`.
"""

from __future__ import annotations

import json
from typing import Any

from ._jsonsafe import flat_json_within, json_safe, short_repr

__all__ = [
    "READ_RESULT",
    "RESULT_CHARS",
    "is_cut",
    "longer_than",
    "result_handle",
    "result_text",
    "shown_result",
]

READ_RESULT = "read_result"
"""The name of the built-in tool that reads a slice of a kept result."""

RESULT_CHARS = 2000
"""The default ``max_result_chars`` of a run."""


def result_text(value: Any) -> str:
    """A tool's result as a model is shown it: a string as it is, anything else as JSON
    (made JSON-safe first: bytes, cycles, NaN never raise; an int too long for ``str``
    is said by its bounded ``repr``)."""
    if type(value) is str:
        return value
    try:
        return json.dumps(json_safe(value), ensure_ascii=False)
    except ValueError:  # an int of more digits than Python writes out
        return json.dumps(short_repr(value, 2000))


def longer_than(value: Any, limit: int) -> bool:
    """Whether ``result_text(value)`` is longer than ``limit``, mostly without writing it:
    once JSON-safe, a value's JSON is at most twice its ``repr`` (a character JSON escapes
    takes at most two of its ``repr``'s), so a short ``repr`` settles it."""
    if type(value) is str:
        return len(value) > limit
    if type(value) is dict and flat_json_within(value, limit):
        return False
    try:
        if len(repr(json_safe(value))) * 2 <= limit:
            return False
    except ValueError:  # an int of more digits than Python writes out
        pass
    return len(result_text(value)) > limit


def result_handle(call_id: str) -> str:
    """The handle of the result of the call ``call_id``: ``"r:<call_id>"``."""
    return f"r:{call_id}"


def is_cut(text: str, limit: int | None, tool_name: str = "") -> bool:
    """Whether :func:`shown_result` cuts ``text``: longer than ``limit`` (``None``: no
    limit), and not a slice ``read_result`` read (at most ``limit`` characters of a result
    already kept)."""
    return limit is not None and len(text) > limit and tool_name != READ_RESULT


def shown_result(text: str, handle: str, limit: int | None, *, tool_name: str = "") -> str:
    """``text`` as a prompt shows it: whole when it is not cut (:func:`is_cut`), else its
    first ``limit`` characters and a line saying how much was shown and how to read the
    rest."""
    if not is_cut(text, limit, tool_name):
        return text
    assert limit is not None
    return (
        f"{text[:limit]}\n[cut for the model: shown {limit:,} of {len(text):,} characters; "
        f"read the rest with {READ_RESULT}(handle={json.dumps(handle)}, offset={limit})]"
    )
