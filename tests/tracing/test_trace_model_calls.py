"""Every model call of a run is a ``chat`` span, whatever product made it: the kernel's
``ModelCallStarted`` / ``ModelCallFinished`` become spans with their usage, finish reason
and failure; its ``RunFinished`` puts the run's usage on the run span. Needs the ``otel``
extra."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from toolloop.flow import Context, Execution, ExecutionFinished, ExecutionStarted, Flow
from toolloop.kernel import (
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunOptions,
    StopReason,
    drive,
)
from toolloop.models import ChatRequest, Usage, stream_chat
from toolloop.runner import ToolExecutionRecord
from toolloop.testing import ScriptedChatModel
from toolloop.tracing import OpenTelemetrySpans

pytest.importorskip(
    "opentelemetry.sdk", reason="the otel extra is not installed: pip install 'toolloop[otel]'"
)

from opentelemetry.sdk.trace import TracerProvider  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # type: ignore[import-not-found, import-untyped, unused-ignore]

pytestmark = pytest.mark.anyio

E = "run-1"


def spans_of(events: list[Any]) -> list[Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans = OpenTelemetrySpans(provider.get_tracer("test"))
    for event in events:
        spans(event)
    spans.close()
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_each_model_call_is_a_chat_span_with_its_usage_finish_reason_and_failure() -> None:
    usage = Usage(requests=1, input_tokens=30, output_tokens=4, total_tokens=34)
    finished = spans_of(
        [
            ExecutionStarted(execution_id=E, at=0.0, flow="any"),
            ModelCallStarted(execution_id=E, at=0.1, call_index=0),
            ModelCallFinished(
                execution_id=E,
                at=0.5,
                call_index=0,
                duration=0.4,
                usage=usage,
                finish_reason="tool_calls",
                tool_calls=[{"id": "c1", "name": "echo", "arguments": "{}"}],
            ),
            ModelCallStarted(execution_id=E, at=0.6, call_index=1),
            ModelCallFinished(
                execution_id=E, at=0.7, call_index=1, duration=0.1, error="ModelCallError: 503"
            ),
            # a call whose start the trace does not have (cut short): a span all the same
            ModelCallFinished(execution_id=E, at=0.9, call_index=2, duration=0.1, text="hi"),
            RunFinished(
                execution_id=E, at=1.0, stop_reason="answered", records=1, usage=usage, turns=3
            ),
            ExecutionFinished(execution_id=E, at=1.0, duration=1.0),
        ]
    )
    chats = sorted(
        (s for s in finished if s.name == "chat"), key=lambda s: s.attributes["toolloop.call_index"]
    )
    first, failed, late = chats
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.usage.input_tokens"] == 30
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first.attributes["toolloop.tool_calls"] == 1
    assert (first.end_time - first.start_time) == pytest.approx(0.4e9, rel=0.01)
    assert failed.status.status_code == StatusCode.ERROR
    assert "503" in failed.attributes["toolloop.error"]
    assert (late.end_time - late.start_time) == pytest.approx(0.1e9, rel=0.01)
    (run,) = [s for s in finished if s.name == "toolloop.run"]
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in chats)
    assert run.attributes["toolloop.stop_reason"] == "answered"
    assert (run.attributes["toolloop.turns"], run.attributes["toolloop.records"]) == (3, 1)
    assert run.attributes["gen_ai.usage.output_tokens"] == 4


class S(BaseModel):
    usage: Usage | None = None
    done: bool = False


class Logic:
    tool_step = "step"

    def stop_reason(self, state: S) -> StopReason | None:
        return "answered" if state.done else None

    def records(self, state: S) -> list[ToolExecutionRecord]:
        return []

    def turns(self, state: S) -> int:
        return 2

    def settle(self, state: S, stop: StopReason) -> None:
        pass

    def kept(self, state: S, handle: str) -> None:
        return None


async def test_any_product_driven_by_the_kernel_gets_chat_spans() -> None:
    """A flow of no product at all: its model calls, told by the kernel, are spans."""
    model = ScriptedChatModel()
    model.add_reply("a", usage={"prompt_tokens": 3, "completion_tokens": 1})
    model.add_reply("b")
    flow = Flow("not_a_product", state=S)

    async def ask(value: Any, ctx: Context[S]) -> None:
        for _ in range(2):
            async with stream_chat(model, ChatRequest(messages=[])) as deltas:
                async for _delta in deltas:
                    pass
        ctx.state.done = True

    flow.start.to(ask).end()
    events: list[Any] = []
    execution = Execution(flow, S())
    options = RunOptions(on_event=events.append)
    await drive(execution, lambda: execution.run(), options, Logic(), result_of=lambda e: e)
    finished = spans_of(events)
    chats = [s for s in finished if s.name == "chat"]
    assert sorted(s.attributes["toolloop.call_index"] for s in chats) == [0, 1]
    by_index = {s.attributes["toolloop.call_index"]: s for s in chats}
    assert by_index[0].attributes["gen_ai.usage.input_tokens"] == 3
    assert by_index[1].attributes["toolloop.usage.unreported_requests"] == 1
    (run,) = [s for s in finished if s.name == "toolloop.run"]
    assert run.attributes["toolloop.usage.requests"] == 2
