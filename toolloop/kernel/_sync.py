"""The sync twins of every product's verbs: one event loop per call, never inside another."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias, TypeVar

import anyio
import sniffio

__all__ = ["Backend", "run_sync"]

T = TypeVar("T")

Backend: TypeAlias = Literal["asyncio", "trio"]
"""The event loop a sync twin runs its call on."""


def run_sync(call: Callable[[], Awaitable[T]], backend: Backend, *, name: str, instead: str) -> T:
    """Run ``call`` on an event loop of its own (``backend``), for scripts.

    Args:
        name: the sync twin, as the caller wrote it (``"plan_and_execute"``, ``"run_sync"``).
        instead: what to ``await`` inside a running event loop (``"agent.run"``).

    Raises:
        RuntimeError: called inside a running event loop (a second one cannot run there).
    """
    try:
        running = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        running = None
    if running is not None:
        raise RuntimeError(
            f"{name}() was called inside a running {running} event loop; use "
            f"`await {instead}(...)` there"
        )
    return anyio.run(call, backend=backend)
