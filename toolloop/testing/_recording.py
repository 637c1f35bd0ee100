"""A recorded run, read from its events: its model calls (the replies whole) and its tool
calls (each with its outcome), turn by turn, and how it ended.

Every product publishes the same events (the kernel's ``ModelCallStarted`` /
``ModelCallFinished`` and ``RunFinished``, the runner's ``ToolCallStarted`` /
``ToolCallFinished``, the engine's pause and failure), so one reading serves the loop, the
middleware agent and the status agent alike. A *turn* is what a model call's reply led to:
the tool calls made after model call ``i`` started and before the next one did are turn
``i``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from ..flow import ExecutionFailed, ExecutionPaused, FlowEvent
from ..kernel import ModelCallFinished, ModelCallStarted, RunFinished
from ..models import Usage
from ..runner import ToolCallFinished, ToolCallStarted, ToolExecutionRecord
from ..tracing import EventTrace, read_trace

__all__ = ["RecordedEnd", "RecordedModelCall", "RecordedToolCall", "Recording"]

CUT_MARK = " characters in all)"
"""How a trace says it cut a long string (``… (cut: 70,000 characters in all)``)."""


@dataclass(frozen=True)
class RecordedModelCall:
    """One model call of a recorded run, its reply whole (as far as it was read)."""

    position: int
    """Its place among the run's model calls (0 for the first): the turn it starts."""
    call_index: int
    """Its index as the run told it (counted across pauses and resumes)."""
    text: str = ""
    reasoning: str | None = None
    reasoning_field: str | None = None
    refusal: str | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """``{"id", "name", "arguments"}`` of each tool call, arguments as text."""
    finish_reason: str | None = None
    usage: Usage | None = None
    closed_early: bool = False
    """The run stopped reading before the reply's end (the short-circuit): ``text`` is what
    it had read."""
    error: str | None = None
    """``"Type: message"`` of what made the call fail, when it did."""
    request: Mapping[str, Any] | None = None
    """What mattered of its request (:meth:`~toolloop.models.ChatRequest.summary`); ``None``
    in a trace written before requests were told."""

    def said(self) -> str:
        """The reply in a few words, for a diff."""
        parts = []
        if self.text:
            parts.append(_short(repr(self.text), 60))
        for call in self.tool_calls:
            parts.append(f"{call.get('name')}({_short(str(call.get('arguments', '')), 60)})")
        if self.refusal:
            parts.append(f"refusal {_short(repr(self.refusal), 40)}")
        if self.error:
            parts.append(f"failed: {_short(self.error, 60)}")
        if self.closed_early:
            parts.append("(closed early)")
        return ", ".join(parts) or "(empty)"


@dataclass(frozen=True)
class RecordedToolCall:
    """One tool call of a recorded run and its outcome."""

    turn: int
    """The model call whose turn it was part of (``-1``: before the first model call)."""
    round_index: int
    index: int
    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    ran: bool
    """The tool ran (it was not refused before running, nor answered from a journal)."""
    success: bool
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    source: str = "ran"

    @property
    def cut(self) -> bool:
        """The trace cut a long string of its result: it cannot be given back whole."""
        return _has_cut(self.result)

    def said(self) -> str:
        """The call in one line, for a diff: where, which tool, which arguments."""
        arguments = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True, default=str)
        line = f"[{self.round_index}.{self.index}] {self.tool_name} {_short(arguments, 200)}"
        if not self.ran:
            line += " (not run: " + _short(self.error or self.source, 80) + ")"
        return line


@dataclass(frozen=True)
class RecordedEnd:
    """How a recorded run ended."""

    status: Literal["completed", "paused", "failed", "unfinished"]
    stop_reason: str | None = None
    records: int | None = None
    error: str | None = None

    def said(self) -> str:
        if self.status == "completed":
            count = self.records or 0
            return f"end: completed ({self.stop_reason}, {count} record{'s' * (count != 1)})"
        if self.status == "failed":
            return f"end: failed ({_short(self.error or '', 120)})"
        return f"end: {self.status}"


@dataclass(frozen=True)
class Recording:
    """A run as its events told it: what :func:`~toolloop.testing.replay` plays back.

    Read one from a trace file (:meth:`from_trace`: ``toolloop run --trace``,
    :class:`~toolloop.tracing.TraceWriter`, :class:`~toolloop.tracing.TraceRecorder`) or
    from the events themselves (:meth:`from_events`). Only the first run the events tell
    is read (a trace may hold the runs a run's tools started too).
    """

    model_calls: tuple[RecordedModelCall, ...] = ()
    tool_calls: tuple[RecordedToolCall, ...] = ()
    end: RecordedEnd = field(default_factory=lambda: RecordedEnd("unfinished"))
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The trace's header (``toolloop run`` names the product, model and tools there)."""
    source: str = "a recording"
    """Where it came from, for messages (a file's path)."""

    @classmethod
    def from_trace(cls, source: str | Path | IO[str] | EventTrace) -> Recording:
        """The run a trace file tells.

        Raises:
            TraceError: the file is not a toolloop trace.
            OSError: it cannot be read.
        """
        trace = source if isinstance(source, EventTrace) else read_trace(source)
        if isinstance(source, (str, Path)):
            label = str(source)
        else:
            label = "a trace"
        return cls.from_events(trace.events, meta=trace.meta, source=label)

    @classmethod
    def from_events(
        cls,
        events: Iterable[FlowEvent],
        *,
        meta: Mapping[str, Any] | None = None,
        source: str = "the events",
    ) -> Recording:
        """The first run that ``events`` tell (its ``execution_id`` is the first event's)."""
        reader = _Reader()
        run: str | None = None
        for event in events:
            if run is None:
                run = event.execution_id
            elif event.execution_id != run:
                continue
            reader.read(event)
        return cls(
            model_calls=tuple(reader.finished_models()),
            tool_calls=tuple(reader.all_calls()),
            end=reader.end,
            meta=dict(meta or {}),
            source=source,
        )

    def turn(self, position: int) -> list[RecordedToolCall]:
        """The tool calls of turn ``position``, in their order (round, then index)."""
        return [call for call in self.tool_calls if call.turn == position]

    @property
    def turns(self) -> int:
        """How many turns the run had: one per model call (and one before the first, if
        a tool was called then)."""
        return len(self.model_calls)


