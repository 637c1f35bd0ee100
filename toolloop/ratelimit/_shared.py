"""One rate limit for every worker: a :class:`SharedRateLimit` keeps its rate, its hold and
its schedule of permits in a store every worker reaches (PostgreSQL: one row per limiter
name).

How the workers stay under one rate together:

- **Permits from one schedule.** The row keeps when the next call of all the workers is due
  (a GCRA "theoretical arrival time", on the database's clock). A worker whose calls wait
  reserves a few permits at once, at most ``sync`` seconds of the rate: in one transaction
  that locks the row, it takes the next times of the schedule and moves it on. Every time
  is handed to exactly one worker, one ``1 / rate`` after the other, so the calls of all the
  workers together go at most at the rate (plus one call: a burst of one). A worker admits
  each of its calls at its permit's time, on its own clock (read against the database's at
  each round trip: the calls of two workers may come closer than ``1 / rate`` by the
  difference of their round trips' latencies). No permit is handed out more than ``sync``
  seconds ahead (a worker asks again later for the next ones), so one round trip serves up
  to ``rate * sync`` calls, and a back-off or a hold catches the permits handed out before
  it within ``sync`` seconds.
- **A back-off for all.** A refusal (429, 503, ``RateLimitedError``) that a worker sees is
  written to the row with its next round trip (at once: the refused worker drops the
  permits it holds, and its next call asks): the shared rate is lowered (times ``decrease``, once a
  burst: a refusal of a call admitted before the last back-off does not lower it again), and
  a ``Retry-After`` holds the schedule, so no worker gets a permit before it has passed.
  Another worker learns it at its next round trip: within ``sync`` seconds while it has
  calls to make (a worker with permits left asks again once they are ``sync`` old), and
  drops the permits it held from before the back-off.
- **Probing up for all.** While the workers' calls wait for permits, the shared rate grows
  by ``increase`` of itself a second of the database's clock (not a second per worker), up
  to ``rate``.
- **Calls at once stay per worker**: ``concurrency`` bounds the calls in flight of this
  worker (this object), not of all of them.
- **The store out of reach.** Each round trip is bounded by ``timeout``; when it fails or
  runs out, the worker logs a warning and paces its calls alone (the limiter of one
  process, at ``alone_rate``) for 10 seconds, then asks the store again.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio
from typing_extensions import Unpack

from .._secrets import scrub
from ._limiter import _PROBE_STEP, Permit, RateLimit, RateLimitOptions, _positive
from ._observe import ChangeReason, current_observer

__all__ = ["RateLimitStore", "SharedRateLimit"]

T = TypeVar("T")

_ASK = -1.0  # (to the limiter's loop) ask the store for permits
_ALONE_FOR = 10.0  # seconds a worker paces alone once its store could not be reached
_MOST_AT_ONCE = 64  # permits asked in one round trip at most
_KEPT_REPORTS = 32  # refusals kept to tell the store (a longer outage forgets the oldest)
_PROBE_SPAN = 1.0  # the longest span one probe grows the shared rate for, in seconds

log = logging.getLogger("toolloop.ratelimit")


@runtime_checkable
class RateLimitStore(Protocol):
    """Where the workers' :class:`SharedRateLimit` objects keep their shared state:
    :class:`~toolloop.checkpoints.PostgresCheckpointStore` (one row per limiter name).

    ``update_rate_limit(name, change)`` locks the limiter's state (``None`` when there is
    none yet), calls ``change(state, now)`` with the store's own clock (seconds, the same for
    every worker), writes the state it returns and gives back its result, all in one
    transaction: of two workers, one sees the other's change. ``change`` is quick and
    touches nothing else; it may be called again if the transaction is retried.
    """

    async def update_rate_limit(
        self, name: str, change: Callable[[str | None, float], tuple[str, T]]
    ) -> T:
        """Change the state of the limiter ``name`` atomically (see the class docs)."""
        ...


@dataclass(frozen=True, slots=True)
class _Ask:
    """What one worker asks of the shared state, and tells it."""

    want: int
    grow: bool
    refusals: tuple[tuple[int, float | None], ...]
    rate: float
    sync: float
    adaptive: bool
    decrease: float
    increase: float
    min_rate: float
    max_hold: float


@dataclass(slots=True)
class _Grant:
    """What a round trip gives back: the shared state, and the permits (on the store's
    clock)."""

    now: float
    rate: float
    hold: float
    epoch: int
    permits: list[float] = field(default_factory=list)
    retry_at: float | None = None


def _settle(text: str | None, now: float, ask: _Ask) -> tuple[str, _Grant]:
    """The shared state after ``ask``, at ``now`` on the store's clock, and its grant."""
    state: dict[str, Any] = {}
    if text:
        try:
            state = json.loads(text)
        except ValueError:
            state = {}
    try:
        rate = float(state["rate"])
        tat = float(state["tat"])
        hold = float(state["hold"])
        epoch = int(state["epoch"])
        probed = float(state["probed"])
        if not all(math.isfinite(v) for v in (rate, tat, hold, probed)) or rate <= 0:
            raise ValueError
    except (KeyError, TypeError, ValueError):  # none yet (or unreadable): a new one
        rate, tat, hold, epoch, probed = ask.rate, now, now, 0, now
    rate = min(max(rate, ask.min_rate), ask.rate)  # the rate given may have changed
    backed_off = False
    for refused_in, retry_after in ask.refusals:
        if retry_after is not None and retry_after > 0:
            hold = max(hold, now + min(retry_after, ask.max_hold))
        if ask.adaptive and refused_in == epoch:  # once a burst
            epoch += 1
            rate = max(rate * ask.decrease, ask.min_rate)
            probed = now
            backed_off = True
    if ask.grow and ask.adaptive and not backed_off and rate < ask.rate:
        rate = min(rate * (1.0 + ask.increase * min(max(now - probed, 0.0), _PROBE_SPAN)), ask.rate)
        probed = now
    grant = _Grant(now=now, rate=rate, hold=hold, epoch=epoch)
    start = max(tat, now, hold)
    horizon = now + ask.sync  # no permit further ahead: the rate may change meanwhile
    if start > horizon:
        grant.retry_at = start - ask.sync  # ask again then
    elif ask.want:
        interval = 1.0 / rate
        fit = min(ask.want, int((horizon - start) * rate + 1e-9) + 1)
        grant.permits = [start + i * interval for i in range(fit)]
        tat = start + fit * interval
    new = {"rate": rate, "tat": tat, "hold": hold, "epoch": epoch, "probed": probed}
    return json.dumps(new), grant


