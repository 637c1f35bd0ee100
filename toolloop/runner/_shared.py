"""Shared results: identical calls of a tool, made at once by many calls or runs, run once.

A :class:`SharedResults` object, given for a tool (the run option ``shared_results={"search":
shared}``), is one table of the calls of that tool in flight, and (with a ``ttl``) a cache
of their results. A call whose key (the tool's name and its checked arguments as canonical
JSON, hashed by SHA-256) is in flight already waits for that call and takes its outcome;
a call whose result is cached takes it at once; any other runs the tool and leads the
calls that come while it runs. Every caller keeps its own record, events and journal
entry: only the tool's body is shared.

How it holds:

- **Failures are not shared beyond the calls in flight.** The outcome of the call that ran,
  success or failure (its timeout included), is the outcome of every call that waited for
  it; only a success is cached.
- **A cancelled leader hands over.** When the caller that runs the tool is cancelled (its
  run ends, times out, is left), the tool's run is cancelled with it (anyio's structured
  concurrency: no orphan task), and the calls still waiting wake at once: the first of them
  runs the tool itself and the others wait for it. No waiter hangs, and none is cancelled
  by another's cancellation.
- **Every wait is bounded**: by the waiting call's own tool timeout (``tool_timeout``, the
  tool's own), and never longer than the call it waits for.
- **One table of calls in flight per event loop.** A call waits only for a call of its own
  event loop (another loop's events cannot wake it): runs of other threads, each on its
  own loop, share the cache, not the calls in flight.
- **A call that cannot be keyed runs on its own** (arguments that are no JSON data: a cycle,
  an object pydantic cannot serialize), as does a call made from inside the run of the
  same call (a tool that calls itself with its own arguments would wait for itself).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import anyio
from pydantic_core import to_jsonable_python

from .._errors import ToolTimeoutError
from ..ratelimit import Clock
from ._jsonsafe import json_safe

__all__ = ["SharedResultStore", "SharedResults", "SharedSource", "shared_key"]

SharedSource: TypeAlias = Literal["in_flight", "cache"]
"""Where a call's outcome came from when its tool did not run for it: the same call of
another caller, in flight at the time (``"in_flight"``), or the cache (``"cache"``)."""

_LOG = logging.getLogger("toolloop")
_LEADING: ContextVar[frozenset[str]] = ContextVar("toolloop_shared_leading", default=frozenset())
"""The keys whose calls the current task runs as a leader (a nested identical call runs on
its own instead of waiting for itself)."""


@runtime_checkable
class SharedResultStore(Protocol):
    """Where a :class:`SharedResults` keeps its cache for other runs and processes to read:
    the checkpoint stores (:class:`~toolloop.checkpoints.SQLiteCheckpointStore`,
    :class:`~toolloop.checkpoints.PostgresCheckpointStore`,
    :class:`~toolloop.checkpoints.MemoryCheckpointStore`) are ones."""

    async def get_shared(self, key: str, *, now: float) -> tuple[Any] | None:
        """The value kept under ``key`` (boxed: ``(value,)``), or ``None`` when there is
        none, or it expired before ``now`` (it is then forgotten)."""
        ...

    async def put_shared(
        self, key: str, value: Any, *, expires_at: float | None, now: float
    ) -> None:
        """Keep ``value`` (JSON data) under ``key`` until ``expires_at`` (``None``: no
        expiry), replacing what was there; entries expired before ``now`` may be
        forgotten."""
        ...


class _WallClock:
    """The system's wall clock (:func:`time.time`): entries in a store are read by other
    processes, whose monotonic clocks have other origins."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:  # (a Clock's; not used here)
        await anyio.sleep(seconds)


_WALL_CLOCK = _WallClock()


def shared_key(tool_name: str, arguments: dict[str, Any]) -> str | None:
    """The key of a call of ``tool_name`` with (checked) ``arguments``: the name and the
    SHA-256 of the arguments as canonical JSON (sorted keys, no spaces; a NaN is ``NaN``).
    ``None`` when the arguments are no JSON data (a cycle, an object that pydantic cannot
    serialize): such a call is not shared. Never raises."""
    try:
        text = json.dumps(
            arguments,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=to_jsonable_python,
        )
    except (Exception, RecursionError):
        return None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{tool_name}/{digest}"


