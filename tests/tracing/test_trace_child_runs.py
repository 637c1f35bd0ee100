"""A run called as a tool of another (a child run) in the surfaces that read a run's events:
its events written to a trace and read back, its shape under the parent's call, its rows
nested under that call in the timeline, its spans under that call's span."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from child_run_tree import tree

from toolloop.flow import FlowEvent
from toolloop.kernel import ChildRunEvent
from toolloop.runner import ToolCallStarted
from toolloop.tracing import RunShape, TraceWriter, read_trace, render_timeline

pytestmark = pytest.mark.anyio


async def test_a_trace_round_trips_a_child_run_s_events(tmp_path: Path) -> None:
    seen: list[FlowEvent] = []
    path = tmp_path / "run.jsonl"
    with TraceWriter(path) as writer:

        def both(event: FlowEvent) -> None:
            seen.append(event)
            writer(event)

        result = await tree(both)
    read = read_trace(path).events
    assert len(read) == len(seen)
    nested = [e for e in read if isinstance(e, ChildRunEvent)]
    assert nested and len(nested) == sum(isinstance(e, ChildRunEvent) for e in seen)
    for back, live in zip(read, seen, strict=True):
        assert type(back) is type(live)
        if isinstance(live, ChildRunEvent):
            assert isinstance(back, ChildRunEvent)
            assert type(back.event) is type(live.event)  # read back as its own class
            assert back.model_dump(mode="json") == live.model_dump(mode="json")
    assert {e.depth for e in nested} == {1, 2}
    assert {e.parent_run_id for e in nested if e.depth == 1} == {result.run_id}
    sends = [e.event for e in nested if isinstance(e.event, ToolCallStarted)]
    assert [s.command.tool_name for s in sends] == ["deeper", "send"]


def shape_of(events: list[FlowEvent]) -> RunShape:
    (shape,) = RunShape.per_run(events)
    return shape


async def test_the_shape_holds_each_child_under_the_call_that_started_it() -> None:
    events: list[FlowEvent] = []
    result = await tree(events.append)
    shape = shape_of(events)
    assert shape.execution_id == result.run_id
    (call,) = shape.calls
    assert call.tool_name == "helper"
    child = call.child
    assert child is not None and shape.children == [child]
    told = {e.run_id for e in events if isinstance(e, ChildRunEvent) and e.depth == 1}
    assert told == {child.execution_id}
    (deeper,) = child.calls
    assert deeper.tool_name == "deeper" and deeper.success
    assert deeper.child is not None
    (sent,) = deeper.child.calls
    assert (sent.tool_name, sent.result) == ("send", "sent to ada")
    assert len(child.model_calls) == 2 and len(deeper.child.model_calls) == 2
    # on the parent's clock: inside the call that started it
    assert call.ended is not None
    assert call.started <= deeper.started <= sent.started <= call.ended
    assert child.stop_reason is not None


async def test_the_timeline_draws_a_child_s_calls_under_its_parent_s_call() -> None:
    events: list[FlowEvent] = []
    await tree(events.append)
    svg = render_timeline(events)
    shape = shape_of(events)
    (call,) = shape.calls
    assert call.child is not None and call.child.execution_id is not None
    at = svg.index(f'data-call-id="{call.call_id}"')
    assert svg.rfind("helper", 0, at) != -1  # the parent's call is drawn before it
    block = svg[at:]
    assert call.child.execution_id in block
    assert block.index("deeper") < block.index("send")  # the grandchild, inside the child
    assert 'data-depth="2"' in block
    assert svg.count('class="child-run"') == 2


async def test_a_child_run_s_spans_are_under_its_parent_s_call_span() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
        InMemorySpanExporter,
    )

    from toolloop.tracing import OpenTelemetrySpans

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        spans = OpenTelemetrySpans(provider.get_tracer("test"))
        result = await tree(spans)
        spans.close()
        finished: list[Any] = list(memory.get_finished_spans())
    finally:
        provider.shutdown()
    by_id = {s.context.span_id: s for s in finished}

    def parent_of(span: Any) -> Any:
        return None if span.parent is None else by_id.get(span.parent.span_id)

    runs = [s for s in finished if s.name == "toolloop.run"]
    assert len(runs) == 3
    assert {s.context.trace_id for s in finished} == {runs[0].context.trace_id}  # one trace
    top = next(s for s in runs if s.attributes["toolloop.execution_id"] == result.run_id)
    assert top.parent is None
    (helper,) = [s for s in finished if s.name == "execute_tool helper"]
    (child,) = [s for s in runs if parent_of(s) is helper]
    assert child.attributes["toolloop.parent_run_id"] == result.run_id
    (deeper,) = [s for s in finished if s.name == "execute_tool deeper"]
    (grandchild,) = [s for s in runs if parent_of(s) is deeper]
    (sent,) = [s for s in finished if s.name == "execute_tool send"]
    chain = []
    span = sent
    while span is not None:
        chain.append(span)
        span = parent_of(span)
    assert [s for s in chain if s.name == "toolloop.run"] == [grandchild, child, top]
    assert helper in chain and deeper in chain
    chats = [s for s in finished if s.name == "chat" and parent_of(s) is child]
    assert len(chats) == 2  # the helper's two model calls, under its run
