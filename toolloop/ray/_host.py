"""The actor that hosts runs: many at once on its own event loop, one limiter for them all.

Ray runs an actor with async methods on an asyncio loop of its own; :meth:`RunHost.run_chunk`
starts every item of a chunk at once and streams back, as each happens, the run's events
(when asked) and its outcome, as small tuples (a Ray streaming generator that yields, each
time, a list of every message ready at that moment: under load, one Ray object carries
many outcomes):

- ``("event", index, event)``: an event of the run (only when the driver listens);
- ``("ok", index, result)``: the run ended and returned ``result``;
- ``("error", index, text)``: the run raised; ``text`` says what (type and message).
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from ._jobs import Host, RunJob

__all__ = ["Message", "RunHost"]

Message = tuple[str, int, Any]

_MAX_ERROR_CHARS = 2000


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    if len(text) > _MAX_ERROR_CHARS:
        text = f"{text[:_MAX_ERROR_CHARS]}… ({len(text)} chars)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RunHost:
    """Hosts many concurrent runs of one job (made a Ray actor by the pool).

    Args:
        job: the job (Ray resolves the object reference it was given once, at creation).
        index: the actor's place in the pool.
        tool_concurrency: tokens of the limiter all its runs share (``None``: no limiter).
    """

    def __init__(self, job: RunJob, index: int, tool_concurrency: int | None) -> None:
        self._job = job
        self._index = index
        self._tokens = tool_concurrency
        self._limiter: anyio.CapacityLimiter | None = None
        job.setup()

    def ready(self) -> int:
        """The actor's process id, once it is up."""
        return os.getpid()

    def _host(self, send: MemoryObjectSendStream[Message] | None, index: int) -> Host:
        if self._limiter is None and self._tokens is not None:
            self._limiter = anyio.CapacityLimiter(self._tokens)
        if send is None:
            return Host(self._limiter, None, self._index)

        def forward(event: Any) -> None:
            send.send_nowait(("event", index, event))

        return Host(self._limiter, forward, self._index)

    async def _one(
        self, index: int, item: Any, events: bool, send: MemoryObjectSendStream[Message]
    ) -> None:
        async with send:
            host = self._host(send if events else None, index)
            try:
                result = await self._job.run(item, host)
            except Exception as exc:
                send.send_nowait(("error", index, _error_text(exc)))
            else:
                send.send_nowait(("ok", index, result))

    async def run_chunk(
        self, items: list[tuple[int, Any]], events: bool
    ) -> AsyncIterator[list[Message]]:
        """Run every item at once; stream back events and outcomes as they happen."""
        send, receive = anyio.create_memory_object_stream[Message](math.inf)
        async with anyio.create_task_group() as group, receive:
            with send:
                for index, item in items:
                    group.start_soon(self._one, index, item, events, send.clone())
            async for message in receive:
                ready = [message]
                while True:
                    try:
                        ready.append(receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                yield ready