_STORE_TIMEOUT = 30.0
"""Seconds a store's read (a miss if it does not answer) or write (the result stands) of a
result may take."""


async def _ran(run: Callable[[], Awaitable[Any]]) -> tuple[bool, Any, None]:
    try:
        return True, await run(), None
    except Exception as exc:
        return False, exc, None


class _Flight:
    """One call in flight: its waiters wait for ``done``; ``outcome`` is ``(ok, value or
    exception, source)``, or ``None`` when its leader was cancelled."""

    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.outcome: tuple[bool, Any, SharedSource] | None = None


class SharedResults:
    """Identical calls of a tool run once, and (with a ``ttl``) their results are cached.

    Give one object to the runs that should share (the run option
    ``shared_results={"search": shared}``, in every product): it is one table of the calls
    in flight and one cache. See the module docs for what holds.

    Args:
        ttl: seconds a successful result is kept for later identical calls; ``None`` (the
            default): nothing is kept, only calls in flight at once are shared;
            ``math.inf``: kept until evicted.
        store: keep the cache in this store too (a
            :class:`~toolloop.checkpoints.CheckpointStore` of SQLite or PostgreSQL: runs in
            other processes read it; needs a ``ttl``). What is kept there is the result as
            JSON data (:func:`~toolloop.runner.json_safe`), and a call that finds it gets
            that.
        max_entries: at most this many results are kept in memory (the least recently used
            go first).
        clock: the :class:`~toolloop.ratelimit.Clock` expiry is read on (the wall clock by
            default; :class:`~toolloop.testing.ManualClock` in a test).

    Every caller of a shared call gets the same object the tool returned: treat results as
    read only. Share only tools whose result depends on their arguments alone (a tool that
    reads ``ctx.deps`` of one run serves another with it).

    Counters: ``runs`` (the tool's body ran), ``joined`` (a call took the outcome of one in
    flight), ``hits`` (a call took a cached result), ``waiting`` (calls that wait now for
    one in flight).
    """

    __slots__ = (
        "_cache",
        "_flights",
        "clock",
        "hits",
        "joined",
        "max_entries",
        "runs",
        "store",
        "ttl",
        "waiting",
    )

    def __init__(
        self,
        *,
        ttl: float | None = None,
        store: SharedResultStore | None = None,
        max_entries: int = 1024,
        clock: Clock | None = None,
    ) -> None:
        if ttl is not None and not (
            isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > 0
        ):
            raise ValueError(f"ttl must be a number of seconds above 0, or None; got {ttl!r}")
        if store is not None and not isinstance(store, SharedResultStore):
            raise TypeError(
                "store must be a store of shared results (e.g. a toolloop.checkpoints."
                f"SQLiteCheckpointStore), got {type(store).__name__}"
            )
        if store is not None and ttl is None:
            raise ValueError(
                "a store keeps the cache: give a ttl too (SharedResults(ttl=60, store=...))"
            )
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must be a toolloop.ratelimit.Clock, got {clock!r}")
        self.ttl = ttl
        self.store = store
        self.max_entries = max_entries
        self.clock: Clock = _WALL_CLOCK if clock is None else clock
        self._flights: dict[tuple[object, str], _Flight] = {}
        """The calls in flight, by their event loop and their key."""
        self._cache: dict[str, tuple[float, Any]] = {}
        self.runs = 0
        self.joined = 0
        self.hits = 0
        self.waiting = 0

    def __repr__(self) -> str:
        return (
            f"SharedResults(ttl={self.ttl!r}, store={self.store!r}, runs={self.runs}, "
            f"joined={self.joined}, hits={self.hits}, waiting={self.waiting})"
        )

    def in_flight(self) -> int:
        """How many distinct calls run now."""
        return len(self._flights)

    def clear(self) -> None:
        """Forget the results kept in memory (a store's are kept until they expire)."""
        self._cache.clear()

    async def call(
        self,
        key: str,
        run: Callable[[], Awaitable[Any]],
        *,
        tool_name: str,
        timeout: float | None,
    ) -> tuple[bool, Any, SharedSource | None]:
        """What the call ``key`` came to: ``(True, value, source)`` or ``(False, exception,
        source)``; ``source`` is ``None`` when ``run()`` ran for this call, else where the
        outcome came from. Only cancellation propagates; a call that waited ``timeout``
        seconds for another fails with a :class:`~toolloop.errors.ToolTimeoutError`."""
        if key in _LEADING.get():  # inside the run of this very call: it would wait for itself
            return await _ran(run)
        cached = self._cached(key)
        if cached is not None:
            self.hits += 1
            return True, cached[0], "cache"
        here = (anyio.lowlevel.current_token(), key)  # (a call of this event loop)
        flight = self._flights.get(here)
        if flight is None:
            return await self._lead(here, run)
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        while True:
            self.waiting += 1
            try:
                with anyio.move_on_after(deadline - anyio.current_time()):
                    await flight.done.wait()
            finally:
                self.waiting -= 1
            outcome = flight.outcome
            if outcome is not None:
                ok, value, source = outcome
                if source == "cache":
                    self.hits += 1
                else:
                    self.joined += 1
                return ok, value, source
            if not flight.done.is_set():  # this call's own time ran out
                return (
                    False,
                    ToolTimeoutError(
                        f"tool {tool_name!r} did not finish within {timeout} s (this call "
                        "waited for the same call of another caller)"
                    ),
                    "in_flight",
                )
            # its leader was cancelled: the first waiter to wake runs it, the others wait
            flight = self._flights.get(here)
            if flight is None:
                return await self._lead(here, run)

    def _cached(self, key: str) -> tuple[Any] | None:
        if self.ttl is None:
            return None
        entry = self._cache.pop(key, None)
        if entry is None:
            return None
        if entry[0] <= self.clock.now():  # expired
            return None
        self._cache[key] = entry  # the most recently used last
        return (entry[1],)

    def _keep(self, key: str, value: Any, now: float) -> float | None:
        """Keep ``value`` in memory; its expiry (``None``: none)."""
        ttl = self.ttl
        assert ttl is not None
        expires = now + ttl
        cache = self._cache
        cache.pop(key, None)
        while len(cache) >= self.max_entries:
            # the least recently used (another thread may have taken it out first)
            cache.pop(next(iter(cache), None), None)  # type: ignore[arg-type]
        cache[key] = (expires, value)
        return None if math.isinf(expires) else expires

    async def _lead(
        self, here: tuple[object, str], run: Callable[[], Awaitable[Any]]
    ) -> tuple[bool, Any, SharedSource | None]:
        key = here[1]
        flight = self._flights[here] = _Flight()
        leading = _LEADING.get()
        _LEADING.set(leading | {key})
        try:
            stored = await self._from_store(key)
            if stored is not None:
                self.hits += 1
                flight.outcome = (True, stored[0], "cache")
                flight.done.set()
                return True, stored[0], "cache"
            self.runs += 1
            ok, value, _ = outcome = await _ran(run)
            flight.outcome = (ok, value, "in_flight")
            flight.done.set()
            if ok and self.ttl is not None:
                now = self.clock.now()
                expires = self._keep(key, value, now)
                if self.store is not None:  # (new identical calls join the settled flight)
                    await self._to_store(key, value, expires, now)
            return outcome
        finally:  # settled, or its leader cancelled (outcome None): its waiters wake
            _LEADING.set(leading)
            if self._flights.get(here) is flight:
                del self._flights[here]
            flight.done.set()

    async def _from_store(self, key: str) -> tuple[Any] | None:
        store = self.store
        if store is None:
            return None
        now = self.clock.now()
        found = None
        try:
            with anyio.move_on_after(_STORE_TIMEOUT) as waited:
                found = await store.get_shared(key, now=now)
        except Exception as exc:  # a cache that cannot be read is a miss
            _LOG.warning("shared results: reading %r from the store failed: %s", key, exc)
            return None
        if waited.cancelled_caught:
            _LOG.warning("shared results: reading %r from the store took too long", key)
            return None
        if found is not None:
            self._keep(key, found[0], now)
        return found

    async def _to_store(self, key: str, value: Any, expires: float | None, now: float) -> None:
        assert self.store is not None
        try:
            with anyio.move_on_after(_STORE_TIMEOUT):
                await self.store.put_shared(key, json_safe(value), expires_at=expires, now=now)
        except Exception as exc:  # the result stands; it is only not kept
            _LOG.warning("shared results: keeping %r in the store failed: %s", key, exc)
