"""Awaiting a Ray object without blocking the event loop, on asyncio and on trio.

On asyncio an ``ObjectRef`` is awaitable (Ray completes a future from its own thread). On
trio it is not: a worker thread waits with ``ray.get(ref, timeout=poll)`` and comes back to
the loop; the thread is abandoned at once when the waiting task is cancelled and ends by
itself within ``poll`` seconds. Either way, a wait cut short (a timeout, a cancelled run)
cancels the Ray task with ``ray.cancel``, so nothing keeps running on the cluster for a
result nobody will read.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.to_thread
import ray
import sniffio
from ray.exceptions import GetTimeoutError, RayTaskError

__all__ = ["POLL_SECONDS", "await_ref", "cancel_ref", "unwrap_task_error"]

POLL_SECONDS = 1.0
"""On trio, how long a worker thread waits in one ``ray.get`` before checking back."""

_LOG = logging.getLogger("toolloop")
_PENDING = object()


def _get(ref: Any, poll: float) -> Any:
    try:
        return ray.get(ref, timeout=poll)
    except GetTimeoutError:
        return _PENDING


def cancel_ref(ref: Any) -> None:
    """``ray.cancel(ref)``; a task that has already finished (or a lost cluster) is no error."""
    try:
        ray.cancel(ref, force=False, recursive=True)
    except Exception as exc:  # finished, unknown, or the cluster is gone: nothing to stop
        _LOG.debug("ray.cancel(%r) did nothing: %s", ref, exc)


def unwrap_task_error(exc: BaseException) -> BaseException:
    """The user's own exception when a Ray task raised one (its type kept for the record)."""
    if isinstance(exc, RayTaskError):
        cause = exc.cause
        if isinstance(cause, Exception):
            return cause
    return exc


async def await_ref(ref: Any, *, poll: float = POLL_SECONDS) -> Any:
    """The value of ``ref``, awaited without blocking the event loop.

    Args:
        ref: a Ray ``ObjectRef`` (the result of a task or an actor method).
        poll: on trio, seconds a worker thread waits before checking back.

    Raises:
        Exception: what the task raised (a ``RayTaskError`` is unwrapped to its cause, the
            user's exception), or Ray's own error when the worker or actor died.
    """
    done = False
    try:
        try:
            if sniffio.current_async_library() == "asyncio":
                value = await ref
            else:
                while True:
                    value = await anyio.to_thread.run_sync(
                        _get,
                        ref,
                        poll,
                        abandon_on_cancel=True,
                        # a token of its own: an abandoned thread must hold no later wait back
                        limiter=anyio.CapacityLimiter(1),
                    )
                    if value is not _PENDING:
                        break
        except RayTaskError as exc:
            done = True
            cause = unwrap_task_error(exc)
            if cause is exc:
                raise
            raise cause from exc
        except Exception:
            done = True
            raise
        done = True
        return value
    finally:
        if not done:  # cancelled or timed out while the task may still run: stop it
            cancel_ref(ref)
