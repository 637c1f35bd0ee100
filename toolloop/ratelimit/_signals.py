"""What a failed call says about the rate: its HTTP status, and how long the server asked to
wait.

A model call fails with a :class:`~toolloop.errors.ModelCallError` that keeps both
(``status``, ``retry_after``); a tool raises :class:`~toolloop.errors.RateLimitedError`, or
the error of its HTTP client, which is read as it is: its ``status`` or ``status_code``, or
its ``response``'s, and the ``Retry-After`` of its headers (httpx, requests, aiohttp and
openai's errors all fit).
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

from .._errors import ModelCallError, RateLimitedError

__all__ = [
    "RATE_LIMIT_STATUSES",
    "is_rate_limited",
    "retry_after_from_headers",
    "retry_after_of",
    "status_of",
]

RATE_LIMIT_STATUSES = frozenset({429, 503})
"""The answers a limiter backs off on: Too Many Requests, Service Unavailable."""

_MAX_HEADER = 64  # characters of a header value worth reading


def _status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status ``exc`` carries: its own ``status`` or ``status_code``, or its
    ``response``'s; ``None`` when it has none."""
    if isinstance(exc, (ModelCallError, RateLimitedError)):
        return _status(exc.status)
    for owner in (exc, getattr(exc, "response", None)):
        if owner is None:
            continue
        for name in ("status_code", "status"):
            try:
                found = _status(getattr(owner, name, None))
            except Exception:  # a property that raises: no status
                found = None
            if found is not None:
                return found
    return None


def retry_after_from_headers(headers: Any, *, now: float | None = None) -> float | None:
    """Seconds to wait that HTTP ``headers`` ask for: ``retry-after-ms``, then
    ``Retry-After`` in seconds or as an HTTP date; ``None`` when they ask nothing usable
    (a negative, an infinite or an unreadable value).

    Args:
        headers: a mapping of header names to values (case as a client keeps them:
            httpx's, requests' and aiohttp's headers ignore case; a plain dict is read in
            lower case too).
        now: the wall clock's time, for a date (``time.time()`` by default).
    """
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = _header(headers, name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if name == "retry-after":
                return _date(value, now)
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _header(headers: Any, name: str) -> str | None:
    try:
        value = headers.get(name)
        if value is None and isinstance(headers, Mapping):
            for key, found in headers.items():
                if isinstance(key, str) and key.lower() == name:
                    value = found
                    break
    except Exception:  # headers of no usable shape
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or len(value) > _MAX_HEADER:
        return None
    return value.strip()


def _date(value: str, now: float | None) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return max(wait, 0.0)


def retry_after_of(exc: BaseException) -> float | None:
    """The seconds ``exc`` says to wait before the next try: a
    :class:`~toolloop.errors.ModelCallError`'s or :class:`~toolloop.errors.RateLimitedError`'s
    ``retry_after``, or the ``Retry-After`` of its (or its ``response``'s) headers."""
    if isinstance(exc, (ModelCallError, RateLimitedError)):
        wait: object = exc.retry_after
        if isinstance(wait, bool) or not isinstance(wait, (int, float)):
            return None
        return float(wait) if math.isfinite(wait) and wait >= 0 else None
    for owner in (exc, getattr(exc, "response", None)):
        if owner is None:
            continue
        try:
            headers = getattr(owner, "headers", None)
        except Exception:
            headers = None
        if headers is not None:
            found = retry_after_from_headers(headers)
            if found is not None:
                return found
    return None


def is_rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is a refusal for the rate: a
    :class:`~toolloop.errors.RateLimitedError`, or an HTTP 429 or 503."""
    if isinstance(exc, RateLimitedError):
        return True
    return status_of(exc) in RATE_LIMIT_STATUSES
