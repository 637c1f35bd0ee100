"""Rate limits that adapt, and retries: for model calls and tool calls, in every product.

- :class:`RateLimit`: calls per second and calls at once, shared by every run given the
  same object; it backs off when a server refuses calls for their rate (HTTP 429 or 503, a
  tool's :class:`~toolloop.errors.RateLimitedError`), holds calls for its ``Retry-After``,
  and probes back up.
- :class:`SharedRateLimit`: a :class:`RateLimit` shared by every worker (process, machine)
  through a store (PostgreSQL): one rate for all of them, backing off and probing together.
- :class:`RetryPolicy`: tries, backoff with jitter, which failures; bounded by the run's
  deadline and budget.

A run takes them as options (the same in every product): ``model_rate_limit`` and
``model_retry`` for its model calls, ``rate_limits`` (tool names to limiters) and
``tool_retry`` (for its ``idempotent_tools``) for its tool calls. Each retry is told as a
``RetryScheduled`` event, each change of a limiter as a ``RateLimitChanged`` event (see
:mod:`toolloop.kernel`).

This package knows only the error hierarchy: the model layer and the runner use it alike.
"""

from __future__ import annotations

from ._clock import Clock as Clock
from ._clock import SystemClock as SystemClock
from ._limiter import Permit as Permit
from ._limiter import RateLimit as RateLimit
from ._limiter import RateLimitOptions as RateLimitOptions
from ._observe import ChangeReason as ChangeReason
from ._observe import LimitObserver as LimitObserver
from ._observe import RateLimitState as RateLimitState
from ._observe import RetryTarget as RetryTarget
from ._observe import ScheduledRetry as ScheduledRetry
from ._observe import current_observer as current_observer
from ._observe import observe as observe
from ._observe import stop_observing as stop_observing
from ._retry import RETRY_STATUSES as RETRY_STATUSES
from ._retry import RetryPolicy as RetryPolicy
from ._retry import Tries as Tries
from ._shared import RateLimitStore as RateLimitStore
from ._shared import SharedRateLimit as SharedRateLimit
from ._signals import RATE_LIMIT_STATUSES as RATE_LIMIT_STATUSES
from ._signals import is_rate_limited as is_rate_limited
from ._signals import retry_after_from_headers as retry_after_from_headers
from ._signals import retry_after_of as retry_after_of
from ._signals import status_of as status_of

__all__ = [
    "RATE_LIMIT_STATUSES",
    "RETRY_STATUSES",
    "ChangeReason",
    "Clock",
    "LimitObserver",
    "Permit",
    "RateLimit",
    "RateLimitOptions",
    "RateLimitState",
    "RateLimitStore",
    "RetryPolicy",
    "RetryTarget",
    "ScheduledRetry",
    "SharedRateLimit",
    "SystemClock",
    "Tries",
    "current_observer",
    "is_rate_limited",
    "observe",
    "retry_after_from_headers",
    "retry_after_of",
    "status_of",
]
