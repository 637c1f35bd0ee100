"""A run's typed events as JSON lines, with timings, and back.

The file is one JSON object per line: a header, then the events in the order they were
published::

    {"toolloop_trace": 1, "started": "2025-01-01T12:00:00.000000+00:00", "meta": {...}}
    {"kind": "execution_started", "execution_id": "...", "at": 0.0, "flow": "plan_execute"}
    {"kind": "round_started", "execution_id": "...", "at": 0.0001, "round_index": 0}
    ...

``at`` is seconds since the run started (``started`` is that moment on the wall clock) and
the events that end something carry their ``duration``. Reading a trace gives back the same
event classes (``RoundStarted``, ``ToolCallFinished``, ...) with equal values; an event whose
class is not imported is read as an :class:`UnknownEvent` that keeps every field.

Secrets are scrubbed on the way out (see :func:`~toolloop.tracing.redact`) unless
``redact=False``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

from pydantic import ConfigDict, ValidationError

from .._errors import ToolloopError
from ..flow import FlowEvent
from ..loop import LoopEvent  # noqa: F401  (imported so the loop's event classes are known)
from ..runner import json_safe
from ._redact import redact as _redact

__all__ = [
    "TRACE_FORMAT",
    "TRACE_VALUE_CHARS",
    "EventTrace",
    "TraceError",
    "TraceRecorder",
    "TraceWriter",
    "UnknownEvent",
    "dump_event",
    "load_event",
    "read_trace",
    "write_trace",
]

TRACE_FORMAT = 1
"""The version of the file format, in the header's ``toolloop_trace``."""

PathLike = str | Path


class TraceError(ToolloopError, ValueError):
    """A trace file that cannot be read: not JSON lines, or not a toolloop trace."""


class UnknownEvent(FlowEvent):
    """An event whose class was not imported when the trace was read; keeps every field."""

    model_config = ConfigDict(frozen=True, extra="allow")


def _event_classes() -> dict[str, type[FlowEvent]]:
    """Every imported event class, by its ``kind``."""
    found: dict[str, type[FlowEvent]] = {}
    pending: list[type[FlowEvent]] = [FlowEvent]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        kind = cls.model_fields.get("kind")
        if kind is not None and isinstance(kind.default, str) and kind.default not in found:
            found[kind.default] = cls
    return found


TRACE_VALUE_CHARS = 65_536
"""A string in a trace keeps at most this many characters (and says how long it was)."""


def dump_event(
    event: FlowEvent, *, redact: bool = True, max_value_chars: int | None = TRACE_VALUE_CHARS
) -> dict[str, Any]:
    """An event as a JSON-ready dict: whatever a tool returned (bytes, datetimes, cycles,
    values nested too deep) is made JSON data as :func:`toolloop.runner.json_safe` does,
    and strings longer than ``max_value_chars`` are cut before anything scans them
    (``None``: kept whole)."""
    data: dict[str, Any] = json_safe(event, max_string=max_value_chars)
    if redact:
        data = {
            key: value if key in ("kind", "execution_id", "at") else _redact(value)
            for key, value in data.items()
        }
    return data


def load_event(
    data: Mapping[str, Any], classes: Mapping[str, type[FlowEvent]] | None = None
) -> FlowEvent:
    """The event a :func:`dump_event` dict stands for.

    Raises:
        TraceError: ``data`` has no ``kind``, or does not fit its event class.
    """
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise TraceError(f"an event needs a string 'kind'; got {dict(data)!r:.200}")
    cls = (classes if classes is not None else _event_classes()).get(kind, UnknownEvent)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise TraceError(f"a {kind!r} event that does not fit {cls.__name__}: {exc}") from exc


@dataclass
class EventTrace:
    """The events of one run, with when it started and what it was (``meta``)."""

    events: list[FlowEvent] = field(default_factory=list)
    started: datetime | None = None
    """The wall-clock time of ``at == 0``."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What the run was: e.g. the request, the planner, the model (no secrets)."""

    def lines(
        self, *, redact: bool = True, max_value_chars: int | None = TRACE_VALUE_CHARS
    ) -> Iterator[str]:
        """The trace as JSON lines (without line ends): the header, then each event (a
        string longer than ``max_value_chars`` cut; ``None``: kept whole)."""
        header: dict[str, Any] = {"toolloop_trace": TRACE_FORMAT}
        if self.started is not None:
            header["started"] = self.started.isoformat()
        header["meta"] = _redact(self.meta) if redact else self.meta
        yield json.dumps(header, ensure_ascii=False, default=str)
        for event in self.events:
            data = dump_event(event, redact=redact, max_value_chars=max_value_chars)
            yield json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> EventTrace:
        """Read a trace from its JSON lines (blank lines are skipped; the header is optional).

        Raises:
            TraceError: a line is not a JSON object, or an event does not fit its class.
        """
        trace = cls()
        classes = _event_classes()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"line {number} is not JSON ({exc.msg})") from exc
            if not isinstance(data, dict):
                raise TraceError(f"line {number} is not a JSON object")
            if "toolloop_trace" in data:
                if data["toolloop_trace"] != TRACE_FORMAT:
                    raise TraceError(
                        f"this trace has format {data['toolloop_trace']!r}; this toolloop "
                        f"reads format {TRACE_FORMAT}"
                    )
                started = data.get("started")
                trace.started = datetime.fromisoformat(started) if started else None
                meta = data.get("meta")
                trace.meta = meta if isinstance(meta, dict) else {}
                continue
            try:
                trace.events.append(load_event(data, classes))
            except TraceError as exc:
                raise TraceError(f"line {number}: {exc}") from exc
        return trace

    @property
    def duration(self) -> float:
        """Seconds from the start to the last event."""
        return max((event.at for event in self.events), default=0.0)


