"""Telling tasks apart in tests: the backend's own task objects, held, so that no task
can take another's id (``anyio.get_current_task().id`` is ``id()`` of the task, which a
new task may reuse once the first is gone)."""

from __future__ import annotations

import sniffio


def current_task() -> object:
    """The running backend's own task object (asyncio's or trio's)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_task()
    import asyncio  # noqa: TID251 - the backend's own task, asked of each backend in turn

    task = asyncio.current_task()
    assert task is not None
    return task


def distinct(tasks: list[object]) -> int:
    """How many different tasks ``tasks`` holds (all alive: the list holds them)."""
    return len({id(task) for task in tasks})
