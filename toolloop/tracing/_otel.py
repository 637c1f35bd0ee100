"""A run as OpenTelemetry spans: run → round → plan / tool call (optional extra).

Needs ``opentelemetry-api`` (``pip install 'toolloop[otel]'``); where it is missing this
module still imports, and :class:`OpenTelemetrySpans` raises an :class:`ImportError` that
says what to install. Spans go to the tracer given, or to the global tracer provider (set
up by the application, or by ``opentelemetry-instrument``).

No attribute carries a secret: tool arguments, purposes, errors and the run's attributes
are scrubbed (see :func:`~toolloop.tracing.redact`); tool results are left out unless asked
for, and are scrubbed too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..flow import (
    ExecutionFailed,
    ExecutionFinished,
    ExecutionPaused,
    ExecutionStarted,
    FlowEvent,
)
from ..kernel import ModelCallFinished, ModelCallStarted, RunEvent, RunFinished
from ..loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ..models import Usage
from ..runner import ToolCallFinished, ToolCallStarted, ToolProgress, json_safe
from ._jsonl import EventTrace
from ._redact import redact, redact_text

try:  # the optional extra
    from opentelemetry import trace as otel_trace  # type: ignore[import-not-found, import-untyped, unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    otel_trace = None  # type: ignore[assignment, unused-ignore]

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer  # type: ignore[import-not-found, import-untyped, unused-ignore]

__all__ = ["OpenTelemetrySpans", "export_spans", "otel_available"]

_MAX_ATTRIBUTE = 1024
_INSTALL = (
    "OpenTelemetry spans need the opentelemetry-api package: pip install 'toolloop[otel]' "
    "(or opentelemetry-api and opentelemetry-sdk)"
)

AttributeValue = str | bool | int | float


def _set_usage(span: Span, usage: Usage) -> None:
    """The usage on a span, with the OpenTelemetry GenAI semantic-convention names where
    they exist (``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``)."""
    for name, value in (
        ("gen_ai.usage.input_tokens", usage.input_tokens),
        ("gen_ai.usage.output_tokens", usage.output_tokens),
        ("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens),
        ("toolloop.usage.reasoning_tokens", usage.reasoning_tokens),
        ("toolloop.usage.total_tokens", usage.total_tokens),
        ("toolloop.usage.requests", usage.requests),
        ("toolloop.usage.unreported_requests", usage.unreported_requests),
    ):
        if value is not None:
            span.set_attribute(name, value)


def otel_available() -> bool:
    """Whether ``opentelemetry-api`` can be imported."""
    return otel_trace is not None


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = redact_text(value[: _MAX_ATTRIBUTE * 2])
    else:
        safe = json_safe(value, max_string=_MAX_ATTRIBUTE * 2)  # cut before redacting
        text = json.dumps(redact(safe), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _MAX_ATTRIBUTE else text[: _MAX_ATTRIBUTE - 1] + "…"


def _attribute(value: Any) -> AttributeValue:
    if isinstance(value, (bool, int, float)):
        return value
    return _text(value)


class OpenTelemetrySpans:
    """Turns a run's events into OpenTelemetry spans, as they happen: pass it as
    ``on_event`` (or replay a trace with :func:`export_spans`).

    - ``toolloop.run``: the whole run (status ERROR if it failed);
    - ``toolloop.round``: one round, under the run;
    - ``toolloop.plan``: the planner call of a round, under the round (``short_circuit``
      event where the planner hung up);
    - ``execute_tool {name}``: one tool call, under its round (status ERROR if it failed;
      a command refused before running is a span of no length); what the tool reports
      (``ctx.report``) are ``progress`` events of it;
    - ``chat``: one model call of the run (the kernel's ``ModelCallStarted`` /
      ``ModelCallFinished``, whatever product made it), under the run, with its usage, its
      finish reason, and status ERROR if it failed.

    The plan, chat and run spans carry the model usage with the OpenTelemetry GenAI
    semantic-convention names (``gen_ai.usage.input_tokens``,
    ``gen_ai.usage.output_tokens``, ``gen_ai.usage.cache_read.input_tokens``) and
    ``toolloop.usage.*`` for the rest (requests, total, reasoning tokens, unreported
    requests).

    Args:
        tracer: where spans go; the global provider's ``toolloop`` tracer by default.
        attributes: more attributes of the run span (scrubbed of secrets).
        include_results: put each tool's result (scrubbed, cut to 1 KiB) on its span.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self,
        tracer: Tracer | None = None,
        *,
        attributes: Mapping[str, Any] | None = None,
        include_results: bool = False,
    ) -> None:
        if otel_trace is None:
            raise ImportError(_INSTALL)
        self._tracer: Tracer = tracer if tracer is not None else otel_trace.get_tracer("toolloop")
        self._attributes = {
            str(key): _attribute(value)
            for key, value in redact(dict(attributes or {})).items()
            if value is not None
        }
        self._include_results = include_results
        self._t0: int | None = None
        self._run: Span | None = None
        self._rounds: dict[int, Span] = {}
        self._plans: dict[int, Span] = {}
        self._calls: dict[tuple[int, int], Span] = {}
        self._purposes: dict[tuple[int, int], str] = {}
        self._chats: dict[int, Span] = {}
        self._last = 0

    def start_at(self, unix_ns: int) -> None:
        """Set the wall-clock time of ``at == 0`` (by default: the first event's arrival)."""
        self._t0 = unix_ns

    def _ns(self, at: float) -> int:
        if self._t0 is None:
            self._t0 = time.time_ns() - int(at * 1e9)
        ns = self._t0 + int(at * 1e9)
        self._last = max(self._last, ns)
        return ns

    def _start(self, name: str, parent: Span | None, at: float, **attrs: Any) -> Span:
        context = otel_trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(
            name,
            context=context,
            start_time=self._ns(at),
            attributes={f"toolloop.{k}": _attribute(v) for k, v in attrs.items() if v is not None},
        )

    def _run_span(self, event: FlowEvent) -> Span:
        if self._run is None:
            flow = event.flow if isinstance(event, ExecutionStarted) else None
            self._run = self._start(
                "toolloop.run", None, event.at, execution_id=event.execution_id, flow=flow
            )
            for key, value in self._attributes.items():
                self._run.set_attribute(key, value)
        return self._run

    def _round_span(self, index: int, at: float, run: Span) -> Span:
        span = self._rounds.get(index)
        if span is None:
            span = self._rounds[index] = self._start("toolloop.round", run, at, round_index=index)
        return span

    def __call__(self, event: FlowEvent) -> None:
        run = self._run_span(event)
        if isinstance(event, RoundStarted):
            rnd = self._round_span(event.round_index, event.at, run)
            self._plans[event.round_index] = self._start(
                "toolloop.plan", rnd, event.at, round_index=event.round_index
            )
        elif isinstance(event, PlanDecided):
            self._plan_decided(event, run)
        elif isinstance(event, ToolCallStarted):
            rnd = self._round_span(event.round_index, event.at, run)
            command = event.command
            span = self._start(
                f"execute_tool {_text(command.tool_name)}",
                rnd,
                event.at,
                round_index=event.round_index,
                command_index=event.index,
                purpose=command.purpose,
                tool_kwargs=command.tool_kwargs,
            )
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", _text(command.tool_name))
            self._calls[(event.round_index, event.index)] = span
            self._purposes[(event.round_index, event.index)] = command.purpose
        elif isinstance(event, ToolCallFinished):
            self._command_finished(event, run)
        elif isinstance(event, ToolProgress):
            self._progress(event)
        elif isinstance(event, RunEvent):
            self._run_event(event, run)
        elif isinstance(event, RoundFinished):
            finished = self._rounds.pop(event.round_index, None)
            if finished is not None:
                finished.set_attribute("toolloop.records", len(event.records))
                finished.end(end_time=self._ns(event.at))
        elif isinstance(event, (ExecutionFinished, ExecutionPaused)):
            if isinstance(event, ExecutionPaused):
                run.set_attribute("toolloop.paused", True)
            self.close(event.at)
        elif isinstance(event, ExecutionFailed):
            run.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, _text(event.error)))
            run.set_attribute("error.type", "ExecutionFailed")
            self.close(event.at)

    def _plan_decided(self, event: PlanDecided, run: Span) -> None:
        span = self._plans.pop(event.round_index, None)
        if span is None:
            rnd = self._round_span(event.round_index, event.at - event.duration, run)
            span = self._start(
                "toolloop.plan", rnd, event.at - event.duration, round_index=event.round_index
            )
        span.set_attribute("toolloop.next_action", event.next_action)
        span.set_attribute("toolloop.commands", len(event.commands))
        span.set_attribute("toolloop.short_circuited", event.short_circuited)
        if event.commands:
            names = sorted({c.tool_name for c in event.commands})
            span.set_attribute("toolloop.tool_names", _text(", ".join(names)))
        if event.stop_reason is not None:
            span.set_attribute("toolloop.stop_reason", event.stop_reason)
        if event.notes:
            span.set_attribute("toolloop.notes", _text(" | ".join(event.notes)))
        if event.reasoning:
            span.set_attribute("toolloop.reasoning", _text(event.reasoning))
        if event.refusal is not None:
            span.set_attribute("toolloop.refusal", _text(event.refusal))
        if event.usage is not None:
            _set_usage(span, event.usage)
        end = self._ns(event.at)
        if event.short_circuited:
            span.add_event("short_circuit", timestamp=end)
        span.end(end_time=end)

    def _run_event(self, event: RunEvent, run: Span) -> None:
        """The kernel's events: each model call a ``chat`` span under the run, with its
        usage; the run's end puts the run's usage on the run span."""
        if isinstance(event, ModelCallStarted):
            self._chats[event.call_index] = self._chat(event.call_index, event.at, run)
        elif isinstance(event, ModelCallFinished):
            index = event.call_index
            if index in self._chats:
                span = self._chats.pop(index)
            else:  # its start was not seen (a trace cut short)
                span = self._chat(index, event.at - event.duration, run)
            if event.usage is not None:
                _set_usage(span, event.usage)
            if event.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", (event.finish_reason,))
            if event.tool_calls:
                span.set_attribute("toolloop.tool_calls", len(event.tool_calls))
            if event.closed_early:
                span.set_attribute("toolloop.closed_early", True)
            if event.refusal is not None:
                span.set_attribute("toolloop.refusal", _text(event.refusal))
            if event.error is not None:
                error = _text(event.error)
                span.set_attribute("toolloop.error", error)
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
            span.end(end_time=self._ns(event.at))
        elif isinstance(event, RunFinished):
            run.set_attribute("toolloop.stop_reason", event.stop_reason)
            run.set_attribute("toolloop.records", event.records)
            run.set_attribute("toolloop.turns", event.turns)
            if event.usage is not None:
                _set_usage(run, event.usage)
            self._end_children(self._ns(event.at))

    def _chat(self, index: int, at: float, run: Span) -> Span:
        span = self._start("chat", run, at, call_index=index)
        span.set_attribute("gen_ai.operation.name", "chat")
        return span

    def _progress(self, event: ToolProgress) -> None:
        """A tool's report, as an event of its call's span (the first open call of that
        tool and purpose in the round)."""
        for key, span in self._calls.items():
            if key[0] == event.round_index and self._purposes.get(key) == event.purpose:
                span.add_event(
                    "progress",
                    timestamp=self._ns(event.at),
                    attributes={
                        "toolloop.message": _text(event.message),
                        "toolloop.data": _text(event.data),
                    },
                )
                return

    def _command_finished(self, event: ToolCallFinished, run: Span) -> None:
        record = event.record
        span = self._calls.pop((event.round_index, event.index), None)
        if span is None:  # refused before it ran
            rnd = self._round_span(event.round_index, event.at, run)
            span = self._start(
                f"execute_tool {_text(record.tool_name)}",
                rnd,
                event.at - event.duration,
                round_index=event.round_index,
                command_index=event.index,
                purpose=record.purpose,
                tool_kwargs=record.kwargs,
                refused=True,
            )
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", _text(record.tool_name))
        span.set_attribute("toolloop.success", record.success)
        if record.success:
            if self._include_results:
                span.set_attribute("toolloop.result", _text(record.result))
        else:
            error = _text(record.error or "failed")
            span.set_attribute("toolloop.error", error)
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
        span.end(end_time=self._ns(event.at))

    def _end_children(self, end: int) -> None:
        for spans in (self._calls, self._plans, self._rounds, self._chats):
            for span in spans.values():
                span.end(end_time=end)
            spans.clear()

    def close(self, at: float | None = None) -> None:
        """End every span still open (at ``at``, or at the last event seen); called by the
        run's end event, and safe to call again, e.g. after a cancelled run."""
        end = self._ns(at) if at is not None else (self._last or time.time_ns())
        self._end_children(end)
        if self._run is not None:
            self._run.end(end_time=end)
            self._run = None


def export_spans(
    source: EventTrace | Iterable[FlowEvent],
    tracer: Tracer | None = None,
    *,
    attributes: Mapping[str, Any] | None = None,
    include_results: bool = False,
) -> None:
    """Replay a recorded run as OpenTelemetry spans, at the times it really ran (when the
    trace knows its start; otherwise ending now)."""
    spans = OpenTelemetrySpans(tracer, attributes=attributes, include_results=include_results)
    if isinstance(source, EventTrace):
        events = source.events
        if source.started is not None:
            spans.start_at(int(source.started.timestamp() * 1e9))
        elif events:
            spans.start_at(time.time_ns() - int(events[-1].at * 1e9))
    else:
        events = list(source)
    for event in events:
        spans(event)
    spans.close()
