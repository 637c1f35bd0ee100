"""The shape of a run, rebuilt from its events: rounds, their plan, their tool calls."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..flow import ExecutionFailed, FlowEvent
from ..kernel import RunFinished
from ..loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ..runner import ToolCallFinished, ToolCallStarted

__all__ = ["CallSpan", "RoundSpan", "RunShape"]


@dataclass
class CallSpan:
    """One command of a round: when its tool ran, and how it ended."""

    round_index: int
    index: int
    tool_name: str
    purpose: str
    kwargs: dict[str, Any]
    started: float
    ended: float | None = None
    ran: bool = True
    """False for a command refused before its tool ran (unknown tool, bad arguments)."""
    success: bool | None = None
    result: Any = None
    error: str | None = None

    @property
    def duration(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass
class RoundSpan:
    """One round: its planner call, then its tool calls."""

    index: int
    plan_started: float
    plan_ended: float | None = None
    next_action: str | None = None
    commands: int = 0
    short_circuited: bool = False
    stop_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    ended: float | None = None
    calls: list[CallSpan] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        """Some tool started before the plan was complete (streaming dispatch)."""
        return self.plan_ended is not None and any(
            c.ran and c.started < self.plan_ended for c in self.calls
        )


@dataclass
class RunShape:
    """Rounds, calls and the end of a run, from its events (in any flow that publishes the
    loop's events)."""

    rounds: list[RoundSpan] = field(default_factory=list)
    finished_at: float | None = None
    stop_reason: str | None = None
    failed_at: float | None = None
    error: str | None = None
    end: float = 0.0
    """The time of the last event."""

    @property
    def calls(self) -> list[CallSpan]:
        return [call for r in self.rounds for call in r.calls]

    @classmethod
    def from_events(cls, events: Iterable[FlowEvent]) -> RunShape:
        shape = cls()
        rounds: dict[int, RoundSpan] = {}
        open_calls: dict[tuple[int, int], CallSpan] = {}

        def round_at(index: int, at: float) -> RoundSpan:
            span = rounds.get(index)
            if span is None:
                span = rounds[index] = RoundSpan(index=index, plan_started=at)
                shape.rounds.append(span)
            return span

        def add_call(
            event: ToolCallStarted | ToolCallFinished,
            tool_name: str,
            purpose: str,
            kwargs: Mapping[str, Any],
            started: float,
            ran: bool = True,
        ) -> CallSpan:
            call = CallSpan(
                round_index=event.round_index,
                index=event.index,
                tool_name=tool_name,
                purpose=purpose,
                kwargs=dict(kwargs),
                started=started,
                ran=ran,
            )
            round_at(event.round_index, event.at).calls.append(call)
            return call

        for event in events:
            shape.end = max(shape.end, event.at)
            if isinstance(event, RoundStarted):
                round_at(event.round_index, event.at)
            elif isinstance(event, PlanDecided):
                span = round_at(event.round_index, event.at - event.duration)
                span.plan_ended = event.at
                span.next_action = event.next_action
                span.commands = len(event.commands)
                span.short_circuited = event.short_circuited
                span.stop_reason = event.stop_reason
                span.notes = list(event.notes)
            elif isinstance(event, ToolCallStarted):
                command = event.command
                open_calls[(event.round_index, event.index)] = add_call(
                    event, command.tool_name, command.purpose, command.tool_kwargs, event.at
                )
            elif isinstance(event, ToolCallFinished):
                record = event.record
                found = open_calls.pop((event.round_index, event.index), None)
                if found is None:  # refused before its tool ran
                    started = event.at - event.duration
                    found = add_call(
                        event, record.tool_name, record.purpose, record.kwargs, started, ran=False
                    )
                found.ended = event.at
                found.success = record.success
                found.result = record.result
                found.error = record.error
            elif isinstance(event, RoundFinished):
                round_at(event.round_index, event.at - event.duration).ended = event.at
            elif isinstance(event, RunFinished):
                shape.finished_at = event.at
                shape.stop_reason = event.stop_reason
            elif isinstance(event, ExecutionFailed):
                shape.failed_at = event.at
                shape.error = event.error
        for span in shape.rounds:
            span.calls.sort(key=lambda c: c.index)
        return shape
