"""Streaming dispatch: commands handed over while the plan still streams.

The PLAN step emits ``command_ready`` for each command the moment its JSON object closes;
the ``run_command`` step runs it (in a task of its own, under the run's concurrency limit)
and notes its record here; EXECUTE waits for the ones still running and keeps every record
in the planner's order.
"""

from __future__ import annotations

import anyio

from ..runner import ToolCommand, ToolExecutionRecord, cancelled_error
from ._normalize import PlanItem

__all__ = ["Inflight"]


class Inflight:
    """The commands of one round that were dispatched while the plan streamed."""

    __slots__ = ("_idle", "commands", "committed", "items", "pending", "records", "round_index")

    def __init__(self, round_index: int) -> None:
        self.round_index = round_index
        self.items: dict[int, PlanItem] = {}
        """By index in the planner's command list."""
        self.records: dict[int, ToolExecutionRecord] = {}
        self.pending = 0
        self.commands = 0
        self.committed = False
        self._idle: anyio.Event | None = None

    def add(self, index: int, item: PlanItem) -> bool:
        """Note a command; ``True`` when it must be run (it is new and runnable)."""
        if index in self.items:
            return False
        self.items[index] = item
        if isinstance(item, ToolCommand):
            self.commands += 1
            self.pending += 1
            return True
        self.records[index] = item
        return False

    def finished(self, index: int, record: ToolExecutionRecord) -> None:
        self.records[index] = record
        self.pending -= 1
        if self.pending == 0 and self._idle is not None:
            self._idle.set()

    async def wait(self) -> None:
        """Until every dispatched command has its record."""
        while self.pending:
            self._idle = anyio.Event()
            await self._idle.wait()

    def ordered(self) -> list[tuple[int, ToolExecutionRecord]]:
        """``(index, record)`` in the planner's order; a command still without a record gets
        a cancelled one (the run ended before it finished)."""
        out: list[tuple[int, ToolExecutionRecord]] = []
        for index in sorted(self.items):
            record = self.records.get(index)
            if record is None:
                item = self.items[index]
                assert isinstance(item, ToolCommand)
                record = ToolExecutionRecord.failed(item, cancelled_error(item.tool_name))
            out.append((index, record))
        return out
