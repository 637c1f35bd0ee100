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


class ToolCallReader:
    """Streamed tool-call pieces put together by ``index`` (a new ``id`` at an index that
    already has one, or a named piece without an index, starts a new call)."""

    __slots__ = ("_open", "calls")

    def __init__(self) -> None:
        self.calls: list[StreamedToolCall] = []
        self._open: dict[int | None, StreamedToolCall] = {}

    def feed(self, pieces: Sequence[ToolCallDelta]) -> None:
        """Add the pieces of one streamed chunk."""
        for piece in pieces:
            key: int | None = piece.index  # some servers leave it out
            call: StreamedToolCall | None
            if key is None:
                call = self.calls[-1] if self.calls else None
                starts = piece.id is not None or piece.name is not None
            else:
                call = self._open.get(key)
                starts = False
            if call is not None and piece.id is not None and call.id not in (None, piece.id):
                starts = True
            if starts or call is None:
                call = StreamedToolCall(index=key, id=piece.id, name=piece.name or "")
                self.calls.append(call)
                self._open[key] = call
            else:
                if call.id is None and piece.id is not None:
                    call.id = piece.id
                if not call.name and piece.name:
                    call.name = piece.name
            if piece.arguments:
                call.arguments.append(piece.arguments)