_REPLY_FIELDS = (
    "text",
    "reasoning",
    "reasoning_field",
    "refusal",
    "finish_reason",
    "usage",
    "closed_early",
    "error",
    "request",
)
"""What a :class:`RecordedModelCall` takes as ``ModelCallFinished`` tells it."""
_OUTCOME_FIELDS = ("success", "result", "error", "error_type")
"""What a :class:`RecordedToolCall` takes of its call's record."""


class _Reader:
    """Reads one run's events in order."""

    def __init__(self) -> None:
        self.models: dict[int, RecordedModelCall] = {}
        self.started_models: list[int] = []  # call indexes, in order
        self.open_calls: dict[tuple[int, int], tuple[int, ToolCallStarted]] = {}
        self.calls: list[RecordedToolCall] = []
        self.end = RecordedEnd("unfinished")

    @property
    def turn(self) -> int:
        return len(self.started_models) - 1

    def read(self, event: FlowEvent) -> None:
        if isinstance(event, ModelCallStarted):
            # a retry is a try of the same call: its last try's reply is the call's
            if event.call_index not in self.started_models:
                self.started_models.append(event.call_index)
        elif isinstance(event, ModelCallFinished):
            if event.call_index not in self.started_models:  # its start was not told
                self.started_models.append(event.call_index)
            self.models[event.call_index] = RecordedModelCall(
                position=self.started_models.index(event.call_index),
                call_index=event.call_index,
                tool_calls=tuple(dict(call) for call in event.tool_calls),
                **{name: getattr(event, name) for name in _REPLY_FIELDS},
            )
        elif isinstance(event, ToolCallStarted):
            self.open_calls[(event.round_index, event.index)] = (self.turn, event)
        elif isinstance(event, ToolCallFinished):
            opened = self.open_calls.pop((event.round_index, event.index), None)
            record = event.record
            turn = self.turn if opened is None else opened[0]
            arguments = record.kwargs if opened is None else opened[1].command.tool_kwargs
            self.calls.append(
                RecordedToolCall(
                    turn=turn,
                    round_index=event.round_index,
                    index=event.index,
                    call_id=event.call_id,
                    tool_name=record.tool_name,
                    arguments=dict(arguments),
                    ran=opened is not None and event.source == "ran" and _reached(record),
                    source=event.source,
                    **{name: getattr(record, name) for name in _OUTCOME_FIELDS},
                )
            )
        elif isinstance(event, RunFinished):
            self.end = RecordedEnd("completed", event.stop_reason, event.records)
        elif isinstance(event, ExecutionPaused):
            self.end = RecordedEnd("paused")
        elif isinstance(event, ExecutionFailed) and self.end.status != "completed":
            self.end = RecordedEnd("failed", error=event.error)

    def all_calls(self) -> list[RecordedToolCall]:
        """Every call, those whose end was never told too (the run stopped while they ran)."""
        unfinished = [
            RecordedToolCall(
                turn=turn,
                round_index=event.round_index,
                index=event.index,
                call_id=event.call_id,
                tool_name=event.command.tool_name,
                arguments=dict(event.command.tool_kwargs),
                ran=True,
                success=False,
                error="unfinished: its end was not told",
            )
            for turn, event in self.open_calls.values()
        ]
        return self.calls + unfinished

    def finished_models(self) -> list[RecordedModelCall]:
        """Every model call in order; one whose end was never told failed (unfinished)."""
        out = []
        for position, index in enumerate(self.started_models):
            found = self.models.get(index)
            if found is None:
                found = RecordedModelCall(
                    position=position, call_index=index, error="unfinished: its end was not told"
                )
            out.append(found)
        return out


def _reached(record: ToolExecutionRecord) -> bool:
    """Whether a call's tool was reached (it returned, raised, ran out of time or was
    cancelled), rather than refused before it ran (an unknown tool, arguments that do not
    fit, a call a limit or a human turned down)."""
    if record.success or record.error_type is not None:
        return True
    error = record.error or ""
    name = repr(record.tool_name)
    return error.startswith(
        (f"tool {name} did not finish within", f"tool {name} was cancelled before it finished")
    )


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _has_cut(value: Any) -> bool:
    if isinstance(value, str):
        return value.endswith(CUT_MARK) and "… (cut: " in value
    if isinstance(value, Mapping):
        return any(_has_cut(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_cut(item) for item in value)
    return False
