"""Traces of a run and pictures of them.

- a trace: the run's typed events as JSON lines, with timings (:class:`TraceRecorder`,
  :func:`write_trace`, :func:`read_trace`; :class:`TraceWriter` writes them as they happen);
- a timeline: an SVG picture of a run of any product: its model calls (with their usage),
  its tool calls overlapping in time, the loop's planner calls (streamed,
  short-circuited), the status agent's statuses, the pauses for a human and the resumes,
  the stop reason (:func:`render_timeline`, :func:`write_timeline`; the shape it draws:
  :class:`RunShape`);
- OpenTelemetry spans: run → model call (``chat``) / turn → tool call, the loop's plans,
  statuses and pauses as events of the run's span (:class:`OpenTelemetrySpans`, needs the
  ``otel`` extra).

Nothing written carries an API key, a token or a password: see :func:`redact`.
"""

from __future__ import annotations

from ._jsonl import TRACE_FORMAT as TRACE_FORMAT
from ._jsonl import TRACE_VALUE_CHARS as TRACE_VALUE_CHARS
from ._jsonl import EventTrace as EventTrace
from ._jsonl import TraceError as TraceError
from ._jsonl import TraceRecorder as TraceRecorder
from ._jsonl import TraceWriter as TraceWriter
from ._jsonl import UnknownEvent as UnknownEvent
from ._jsonl import dump_event as dump_event
from ._jsonl import load_event as load_event
from ._jsonl import read_trace as read_trace
from ._jsonl import write_trace as write_trace
from ._otel import OpenTelemetrySpans as OpenTelemetrySpans
from ._otel import export_spans as export_spans
from ._otel import otel_available as otel_available
from ._redact import REDACTED as REDACTED
from ._redact import is_secret_key as is_secret_key
from ._redact import redact as redact
from ._redact import redact_text as redact_text
from ._redact import register_secret as register_secret
from ._shape import CallSpan as CallSpan
from ._shape import ModelSpan as ModelSpan
from ._shape import PauseSpan as PauseSpan
from ._shape import RoundSpan as RoundSpan
from ._shape import RunShape as RunShape
from ._shape import StatusMark as StatusMark
from ._timeline import render_timeline as render_timeline
from ._timeline import write_timeline as write_timeline

__all__ = [
    "REDACTED",
    "TRACE_FORMAT",
    "TRACE_VALUE_CHARS",
    "CallSpan",
    "EventTrace",
    "ModelSpan",
    "OpenTelemetrySpans",
    "PauseSpan",
    "RoundSpan",
    "RunShape",
    "StatusMark",
    "TraceError",
    "TraceRecorder",
    "TraceWriter",
    "UnknownEvent",
    "dump_event",
    "export_spans",
    "is_secret_key",
    "load_event",
    "otel_available",
    "read_trace",
    "redact",
    "redact_text",
    "register_secret",
    "render_timeline",
    "write_timeline",
]
