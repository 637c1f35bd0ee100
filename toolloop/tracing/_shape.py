"""The shape of a run, rebuilt from its events: its model calls, its turns and their tool
calls, its statuses, its pauses and resumes, its end.

It reads the events every product publishes (the kernel's model calls and end, the
runner's tool calls, the engine's pause), so it is the same for the loop, the middleware
agent and the status agent; the loop's own round events add each round's plan, and the
status agent's ``status_changed`` its statuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..flow import ExecutionFailed, ExecutionPaused, ExecutionStarted, FlowEvent
from ..kernel import ChildRunEvent, ModelCallFinished, ModelCallStarted, ResultKept, RunFinished
from ..loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ..models import Usage
from ..runner import ToolCallFinished, ToolCallStarted

__all__ = ["CallSpan", "ModelSpan", "PauseSpan", "RoundSpan", "RunShape", "StatusMark"]


def _duration(span: CallSpan | ModelSpan) -> float | None:
    """Seconds from the span's start to its end (``None`` while it runs)."""
    return None if span.ended is None else span.ended - span.started


@dataclass
class CallSpan:
    """One tool call of a turn: when its tool ran, and how it ended."""

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
    call_id: str = ""
    kept: str | None = None
    """When its result was longer than the run's ``max_result_chars``: what the model was
    shown of it, and the handle ``read_result`` reads the rest by (a ``ResultKept``)."""
    child: RunShape | None = None
    """The run this call started, when its tool is a run (a run as a tool: the child's
    :class:`~toolloop.kernel.ChildRunEvent`), on its parent's clock."""

    duration = property(_duration)


@dataclass
class ModelSpan:
    """One model call of the run (the kernel's ``ModelCallStarted`` / ``ModelCallFinished``)."""

    index: int
    started: float
    ended: float | None = None
    usage: Usage | None = None
    tool_calls: list[str] = field(default_factory=list)
    """The names of the tools the reply asked for."""
    finish_reason: str | None = None
    closed_early: bool = False
    error: str | None = None
    text: str = ""

    duration = property(_duration)


@dataclass
class RoundSpan:
    """One turn: the loop's round (its planner call, then its tool calls), or the turn of
    another product whose tool calls carry this ``round_index``."""

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
    planned: bool = False
    """The run told this round's plan (the loop's ``round_started`` / ``plan_decided``)."""
    models: list[ModelSpan] = field(default_factory=list)
    """The model calls made while this round's plan was being made."""

    @property
    def streamed(self) -> bool:
        """Some tool started before the plan was complete (streaming dispatch)."""
        return self.plan_ended is not None and any(
            c.ran and c.started < self.plan_ended for c in self.calls
        )

    @property
    def start(self) -> float:
        starts = [self.plan_started] if self.planned else []
        starts += [c.started for c in self.calls] + [m.started for m in self.models]
        return min(starts, default=self.plan_started)


@dataclass
class PauseSpan:
    """The run paused for a human (the engine's ``ExecutionPaused``), and when it resumed."""

    at: float
    waiting_for: list[str]
    requests: list[Any]
    resumed_at: float | None = None

    @property
    def what(self) -> str:
        """What the run asks, in a few words: each request's kind, reason and tools."""
        said = []
        for request in self.requests:
            if isinstance(request, Mapping):
                kind = request.get("kind") or "request"
                calls = request.get("tool_calls") or []
                names = [c.get("tool_name") for c in calls if isinstance(c, Mapping)]
                tools = f" ({', '.join(str(n) for n in names)})" if names else ""
                said.append(f"{kind}{tools}")
            else:
                said.append(str(request))
        return "; ".join(said) or ", ".join(self.waiting_for) or "a human"


@dataclass
class StatusMark:
    """A status a step set (the status agent's ``status_changed``)."""

    at: float
    node: str
    status: str


