"""OpenTelemetry spans of a run: run → round → plan / tool call, with no secret in any
attribute. Needs the ``otel`` extra (opentelemetry-sdk); skipped without it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from toolloop import async_plan_and_execute
from toolloop.loop import PlanDecided
from toolloop.planners import PlannerReply
from toolloop.testing import ScriptedPlanner
from toolloop.tracing import (
    OpenTelemetrySpans,
    TraceRecorder,
    _otel,
    export_spans,
    otel_available,
    read_trace,
)

pytest.importorskip(
    "opentelemetry.sdk", reason="the otel extra is not installed: pip install 'toolloop[otel]'"
)

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # type: ignore[import-not-found, import-untyped, unused-ignore]

SECRETS = (
    "sk-proj-0123456789abcdefghijkl",
    "tok_abcdefghijklmnop",
    "hunter2secret",
    "eyJhbGciOiJIUzI1NiJ9",
)


def call_api(query: str, api_key: str, headers: dict[str, str] | None = None) -> str:
    """Call an API.

    Args:
        query: what to ask.
        api_key: the key.
        headers: extra headers.
    """
    return "ok"


def get_weather(city: str) -> dict[str, Any]:
    """The forecast.

    Args:
        city: the city.
    """
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"city": city}


PLANNER = ScriptedPlanner(
    [
        {
            "next_action": "execute",
            "execution_commands": [
                {
                    "purpose": "call the API with Bearer tok_abcdefghijklmnop",
                    "tool_name": "call_api",
                    "tool_kwargs": {
                        "query": "q",
                        "api_key": "sk-proj-0123456789abcdefghijkl",
                        "headers": {"Authorization": "Bearer tok_abcdefghijklmnop"},
                    },
                },
                {
                    "purpose": "weather",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": "Lisbon"},
                },
                {
                    "purpose": "nowhere",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": "Atlantis"},
                },
                {"purpose": "missing", "tool_name": "no_such_tool", "tool_kwargs": {}},
            ],
        },
        PlannerReply(output={"next_action": "response"}, short_circuited=True),
    ]
)


@pytest.fixture
def exporter() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider.get_tracer("test"), memory
    provider.shutdown()


@dataclass
class Span:
    """What a test reads of a finished span (plain values, whatever the SDK's types)."""

    name: str
    span_id: int
    parent_id: int | None
    start: int
    end: int
    attrs: dict[str, Any]
    events: list[str]
    status: Any
    text: str

    @classmethod
    def of(cls, span: ReadableSpan) -> Span:
        attrs = dict(span.attributes or {})
        events = [e.name for e in span.events]
        text = "\n".join(
            [span.name, str(span.status.description)]
            + [f"{k}={v}" for k, v in attrs.items()]
            + [str(dict(e.attributes or {})) for e in span.events]
        )
        return cls(
            name=span.name,
            span_id=span.context.span_id,
            parent_id=span.parent.span_id if span.parent is not None else None,
            start=int(span.start_time or 0),
            end=int(span.end_time or 0),
            attrs=attrs,
            events=events,
            status=span.status.status_code,
            text=text,
        )


def finished_spans(memory: InMemorySpanExporter) -> list[Span]:
    return [Span.of(span) for span in memory.get_finished_spans()]


def check_tree(spans: list[Span]) -> None:
    (run,) = [s for s in spans if s.name == "toolloop.run"]
    rounds = [s for s in spans if s.name == "toolloop.round"]
    plans = sorted(
        (s for s in spans if s.name == "toolloop.plan"),
        key=lambda s: int(s.attrs["toolloop.round_index"]),
    )
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(rounds) == 2 and len(plans) == 2 and len(tools) == 4
    assert run.parent_id is None
    assert all(r.parent_id == run.span_id for r in rounds)
    round_ids = {r.span_id for r in rounds}
    assert all(s.parent_id in round_ids for s in plans + tools)
    for child in plans + tools + rounds:  # times nest
        assert run.start <= child.start <= child.end <= run.end
    assert run.attrs["toolloop.stop_reason"] == "answered"
    assert run.attrs["toolloop.records"] == 4
    first_plan, last_plan = plans
    assert first_plan.attrs["toolloop.next_action"] == "execute"
    assert first_plan.attrs["toolloop.commands"] == 4
    assert last_plan.attrs["toolloop.short_circuited"] is True
    assert last_plan.events == ["short_circuit"]
    api = [s for s in tools if s.name == "execute_tool call_api"]
    assert len(api) == 1 and api[0].status == StatusCode.UNSET
    failed = [s for s in tools if s.attrs["toolloop.success"] is False]
    assert {s.attrs["gen_ai.tool.name"] for s in failed} == {"get_weather", "no_such_tool"}
    assert all(s.status == StatusCode.ERROR for s in failed)


def all_text(spans: list[Span]) -> str:
    return "\n".join(s.text for s in spans)


@pytest.mark.anyio
async def test_spans_of_a_run_without_secrets(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, memory = exporter
    spans = OpenTelemetrySpans(
        tracer,
        attributes={
            "toolloop.base_url": "http://user:hunter2secret@127.0.0.1/v1",
            "api_key": "sk-proj-0123456789abcdefghijkl",
            "toolloop.jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc",
        },
        include_results=True,
    )
    await async_plan_and_execute(
        "?", tools=[call_api, get_weather], planner=PLANNER, on_event=spans
    )
    finished = finished_spans(memory)
    check_tree(finished)
    text = all_text(finished)
    for secret in SECRETS:
        assert secret not in text
    assert "[redacted]" in text
    assert "Lisbon" in text  # what is not secret stays


@pytest.mark.anyio
async def test_spans_from_a_recorded_trace(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, memory = exporter
    recorder = TraceRecorder()
    await async_plan_and_execute(
        "?", tools=[call_api, get_weather], planner=PLANNER, on_event=recorder
    )
    buffer = io.StringIO()
    recorder.write(buffer)
    trace = read_trace(io.StringIO(buffer.getvalue()))
    export_spans(trace, tracer)
    finished = finished_spans(memory)
    check_tree(finished)
    (run,) = [s for s in finished if s.name == "toolloop.run"]
    assert trace.started is not None
    assert run.start == pytest.approx(trace.started.timestamp() * 1e9, abs=2e6)
    text = all_text(finished)
    for secret in SECRETS:
        assert secret not in text


def test_a_cancelled_run_leaves_no_span_open(exporter: tuple[Any, InMemorySpanExporter]) -> None:
    from toolloop.loop import RoundStarted

    tracer, memory = exporter
    spans = OpenTelemetrySpans(tracer)
    spans(RoundStarted(execution_id="e", at=0.0, round_index=0))
    spans.close()
    spans.close()
    assert sorted(s.name for s in memory.get_finished_spans()) == [
        "toolloop.plan",
        "toolloop.round",
        "toolloop.run",
    ]


def test_without_the_api_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert otel_available()
    monkeypatch.setattr(_otel, "otel_trace", None)
    assert not otel_available()
    with pytest.raises(ImportError, match=r"pip install 'toolloop\[otel\]'"):
        OpenTelemetrySpans()


@pytest.mark.anyio
async def test_a_thinking_model_s_reasoning_is_in_the_trace_and_the_plan_span(
    exporter: tuple[Any, InMemorySpanExporter],
) -> None:
    """DeepSeek's thinking mode: the plan's reasoning reaches the PlanDecided event, so the
    JSON-lines trace and the plan's span carry it."""
    from toolloop.models import OpenAIChatModel
    from toolloop.planners import ToolCallingPlanner
    from toolloop.testing import FakeOpenAIServer

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    call = {"index": 0, "id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}  # fmt: skip
    tracer, memory = exporter
    recorder = TraceRecorder()
    spans = OpenTelemetrySpans(tracer)

    def both(event: Any) -> None:
        recorder(event)
        spans(event)

    async with FakeOpenAIServer() as server:
        server.add_raw(
            [
                chunk({"role": "assistant", "reasoning_content": "Oslo's weather: a tool "}),
                chunk({"reasoning_content": "tells it."}),
                chunk({"tool_calls": [call]}, "tool_calls"),
                "data: [DONE]\n\n",
            ]
        )
        server.add_reply("Sunny in Oslo.")
        async with OpenAIChatModel("m", base_url=server.base_url, api_key="k") as model:
            await async_plan_and_execute(
                "Oslo?",
                tools=[get_weather],
                planner=ToolCallingPlanner(model),
                on_event=both,
            )
        sent = server.requests[1].body["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "Oslo's weather: a tool tells it."
    out = io.StringIO()
    recorder.write(out)
    events = read_trace(io.StringIO(out.getvalue())).events
    decided = [e for e in events if isinstance(e, PlanDecided)]
    assert [e.reasoning for e in decided] == ["Oslo's weather: a tool tells it.", None]
    plans = sorted(
        (s for s in finished_spans(memory) if s.name == "toolloop.plan"),
        key=lambda s: int(s.attrs["toolloop.round_index"]),
    )
    reasoning = [s.attrs.get("toolloop.reasoning") for s in plans]
    assert reasoning == ["Oslo's weather: a tool tells it.", None]
