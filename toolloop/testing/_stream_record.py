"""What the scripted model and the fake server tell of each stream they answer."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

__all__ = ["StreamProgress"]


@dataclass(eq=False, kw_only=True)
class StreamProgress:
    """How far one streamed reply went, updated as it goes (times are
    ``time.monotonic()``)."""

    request_index: int
    """The request it answers (its place in the requests received)."""
    chunks_planned: int
    """The pieces of the reply (deltas, or SSE events), its end included."""
    started_at: float
    chunks_sent: int = 0
    """The pieces handed over so far."""
    completed: bool = False
    """Every piece was handed over."""
    ended_at: float | None = None
    held: anyio.Event = field(default_factory=anyio.Event, repr=False)
    """Set once the stream waits at a gate of its reply (its ``gates``)."""
    _content: list[str] = field(default_factory=list, repr=False)

    @property
    def content_sent(self) -> str:
        """The content handed over so far, joined."""
        return "".join(self._content)
