"""Real providers' responses, replayed byte for byte, read exactly by every product.

Each fixture under ``fixtures/`` (see the README there) is sent by the suite's local server
as it is, piece by piece, to the real ``openai`` client behind
:class:`~toolloop.models.OpenAIChatModel`; the adapter, both planners, the loop (with and
without streaming dispatch), the middleware agent, the status agent and the final answer
must each find in it what an independent reading finds (``independent.py``, itself held to
the fixture's hand-written ``expect``): the calls in order with their names, ids and
``json.loads`` of their arguments, the text, the reasoning, a refusal, the finish reason,
the usage, an error sent inside the stream; and the next request must carry back what the
provider requires (reasoning, signatures).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from independent import disagreements, fixture_paths, is_stream, load, read

from toolloop import PlannerError, Tool, async_plan_and_execute
from toolloop.agents import AgentModelError, AssistantMessage, create_agent
from toolloop.errors import ExecutionError, ModelCallError, ModelOutputError, ModelRefusalError
from toolloop.loop import LoopResult, final_answer, stream_final_answer
from toolloop.models import ChatReply, ChatRequest, OpenAIChatModel, ReplyReader, Usage
from toolloop.models._sse import SSEDecoder
from toolloop.models._wire import WireReader
from toolloop.planners import PlannerContext, StructuredPlanner, ToolCallingPlanner
from toolloop.status_agent import StatusAgent
from toolloop.testing import FakeOpenAIServer
from toolloop.tools import ToolRegistry

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

PATHS = fixture_paths()
IDS = [f"{path.parent.name}/{path.stem}" for path in PATHS]
FOLLOW_UP = "All done."
REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details")


@dataclass(frozen=True)
class Case:
    path: Path
    data: dict[str, Any]
    want: dict[str, Any]
    """The independent reading (equal to the fixture's ``expect``)."""

    @property
    def send_back(self) -> dict[str, Any]:
        return dict(self.data.get("send_back") or {})

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(self.want["tool_calls"])

    @property
    def empty(self) -> bool:
        """Nothing to act on: no text, no call, no refusal (e.g. a content filter's stop)."""
        want = self.want
        return not (want["text"] or want["tool_calls"] or want["refusal"])

    @property
    def runnable(self) -> list[dict[str, Any]]:
        """The calls a product runs: those with a name and a JSON object of arguments."""
        return [c for c in self.calls if c["name"] and isinstance(c["arguments"], dict)]


def _case(path: Path) -> Case:
    data = load(path)
    return Case(path, data, read(data))


@pytest.fixture(params=PATHS, ids=IDS)
def case(request: pytest.FixtureRequest) -> Case:
    return _case(request.param)


def test_there_are_fixtures_of_every_provider_named() -> None:
    providers = {path.parent.name for path in PATHS}
    assert providers >= {
        "openai",
        "azure",
        "groq",
        "deepseek",
        "dashscope",
        "mistral",
        "xai",
        "gemini",
        "openrouter",
        "cerebras",
        "huggingface",
        "ollama",
        "vllm",
        "snowflake",
        "zai",
    }
    kinds = {is_stream(load(path)) for path in PATHS}
    assert kinds == {True, False}  # streamed and whole bodies


def test_the_independent_reading_agrees_with_the_hand_written_expect(case: Case) -> None:
    assert disagreements(case.data) == []


# -- helpers -----------------------------------------------------------------------------


def _usage(usage: Usage | None) -> dict[str, int | None] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def _arguments(text: str) -> Any:
    return json.loads(text) if text.strip() else {}


def check_reply(reply: ChatReply, want: dict[str, Any]) -> None:
    assert reply.text == want["text"]
    assert (reply.reasoning.text if reply.reasoning is not None else "") == want["reasoning"]
    assert reply.refusal == want["refusal"]
    assert reply.finish_reason == want["finish_reason"]
    got = [(c.id, c.name, _arguments(c.arguments)) for c in reply.tool_calls]
    assert got == [(c["id"], c["name"], c["arguments"]) for c in want["tool_calls"]]
    assert _usage(reply.usage) == want["usage"]


def queue(server: FakeOpenAIServer, case: Case) -> None:
    data = case.data
    server.add_raw(data["body"], status=data.get("status", 200), headers=data["headers"])


@asynccontextmanager
async def serving(case: Case) -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with FakeOpenAIServer() as server:
        model = OpenAIChatModel(
            case.data.get("model", "model"),
            base_url=server.base_url,
            api_key="test-key",
            max_retries=0,
            # the suite's server is on 127.0.0.1: a provider that refuses reasoning back is
            # told so here, as its host would tell OpenAIChatModel
            send_reasoning=False if case.send_back.get("reasoning_dropped") else None,
        )
        async with model:
            yield server, model


class Recorder:
    """Tools named as the fixture's calls, taking any object, noting each call."""

    def __init__(self, case: Case) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        names = [c["name"] for c in case.calls if c["name"]] or ["get_weather"]
        self.tools = [self._tool(name) for name in dict.fromkeys(names)]

    def _tool(self, name: str) -> Tool:
        def run(**kwargs: Any) -> dict[str, Any]:
            self.ran.append((name, kwargs))
            return {"ok": True, "tool": name}

        return Tool(
            name=name,
            description=f"the {name} tool",
            parameters={"type": "object"},
            function=run,
            thread=False,
        )

    def registry(self) -> ToolRegistry:
        return ToolRegistry(self.tools)


def _assistant(request: Any) -> dict[str, Any]:
    """The assistant message a follow-up request sent back."""
    messages = request.body["messages"]
    found = [m for m in messages if m.get("role") == "assistant"]
    assert found, messages
    return dict(found[-1])


def check_sent_back(case: Case, sent: dict[str, Any]) -> None:
    """The reply as the next request carries it: ids, reasoning where the provider wants
    it, signatures, and nothing a provider refuses."""
    back = case.send_back
    calls = sent.get("tool_calls") or []
    assert [c["function"]["name"] for c in calls] == [c["name"] for c in case.calls]
    for call, want in zip(calls, case.calls, strict=True):
        if want["id"]:
            assert call["id"] == want["id"]
        assert call["id"]  # made up where the server gave none
    if back.get("reasoning_dropped"):
        assert not any(key in sent for key in REASONING_KEYS), sent
    elif back.get("reasoning_field"):
        assert sent[back["reasoning_field"]] == case.want["reasoning"]
    if back.get("reasoning_details") and not back.get("reasoning_dropped"):
        details = sent.get("reasoning_details")
        assert isinstance(details, list) and details, sent
        body = "".join(case.data["body"])
        for item in details:  # every signature and encrypted block exactly as received
            for key in ("signature", "data"):
                if isinstance(item.get(key), str):
                    assert json.dumps(item[key])[1:-1] in body
    if back.get("tool_call_extra"):
        body = "".join(case.data["body"])
        for call in calls:
            if "extra_content" in call:
                signature = call["extra_content"]["google"]["thought_signature"]
                assert signature in body
        assert any("extra_content" in call for call in calls)


# -- the adapter ---------------------------------------------------------------------------


async def read_all(model: OpenAIChatModel, reader: ReplyReader) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    async with model.stream(request) as deltas:
        async for delta in deltas:
            reader.feed(delta)


async def test_the_adapter_reads_it_exactly(case: Case) -> None:
    async with serving(case) as (server, model):
        queue(server, case)
        reader = ReplyReader()
        if case.want["error"] is not None:
            with pytest.raises(ModelCallError) as info:
                await read_all(model, reader)
            assert case.want["error"] in str(info.value)
            assert info.value.__cause__ is None and info.value.__context__ is None
            assert _usage(reader.usage) == case.want["usage"]  # the error chunk's too
            return
        await read_all(model, reader)
        check_reply(reader.reply(), case.want)


def test_any_split_of_the_bytes_reads_the_same(case: Case) -> None:
    """The body cut at random places (a UTF-8 character, a line, an event split in two)
    reads as the fixture's own pieces do."""
    if not is_stream(case.data):
        return
    body = "".join(case.data["body"]).encode()
    rng = random.Random(case.path.name)
    for _ in range(5):
        cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(1, 40))))
        pieces = [body[i:j] for i, j in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        decoder, wire, reader = SSEDecoder(), WireReader(), ReplyReader()
        events = [e for piece in pieces for e in decoder.feed(piece)] + decoder.close()
        for event in events:
            if event.data.strip() == "[DONE]":
                break
            delta, failure = wire.chunk(json.loads(event.data))
            if delta is not None:
                reader.feed(delta)
            if failure is not None:
                assert case.want["error"] is not None
                assert case.want["error"] in failure.message
                break
        for delta in wire.end():
            reader.feed(delta)
        if case.want["error"] is None:
            check_reply(reader.reply(), case.want)


# -- the planners ----------------------------------------------------------------------------


def _context(case: Case) -> PlannerContext:
    return PlannerContext(
        user_input="Please help.", available_tools=Recorder(case).registry().specs()
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["plan", "plan_streaming"])
async def test_the_tool_calling_planner(case: Case, streamed: bool) -> None:
    async with serving(case) as (server, model):
        queue(server, case)
        planner = ToolCallingPlanner(model)
        dispatched: list[int] = []

        async def plan() -> Any:
            if streamed:
                return await planner.plan_streaming(
                    _context(case), lambda i, raw: dispatched.append(i)
                )
            return await planner.plan(_context(case))

        want = case.want
        if want["error"] is not None:
            with pytest.raises(ModelCallError, match="inside its reply"):
                await plan()
            return
        if case.empty:  # nothing to act on: an error that says so, never a silent answer
            with pytest.raises(ModelOutputError, match="no text and no tool call"):
                await plan()
            return
        reply = await plan()
    commands = reply.output["execution_commands"]
    assert [(c["tool_name"], c["tool_kwargs"]) for c in commands] == [
        (c["name"], c["arguments"]) for c in case.calls
    ]
    if streamed:
        assert dispatched == list(range(len(commands)))
    assert reply.finish_reason == want["finish_reason"]
    assert (reply.reasoning.text if reply.reasoning else "") == want["reasoning"]
    if want["refusal"] is not None and not commands:
        assert reply.refusal == want["refusal"]
        assert reply.output["next_action"] == "response"
    else:
        assert reply.output["content"] == want["text"]
        assert reply.output["next_action"] == ("execute" if commands else "response")


async def test_the_structured_planner_never_fails_on_a_shape(case: Case) -> None:
    """None of these replies is a plan: the planner reads each one to a clear outcome (a
    refusal, an error that says what came), never a crash on the shape."""
    async with serving(case) as (server, model):
        queue(server, case)
        outcome: Any
        try:
            outcome = await StructuredPlanner(model).plan(_context(case))
        except (ModelCallError, ModelOutputError) as exc:
            outcome = exc
    if isinstance(outcome, ModelCallError):
        assert case.want["error"] is not None
        assert case.want["error"] in str(outcome)
    elif isinstance(outcome, ModelOutputError):
        assert case.want["error"] is None
        assert case.want["refusal"] is None
        assert "JSON" in str(outcome) or "no text" in str(outcome)
    elif case.want["refusal"] is not None:
        assert outcome.refusal == case.want["refusal"]
    else:  # a reply that is JSON text is read as the plan it says (normalized by the loop)
        assert outcome.output == json.loads(case.want["text"])


# -- the loop --------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming_dispatch", [False, True], ids=["rounds", "dispatch"])
async def test_the_loop(case: Case, streaming_dispatch: bool) -> None:
    tools = Recorder(case)
    async with serving(case) as (server, model):
        queue(server, case)
        server.add_reply(FOLLOW_UP)

        async def run() -> LoopResult:
            return await async_plan_and_execute(
                "Please help.",
                tools=tools.registry(),
                planner=ToolCallingPlanner(model),
                streaming_dispatch=streaming_dispatch,
            )

        want = case.want
        if want["error"] is not None or case.empty:
            with pytest.raises(PlannerError) as info:
                await run()
            said = want["error"] if want["error"] is not None else "no text and no tool call"
            assert said in str(info.value.__cause__)
            assert tools.ran == []  # nothing runs from a reply the server broke off
            return
        result = await run()
        requests = [r for r in server.requests if r.path == "/v1/chat/completions"]
    assert tools.ran == [(c["name"], c["arguments"]) for c in case.runnable]
    assert len(result.done_plans) == len(case.calls)
    assert [r.tool_name for r in result.done_plans] == [c["name"] for c in case.calls]
    if case.calls:
        assert result.rounds == 1
        assert len(requests) == 2
        check_sent_back(case, _assistant(requests[1]))
    elif want["refusal"] is not None:
        assert result.stop_reason == "refusal"
        assert result.planner_text == want["refusal"]
    else:
        assert result.stop_reason == "answered"
        assert len(requests) == 1
        assert result.planner_text == (want["text"] if want["text"].strip() else None)


# -- the middleware agent ---------------------------------------------------------------------


async def test_the_middleware_agent(case: Case) -> None:
    tools = Recorder(case)
    async with serving(case) as (server, model):
        queue(server, case)
        server.add_reply(FOLLOW_UP)
        agent = create_agent(model, tools=tools.tools)
        want = case.want
        if want["error"] is not None or case.empty:
            with pytest.raises(AgentModelError) as info:
                await agent.run("Please help.")
            cause = str(info.value.__cause__)
            assert want["error"] in cause if want["error"] else "no text" in cause
            return
        result = await agent.run("Please help.")
        requests = [r for r in server.requests if r.path == "/v1/chat/completions"]
    first = result.messages[1]
    assert isinstance(first, AssistantMessage)
    assert first.content == want["text"]
    assert (first.reasoning.text if first.reasoning else "") == want["reasoning"]
    assert first.refusal == want["refusal"]
    assert first.finish_reason == want["finish_reason"]
    assert [(c.name, c.args if c.error is None else c.raw_arguments) for c in first.tool_calls] == [
        (c["name"], c["arguments"] if isinstance(c["arguments"], dict) else None)
        for c in case.calls
    ]
    for call, wanted in zip(first.tool_calls, case.calls, strict=True):
        if wanted["id"]:
            assert call.id == wanted["id"]
    assert tools.ran == [(c["name"], c["arguments"]) for c in case.runnable]
    if case.calls:
        assert result.text == FOLLOW_UP
        check_sent_back(case, _assistant(requests[1]))
    else:
        assert len(requests) == 1
        assert result.stop_reason == (
            "refusal"
            if want["refusal"] is not None
            else "cut_off"
            if want["finish_reason"] == "length"
            else "answered"
        )
        assert result.text == (want["text"] or None)  # a reply that said nothing: no text


# -- the status agent --------------------------------------------------------------------------


async def test_the_status_agent(case: Case) -> None:
    """The fixture answers the analysis and the conversation steps; the plan between them
    is empty (no tool), so the answer is the conversation step's text."""
    tools = Recorder(case)
    async with serving(case) as (server, model):
        queue(server, case)
        server.add_reply(json.dumps({"steps": []}))
        queue(server, case)
        agent = StatusAgent(model=model, tools=tools.tools)
        want = case.want
        if want["error"] is not None or not want["text"]:
            with pytest.raises(ExecutionError) as info:
                await agent.run("Please help.")
            cause = info.value.__cause__
            if want["error"] is not None:
                assert isinstance(cause, ModelCallError) and want["error"] in str(cause)
            elif want["refusal"] is not None:
                assert isinstance(cause, ModelRefusalError) and cause.refusal == want["refusal"]
            else:
                assert isinstance(cause, ModelOutputError) and "no text" in str(cause)
            return
        result = await agent.run("Please help.")
    assert result.state.analysis == want["text"]
    if want["finish_reason"] == "length":  # an answer cut off is not one: a human looks
        assert result.paused and "cut off" in (result.state.error or "")
    else:
        assert result.text == want["text"]
    assert tools.ran == []


# -- the final answer ----------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["final_answer", "stream_final_answer"])
async def test_the_final_answer(case: Case, streamed: bool) -> None:
    loop = LoopResult(user_input="Please help.", rounds=0, stop_reason="answered")
    want = case.want
    async with serving(case) as (server, model):
        queue(server, case)

        async def answer() -> tuple[str, str | None, Usage | None, str]:
            if not streamed:
                text = await final_answer(model, loop)
                return text, text.finish_reason, text.usage, text.reasoning
            async with stream_final_answer(model, loop) as stream:
                pieces = [piece async for piece in stream]
                return "".join(pieces), stream.finish_reason, stream.usage, stream.reasoning

        if want["error"] is not None:
            with pytest.raises(ModelCallError, match="inside its reply"):
                await answer()
            return
        if not want["text"]:
            expected = ModelRefusalError if want["refusal"] is not None else ModelOutputError
            with pytest.raises(expected) as info:
                await answer()
            if want["refusal"] is not None:
                assert isinstance(info.value, ModelRefusalError)
                assert info.value.refusal == want["refusal"]
            return
        text, finish, usage, reasoning = await answer()
    assert text == want["text"]
    assert finish == want["finish_reason"]
    assert _usage(usage) == want["usage"]
    assert reasoning == want["reasoning"]
