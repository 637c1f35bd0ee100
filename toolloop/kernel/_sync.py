"""The sync twins of every product's verbs: one event loop per call, never inside another."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar

import anyio
import sniffio

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._options import RunOverrides

__all__ = ["Backend", "SyncTwins", "run_sync"]

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


R = TypeVar("R")


class Verbs(Generic[R]):
    """What a product's twins stand on: its async ``resume`` and ``recover``."""

    __slots__ = ()

    if TYPE_CHECKING:

        async def resume(
            self, run: Any, decision: Any, /, **options: Unpack[RunOverrides]
        ) -> R: ...

        async def recover(
            self, run_id: str, /, *, force: bool = False, **options: Unpack[RunOverrides]
        ) -> R: ...


class SyncTwins(Verbs[R]):
    """The sync twins of an agent's ``resume`` and ``recover`` (the same arguments, and
    ``backend``): one event loop per call, for scripts. An agent class derives from it and
    defines the two async verbs."""

    __slots__ = ()

    def resume_sync(
        self,
        run: Any,
        decision: Any,
        /,
        *,
        backend: Backend = "asyncio",
        **options: Unpack[RunOverrides],
    ) -> R:
        """The sync twin of :meth:`resume`."""
        call = functools.partial(self.resume, run, decision, **options)
        return run_sync(call, backend, name="resume_sync", instead="agent.resume")

    def recover_sync(
        self,
        run_id: str,
        /,
        *,
        force: bool = False,
        backend: Backend = "asyncio",
        **options: Unpack[RunOverrides],
    ) -> R:
        """The sync twin of :meth:`recover`."""
        call = functools.partial(self.recover, run_id, force=force, **options)
        return run_sync(call, backend, name="recover_sync", instead="agent.recover")
