"""Retries with backoff and jitter, honouring a server's ``Retry-After``, bounded by the
run's deadline: one policy for model calls and for idempotent tools.

:class:`Tries` is the one loop every guarded call goes through (a model call in
:func:`~toolloop.models.stream_chat`, a tool call in the runner's
:class:`~toolloop.runner.Executor`): each try is admitted by the call's limiter, if any, and
a failed one is told to it; a failure the policy retries waits (never past the deadline of
the enclosing cancel scopes: the run's ``timeout``, a ``model_timeout``), is told to the
run as a scheduled retry, and the call is tried again.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass, field

import anyio

from .._errors import ModelCallError, RateLimitedError
from ._clock import SYSTEM_CLOCK, Clock
from ._limiter import Permit, RateLimit
from ._observe import RetryTarget, ScheduledRetry, current_observer
from ._signals import retry_after_of, status_of

__all__ = ["RETRY_STATUSES", "RetryPolicy", "Tries"]

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""The HTTP statuses retried by default: a timeout, a conflict, the rate, the server's
errors (as the ``openai`` client retries)."""

_MAX_ERROR_CHARS = 500


def _number(name: str, value: object, *, low: float, high: float = math.inf) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise ValueError(f"RetryPolicy: {name} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a failed call is tried again: a run's ``model_retry`` (every model call), its
    ``tool_retry`` (the calls of its ``idempotent_tools`` only: a tool that is not safe to
    run twice is never retried).

    The wait before retry ``n`` (1 for the first) is ``backoff * 2 ** (n - 1)``, at most
    ``max_backoff``, less up to ``jitter`` of it at random (so that many calls refused at
    once do not come back at once), and never less than the server's ``Retry-After``. A
    retry whose wait would pass the deadline of the run (its ``timeout``, a
    ``model_timeout``) is not made: the call fails at once with its error. A retried model
    call is a model call of the run: its budget is checked before each try, and each try is
    counted as a request.

    Args:
        tries: tries in all, the first included (1: no retry).
        backoff: seconds before the first retry.
        max_backoff: the longest wait between two tries (unless a ``Retry-After`` asks
            for more).
        jitter: the fraction of each wait taken off at random (0: none, 1: "full jitter").
        statuses: the HTTP statuses retried (a model's errors keep theirs; a tool's HTTP
            client's are read from its exception).
        retry_on: exception types retried besides (by default ``ConnectionError``); a model
            call that could not reach its server, or whose stream broke before it began, is
            always retried.
        max_retry_after: a ``Retry-After`` longer than this many seconds is not waited for:
            the call fails at once.
        clock: the clock the waits sleep on (the system's by default).

    Raises:
        ValueError: a value out of range.
    """

    tries: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    jitter: float = 0.5
    statuses: Collection[int] = RETRY_STATUSES
    retry_on: tuple[type[BaseException], ...] = (ConnectionError,)
    max_retry_after: float = 60.0
    clock: Clock | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.tries, bool) or not isinstance(self.tries, int) or self.tries < 1:
            raise ValueError(f"RetryPolicy: tries must be an int >= 1, got {self.tries!r}")
        _number("backoff", self.backoff, low=0.0)
        _number("max_backoff", self.max_backoff, low=0.0)
        _number("jitter", self.jitter, low=0.0, high=1.0)
        _number("max_retry_after", self.max_retry_after, low=0.0)
        if isinstance(self.statuses, (str, bytes)) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in self.statuses
        ):
            raise ValueError(
                f"RetryPolicy: statuses must be HTTP statuses (ints), got {self.statuses!r}"
            )
        object.__setattr__(self, "statuses", frozenset(self.statuses))
        retry_on = self.retry_on
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
            object.__setattr__(self, "retry_on", retry_on)
        if not isinstance(retry_on, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in retry_on
        ):
            raise ValueError(
                f"RetryPolicy: retry_on must be a tuple of exception types, got {retry_on!r}"
            )

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth another try (tries left aside)."""
        if isinstance(exc, RateLimitedError):
            return True
        status = status_of(exc)
        if status is not None:
            return status in self.statuses
        if isinstance(exc, ModelCallError):
            return True  # the server could not be reached, or broke off before the reply
        return isinstance(exc, self.retry_on)

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after try ``attempt`` (1 for the first) failed."""
        wait = min(self.backoff * 2.0 ** min(attempt - 1, 64), self.max_backoff)
        if self.jitter:
            wait *= 1.0 - self.jitter * random.random()
        if retry_after is not None and retry_after > wait:
            wait = retry_after
        return wait


@dataclass(slots=True, eq=False)
class Tries:
    """The tries of one call: each admitted by ``limit``, retried by ``retry`` (see the
    module docs). ``attempt`` is the try in progress (1 for the first).

    ::

        tries = Tries(limit, retry, "tool", name)
        while True:
            permit = await tries.admit()
            try:
                value = await work()
            except Exception as exc:
                failure = exc
            else:
                tries.release(permit)
                return value
            tries.release(permit, failure)
            if not await tries.again(failure):
                raise failure
    """

    limit: RateLimit | None
    retry: RetryPolicy | None
    target: RetryTarget
    name: str = ""
    index: int | None = None
    attempt: int = field(default=0, init=False)

    async def admit(self) -> Permit | None:
        """Start the next try: its permit from the limiter (``None``: no limiter)."""
        self.attempt += 1
        limit = self.limit
        return None if limit is None else await limit.acquire()

    @staticmethod
    def release(permit: Permit | None, outcome: BaseException | None = None) -> None:
        """The try ended: told to its limiter (see :meth:`Permit.release`)."""
        if permit is not None:
            permit.release(outcome)

    async def again(self, exc: Exception) -> bool:
        """Try ``attempt`` failed with ``exc``: wait and say ``True`` if the call is to be
        tried again; ``False`` (at once) if not: no policy, no try left, an error it does
        not retry, a ``Retry-After`` too long, or a wait that would pass the deadline."""
        retry = self.retry
        if retry is None or self.attempt >= retry.tries or not retry.retries(exc):
            return False
        retry_after = retry_after_of(exc)
        if retry_after is not None and retry_after > retry.max_retry_after:
            return False
        wait = retry.wait(self.attempt, retry_after)
        deadline = anyio.current_effective_deadline()
        if deadline != math.inf and anyio.current_time() + wait >= deadline:
            return False  # it would fail on the deadline anyway: fail now, with its error
        observer = current_observer()
        if observer is not None:
            said = f"{type(exc).__name__}: {exc}"
            if len(said) > _MAX_ERROR_CHARS:
                said = said[:_MAX_ERROR_CHARS] + "…"
            observer.retry_scheduled(
                ScheduledRetry(
                    target=self.target,
                    name=self.name,
                    index=self.index,
                    attempt=self.attempt,
                    wait=wait,
                    error=said,
                    status=status_of(exc),
                    retry_after=retry_after,
                )
            )
        clock = retry.clock or SYSTEM_CLOCK
        await clock.sleep(wait)
        return True
