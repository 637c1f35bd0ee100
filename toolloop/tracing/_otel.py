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
from ..kernel import (
    CheckpointSaved,
    ChildRunEvent,
    ModelCallFinished,
    ModelCallStarted,
    RunEvent,
    RunFinished,
)
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


class _RunSpans:
    """The open spans of one run (one execution of it: a resume opens a new run span)."""

    def __init__(self, run: Span) -> None:
        self.run = run
        self.rounds: dict[int, Span] = {}
        self.plans: dict[int, Span] = {}
        self.calls: dict[tuple[int, int], Span] = {}
        self.asked: dict[tuple[int, int], tuple[str, str, str]] = {}
        """Each open call's tool, purpose and call id (a tool's report names its call id)."""
        self.chats: dict[int, Span] = {}
        self.usage: Usage | None = None
        """The usage of the model calls seen (a paused run tells no total)."""

    def children(self) -> list[dict[Any, Span]]:
        return [self.calls, self.plans, self.rounds, self.chats]


class OpenTelemetrySpans:
    """Turns a run's events into OpenTelemetry spans, as they happen: pass it as
    ``on_event`` (or replay a trace with :func:`export_spans`).

    The same spans for every product, from the events every run publishes:

    - ``toolloop.run``: one execution of a run (status ERROR if it failed); a pause for a
      human ends it with ``toolloop.paused`` (status unset: not an error), what it waits
      for and asks (``toolloop.waiting_for``, ``toolloop.request.kind``, a ``paused``
      event) and the usage so far; the resumed run is a new ``toolloop.run`` of the same
      ``toolloop.execution_id`` with ``toolloop.resumed``. Its end sets
      ``toolloop.stop_reason``, ``toolloop.turns``, ``toolloop.records`` and the run's usage;
      the status agent's statuses are ``status_changed`` events of it (and the last one
      ``toolloop.status``), checkpoints ``checkpoint`` events;
    - ``chat``: one model call of the run (the kernel's ``ModelCallStarted`` /
      ``ModelCallFinished``, whatever product made it), under the run, with its usage, its
      finish reason, the tools it asked for, and status ERROR if it failed;
    - ``toolloop.round``: one turn (the loop's round, the turn whose tool calls carry that
      ``round_index``), under the run;
    - ``toolloop.plan``: the loop's planner call of a round, under the round
      (``short_circuit`` event where the planner hung up);
    - ``execute_tool {name}``: one tool call, under its turn (status ERROR if it failed;
      a command refused before running is a span of no length); what the tool reports
      (``ctx.report``) are ``progress`` events of it;
    - a run called as a tool (a child run, told as the parent's
      :class:`~toolloop.kernel.ChildRunEvent`) is a ``toolloop.run`` of its own (its
      ``toolloop.execution_id`` the child's, ``toolloop.parent_run_id`` its parent's) under
      the ``execute_tool`` span of the call that started it, with its own spans below, on
      the parent's clock.

    Several runs may share one instance: each has its spans.

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
        self._fixed: int | None = None
        self._t0: dict[str, int] = {}
        """Per run: the wall-clock time of its ``at == 0`` (a resume's clock may start
        again)."""
        self._paused_at: dict[str, float] = {}
        self._runs: dict[str, _RunSpans] = {}
        self._last = 0
        self._under: dict[str, tuple[Span | None, str]] = {}
        """Per child run: the span of the call that started it, and its parent's run."""

    def start_at(self, unix_ns: int) -> None:
        """Set the wall-clock time of ``at == 0`` (by default: each run's first event's
        arrival)."""
        self._fixed = unix_ns

    def _ns(self, at: float, run: str) -> int:
        t0 = self._t0.get(run)
        if t0 is None:
            base = self._fixed if self._fixed is not None else time.time_ns() - int(at * 1e9)
            t0 = self._t0[run] = base
        ns = t0 + int(at * 1e9)
        self._last = max(self._last, ns)
        return ns

    def _start(self, name: str, parent: Span | None, at: float, run: str, **attrs: Any) -> Span:
        context = otel_trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(
            name,
            context=context,
            start_time=self._ns(at, run),
            attributes={f"toolloop.{k}": _attribute(v) for k, v in attrs.items() if v is not None},
        )

    def _run_of(self, event: FlowEvent) -> _RunSpans:
        key = event.execution_id
        spans = self._runs.get(key)
        if spans is None:
            resumed = key in self._paused_at
            if isinstance(event, ExecutionStarted) and resumed:
                paused_at = self._paused_at[key]
                if self._fixed is None:  # live: its clock is this moment's
                    self._t0[key] = time.time_ns() - int(event.at * 1e9)
                elif event.at < paused_at:  # replayed, its clock started again: after the pause
                    self._t0[key] = self._t0[key] + int((paused_at - event.at) * 1e9)
            flow = event.flow if isinstance(event, ExecutionStarted) else None
            call, parent = self._under.get(key, (None, None))
            run = self._start(
                "toolloop.run", call, event.at, key, execution_id=key, flow=flow,
                parent_run_id=parent,
            )  # fmt: skip
            if resumed:
                run.set_attribute("toolloop.resumed", True)
            for name, value in self._attributes.items():
                run.set_attribute(name, value)
            spans = self._runs[key] = _RunSpans(run)
        return spans

    def _round_span(self, index: int, at: float, spans: _RunSpans, key: str) -> Span:
        span = spans.rounds.get(index)
        if span is None:
            span = spans.rounds[index] = self._start(
                "toolloop.round", spans.run, at, key, round_index=index
            )
        return span

    def _child(self, event: ChildRunEvent) -> None:
        """An event of a child run: handled as the child's own, its run span under the
        parent's call, on the parent's clock."""
        key, parent = event.run_id, event.parent_run_id
        if key not in self._runs or key not in self._under:
            self._under[key] = (self._call_span(parent, event.call_id), parent)
        t0 = self._t0.get(parent)
        if t0 is not None:
            self._t0.setdefault(key, t0)
        self(event.event.model_copy(update={"execution_id": key, "at": event.at}))

    def _call_span(self, run: str, call_id: str) -> Span | None:
        spans = self._runs.get(run)
        if spans is None:
            return None
        for at, (_, _, asked) in spans.asked.items():
            if asked == call_id:
                return spans.calls.get(at)
        return None

    def __call__(self, event: FlowEvent) -> None:
        if isinstance(event, ChildRunEvent):
            self._child(event)
            return
        spans = self._run_of(event)
        key = event.execution_id
        run = spans.run
        if isinstance(event, RoundStarted):
            rnd = self._round_span(event.round_index, event.at, spans, key)
            spans.plans[event.round_index] = self._start(
                "toolloop.plan", rnd, event.at, key, round_index=event.round_index
            )
        elif isinstance(event, PlanDecided):
            self._plan_decided(event, spans, key)
        elif isinstance(event, ToolCallStarted):
            command = event.command
            span = self._tool_span(
                event, spans, key, event.at, command.tool_name, command.purpose, command.tool_kwargs
            )
            span.set_attribute("gen_ai.tool.call.id", _text(event.call_id))
            spans.calls[(event.round_index, event.index)] = span
            spans.asked[(event.round_index, event.index)] = (
                command.tool_name,
                command.purpose,
                event.call_id,
            )
        elif isinstance(event, ToolCallFinished):
            self._command_finished(event, spans, key)
        elif isinstance(event, ToolProgress):
            self._progress(event, spans, key)
        elif isinstance(event, RunEvent):
            self._run_event(event, spans, key)
        elif isinstance(event, RoundFinished):
            finished = spans.rounds.pop(event.round_index, None)
            if finished is not None:
                finished.set_attribute("toolloop.records", len(event.records))
                finished.end(end_time=self._ns(event.at, key))
        elif event.kind == "status_changed":
            data = event.model_dump()
            status, node = str(data.get("status")), str(data.get("node"))
            run.set_attribute("toolloop.status", status)
            run.add_event(
                "status_changed",
                timestamp=self._ns(event.at, key),
                attributes={"toolloop.node": node, "toolloop.status": status},
            )
        elif isinstance(event, ExecutionPaused):
            self._paused(event, spans, key)
            self._close_run(key, event.at)
        elif isinstance(event, ExecutionFinished):
            self._close_run(key, event.at)
        elif isinstance(event, ExecutionFailed):
            run.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, _text(event.error)))
            run.set_attribute("error.type", "ExecutionFailed")
            self._close_run(key, event.at)

    def _paused(self, event: ExecutionPaused, spans: _RunSpans, key: str) -> None:
        """A pause for a human: the run span says so (its status stays unset: not an error),
        with what it asks, and the usage of its model calls so far."""
        run = spans.run
        self._paused_at[key] = event.at
        run.set_attribute("toolloop.paused", True)
        run.set_attribute("toolloop.waiting_for", _text(", ".join(event.waiting_for)))
        kinds = [str(r.get("kind")) for r in event.requests if isinstance(r, Mapping)]
        if kinds:
            run.set_attribute("toolloop.request.kind", _text(", ".join(kinds)))
        run.add_event(
            "paused",
            timestamp=self._ns(event.at, key),
            attributes={
                "toolloop.waiting_for": _text(", ".join(event.waiting_for)),
                "toolloop.requests": _text(event.requests),
            },
        )
        if spans.usage is not None:
            _set_usage(run, spans.usage)

    def _plan_decided(self, event: PlanDecided, spans: _RunSpans, key: str) -> None:
        span = spans.plans.pop(event.round_index, None)
        if span is None:
            rnd = self._round_span(event.round_index, event.at - event.duration, spans, key)
            span = self._start(
                "toolloop.plan", rnd, event.at - event.duration, key, round_index=event.round_index
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
        end = self._ns(event.at, key)
        if event.short_circuited:
            span.add_event("short_circuit", timestamp=end)
        span.end(end_time=end)

    def _run_event(self, event: RunEvent, spans: _RunSpans, key: str) -> None:
        """The kernel's events: each model call a ``chat`` span under the run, with its
        usage; a checkpoint an event of the run span; the run's end puts the stop reason and
        the run's usage on the run span."""
        run = spans.run
        if isinstance(event, ModelCallStarted):
            spans.chats[event.call_index] = self._chat(event.call_index, event.at, run, key)
        elif isinstance(event, ModelCallFinished):
            index = event.call_index
            if index in spans.chats:
                span = spans.chats.pop(index)
            else:  # its start was not seen (a trace cut short)
                span = self._chat(index, event.at - event.duration, run, key)
            if event.usage is not None:
                _set_usage(span, event.usage)
                spans.usage = event.usage if spans.usage is None else spans.usage + event.usage
            if event.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", (event.finish_reason,))
            if event.tool_calls:
                span.set_attribute("toolloop.tool_calls", len(event.tool_calls))
                names = ", ".join(str(c.get("name")) for c in event.tool_calls)
                span.set_attribute("toolloop.tool_names", _text(names))
            if event.closed_early:
                span.set_attribute("toolloop.closed_early", True)
            if event.refusal is not None:
                span.set_attribute("toolloop.refusal", _text(event.refusal))
            if event.error is not None:
                error = _text(event.error)
                span.set_attribute("toolloop.error", error)
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
            span.end(end_time=self._ns(event.at, key))
        elif isinstance(event, CheckpointSaved):
            run.add_event(
                "checkpoint",
                timestamp=self._ns(event.at, key),
                attributes={"toolloop.step": _text(event.step)},
            )
        elif isinstance(event, RunFinished):
            run.set_attribute("toolloop.stop_reason", event.stop_reason)
            run.set_attribute("toolloop.records", event.records)
            run.set_attribute("toolloop.turns", event.turns)
            usage = event.usage if event.usage is not None else spans.usage
            if usage is not None:
                _set_usage(run, usage)
            self._end_children(spans, self._ns(event.at, key))

    def _chat(self, index: int, at: float, run: Span, key: str) -> Span:
        span = self._start("chat", run, at, key, call_index=index)
        span.set_attribute("gen_ai.operation.name", "chat")
        return span

    def _progress(self, event: ToolProgress, spans: _RunSpans, key: str) -> None:
        """A tool's report, as an event of its call's span (the open call of the round with
        the report's call id)."""
        for found, span in spans.calls.items():
            _, _, call_id = spans.asked.get(found, ("", "", ""))
            if found[0] == event.round_index and call_id == event.call_id:
                span.add_event(
                    "progress",
                    timestamp=self._ns(event.at, key),
                    attributes={
                        "toolloop.message": _text(event.message),
                        "toolloop.data": _text(event.data),
                    },
                )
                return

    def _tool_span(
        self,
        event: ToolCallStarted | ToolCallFinished,
        spans: _RunSpans,
        key: str,
        at: float,
        tool_name: str,
        purpose: str,
        kwargs: Any,
        **more: Any,
    ) -> Span:
        """The span of one tool call, under its round's."""
        rnd = self._round_span(event.round_index, event.at, spans, key)
        span = self._start(
            f"execute_tool {_text(tool_name)}",
            rnd,
            at,
            key,
            round_index=event.round_index,
            command_index=event.index,
            call_id=event.call_id,
            purpose=purpose,
            tool_kwargs=kwargs,
            **more,
        )
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", _text(tool_name))
        return span

    def _command_finished(self, event: ToolCallFinished, spans: _RunSpans, key: str) -> None:
        record = event.record
        span = spans.calls.pop((event.round_index, event.index), None)
        if span is None:  # refused before it ran
            at = event.at - event.duration
            span = self._tool_span(
                event, spans, key, at, record.tool_name, record.purpose, record.kwargs, refused=True
            )
        span.set_attribute("toolloop.success", record.success)
        if event.source != "ran":
            span.set_attribute("toolloop.source", event.source)
        if record.success:
            if self._include_results:
                span.set_attribute("toolloop.result", _text(record.result))
        else:
            error = _text(record.error or "failed")
            span.set_attribute("toolloop.error", error)
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
        span.end(end_time=self._ns(event.at, key))

    @staticmethod
    def _end_children(spans: _RunSpans, end: int) -> None:
        for children in spans.children():
            for span in children.values():
                span.end(end_time=end)
            children.clear()

    def _close_run(self, key: str, at: float | None) -> None:
        spans = self._runs.pop(key, None)
        if spans is None:
            return
        end = self._ns(at, key) if at is not None else (self._last or time.time_ns())
        self._end_children(spans, end)
        spans.run.end(end_time=end)

    def close(self, at: float | None = None) -> None:
        """End every span still open (at ``at``, or at the last event seen); called for a
        run by its end or its pause, and safe to call again, e.g. after a cancelled run."""
        for key in list(self._runs):
            self._close_run(key, at)


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