def write_trace(
    destination: PathLike | IO[str],
    events: Iterable[FlowEvent] | EventTrace,
    *,
    meta: Mapping[str, Any] | None = None,
    started: datetime | None = None,
    redact: bool = True,
    max_value_chars: int | None = TRACE_VALUE_CHARS,
) -> None:
    """Write a run's events as JSON lines to a path or an open text file.

    Args:
        destination: a path (written as UTF-8) or a text file.
        events: the events, or an :class:`EventTrace` (its ``meta`` and ``started`` are
            used unless given here).
        meta: what the run was, put in the header.
        started: the wall-clock time of the run's start.
        redact: scrub keys, tokens and passwords (see :func:`~toolloop.tracing.redact`).
        max_value_chars: a longer string (a tool's result, a reply) is cut, saying how long
            it was; ``None``: kept whole (what a replay of a run with big results needs).
    """
    if isinstance(events, EventTrace):
        trace = EventTrace(
            list(events.events),
            started=started or events.started,
            meta=dict(meta) if meta is not None else dict(events.meta),
        )
    else:
        trace = EventTrace(list(events), started=started, meta=dict(meta or {}))
    if isinstance(destination, (str, Path)):
        with Path(destination).open("w", encoding="utf-8") as file:
            _write_lines(file, trace, redact, max_value_chars)
    else:
        _write_lines(destination, trace, redact, max_value_chars)


def _write_lines(
    file: IO[str], trace: EventTrace, redact: bool, max_value_chars: int | None
) -> None:
    for line in trace.lines(redact=redact, max_value_chars=max_value_chars):
        file.write(line + "\n")


def read_trace(source: PathLike | IO[str]) -> EventTrace:
    """Read a trace written by :func:`write_trace` (or :class:`TraceRecorder`).

    Raises:
        TraceError: the file is not a toolloop trace.
        OSError: the file cannot be read.
    """
    if isinstance(source, (str, Path)):
        with Path(source).open(encoding="utf-8") as file:
            return EventTrace.from_lines(file)
    return EventTrace.from_lines(source)


class TraceRecorder:
    """Collects a run's events as they happen: pass it as ``on_event``.

    ::

        recorder = TraceRecorder(meta={"request": request})
        result = await async_plan_and_execute(request, ..., on_event=recorder)
        recorder.write("run.jsonl")

    Args:
        meta: what the run was, for the header (no secrets: it is scrubbed anyway).
        forward: also call this with every event (e.g. a progress display).
        max_value_chars: what :meth:`write` keeps of a long string (see
            :func:`write_trace`; ``None``: whole).
    """

    def __init__(
        self,
        *,
        meta: Mapping[str, Any] | None = None,
        forward: Callable[[FlowEvent], None] | None = None,
        max_value_chars: int | None = TRACE_VALUE_CHARS,
    ) -> None:
        self.trace = EventTrace(meta=dict(meta or {}))
        self._forward = forward
        self._max_value_chars = max_value_chars

    @property
    def events(self) -> list[FlowEvent]:
        return self.trace.events

    def __call__(self, event: FlowEvent) -> None:
        if self.trace.started is None:
            self.trace.started = _wall_clock_start(event.at)
        self.trace.events.append(event)
        if self._forward is not None:
            self._forward(event)

    def write(self, destination: PathLike | IO[str], *, redact: bool = True) -> None:
        """Write what was recorded so far (see :func:`write_trace`)."""
        write_trace(destination, self.trace, redact=redact, max_value_chars=self._max_value_chars)


def _wall_clock_start(at: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=at)


class TraceWriter:
    """Writes a run's events to a trace file as they happen: pass it as ``on_event``.

    ::

        with TraceWriter("run.jsonl", meta={"request": request}) as trace:
            result = await async_plan_and_execute(request, ..., on_event=trace)

    The file is the one :func:`write_trace` writes, line by line (each flushed), so
    ``toolloop view run.jsonl --follow`` shows the run live from it, and
    :func:`read_trace` reads it back, even when the run was cut short.

    Args:
        destination: the file, opened (and emptied) at once, so a path that cannot be
            written fails before the run starts.
        meta: what the run was, for the header (scrubbed unless ``redact=False``).
        redact: scrub keys, tokens and passwords (see :func:`~toolloop.tracing.redact`).
        max_value_chars: a longer string is cut, saying how long it was (``None``: kept
            whole, what a replay of a run with big results needs).

    Raises:
        OSError: the file cannot be opened for writing.
    """

    def __init__(
        self,
        destination: PathLike,
        *,
        meta: Mapping[str, Any] | None = None,
        redact: bool = True,
        max_value_chars: int | None = TRACE_VALUE_CHARS,
    ) -> None:
        self.path = Path(destination)
        self._meta = dict(meta or {})
        self._redact = redact
        self._max_value_chars = max_value_chars
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self._header = False
        self.events = 0
        """How many events were written."""

    def __call__(self, event: FlowEvent) -> None:
        file = self._file
        if file is None:
            return
        if not self._header:
            self._header = True
            trace = EventTrace(started=_wall_clock_start(event.at), meta=self._meta)
            file.write(next(trace.lines(redact=self._redact)) + "\n")
        data = dump_event(event, redact=self._redact, max_value_chars=self._max_value_chars)
        file.write(json.dumps(data, ensure_ascii=False) + "\n")
        file.flush()
        self.events += 1

    def close(self) -> None:
        """Close the file (safe to call twice); a run with no event leaves just a header."""
        if self._file is None:
            return
        if not self._header:
            self._header = True
            self._file.write(next(EventTrace(meta=self._meta).lines(redact=self._redact)) + "\n")
        self._file.close()
        self._file = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
