"""The clock a limiter and a retry policy read and sleep on: the system's, or one a test
moves."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import anyio

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What a :class:`~toolloop.ratelimit.RateLimit` and a
    :class:`~toolloop.ratelimit.RetryPolicy` need of time: its reading, and a sleep.

    The default is the system's (:class:`SystemClock`);
    :class:`toolloop.testing.ManualClock` is one a test moves by hand.
    """

    def now(self) -> float:
        """Seconds on this clock (any origin: only differences count)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock (cancellable)."""
        ...


class SystemClock:
    """The system's monotonic clock (:func:`time.monotonic`: the same in every event loop,
    so a limiter may outlive one, as a sync call's does) and :func:`anyio.sleep`."""

    __slots__ = ()

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
