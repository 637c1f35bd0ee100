"""How an execution ended, and the stream of its events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from ._events import FlowEvent
from ._snapshot import FlowSnapshot, Wait
from ._trace import RawEntry, TraceEntry, materialize

__all__ = ["EventStream", "FlowResult"]

S = TypeVar("S")


class FlowResult(Generic[S]):
    """How an execution ended (or paused): its value, its state, its trace.

    Attributes:
        status: ``completed``, or ``paused`` waiting for external events.
        value: what reached the end (``None`` when paused).
        state: the execution's state.
        execution_id: the execution's id.
        waiting: when paused, the external events it waits for, with what each asks.
        snapshot: when paused, everything needed to resume it elsewhere (JSON-ready).
    """

    __slots__ = ("_raw", "execution_id", "snapshot", "state", "status", "value", "waiting")

    def __init__(
        self,
        status: Literal["completed", "paused"],
        value: Any,
        state: S,
        raw_trace: list[RawEntry],
        execution_id: str,
        waiting: list[Wait] | None = None,
        snapshot: FlowSnapshot | None = None,
    ) -> None:
        self.status = status
        self.value = value
        self.state = state
        self._raw = raw_trace
        self.execution_id = execution_id
        self.waiting: list[Wait] = waiting or []
        self.snapshot = snapshot

    @property
    def trace(self) -> list[TraceEntry]:
        """What ran, in the order it finished."""
        return materialize(self._raw)

    @property
    def paused(self) -> bool:
        return self.status == "paused"

    def __repr__(self) -> str:
        return f"FlowResult(status={self.status!r}, value={self.value!r})"


class EventStream:
    """An async iterator over an execution's events; ends when the execution stops.

    Use it as ``async with execution.events() as events: async for event in events: ...``.
    """

    def __init__(
        self, receive: MemoryObjectReceiveStream[FlowEvent], unsubscribe: Callable[[], None]
    ) -> None:
        self._receive = receive
        self._unsubscribe = unsubscribe

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> FlowEvent:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._receive.close()  # read to the end: nothing left to close
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._unsubscribe()
        self._receive.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
