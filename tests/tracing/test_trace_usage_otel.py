"""Usage and progress on OpenTelemetry spans: the GenAI semantic-convention names on the plan
and run spans, a tool's reports as events of its span. Needs the ``otel`` extra."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolloop import StructuredPlanner, async_plan_and_execute
from toolloop.testing import ScriptedChatModel
from toolloop.tools import RunContext
from toolloop.tracing import OpenTelemetrySpans

pytest.importorskip(
    "opentelemetry.sdk", reason="the otel extra is not installed: pip install 'toolloop[otel]'"
)

from opentelemetry.sdk.trace import TracerProvider  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # type: ignore[import-not-found, import-untyped, unused-ignore]
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
    InMemorySpanExporter,
)

pytestmark = pytest.mark.anyio


async def fetch(url: str, ctx: RunContext[None]) -> str:
    """Fetch a page.

    Args:
        url: the page.
    """
    ctx.report("downloading", bytes=1024)
    return "<html>"


PLAN = json.dumps(
    {
        "next_action": "execute",
        "execution_commands": [
            {
                "purpose": "read the page",
                "tool_name": "fetch",
                "tool_kwargs": {"url": "https://example.com"},
                "todo_suggestion": "",
            }
        ],
    }
)


async def test_usage_and_progress_on_the_spans() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    model = ScriptedChatModel()
    model.add_reply(
        PLAN,
        usage={
            "prompt_tokens": 300,
            "completion_tokens": 40,
            "total_tokens": 340,
            "prompt_tokens_details": {"cached_tokens": 256},  # type: ignore[dict-item]
        },
    )
    model.add_reply('{"next_action": "response", "execution_commands": []}')  # no usage
    spans = OpenTelemetrySpans(provider.get_tracer("test"))
    await async_plan_and_execute(
        "Read it", tools=[fetch], planner=StructuredPlanner(model), on_event=spans
    )
    provider.shutdown()
    finished: dict[str, list[Any]] = {}
    for span in memory.get_finished_spans():
        finished.setdefault(span.name, []).append(span)
    first_plan = finished["toolloop.plan"][0].attributes
    assert first_plan["gen_ai.usage.input_tokens"] == 300
    assert first_plan["gen_ai.usage.output_tokens"] == 40
    assert first_plan["gen_ai.usage.cache_read.input_tokens"] == 256
    assert first_plan["toolloop.usage.requests"] == 1
    second_plan = finished["toolloop.plan"][1].attributes
    assert "gen_ai.usage.input_tokens" not in second_plan  # not reported: unknown, not 0
    assert second_plan["toolloop.usage.unreported_requests"] == 1
    run = finished["toolloop.run"][0].attributes
    assert (run["gen_ai.usage.input_tokens"], run["toolloop.usage.requests"]) == (300, 2)
    assert run["toolloop.usage.unreported_requests"] == 1
    (call,) = finished["execute_tool fetch"]
    (progress,) = [e for e in call.events if e.name == "progress"]
    assert progress.attributes["toolloop.message"] == "downloading"
    assert json.loads(progress.attributes["toolloop.data"]) == {"bytes": 1024}


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    return text


async def test_the_agent_s_model_calls_are_chat_spans_with_their_usage() -> None:
    from toolloop.agents import create_agent

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[{"name": "echo", "arguments": '{"text": "x"}'}],
        usage={"prompt_tokens": 50, "completion_tokens": 7},
    )
    model.add_reply("done")  # reports nothing
    spans = OpenTelemetrySpans(provider.get_tracer("test"))
    await create_agent(model, [echo]).run("go", on_event=spans)
    spans.close()
    provider.shutdown()
    finished: list[Any] = list(memory.get_finished_spans())
    chats = sorted(
        (s for s in finished if s.name == "chat"), key=lambda s: s.attributes["toolloop.call_index"]
    )
    first, second = (dict(s.attributes) for s in chats)
    assert (first["gen_ai.operation.name"], second["gen_ai.operation.name"]) == ("chat", "chat")
    assert first["gen_ai.usage.input_tokens"] == 50
    assert first["gen_ai.usage.output_tokens"] == 7
    assert "gen_ai.usage.input_tokens" not in second
    assert second["toolloop.usage.unreported_requests"] == 1
    (run,) = [s for s in finished if s.name == "toolloop.run"]
    assert run.attributes["toolloop.usage.requests"] == 2
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in chats)
