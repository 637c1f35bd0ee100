"""The OpenTelemetry spans of each product (the loop, the middleware agent, the status
agent), driven through its public API, through the SDK's in-memory exporter: the model
calls with their usage, a pause as paused (not an error), the resume, the stop reason, the
run's usage, several runs at once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from product_runs import MODEL_CALLS, PRODUCTS, Driven

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from toolloop.tracing import OpenTelemetrySpans

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _spans(exporter: InMemorySpanExporter) -> OpenTelemetrySpans:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetrySpans(provider.get_tracer("test"))


def named(spans: Any, name: str, run_id: str) -> list[ReadableSpan]:
    """The spans of that name of that run (a chat's run is its parent's)."""
    runs = {
        s.context.span_id
        for s in spans
        if s.name == "toolloop.run" and (s.attributes or {}).get("toolloop.execution_id") == run_id
    }
    if name == "toolloop.run":
        return [s for s in spans if s.context.span_id in runs]
    return [s for s in spans if s.name == name and s.parent and s.parent.span_id in runs]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_spans_of_a_run_model_calls_usage_stop_reason(
    product: str, exporter: InMemorySpanExporter
) -> None:
    spans = _spans(exporter)
    result = await Driven(product).run(spans)
    assert result.stop_reason == "answered"
    finished = exporter.get_finished_spans()
    chats = named(finished, "chat", result.run_id)
    assert len(chats) == MODEL_CALLS[product]
    for chat in chats:
        attributes = chat.attributes or {}
        assert (
            attributes["gen_ai.usage.input_tokens"],
            attributes["gen_ai.usage.output_tokens"],
        ) == (10, 5)
    (run,) = named(finished, "toolloop.run", result.run_id)
    attributes = run.attributes or {}
    assert attributes["toolloop.stop_reason"] == "answered"
    assert attributes["gen_ai.usage.input_tokens"] == 10 * MODEL_CALLS[product]
    assert attributes["toolloop.usage.requests"] == MODEL_CALLS[product]
    assert run.status.status_code is StatusCode.UNSET
    (tool,) = [s for s in finished if s.name == "execute_tool send"]
    assert [e.name for e in tool.events] == ["progress"]  # the tool's ctx.report
    if product == "status":  # its statuses, in order, as events of the run
        statuses = [
            e.attributes["toolloop.status"]
            for e in run.events
            if e.name == "status_changed" and e.attributes
        ]
        assert statuses[0] == "analysis_completed" and statuses[-1] == "reflection_completed"
        assert attributes["toolloop.status"] == "reflection_completed"


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_paused_run_is_paused_not_failed_and_its_resume_finishes_it(
    product: str, exporter: InMemorySpanExporter
) -> None:
    spans = _spans(exporter)
    driven = Driven(product)
    paused = await driven.run(spans, pause=True)
    assert paused.paused
    (run,) = named(exporter.get_finished_spans(), "toolloop.run", paused.run_id)
    attributes = run.attributes or {}
    assert attributes["toolloop.paused"] is True
    assert attributes["toolloop.request.kind"] == "approve_tool_calls"
    assert "toolloop.stop_reason" not in attributes
    assert run.status.status_code is StatusCode.UNSET  # not an error
    assert [e.name for e in run.events if e.name == "paused"] == ["paused"]
    asked = len(named(exporter.get_finished_spans(), "chat", paused.run_id))
    assert asked >= 1 and attributes["toolloop.usage.requests"] == asked  # the usage so far
    result = await driven.resume(paused.run_id, spans)
    assert result.stop_reason == "answered"
    first, resumed = sorted(
        named(exporter.get_finished_spans(), "toolloop.run", paused.run_id),
        key=lambda s: s.start_time or 0,
    )
    assert first is not resumed
    again = resumed.attributes or {}
    assert again["toolloop.resumed"] is True and again["toolloop.stop_reason"] == "answered"
    assert again["toolloop.usage.requests"] == MODEL_CALLS[product]  # across the pause
    assert (resumed.start_time or 0) >= (first.end_time or 0)
    assert len(named(exporter.get_finished_spans(), "chat", paused.run_id)) == MODEL_CALLS[product]


async def test_several_runs_of_every_product_at_once_have_their_own_spans(
    exporter: InMemorySpanExporter,
) -> None:
    spans = _spans(exporter)
    results: dict[str, Any] = {}

    async def one(product: str) -> None:
        results[product] = await Driven(product).run(spans)

    async with anyio.create_task_group() as tg:
        for product in PRODUCTS:
            tg.start_soon(one, product)
    finished = exporter.get_finished_spans()
    for product, result in results.items():
        (run,) = named(finished, "toolloop.run", result.run_id)
        assert (run.attributes or {})["toolloop.stop_reason"] == "answered"
        assert len(named(finished, "chat", result.run_id)) == MODEL_CALLS[product]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_the_timeline_says_a_result_was_cut_for_the_model(product: str) -> None:
    """A result longer than the run's ``max_result_chars``: the shape of the run keeps what
    the model was shown and the handle, and the call's bar in the timeline says it (its
    title)."""
    from toolloop.flow import FlowEvent
    from toolloop.kernel import ResultKept
    from toolloop.tracing import RunShape, render_timeline

    events: list[FlowEvent] = []
    await Driven(product).run(events.append, max_result_chars=4)
    (kept,) = [e for e in events if isinstance(e, ResultKept)]
    shape = RunShape.from_events(events)
    (call,) = [c for r in shape.rounds for c in r.calls]
    said = f"cut for the model: shown 4 of 11 chars, kept whole · handle {kept.handle}"
    assert call.kept == said
    assert said in render_timeline(events)
