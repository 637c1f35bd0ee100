"""Big results kept whole: what a model sees of a long tool result, and how it reads the rest.

A tool result longer than the run's ``max_result_chars`` (as text: a string as it is,
anything else as JSON) is not cut away. The run keeps it whole where it keeps every record
(its state: a snapshot, a durable run's checkpoints), and the model's prompt shows its
first ``max_result_chars`` characters, then a line that says how much it was shown and
the result's **handle** (``"r:<id>"``). The built-in tool :data:`READ_RESULT`
(``read_result(handle, offset=0, length=...)``) reads any slice of it: it is offered to the
model with the request whose prompt holds a cut result, and a resumed run still reads the
results kept before its pause or its crash. Each product tells a cut result once, as the
:class:`ResultKept` event, when the call's record is kept.

One helper per part, used by every product: the runner's ``result_text`` (the text a model
is shown) and ``shown_result`` (its head and the line that says it was cut), re-exported
here, for every prompt builder; :func:`tell_kept` for the event; ``read_result`` reads the
kept results of the run it is called in through the run's link (made active by
:func:`~toolloop.kernel.drive`).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Literal

from .._errors import ToolCallError, ToolDefinitionError
from ..flow import Context
from ..runner import READ_RESULT, RESULT_CHARS, is_cut, result_handle, result_text, shown_result
from ..tools import Tool, register_builtin
from ._child import current_run
from ._events import RunEvent, tell

__all__ = [
    "READ_RESULT",
    "RESULT_CHARS",
    "ReadResultError",
    "ResultKept",
    "check_tool_names",
    "is_cut",
    "read_result_spec",
    "read_result_tool",
    "result_handle",
    "result_text",
    "shown_result",
    "tell_kept",
]


class ResultKept(RunEvent):
    """A tool result was longer than the run's ``max_result_chars``: the model is shown its
    head and a handle, and the run keeps it whole for ``read_result``."""

    kind: Literal["result_kept"] = "result_kept"
    call_id: str
    """The call's id (as its ``ToolCallFinished`` tells it)."""
    tool_name: str
    handle: str
    """What ``read_result(handle=...)`` takes."""
    shown: int
    """The characters the model is shown."""
    total: int
    """The characters of the whole result (as text)."""


def tell_kept(
    ctx: Context[Any, Any],
    call_id: str,
    handle: str,
    tool_name: str,
    value: Any,
    limit: int | None,
) -> bool:
    """Tell :class:`ResultKept` when the result ``value`` is cut for the model (only when
    the run is observed); whether it is."""
    if limit is None or tool_name == READ_RESULT or not ctx.observed:
        return False
    if type(value) is str:
        total = len(value)
    else:
        total = len(result_text(value))
    if total <= limit:
        return False
    tell(
        ctx,
        ResultKept,
        call_id=call_id,
        tool_name=tool_name,
        handle=handle,
        shown=limit,
        total=total,
    )
    return True


def check_tool_names(names: Container[str], limit: int | None) -> None:
    """Refuse a tool of the user's named like the built-in ``read_result`` in a run that
    cuts long results (``limit`` not ``None``).

    Raises:
        ToolDefinitionError: the names collide.
    """
    if limit is not None and READ_RESULT in names:
        raise ToolDefinitionError(
            f"a tool is named {READ_RESULT!r}, the name of the built-in tool that reads long "
            "results kept by the run: rename your tool, or give max_result_chars=None (no "
            "result is cut, and the built-in tool is not offered)"
        )


class ReadResultError(ToolCallError):
    """``read_result`` was given a handle or a slice it cannot read."""


async def read_result(handle: str, offset: int = 0, length: int | None = None) -> str:
    """Read a slice of a long tool result that was cut for you (its handle is in the line
    that says it was cut).

    Args:
        handle: the result's handle, e.g. "r:0.1".
        offset: the first character to read (0 is the start).
        length: how many characters to read (at most the run's max_result_chars; the
            default).
    """
    run = current_run()  # its link says what it keeps
    limit = None if run is None or run.kept is None else run.limit
    if run is None or limit is None:
        raise ReadResultError(
            "this run keeps no long results (its max_result_chars is None): there is "
            "nothing to read"
        )
    text = run.kept_result(handle) if isinstance(handle, str) else None
    if text is None:
        raise ReadResultError(
            f"no kept result has the handle {handle!r}: give the handle written in the line "
            'that says a result was cut (e.g. "r:0.1")'
        )
    total = len(text)
    if offset < 0:
        raise ReadResultError(f"offset must be 0 or more, got {offset}")
    if offset >= total:
        raise ReadResultError(
            f"offset {offset:,} is past the end: the result {handle} has {total:,} "
            f"characters (offsets 0 to {max(total - 1, 0):,})"
        )
    if length is None:
        length = limit
    if length < 1:
        raise ReadResultError(f"length must be 1 or more, got {length}")
    length = min(length, limit)
    end = min(offset + length, total)
    more = f"; the rest from offset={end}" if end < total else "; the end of the result"
    return f"[{handle}: characters {offset:,} to {end:,} of {total:,}{more}]\n{text[offset:end]}"


_TOOL = Tool(
    name=READ_RESULT,
    description=(
        "Read a slice of a long tool result that was cut for you: give its handle (from "
        "the line that says it was cut) and where to start."
    ),
    parameters={
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": 'the result\'s handle, e.g. "r:0.1"'},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "the first character to read (0 is the start)",
            },
            "length": {
                "type": "integer",
                "minimum": 1,
                "description": "how many characters to read (at most the run's limit)",
            },
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
    function=read_result,
)
register_builtin(_TOOL)
_SPEC = _TOOL.spec()


def read_result_tool() -> Tool:
    """The built-in ``read_result`` :class:`~toolloop.Tool` (what a product offers its
    model when a prompt holds a cut result)."""
    return _TOOL


def read_result_spec() -> dict[str, Any]:
    """The spec of ``read_result``, as a run offers it (``{"name", "description",
    "parameters"}``)."""
    return dict(_SPEC)
