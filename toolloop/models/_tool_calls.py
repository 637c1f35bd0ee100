"""Native tool calls streamed in pieces, put back together."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._chat import ToolCallDelta

__all__ = ["StreamedToolCall", "ToolCallReader", "parse_tool_arguments"]


def parse_tool_arguments(text: str) -> Any:
    """The arguments as parsed JSON; the raw text when it is not JSON (the loop then makes
    the call a failed record that quotes it); ``{}`` when there are none."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return {} if value is None else value


@dataclass
class StreamedToolCall:
    """One tool call put together from streamed pieces (its arguments as text pieces)."""

    index: int | None
    id: str | None
    name: str
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] | None = None
    """Fields of the call to send back as they came (e.g. Gemini's ``extra_content``)."""


class ToolCallReader:
    """Streamed tool-call pieces put together.

    Pieces with an ``index`` belong to the call at that index; a different id at an index
    whose call already has one starts a new call. Pieces without an ``index`` continue the
    last call, unless both carry ids that differ, or (without ids to compare) the piece
    names a tool and the last call already has its name. An empty id or name is no id or
    name: servers (DashScope, vLLM's parsers) send the argument pieces of a call with
    ``"id": ""``, and those continue the call the id was given to.
    """

    __slots__ = ("_open", "calls")

    def __init__(self) -> None:
        self.calls: list[StreamedToolCall] = []
        self._open: dict[int, StreamedToolCall] = {}

    def feed(self, pieces: Sequence[ToolCallDelta]) -> None:
        """Add the pieces of one streamed chunk."""
        for piece in pieces:
            pid = piece.id or None
            name = piece.name or None
            key = piece.index
            call: StreamedToolCall | None
            if key is None:  # some servers leave the index out
                call = self.calls[-1] if self.calls else None
                if call is not None:
                    same = pid == call.id if pid and call.id else not (name and call.name)
                    if not same:
                        call = None
            else:
                call = self._open.get(key)
                if call is not None and pid and call.id and pid != call.id:
                    call = None
            if call is None:
                call = StreamedToolCall(index=key, id=pid, name=name or "")
                self.calls.append(call)
                if key is not None:
                    self._open[key] = call
            else:
                if call.id is None and pid:
                    call.id = pid
                if not call.name and name:
                    call.name = name
            if piece.arguments:
                call.arguments.append(piece.arguments)
            if piece.extra:
                call.extra = {**(call.extra or {}), **piece.extra}
