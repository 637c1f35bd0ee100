"""Who is told of retries and of a limiter's changes: the run the call belongs to.

A run makes its :class:`LimitObserver` active for its tasks (a context variable, as its
usage meter), so a retry scheduled, or a shared limiter that backs off or probes up, is
told to the run whose call it was, in its events; no layer passes the run down.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ChangeReason",
    "LimitObserver",
    "RateLimitState",
    "RetryTarget",
    "ScheduledRetry",
    "current_observer",
    "observe",
    "stop_observing",
]

RetryTarget = Literal["model", "tool"]
ChangeReason = Literal["backoff", "probe", "hold", "slow_start_ended"]
"""Why a limiter changed: it backed off (a call was refused for the rate), it probed up
(calls went through at the rate it allowed), it holds every call (the server's
``Retry-After``), or its start (admitting more calls at once while nothing was refused)
ended at the first refusal."""


@dataclass(frozen=True, slots=True)
class ScheduledRetry:
    """A call failed and will be tried again after ``wait`` seconds."""

    target: RetryTarget
    """A model call, or a tool call."""
    name: str
    """The tool's name (``""`` for a model call)."""
    index: int | None
    """The model call's index in its run (``None``: a tool call, or not known)."""
    attempt: int
    """The try that failed (1: the first)."""
    wait: float
    """Seconds before the next try (it also waits for its limiter, if any)."""
    error: str
    """What the failed try raised."""
    status: int | None
    """Its HTTP status, if any."""
    retry_after: float | None
    """The seconds the server asked to wait, if it said."""


class RateLimitState(BaseModel):
    """A limiter as it is now (:meth:`RateLimit.state`), and why it changed when told (a
    run tells each change as this state, its event
    :class:`~toolloop.kernel.RateLimitChanged`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The limiter's name (``RateLimit(name=...)``)."""
    rate: float | None
    """Calls a second it admits now (``None``: no bound on the rate)."""
    concurrency: int | None
    """Calls at once it admits now (``None``: no bound)."""
    in_flight: int
    """Calls admitted and not ended."""
    waiting: int
    """Calls waiting to be admitted."""
    hold: float
    """Seconds from now before it admits any call (the server's ``Retry-After``); 0: none."""
    admitted: int
    """Calls admitted so far."""
    refused: int
    """Calls the server refused for the rate so far (429, 503, ``RateLimitedError``)."""
    backoffs: int
    """Times it lowered its rate."""
    reason: ChangeReason | None = None
    """Why it changed (``None``: a reading, not a change)."""


class LimitObserver(Protocol):
    """Told of the retries and limiter changes of a run's calls (the kernel makes them
    the run's ``RetryScheduled`` and ``RateLimitChanged`` events)."""

    def retry_scheduled(self, retry: ScheduledRetry) -> None:
        """A call of the run will be tried again."""

    def rate_limit_changed(self, state: RateLimitState) -> None:
        """A limiter changed on a call of the run."""


_OBSERVER: ContextVar[LimitObserver | None] = ContextVar("toolloop_limit_observer", default=None)


def current_observer() -> LimitObserver | None:
    """The observer of the run in progress in this task, if any."""
    return _OBSERVER.get()


def observe(observer: LimitObserver | None) -> Token[LimitObserver | None]:
    """Make ``observer`` the one told in this task (and the tasks it starts); give the
    token to :func:`stop_observing` when the run ends."""
    return _OBSERVER.set(observer)


def stop_observing(token: Token[LimitObserver | None]) -> None:
    """Undo :func:`observe`."""
    _OBSERVER.reset(token)
