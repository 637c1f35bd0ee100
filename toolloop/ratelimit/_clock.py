"""The clock a limiter and a retry policy read and sleep on: anyio's, or one a test moves."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "EventLoopClock"]


@runtime_checkable
class Clock(Protocol):
    """What a :class:`~toolloop.ratelimit.RateLimit` and a
    :class:`~toolloop.ratelimit.RetryPolicy` need of time: its reading, and a sleep.

    The default is the event loop's own (:class:`EventLoopClock`);
    :class:`toolloop.testing.ManualClock` is one a test moves by hand.
    """

    def now(self) -> float:
        """Seconds on this clock (any origin: only differences count)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock (cancellable)."""
        ...


class EventLoopClock:
    """The event loop's clock: :func:`anyio.current_time` and :func:`anyio.sleep`."""

    __slots__ = ()

    def now(self) -> float:
        return anyio.current_time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    def __repr__(self) -> str:
        return "EventLoopClock()"


EVENT_LOOP_CLOCK = EventLoopClock()
