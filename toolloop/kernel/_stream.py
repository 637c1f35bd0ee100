"""Every product's streamed run: the run in a task beside the caller, its events read as they
happen, its result once they ended.

::

    async with agent.stream("Mail Ada the forecast") as run:
        async for event in run:
            print(event.kind)
    print(run.result.text)

:func:`stream_run` runs any product's run call with an ``on_event`` that forwards each event
into a :class:`RunStream` (and to the caller's own ``on_event``); every product's stream
verbs are that: the loop's ``stream_plan_and_execute`` and its resume and recover twins, and
each agent's ``stream``, ``stream_resume`` and ``stream_recover`` (:class:`StreamTwins`).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..flow import (
    EventEmitted,
    ExecutionFailed,
    ExecutionFinished,
    ExecutionStarted,
    FlowEvent,
    StepFailed,
    StepFinished,
    StepStarted,
)
from ._options import OnEvent
from ._sync import Verbs

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._options import RunOverrides

__all__ = ["ENGINE_EVENTS", "RunStream", "StreamTwins", "stream_run"]

ResultT = TypeVar("ResultT")

ENGINE_EVENTS: frozenset[type[FlowEvent]] = frozenset(
    {
        ExecutionStarted,
        StepStarted,
        StepFinished,
        StepFailed,
        EventEmitted,
        ExecutionFinished,
        ExecutionFailed,
    }
)
"""The engine's own events, which a stream with ``engine_events=False`` leaves out: the
steps of the flow and the execution's start and end. A pause
(:class:`~toolloop.flow.ExecutionPaused`) is the run's, and stays."""


class RunStream(Generic[ResultT]):
    """A run in progress: iterate over its events (any product's, typed: each a
    :class:`~toolloop.flow.FlowEvent`); :attr:`result` is there once they ended.

    Made by :func:`stream_run` (every product's stream verbs).
    """

    __slots__ = ("_ended", "_engine_events", "_failure", "_left_early", "_receive", "_result")

    def __init__(
        self, receive: MemoryObjectReceiveStream[FlowEvent], *, engine_events: bool = True
    ) -> None:
        self._receive = receive
        self._engine_events = engine_events
        self._result: tuple[ResultT] | None = None
        self._failure: Exception | None = None
        self._ended = False
        self._left_early = False

    def __aiter__(self) -> RunStream[ResultT]:
        return self

    async def __anext__(self) -> FlowEvent:
        try:
            while True:
                event = await self._receive.receive()
                if self._engine_events or type(event) not in ENGINE_EVENTS:
                    return event
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._ended = True
            raise StopAsyncIteration from None

    @property
    def result(self) -> ResultT:
        """The run's result (the product's: a completed run's, or a paused one's).

        Raises:
            RuntimeError: the events have not ended yet (read them to the end first), the
                run raised (the block raises its error as it exits), or the block was left
                before the run finished, which cancelled it.
        """
        if self._result is not None:
            return self._result[0]
        if self._failure is not None:
            raise RuntimeError(
                f"the run raised {type(self._failure).__name__}, so it has no result (the "
                "block raises the error as it exits)"
            ) from self._failure
        if self._left_early:
            raise RuntimeError(
                "the run was cancelled when its block was left before its events ended, so "
                "it has no result; read the events to the end inside the block"
            )
        raise RuntimeError("the run has not finished; read its events to the end first")


class _Forward:
    """The run's events into the stream's channel, and to the caller's own ``on_event``."""

    __slots__ = ("_also", "_send")

    def __init__(self, send: MemoryObjectSendStream[FlowEvent], also: OnEvent | None) -> None:
        self._send = send
        self._also = also

    def __call__(self, event: FlowEvent) -> None:
        try:
            if self._also is not None:
                self._also(event)
        finally:  # (one that raises is logged by the run; the stream still has the event)
            try:
                self._send.send_nowait(event)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the reader left


@asynccontextmanager
async def stream_run(
    call: Callable[..., Awaitable[ResultT]],
    options: Mapping[str, Any],
    *,
    engine_events: bool = True,
) -> AsyncIterator[RunStream[ResultT]]:
    """Run ``call(**options)`` (a product's run, resume or recover) in a task beside the
    block, and yield the :class:`RunStream` of its events.

    The run's ``on_event`` is a forwarder into the stream, which also calls the
    ``on_event`` of ``options`` (the caller's own), first, with every event. With
    ``engine_events=False`` the stream leaves out the engine's events
    (:data:`ENGINE_EVENTS`: step started and finished, ...); the caller's ``on_event`` still
    sees them.

    Leaving the block before the events ended cancels the run (its tools see the
    cancellation; its task is awaited before the block is left), and its ``result`` then
    raises. An error of the run is raised when the block exits; an error of the block's own
    is raised as it is (the run cancelled), never in an exception group.
    """
    send, receive = anyio.create_memory_object_stream[FlowEvent](max_buffer_size=math.inf)
    stream: RunStream[ResultT] = RunStream(receive, engine_events=engine_events)
    given = {**options, "on_event": _Forward(send, options.get("on_event"))}

    async def run() -> None:
        try:
            stream._result = (await call(**given),)
        except Exception as exc:  # raised as the block exits
            stream._failure = exc
        finally:
            send.close()  # the events end: the reader's iteration stops

    failed: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            yield stream
        except Exception as exc:  # the block's own error: raised as it is, below
            failed = exc
        finally:
            if not stream._ended:  # left early: the run is not wanted any more
                stream._left_early = True
                tg.cancel_scope.cancel()
            receive.close()
    if failed is not None:
        raise failed
    if stream._failure is not None:
        raise stream._failure


class StreamTwins(Verbs[ResultT]):
    """The stream twins of an agent's ``resume`` and ``recover`` (the same arguments, and
    ``engine_events``): each an async context manager of the run's :class:`RunStream`, as
    :func:`stream_run` makes it. An agent class derives from it, defines the two async
    verbs, and its own ``stream`` of ``run``."""

    __slots__ = ()

    def stream_resume(
        self,
        run: Any,
        decision: Any,
        /,
        *,
        engine_events: bool = True,
        **options: Unpack[RunOverrides],
    ) -> AbstractAsyncContextManager[RunStream[ResultT]]:
        """The stream twin of :meth:`resume`: ``async with agent.stream_resume(run_id,
        decision) as run:``, its events as they happen, then ``run.result`` (see
        :func:`~toolloop.kernel.stream_run`)."""

        async def resume(**given: Any) -> ResultT:
            return await self.resume(run, decision, **given)

        return stream_run(resume, options, engine_events=engine_events)

    def stream_recover(
        self,
        run_id: str,
        /,
        *,
        force: bool = False,
        engine_events: bool = True,
        **options: Unpack[RunOverrides],
    ) -> AbstractAsyncContextManager[RunStream[ResultT]]:
        """The stream twin of :meth:`recover`: ``async with agent.stream_recover(run_id) as
        run:``, its events as they happen, then ``run.result`` (see
        :func:`~toolloop.kernel.stream_run`)."""

        async def recover(**given: Any) -> ResultT:
            return await self.recover(run_id, force=force, **given)

        return stream_run(recover, options, engine_events=engine_events)
