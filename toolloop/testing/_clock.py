"""A clock a test moves by hand, for rate limits and retries."""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["ManualClock"]


class ManualClock:
    """A :class:`~toolloop.ratelimit.Clock` that moves only when a test says so.

    Give it to a :class:`~toolloop.ratelimit.RateLimit` or a
    :class:`~toolloop.ratelimit.RetryPolicy` (``clock=``): their waits sleep on it, so a
    test proves the order of things without waiting for real time::

        clock = ManualClock()
        limit = RateLimit(2, adaptive=False, clock=clock)
        ...
        await clock.wait_for_sleepers(1)  # a call waits for its turn
        clock.advance(0.5)                # its turn comes

    Args:
        start: the time it reads at first.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._sleepers: list[tuple[float, anyio.Event]] = []
        self._changed = anyio.Event()

    def now(self) -> float:
        """The time it reads."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been moved ``seconds`` on (no wait for 0 or less)."""
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        entry = (self._now + seconds, anyio.Event())
        self._sleepers.append(entry)
        self._tell()
        try:
            await entry[1].wait()
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)
                self._tell()

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, waking every sleep that has then ended."""
        if seconds < 0:
            raise ValueError(f"a clock moves forward only; got {seconds!r}")
        self._now += seconds
        for entry in [e for e in self._sleepers if e[0] <= self._now]:
            self._sleepers.remove(entry)
            entry[1].set()
        self._tell()

    @property
    def sleepers(self) -> list[float]:
        """When each sleep in progress ends, soonest first."""
        return sorted(deadline for deadline, _ in self._sleepers)

    async def wait_for_sleepers(self, count: int = 1, *, timeout: float = 10.0) -> None:
        """Wait until at least ``count`` sleeps are in progress (``timeout``: seconds of
        real time, a guard against a test that would hang)."""
        with anyio.fail_after(timeout):
            while len(self._sleepers) < count:
                await self._changed.wait()

    def _tell(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now!r}, sleepers={len(self._sleepers)})"
