"""A trace carries what a replay needs, secrets still scrubbed: each model call's reply
whole (its reasoning and where it came from) and what mattered of its request; tool
results whole when asked; the events of runs a harness did not start itself."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from toolloop.agents import create_agent
from toolloop.flow import FlowEvent
from toolloop.kernel import ModelCallFinished, RunResult, observe_runs
from toolloop.models import ChatDelta, ChatModel, ChatRequest, OpenAIChatModel, ToolCallDelta
from toolloop.testing import ScriptedChatModel, replay
from toolloop.tools import ToolRegistry
from toolloop.tracing import TraceRecorder, TraceWriter, read_trace, register_secret

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

OPENAI_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
"""What an OpenAI key looks like: the trace's scrubber knows the shape."""
OWN_SECRET = "tl-" + secrets.token_hex(12)
"""A secret of no known shape: the process registers it (as the CLI does its --api-key)."""


def lookup(key: str) -> dict[str, str]:
    """Look a key up.

    Args:
        key: which one.
    """
    return {"key": key, "value": f"{OPENAI_KEY} and {OWN_SECRET}"}


def echo(key: str) -> str:
    """Echo a key.

    Args:
        key: which one.
    """
    return key


async def test_no_api_key_lands_in_a_trace_and_the_trace_still_replays(tmp_path: Path) -> None:
    from toolloop.testing import FakeOpenAIServer

    register_secret(OWN_SECRET)
    trace = tmp_path / "run.jsonl"
    async with FakeOpenAIServer() as server:
        server.add_reply(
            content=f"Using {OPENAI_KEY}.",
            tool_calls=[{"name": "lookup", "arguments": json.dumps({"key": OWN_SECRET})}],
            chunk_size=5,
        )
        server.add_reply(content=f"The key is {OPENAI_KEY} ({OWN_SECRET}).", chunk_size=7)
        model = OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key=OPENAI_KEY, max_retries=0
        )
        async with model:
            agent = create_agent(model, [lookup], system_prompt=f"Your key: {OWN_SECRET}")
            with TraceWriter(trace, meta={"api_key": OPENAI_KEY, "note": OWN_SECRET}) as writer:
                result = await agent.run(f"What is {OPENAI_KEY}?", on_event=writer)
    assert result.records[0].success

    text = trace.read_text()
    assert OPENAI_KEY not in text
    assert OWN_SECRET not in text
    assert "[redacted]" in text

    # scrubbed consistently, the trace replays: the arguments compare scrubbed too
    async def again(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await create_agent(model, tools, system_prompt="Your key: ...").run("What?")

    replayed = await replay(trace, again)
    assert replayed.stop_reason == "answered"


class _GroqLike:
    """A model whose reasoning comes in the ``reasoning`` field (Groq, OpenRouter)."""

    def __init__(self) -> None:
        self.turn = 0

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        self.turn += 1
        first = self.turn == 1

        async def deltas() -> AsyncIterator[ChatDelta]:
            yield ChatDelta(reasoning="Think first.", reasoning_field="reasoning")
            if first:
                call = ToolCallDelta(index=0, id="c1", name="echo", arguments='{"key": "k"}')
                yield ChatDelta(tool_calls=(call,))
                yield ChatDelta(finish_reason="tool_calls")
            else:
                yield ChatDelta(content="done")
                yield ChatDelta(finish_reason="stop")

        yield deltas()


async def test_a_reply_is_told_whole_with_its_request(tmp_path: Path) -> None:
    recorder = TraceRecorder()
    await create_agent(_GroqLike(), [echo], temperature=0.2).run("go", on_event=recorder)
    finished = [e for e in recorder.events if isinstance(e, ModelCallFinished)]

    first = finished[0]
    assert (first.reasoning, first.reasoning_field) == ("Think first.", "reasoning")
    assert first.tool_calls == [{"id": "c1", "name": "echo", "arguments": '{"key": "k"}'}]
    assert first.request is not None
    assert first.request["messages"] == 1
    assert first.request["tools"] == ["echo"]
    assert first.request["settings"] == {"temperature": 0.2}
    assert finished[1].request is not None
    assert finished[1].request["messages"] == 3  # the user's, the reply, the tool's answer

    # the next request sent the reasoning back where it came from: an exact replay agrees
    trace = tmp_path / "run.jsonl"
    recorder.write(trace)
    read = [e for e in read_trace(trace).events if isinstance(e, ModelCallFinished)]
    assert [e.request for e in read] == [e.request for e in finished]

    async def again(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await create_agent(model, tools, temperature=0.2).run("go")

    await replay(trace, again, tools=[echo], compare_requests="exact")


async def test_a_request_summary_says_what_the_model_is_offered_and_asked() -> None:
    request = ChatRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "a", "parameters": {}}}],
        tool_choice="required",
        max_tokens=10,
        extra={"api_key": OPENAI_KEY},
        settings={"seed": 3, "extra_body": {"token": OPENAI_KEY}},
    )
    summary = request.summary()
    assert summary["messages"] == 1
    assert summary["tools"] == ["a"]
    assert summary["tool_choice"] == "required"
    assert summary["settings"] == {"max_tokens": 10, "seed": 3}
    assert OPENAI_KEY not in json.dumps(summary)
    other = ChatRequest(messages=[{"role": "user", "content": "hi!"}], tools=request.tools)
    assert other.summary()["digest"] != summary["digest"]
    assert other.summary()["schemas"] == summary["schemas"]


@pytest.mark.parametrize("limit", [100, None])
async def test_a_trace_keeps_long_strings_whole_when_asked(
    limit: int | None, tmp_path: Path
) -> None:
    def page() -> str:
        """A long page."""
        return "x" * 500

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "page", "arguments": "{}"}])
    model.add_reply("ok")
    path = tmp_path / "run.jsonl"
    with TraceWriter(path, max_value_chars=limit) as writer:
        await create_agent(model, [page]).run("read", on_event=writer)
    results = [
        json.loads(line)["record"]["result"]
        for line in path.read_text().splitlines()
        if '"tool_call_finished"' in line
    ]
    if limit is None:
        assert results == ["x" * 500]
    else:
        assert results[0].startswith("x" * 100 + "… (cut: 500 characters in all)")


async def test_observe_runs_tells_the_events_of_runs_started_in_the_block() -> None:
    seen: list[FlowEvent] = []
    model = ScriptedChatModel(["one", "two", "three"])
    agent = create_agent(model, [])
    await agent.run("before")
    with observe_runs(seen.append):
        await agent.run("inside")
    await agent.run("after")
    runs = {event.execution_id for event in seen}
    assert len(runs) == 1
    assert [e.kind for e in seen if e.kind == "run_finished"] == ["run_finished"]
    told: list[Any] = [e for e in seen if isinstance(e, ModelCallFinished)]
    assert [e.text for e in told] == ["two"]
