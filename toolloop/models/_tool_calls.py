"""Native tool calls streamed in pieces, put back together, and told complete as they
stream."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ModelOutputError
from ._chat import ToolCallDelta
from ._json_reader import JSONStreamReader

__all__ = ["StreamedToolCall", "ToolCallReader", "parse_tool_arguments"]


_DECODER = json.JSONDecoder()


def parse_tool_arguments(text: str) -> Any:
    """The arguments as parsed JSON: the JSON value the text starts with (whitespace
    aside), what follows it ignored, as when the call streamed (it is complete once that
    value closes: :meth:`ToolCallReader.complete`), so a call runs with the same arguments
    whether its tool starts while the reply streams or after; the raw text when it does not
    start with a JSON value (the products then make the call a failed record that quotes
    it); ``{}`` when there are none."""
    stripped = text.strip()
    if not stripped:
        return {}
    try:
        value, _ = _DECODER.raw_decode(stripped)
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

    :meth:`complete` tells, as the pieces come, how many calls are complete: what streaming
    dispatch starts while the model still writes the next ones.
    """

    __slots__ = ("_fed", "_json", "_open", "_whole", "calls")

    def __init__(self) -> None:
        self.calls: list[StreamedToolCall] = []
        self._open: dict[int, StreamedToolCall] = {}
        self._whole = 0  # the calls known complete, from the first
        self._json: JSONStreamReader | None = None  # reads the arguments of calls[_whole]
        self._fed = 0  # how many argument pieces of calls[_whole] it has read

    def complete(self, *, ended: bool = False) -> int:
        """How many calls, from the first, are complete now: a call is complete once its
        arguments are a whole JSON value and it names its tool, once a later call has
        started, or, with ``ended`` (the reply ended), in any case. A call is counted only
        after every call before it, so the count never goes down; call it after each
        :meth:`feed` (each argument piece is read once, whatever the pieces).

        Arguments that are not JSON keep their call open until a later call or the end: the
        call is then complete as it came (its arguments a text that the consumer refuses).
        """
        calls = self.calls
        if ended:
            self._whole = len(calls)
            self._json = None
            return self._whole
        while self._whole < len(calls):
            if self._whole + 1 < len(calls) or self._closed(calls[self._whole]):
                self._whole += 1
                self._json = None
                self._fed = 0
            else:
                break
        return self._whole

    def _closed(self, call: StreamedToolCall) -> bool:
        """Whether the arguments of ``call`` (the last call so far) are a whole JSON value."""
        pieces = call.arguments
        if self._fed < len(pieces):
            reader = self._json
            if reader is None:
                if self._fed < 0:  # not JSON: it stays open until a later call or the end
                    return False
                reader = self._json = JSONStreamReader(
                    skip_leading_noise=False, string_deltas=False
                )
            try:
                while self._fed < len(pieces) and not reader.done:
                    reader.feed(pieces[self._fed])
                    self._fed += 1
            except ModelOutputError:
                self._json = None
                self._fed = -1
                return False
        reader = self._json
        return reader is not None and reader.done and bool(call.name)

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
