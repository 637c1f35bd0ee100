"""Server-Sent Events read incrementally from bytes: the framing of a streamed chat completion.

Only what chat-completions servers use: ``data:`` lines (several joined with newlines),
``event:`` names, comment lines (``: OPENROUTER PROCESSING``) and blank lines that end an
event. Lines end with ``\\n`` or ``\\r\\n``; a UTF-8 character split across two network
pieces is put back together; an event left open when the body ends is still delivered.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["MAX_EVENT_CHARS", "SSEDecoder", "ServerEvent"]

MAX_EVENT_CHARS = 32 * 1024 * 1024
"""One event larger than this (no chat-completions chunk comes near it) fails the stream."""


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """One event: its ``data`` (the ``data:`` lines joined) and its ``event`` name."""

    data: str
    event: str | None = None


class SSEDecoder:
    """Feed it the body's bytes as they come; it hands back every event they complete."""

    __slots__ = ("_data", "_event", "_pending", "_size", "_text")

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []  # the pieces of a line not ended yet
        self._data: list[str] = []
        self._event: str | None = None
        self._size = 0  # characters of the event so far

    def feed(self, chunk: bytes) -> list[ServerEvent]:
        """The events completed by ``chunk``.

        Raises:
            ValueError: one event grew past :data:`MAX_EVENT_CHARS`.
        """
        text = self._text.decode(chunk)
        self._size += len(text)
        if "\n" not in text:  # the line goes on: kept in pieces, joined once it ends
            if text:
                self._pending.append(text)
            if self._size > MAX_EVENT_CHARS:
                raise ValueError(f"an event of over {MAX_EVENT_CHARS:,} characters")
            return []
        lines = text.split("\n")
        if self._pending:
            lines[0] = "".join(self._pending) + lines[0]
            self._pending = []
        last = lines.pop()
        if last:
            self._pending.append(last)
        events: list[ServerEvent] = []
        for line in lines:
            self._line(line[:-1] if line.endswith("\r") else line, events)
        return events

    def close(self) -> list[ServerEvent]:
        """The body ended: the events left open (a last line without its blank line)."""
        events: list[ServerEvent] = []
        rest = "".join(self._pending) + self._text.decode(b"", final=True)
        self._pending = []
        if rest:
            self._line(rest.removesuffix("\r"), events)
        self._line("", events)
        return events

    def _line(self, line: str, events: list[ServerEvent]) -> None:
        if not line:
            if self._data:
                events.append(ServerEvent("\n".join(self._data), self._event))
            self._data = []
            self._event = None
            self._size = 0
            return
        if line.startswith(":"):
            return  # a comment: servers send them to keep the connection alive
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