class SharedRateLimit(RateLimit):
    """A :class:`RateLimit` shared by every worker (process, machine) that makes one of the
    same ``name`` on the same store: together they make at most ``rate`` calls a second,
    back off together when any of them is refused, hold together for a ``Retry-After``,
    and probe back up together. See the module docs for how, and what it costs (one round
    trip to the store for up to ``rate * sync`` calls).

    It is a :class:`RateLimit` everywhere one is taken (``model_rate_limit=``,
    ``rate_limits=``, in every product), shared by the runs of its process like any other;
    make one per process and limiter name::

        store = PostgresCheckpointStore(url)
        api = SharedRateLimit(50, name="openai", store=store)

    Args:
        rate: the most calls a second of all the workers together (required: the quota
            they share), and where the shared rate starts.
        name: the limiter's name in the store: the workers that give the same one share
            it (required).
        store: where the shared state lives, a :class:`RateLimitStore`
            (:class:`~toolloop.checkpoints.PostgresCheckpointStore`).
        sync: at most this many seconds of the rate are reserved in one round trip, and a
            worker with calls to make learns the others' back-offs and holds within about
            this long (0.25).
        timeout: seconds a round trip to the store may take; past it (or on an error) the
            worker paces alone for a while, with a warning logged (2.0).
        alone_rate: calls a second this worker makes while it paces alone (``None``:
            ``rate``; give ``rate / workers`` to stay under the quota during an outage).
        **options: what a :class:`RateLimit` takes too, with its defaults
            (:class:`~toolloop.ratelimit.RateLimitOptions`):

            - ``concurrency`` (``None``: no bound): the most calls at once **of this
              worker**.
            - ``adaptive`` (``True``): back off on refusals and probe up (``False``: a
              fixed rate).
            - ``decrease`` (0.9): the factor of a back-off (between 0 and 1).
            - ``increase`` (0.05): how fast the shared rate grows again while calls wait:
              this fraction of itself each second (of the store's clock).
            - ``min_rate`` (0.1): the lowest rate a back-off goes to, in calls a second.
            - ``max_hold`` (60.0): the longest ``Retry-After`` honoured, in seconds.
            - ``clock`` (``None``: the system's): the clock this worker paces on.

    Raises:
        ValueError: a value out of range, no name, or a store without
            ``update_rate_limit``.
        TypeError: an option that is not one.
    """

    __slots__ = (
        "_alone_until",
        "_given",
        "_grow",
        "_offset",
        "_outage",
        "_permits",
        "_reports",
        "_retry_at",
        "_synced",
        "alone_rate",
        "store",
        "sync",
        "timeout",
    )

    def __init__(
        self,
        rate: float,
        *,
        name: str,
        store: RateLimitStore,
        sync: float = 0.25,
        timeout: float = 2.0,
        alone_rate: float | None = None,
        **options: Unpack[RateLimitOptions],
    ) -> None:
        for option in options:
            if option not in RateLimitOptions.__annotations__:
                raise TypeError(f"SharedRateLimit() got an unexpected keyword argument {option!r}")
        _positive("rate", rate)
        if not isinstance(name, str) or not name:
            raise ValueError(f"SharedRateLimit: name must be a non-empty str, got {name!r}")
        if not isinstance(store, RateLimitStore):
            raise ValueError(
                "SharedRateLimit: store must have update_rate_limit() (a "
                f"PostgresCheckpointStore), got {type(store).__name__}"
            )
        _positive("sync", sync)
        _positive("timeout", timeout)
        if alone_rate is not None:
            _positive("alone_rate", alone_rate)
        super().__init__(rate, name=name, **options)
        self.store = store
        self.sync = float(sync)
        self.timeout = float(timeout)
        self.alone_rate = float(rate if alone_rate is None else alone_rate)
        self._given = float(rate)
        self._permits: deque[float] = deque()  # times of the permits held, on this clock
        self._offset = 0.0  # this clock's reading less the store's, at the last round trip
        self._synced = -math.inf  # when the last round trip ended, on this clock
        self._retry_at = -math.inf  # no permit before this: ask again then
        self._alone_until = -math.inf  # pacing alone until then (the store out of reach)
        self._grow = False  # calls waited for permits since the last round trip
        self._outage = False  # the last round trip failed
        self._reports: deque[tuple[int, float | None]] = deque(maxlen=_KEPT_REPORTS)

    def __repr__(self) -> str:
        return (
            f"SharedRateLimit({self.name!r}, rate={self._rate!r}, store={self.store!r}, "
            f"concurrency={self.concurrency!r}, adaptive={self.adaptive!r})"
        )

    @property
    def alone(self) -> bool:
        """Whether it paces alone now: its store could not be reached lately."""
        return self._clock.now() < self._alone_until

    # -- admitting ----------------------------------------------------------------------

    def _delay(self, now: float) -> float | None:
        if now < self._alone_until:
            return super()._delay(now)  # the limiter of one process
        if self._reports:
            return _ASK  # a refusal to tell the others (a hold too: before holding)
        if now < self._hold_until:
            return self._hold_until - now
        room = self._room()
        if room is not None and self._in_flight >= room:
            return None
        permits = self._permits
        if now - self._synced >= self.sync and (permits or now >= self._retry_at):
            return _ASK  # learn what the others did
        if permits:
            return max(permits[0] - now, 0.0)
        if now < self._retry_at:
            return self._retry_at - now
        return _ASK

    def _admit(self, now: float) -> Permit:
        permits = self._permits
        if now >= self._alone_until and permits and permits[0] <= now:
            permits.popleft()
        return super()._admit(now)

    async def _refill(self) -> None:
        """One round trip to the store: tell it the refusals seen and whether calls waited,
        learn its rate, hold and back-offs, and reserve permits for the calls waiting."""
        rate = self._rate if self._rate is not None else self._given
        want = max(len(self._queue) - len(self._permits), 0)
        want = min(want, max(1, int(rate * self.sync)), _MOST_AT_ONCE)
        reports = tuple(self._reports)
        ask = _Ask(
            want=want,
            grow=self._grow or self._bound,
            refusals=reports,
            rate=self._given,
            sync=self.sync,
            adaptive=self.adaptive,
            decrease=self.decrease,
            increase=self.increase,
            min_rate=self.min_rate,
            max_hold=self.max_hold,
        )
        grant: _Grant | None = None
        failure: BaseException | None = None
        with anyio.move_on_after(self.timeout):
            try:
                grant = await self.store.update_rate_limit(
                    self.name, lambda text, now: _settle(text, now, ask)
                )
            except Exception as exc:
                failure = exc
        if grant is None:
            self._go_alone(failure)
            return
        for _ in reports:  # told (the ones added meanwhile are told next time)
            self._reports.popleft()
        self._grow = False
        self._bound = False
        self._learn(grant)

    def _learn(self, grant: _Grant) -> None:
        """Take what the store said as this worker's own state."""
        if self._outage:
            self._outage = False
            self._ceiling = self._given
            log.warning("shared rate limit %r: its store answers again", self.name)
        local = self._clock.now()
        offset = self._offset = local - grant.now  # late by the latency: on the safe side
        self._synced = local
        reason: ChangeReason | None = None
        if grant.epoch != self._epoch:
            self._permits.clear()  # reserved at a rate from before a back-off
            if grant.epoch > self._epoch and grant.rate < (self._rate or math.inf):
                reason = "backoff"
            self._epoch = grant.epoch
        hold = grant.hold + offset
        if hold > self._hold_until and hold > local:
            self._hold_until = hold
            reason = reason or "hold"
        while self._permits and self._permits[0] < self._hold_until:
            self._permits.popleft()
        self._permits.extend(t + offset for t in grant.permits)
        self._retry_at = -math.inf if grant.retry_at is None else grant.retry_at + offset
        if grant.rate != self._rate:
            self._set_rate(grant.rate)
        if reason is None and grant.rate > self._told:
            if grant.rate >= self._told * _PROBE_STEP or grant.rate == self._given:
                reason = "probe"
        if reason is not None:
            self._told = grant.rate
            observer = current_observer()
            if observer is not None:
                observer.rate_limit_changed(self.state(reason))

    def _go_alone(self, failure: BaseException | None) -> None:
        """The store could not be reached: pace this worker alone for a while."""
        now = self._clock.now()
        first, self._outage = not self._outage, True
        self._alone_until = now + _ALONE_FOR
        self._permits.clear()
        self._ceiling = self.alone_rate
        if self._rate is None or self._rate > self.alone_rate:
            self._set_rate(self.alone_rate)
        self._tat = max(self._tat, now)
        said = (
            f"no answer within {self.timeout:g} s"
            if failure is None
            else scrub(f"{type(failure).__name__}: {failure}")[:300]
        )
        level = logging.WARNING if first else logging.INFO  # once an outage
        log.log(
            level,
            "shared rate limit %r: its store %r could not be reached (%s); this worker "
            "paces its calls alone at %g a second for %g s, then asks the store again",
            self.name,
            self.store,
            said,
            self._rate,
            _ALONE_FOR,
        )

    # -- learning -----------------------------------------------------------------------

    def _went_through(self) -> ChangeReason | None:
        if self._clock.now() < self._alone_until:
            return super()._went_through()
        self._grow = self._grow or self._bound  # probed up in the store, by the clock there
        self._bound = False
        return None

    def _refused(self, epoch: int, retry_after: float | None) -> ChangeReason | None:
        self._reports.append((epoch, retry_after))
        reason = super()._refused(epoch, retry_after)  # at once here; the others learn it
        if reason in ("backoff", "slow_start_ended"):
            self._permits.clear()
        return reason