@dataclass
class RunShape:
    """Model calls, turns, statuses, pauses and the end of a run, from its events (of any
    product)."""

    rounds: list[RoundSpan] = field(default_factory=list)
    finished_at: float | None = None
    stop_reason: str | None = None
    failed_at: float | None = None
    error: str | None = None
    end: float = 0.0
    """The time of the last event."""
    models: list[ModelSpan] = field(default_factory=list)
    """The model calls made outside any of the loop's plans (every model call of the
    agents); :attr:`model_calls` has them all."""
    pauses: list[PauseSpan] = field(default_factory=list)
    statuses: list[StatusMark] = field(default_factory=list)
    resumes: list[float] = field(default_factory=list)
    """When the run resumed (after a pause, or recovered)."""
    run_usage: Usage | None = None
    """The run's usage as its end told it (across pauses and resumes)."""
    turns: int | None = None
    records: int | None = None
    execution_id: str | None = None
    children: list[RunShape] = field(default_factory=list)
    """The runs this run's tool calls started (each also its call's ``child``), in the
    order they first told something."""

    @property
    def calls(self) -> list[CallSpan]:
        return [call for r in self.rounds for call in r.calls]

    @property
    def model_calls(self) -> list[ModelSpan]:
        """Every model call of the run, in order (those of the loop's plans too)."""
        found = self.models + [m for r in self.rounds for m in r.models]
        return sorted(found, key=lambda m: (m.started, m.index))

    @property
    def paused(self) -> bool:
        """The run's last word is a pause: it waits for a human."""
        return bool(self.pauses) and self.pauses[-1].resumed_at is None

    @property
    def usage(self) -> Usage | None:
        """The run's usage: as its end told it, else the sum of its model calls' (a paused
        run, a run cut short); ``None`` when nothing was counted."""
        if self.run_usage is not None:
            return self.run_usage
        told = [m.usage for m in self.model_calls if m.usage is not None]
        if not told:
            return None
        total = told[0]
        for usage in told[1:]:
            total = total + usage
        return total

    @classmethod
    def from_events(cls, events: Iterable[FlowEvent], *, run_id: str | None = None) -> RunShape:
        """The shape of the run these events tell (one run: see :meth:`per_run`; ``run_id``:
        its id, else the first event's run). The events of a run it called as a tool (its
        :class:`~toolloop.kernel.ChildRunEvent`) make that child's shape, under the call
        that started it.

        A continued run whose clock started again at 0 (a recovered one's; a trace written
        before a resumed run's clock went on) is laid after its pause, so that the times
        read on."""
        shape = cls(execution_id=run_id)
        below: dict[str, list[FlowEvent]] = {}
        called: dict[str, str] = {}
        rounds: dict[int, RoundSpan] = {}
        open_calls: dict[tuple[int, int], CallSpan] = {}
        open_models: dict[int, ModelSpan] = {}
        offset = 0.0
        seen = False

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
                call_id=event.call_id,
            )
            span = round_at(event.round_index, started)
            if not span.planned:  # a turn without a plan starts with its first call
                span.plan_started = min(span.plan_started, started)
            span.calls.append(call)
            return call

        def add_model(index: int, at: float) -> ModelSpan:
            model = ModelSpan(index=index, started=at)
            for span in shape.rounds:  # the loop's round whose plan is being made
                if span.planned and span.plan_ended is None and span.plan_started <= at:
                    span.models.append(model)
                    break
            else:
                shape.models.append(model)
            return model

        for event in events:
            if shape.execution_id is None:
                shape.execution_id = event.execution_id
            if isinstance(event, ChildRunEvent):
                if event.parent_run_id == shape.execution_id:  # its child's: on this clock
                    called.setdefault(event.run_id, event.call_id)
                    told = event.event.model_copy(update={"at": event.at + offset})
                    below.setdefault(event.run_id, []).append(told)
                else:  # a grandchild's: its parent's (a child of this run) to shape
                    below.setdefault(event.parent_run_id, []).append(
                        event.model_copy(update={"at": event.at + offset})
                    )
                continue
            if isinstance(event, ExecutionStarted) and shape.pauses:
                last = shape.pauses[-1]
                if event.at + offset < last.at:  # a new clock: lay it after the pause
                    offset = last.at - event.at
            at = event.at + offset
            shape.end = max(shape.end, at)
            started_before, seen = seen, True
            if isinstance(event, ExecutionStarted):
                if started_before:  # resumed (or recovered)
                    shape.resumes.append(at)
                    if shape.pauses and shape.pauses[-1].resumed_at is None:
                        shape.pauses[-1].resumed_at = at
            elif isinstance(event, RoundStarted):
                span = round_at(event.round_index, at)
                again = span.planned and (
                    span.plan_ended is not None
                    or any(p.at >= span.plan_started for p in shape.pauses)
                )
                if not span.planned or again:  # planned again after a pause
                    span.plan_started, span.plan_ended = at, None
                span.planned = True
            elif isinstance(event, PlanDecided):
                span = round_at(event.round_index, at - event.duration)
                if not span.planned:
                    span.plan_started = at - event.duration
                span.planned = True
                span.plan_ended = at
                span.next_action = event.next_action
                span.commands = len(event.commands)
                span.short_circuited = event.short_circuited
                span.stop_reason = event.stop_reason
                span.notes = list(event.notes)
            elif isinstance(event, ModelCallStarted):
                open_models[event.call_index] = add_model(event.call_index, at)
            elif isinstance(event, ModelCallFinished):
                model = open_models.pop(event.call_index, None)
                if model is None:  # its start was not seen
                    model = add_model(event.call_index, at - event.duration)
                model.ended = at
                model.usage = event.usage
                model.tool_calls = [str(c.get("name", "?")) for c in event.tool_calls]
                model.finish_reason = event.finish_reason
                model.closed_early = event.closed_early
                model.error = event.error
                model.text = event.text
            elif isinstance(event, ToolCallStarted):
                command = event.command
                open_calls[(event.round_index, event.index)] = add_call(
                    event, command.tool_name, command.purpose, command.tool_kwargs, at
                )
            elif isinstance(event, ToolCallFinished):
                record = event.record
                found = open_calls.pop((event.round_index, event.index), None)
                if found is None:  # refused before its tool ran
                    started = at - event.duration
                    found = add_call(
                        event, record.tool_name, record.purpose, record.kwargs, started, ran=False
                    )
                found.ended = at
                found.success = record.success
                found.result = record.result
                found.error = record.error
            elif isinstance(event, ResultKept):
                for round_span in reversed(shape.rounds):
                    kept = [c for c in round_span.calls if c.call_id == event.call_id]
                    if kept:
                        kept[-1].kept = (
                            f"cut for the model: shown {event.shown:,} of {event.total:,} "
                            f"chars, kept whole · handle {event.handle}"
                        )
                        break
            elif isinstance(event, RoundFinished):
                round_at(event.round_index, at - event.duration).ended = at
            elif isinstance(event, ExecutionPaused):
                shape.pauses.append(
                    PauseSpan(at=at, waiting_for=list(event.waiting_for), requests=event.requests)
                )
            elif event.kind == "status_changed":
                data = event.model_dump()
                shape.statuses.append(
                    StatusMark(at=at, node=str(data.get("node")), status=str(data.get("status")))
                )
            elif isinstance(event, RunFinished):
                shape.finished_at = at
                shape.stop_reason = event.stop_reason
                shape.run_usage = event.usage
                shape.turns = event.turns
                shape.records = event.records
            elif isinstance(event, ExecutionFailed):
                shape.failed_at = at
                shape.error = event.error
        for span in shape.rounds:
            span.calls.sort(key=lambda c: c.index)
        by_id = {call.call_id: call for call in shape.calls if call.call_id}
        for child_id, call_id in called.items():
            child = cls.from_events(below[child_id], run_id=child_id)
            shape.children.append(child)
            call = by_id.get(call_id)
            if call is not None:
                call.child = child
        return shape

    @classmethod
    def per_run(cls, events: Iterable[FlowEvent]) -> list[RunShape]:
        """The shape of each run the events tell (several runs may share one stream), in the
        order they first appear."""
        by_run: dict[str, list[FlowEvent]] = {}
        for event in events:
            by_run.setdefault(event.execution_id, []).append(event)
        return [cls.from_events(run) for run in by_run.values()]
