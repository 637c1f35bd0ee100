"""A limiter of calls per second and of calls at once, shared by every run given it, that
backs off when a server refuses calls for their rate and probes back up.

How an adaptive :class:`RateLimit` finds the rate a server allows (unknown at first):

- **Start.** With no ``rate`` given it admits ``start`` calls at once, one more each time a
  call goes through while calls are held back (the calls at once double with each round
  trip), so it reaches the server's rate in a few round trips instead of sending every
  waiting call at once.
- **Back off.** The first refusal (HTTP 429 or 503, or a tool's
  :class:`~toolloop.errors.RateLimitedError`) ends the start: from then on the limiter
  paces calls at ``decrease`` times the rate of the calls that went through lately (what
  the server let through: its rate, when it refuses); each later refusal multiplies the
  rate by ``decrease`` (multiplicative decrease). A refusal of a call admitted before the
  last back-off is of the same burst, and does not lower the rate again. A
  ``Retry-After`` holds every call until it has passed.
- **Probe.** While it holds calls back, the rate grows by ``increase`` (a fraction of
  itself) each second, up to ``rate`` if one was given: gently near the rate that was
  refused. Until the second back-off it grows ten times as fast: the rate measured at the
  end of the start is a rough one (the calls were still growing), most often too low. A
  limiter that holds nothing back (its callers are slower than it) does not grow.

A limiter with ``adaptive=False`` keeps its ``rate`` and ``concurrency`` (it still holds
calls for a server's ``Retry-After``). Either way calls are admitted first come, first
served, and only the first waiting call sleeps on the clock: a thousand waiting calls cost
one timer.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from typing_extensions import TypedDict

from ._clock import SYSTEM_CLOCK, Clock
from ._observe import ChangeReason, RateLimitState, current_observer
from ._signals import is_rate_limited, retry_after_of

__all__ = ["Permit", "RateLimit", "RateLimitOptions"]

_GOODPUT_WINDOW = 0.5  # seconds of successes the rate after a back-off is measured over
_MIN_SPAN = 0.05  # the shortest span a rate is measured over
_PROBE_STEP = 1.1  # a probe is told each time the rate grew by this factor since last told
_FIRST_PROBE = 0.5  # how fast the rate grows (a fraction a second) until a second back-off


class RateLimitOptions(TypedDict, total=False):
    """What a :class:`~toolloop.ratelimit.SharedRateLimit` takes as a :class:`RateLimit`
    does (``**options``): the same names, meanings and defaults, applied by
    :class:`RateLimit`."""

    concurrency: int | None
    """The most calls at once (``None``, the default: no bound)."""
    adaptive: bool
    """Back off on refusals and probe up (``True``; ``False``: a fixed rate)."""
    decrease: float
    """The factor of a back-off, between 0 and 1 (0.9)."""
    increase: float
    """How fast the rate grows again while calls wait: this fraction of itself each
    second (0.05)."""
    min_rate: float
    """The lowest rate a back-off goes to, in calls a second (0.1)."""
    max_hold: float
    """The longest ``Retry-After`` honoured, in seconds (60.0)."""
    clock: Clock | None
    """The clock it paces on (``None``: the system's)."""


def _positive(name: str, value: object, *, whole: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if whole else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not value > 0  # type: ignore[operator]
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        kind = "an int" if whole else "a number"
        raise ValueError(f"RateLimit: {name} must be {kind} above 0, got {value!r}")


class _Waiter:
    __slots__ = ("event", "for_room")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.for_room = False  # waits for a call to end (not for the clock)


class Permit:
    """One admitted call: release it once, when the call ends, with what it raised.

    ``release()`` says the call went through (an adaptive limiter probes up);
    ``release(exc)`` with a refusal for the rate (429, 503,
    :class:`~toolloop.errors.RateLimitedError`) makes it back off, and hold every call for
    the ``Retry-After`` the refusal carries; any other exception (a cancellation too) only
    frees the call's place.
    """

    __slots__ = ("_epoch", "_limit")

    def __init__(self, limit: RateLimit | None, epoch: int) -> None:
        self._limit = limit
        self._epoch = epoch

    def release(self, outcome: BaseException | None = None) -> None:
        """The call ended: ``None`` if it went through, else what it raised. A second
        release does nothing."""
        limit, self._limit = self._limit, None
        if limit is not None:
            limit._release(self._epoch, outcome)


class RateLimit:
    """Calls per second and calls at once, for a model endpoint, a tool or a group of
    tools, shared by every run (and every product) given the same object.

    Give it to a run: ``model_rate_limit=`` limits the run's model calls,
    ``rate_limits={"search": limit, "fetch": limit}`` the calls of those tools (one object
    for several tools limits them as a group). See the module docs for how an adaptive
    limiter finds the server's rate. One limiter serves the runs of one event loop at a
    time (those of a process's loop, or sync calls one after another); give each thread
    that runs a loop of its own a limiter of its own. For one limit shared by many
    processes or machines, see :class:`~toolloop.ratelimit.SharedRateLimit`.

    Args:
        rate: the most calls a second (``None``: no bound but what the server's refusals
            teach an adaptive limiter).
        concurrency: the most calls at once (``None``: no bound).
        adaptive: back off on refusals and probe up (``False``: a fixed limiter).
        start: calls at once an adaptive limiter with no ``rate`` admits at first.
        decrease: the factor of a back-off (between 0 and 1).
        increase: how fast the rate grows again while calls wait: this fraction of itself
            each second.
        min_rate: the lowest rate a back-off goes to, in calls a second.
        max_hold: the longest ``Retry-After`` honoured, in seconds (a longer one holds this
            long).
        name: how its events name it.
        clock: the clock it paces on (the system's by default; a test's
            :class:`~toolloop.testing.ManualClock`).

    Raises:
        ValueError: a value out of range.
    """

    __slots__ = (
        "_bound",
        "_ceiling",
        "_clock",
        "_epoch",
        "_fast",
        "_goodput",
        "_hold_until",
        "_in_flight",
        "_interval",
        "_probed_at",
        "_queue",
        "_rate",
        "_started",
        "_tat",
        "_told",
        "_window",
        "adaptive",
        "admitted",
        "backoffs",
        "concurrency",
        "decrease",
        "increase",
        "max_hold",
        "min_rate",
        "name",
        "refused",
    )

    def __init__(
        self,
        rate: float | None = None,
        *,
        concurrency: int | None = None,
        adaptive: bool = True,
        start: int = 4,
        decrease: float = 0.9,
        increase: float = 0.05,
        min_rate: float = 0.1,
        max_hold: float = 60.0,
        name: str = "",
        clock: Clock | None = None,
    ) -> None:
        if rate is not None:
            _positive("rate", rate)
        if concurrency is not None:
            _positive("concurrency", concurrency, whole=True)
        _positive("start", start, whole=True)
        _positive("min_rate", min_rate)
        _positive("max_hold", max_hold)
        _positive("increase", increase)
        if isinstance(decrease, bool) or not isinstance(decrease, (int, float)):
            raise ValueError(f"RateLimit: decrease must be a number, got {decrease!r}")
        if not 0 < decrease < 1:
            raise ValueError(f"RateLimit: decrease must be between 0 and 1, got {decrease!r}")
        if not isinstance(name, str):
            raise ValueError(f"RateLimit: name must be a str, got {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise ValueError(
                f"RateLimit: clock must have now() and sleep(), got {type(clock).__name__}"
            )
        self.name = name
        self.adaptive = bool(adaptive)
        self.concurrency = concurrency
        """The most calls at once, as given."""
        self.decrease = float(decrease)
        self.increase = float(increase)
        self.min_rate = float(min_rate)
        self.max_hold = float(max_hold)
        self.admitted = 0
        self.refused = 0
        self.backoffs = 0
        self._clock: Clock = SYSTEM_CLOCK if clock is None else clock
        self._ceiling = None if rate is None else float(rate)
        self._rate = self._ceiling
        self._interval = 0.0 if rate is None else 1.0 / rate
        # an adaptive limiter that knows no rate starts with a few calls at once
        self._window: float | None = float(start) if self.adaptive and rate is None else None
        self._tat = -math.inf  # when the next call is due, paced (GCRA)
        self._hold_until = -math.inf
        self._in_flight = 0
        self._queue: deque[_Waiter] = deque()
        self._epoch = 0
        self._fast = False  # the rate grows fast: from the end of the start to a back-off
        self._bound = False  # a call waited for the rate (or for room) since the last probe
        self._goodput: deque[float] = deque()
        self._started: float | None = None
        self._probed_at = 0.0
        self._told = self._rate if self._rate is not None else float(start)

    def __repr__(self) -> str:
        named = f"{self.name!r}, " if self.name else ""
        return (
            f"RateLimit({named}rate={self._rate!r}, concurrency={self._room()!r}, "
            f"adaptive={self.adaptive!r})"
        )

    # -- reading ------------------------------------------------------------------------

    @property
    def rate(self) -> float | None:
        """Calls a second it admits now (``None``: no bound on the rate)."""
        return self._rate

    @property
    def in_flight(self) -> int:
        """Calls admitted and not ended."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Calls waiting to be admitted."""
        return len(self._queue)

    def state(self, reason: ChangeReason | None = None) -> RateLimitState:
        """What it is now (``reason``: why it changed, when telling a change)."""
        return RateLimitState(
            name=self.name,
            rate=self._rate,
            concurrency=self._room(),
            in_flight=self._in_flight,
            waiting=len(self._queue),
            hold=max(self._hold_until - self._clock.now(), 0.0),
            admitted=self.admitted,
            refused=self.refused,
            backoffs=self.backoffs,
            reason=reason,
        )

    def _room(self) -> int | None:
        """The most calls at once now: the given bound, and the start's window."""
        window = None if self._window is None else int(self._window)
        if window is None:
            return self.concurrency
        if self.concurrency is None:
            return window
        return min(window, self.concurrency)

    # -- admitting ----------------------------------------------------------------------

    def _delay(self, now: float) -> float | None:
        """Seconds until a call may be admitted (0: now), or ``None``: when one ends (a
        shared limiter: below 0 when it must ask its store for permits first)."""
        if now < self._hold_until:
            return self._hold_until - now
        room = self._room()
        if room is not None and self._in_flight >= room:
            return None
        if self._rate is not None:
            due = self._tat - self._interval  # a burst of two: a late wake-up loses nothing
            if now < due:
                return due - now
        return 0.0

    def _admit(self, now: float) -> Permit:
        self._in_flight += 1
        self.admitted += 1
        if self._started is None:
            self._started = now
            self._probed_at = now
        if self._rate is not None:
            self._tat = max(self._tat, now) + self._interval
        return Permit(self, self._epoch)

    async def acquire(self) -> Permit:
        """Wait until a call may start (first come, first served); its permit, to
        :meth:`Permit.release` when it ends. Cancellable: a cancelled wait takes no place."""
        clock = self._clock
        queue = self._queue
        if not queue and self._delay(clock.now()) == 0.0:
            return self._admit(clock.now())
        waiter = _Waiter()
        queue.append(waiter)
        try:
            if queue[0] is not waiter:
                await waiter.event.wait()  # until it is the first
            while True:
                now = clock.now()
                delay = self._delay(now)
                if delay == 0.0:
                    break
                if delay is None:  # until a call ends
                    self._bound = True
                    waiter.event = anyio.Event()
                    waiter.for_room = True
                    await waiter.event.wait()
                    waiter.for_room = False
                elif delay < 0.0:  # (a shared limiter) permits are asked of its store
                    await self._refill()
                else:
                    if now >= self._hold_until:
                        self._bound = True  # held back by the rate, not by a hold
                    await clock.sleep(delay)
        except BaseException:
            self._leave(waiter)
            raise
        self._leave(waiter)
        return self._admit(now)

    async def _refill(self) -> None:  # pragma: no cover  (only a shared limiter asks)
        """Ask for permits where they are kept (a
        :class:`~toolloop.ratelimit.SharedRateLimit`'s store)."""

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` is no longer waiting: the next one, if it is now the first, takes
        over the waiting on the clock."""
        queue = self._queue
        first = bool(queue) and queue[0] is waiter
        try:
            queue.remove(waiter)
        except ValueError:  # pragma: no cover  (each waiter leaves once)
            return
        if first and queue:
            queue[0].event.set()

    def _wake_for_room(self) -> None:
        queue = self._queue
        if queue and queue[0].for_room:
            queue[0].event.set()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Permit]:
        """``async with limit.slot():`` one call, released with what the block raised."""
        permit = await self.acquire()
        try:
            yield permit
        except BaseException as exc:
            permit.release(exc)
            raise
        permit.release()

    # -- learning -----------------------------------------------------------------------

    def _release(self, epoch: int, outcome: BaseException | None) -> None:
        self._in_flight -= 1
        reason: ChangeReason | None = None
        if outcome is None:
            if self.adaptive:
                reason = self._went_through()
        elif isinstance(outcome, Exception) and is_rate_limited(outcome):
            reason = self._refused(epoch, retry_after_of(outcome))
        self._wake_for_room()
        if reason is not None:
            observer = current_observer()
            if observer is not None:
                observer.rate_limit_changed(self.state(reason))

    def _went_through(self) -> ChangeReason | None:
        """A call went through: measure, and probe up while calls wait."""
        now = self._clock.now()
        goodput = self._goodput
        goodput.append(now)
        while goodput and goodput[0] < now - _GOODPUT_WINDOW:
            goodput.popleft()
        # only a limiter that held calls back probes up: one that a slow caller never
        # reaches would grow without a refusal to tell it where the server's rate is
        limited = self._bound
        self._bound = False
        if self._window is not None:  # the start: one more at once for each call through
            if not limited:
                return None
            room = self.concurrency
            if room is not None and self._window >= room:
                return None
            self._window += 1.0
            if self._window >= 2 * self._told:
                self._told = self._window
                return "probe"
            return None
        rate = self._rate
        elapsed = now - self._probed_at
        self._probed_at = now
        if rate is None or not limited:
            return None
        ceiling = self._ceiling
        if ceiling is not None and rate >= ceiling:
            return None
        rate *= 1.0 + (_FIRST_PROBE if self._fast else self.increase) * elapsed
        if ceiling is not None and rate > ceiling:
            rate = ceiling
        self._set_rate(rate)
        if rate >= self._told * _PROBE_STEP or rate == ceiling:
            self._told = rate
            return "probe"
        return None

    def _refused(self, epoch: int, retry_after: float | None) -> ChangeReason | None:
        """A call was refused for the rate: hold for its ``Retry-After``, and back off
        once a burst."""
        self.refused += 1
        now = self._clock.now()
        reason: ChangeReason | None = None
        if retry_after is not None and retry_after > 0:
            until = now + min(retry_after, self.max_hold)
            if until > self._hold_until:
                self._hold_until = until
                reason = "hold"
        if not self.adaptive or epoch != self._epoch:
            return reason  # a fixed limiter; or a call of a burst already backed off from
        self._epoch += 1
        self.backoffs += 1
        current = self._rate
        if current is None:  # the end of the start: the rate that went through lately
            current = self._measured(now)
            if current is None:  # nothing went through yet: the calls at once, a second
                current = float(self._room() or 1)
        rate = max(current * self.decrease, self.min_rate)
        if self._ceiling is not None and rate > self._ceiling:
            rate = self._ceiling
        started = self._window is not None
        self._fast = started
        self._window = None
        self._set_rate(rate)
        self._told = rate
        self._probed_at = now
        return "slow_start_ended" if started else "backoff"

    def _measured(self, now: float) -> float | None:
        """Calls a second that went through lately, or ``None``: none did."""
        goodput = self._goodput
        while goodput and goodput[0] < now - _GOODPUT_WINDOW:
            goodput.popleft()
        if not goodput or self._started is None:
            return None
        span = min(max(now - self._started, _MIN_SPAN), _GOODPUT_WINDOW)
        return len(goodput) / span

    def _set_rate(self, rate: float) -> None:
        self._rate = rate
        self._interval = 1.0 / rate

    # -- for tests and tools ------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """Its counters and state, as plain values."""
        state = self.state()
        return {
            "rate": state.rate,
            "concurrency": state.concurrency,
            "in_flight": state.in_flight,
            "waiting": state.waiting,
            "hold": state.hold,
            "admitted": state.admitted,
            "refused": state.refused,
            "backoffs": state.backoffs,
        }
