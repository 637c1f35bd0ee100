"""The real-model suite: toolloop against a real model behind a real OpenAI-compatible server.

Opt-in: every test is marked ``real_model`` and skipped unless ``TOOLLOOP_REAL_MODEL_URL``
names a server that answers (e.g. ``http://127.0.0.1:8765/v1``). ``python3 dev.py
real-model`` installs llama-cpp-python and Gemma 3 270M, serves it, runs this suite and stops
the server (see ``tests/real_model/run.py``).

The model is a 270M *base* model: what it writes is nonsense (it echoes the prompt, invents
arguments), but under a schema its output is JSON of the right shape. So the tests check the
protocol, not the answers: streamed structured output, the fallback from ``json_schema``, the
short-circuit closing a real connection, whatever the model proposes becoming records (an
unknown tool or bad arguments a failed record, no tool ever run with invalid arguments), a
cut-off plan a clear error, native tool calls becoming commands.

Variables: ``TOOLLOOP_REAL_MODEL_URL`` (the server's base URL, with ``/v1``),
``TOOLLOOP_REAL_MODEL_NAME`` (default: the first model the server lists),
``TOOLLOOP_REAL_MODEL_REQUIRED=1`` (a server that does not answer fails instead of skipping),
``TOOLLOOP_REAL_MODEL_LOG`` (the server's log, when it is llama-cpp-python's: lets the
short-circuit test see the server notice the client going).
"""

from __future__ import annotations

import copy
import json
import os
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import perf_counter
from typing import Any, Literal

import anyio
import jsonschema
import pytest

from toolloop import (
    LoopResult,
    ModelCallError,
    ModelOutputError,
    PlannerError,
    ToolExecutionRecord,
    async_plan_and_execute,
)
from toolloop.flow import FlowEvent
from toolloop.loop import PlanDecided
from toolloop.models import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    OpenAIChatModel,
    StructuredOutput,
    StructuredOutputMode,
    UsageLimits,
)
from toolloop.planners import (
    PlannerContext,
    PlannerReply,
    PlannerSchema,
    StructuredPlanner,
    planner_messages,
)
from toolloop.tools import ToolRegistry

URL_VAR = "TOOLLOOP_REAL_MODEL_URL"
NAME_VAR = "TOOLLOOP_REAL_MODEL_NAME"
REQUIRED_VAR = "TOOLLOOP_REAL_MODEL_REQUIRED"
LOG_VAR = "TOOLLOOP_REAL_MODEL_LOG"

MAX_TOKENS = 300  # a free-form tool_kwargs lets the model ramble: less cuts most plans off
REQUEST_TIMEOUT = 300.0  # ~7 tokens/s under a grammar on a busy 2-core machine
RUN_TIMEOUT = 480.0
# after a short-circuit, the server must be free again at once: with the rest of the reply
# still being generated (>= MAX_TOKENS tokens, ~30 s here) a request would wait far longer
FOLLOW_UP_LIMIT = 20.0
PADDING_ITEMS = 400  # forces a reply longer than MAX_TOKENS behind the decision

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.anyio,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not os.environ.get(URL_VAR),
        reason=f"{URL_VAR} is not set: the real-model suite is opt-in; run it with "
        "`python3 dev.py real-model` (installs and serves a small model) or point "
        f"{URL_VAR} at an OpenAI-compatible server, e.g. http://127.0.0.1:8765/v1",
    ),
]


# --- the server ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    url: str
    model: str
    log: Path | None


@pytest.fixture(scope="module")
def server() -> Server:
    """The server named by the environment, or a skip (a failure when it is required)."""
    url = os.environ.get(URL_VAR, "").rstrip("/")
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=10) as reply:
            listing = json.load(reply)
        name = os.environ.get(NAME_VAR) or listing["data"][0]["id"]
    except (OSError, ValueError, LookupError, TypeError) as exc:
        reason = (
            f"no OpenAI-compatible server answers GET {url}/models ({type(exc).__name__}: "
            f"{exc}); start one with `python3 dev.py real-model`, or unset {URL_VAR}"
        )
        if os.environ.get(REQUIRED_VAR):
            pytest.fail(reason)
        pytest.skip(reason)
    log = os.environ.get(LOG_VAR)
    return Server(url=url, model=str(name), log=Path(log) if log else None)


@asynccontextmanager
async def openai_model(
    server: Server, mode: StructuredOutputMode | Literal["auto"] = "json_object_schema"
) -> AsyncIterator[OpenAIChatModel]:
    # no retries: a retried generation would only double the wait and hide what happened
    model = OpenAIChatModel(
        server.model,
        base_url=server.url,
        structured_output=mode,
        max_retries=0,
        timeout=REQUEST_TIMEOUT,
    )
    async with model:
        yield model


# --- a model that keeps what was said ------------------------------------------------------


@dataclass
class Exchange:
    """One streamed request and what came back of it."""

    request: ChatRequest
    text: str = ""
    tool_names: dict[int, str] = field(default_factory=dict)
    tool_arguments: dict[int, list[str]] = field(default_factory=dict)
    finish_reason: str | None = None
    deltas: int = 0
    read_to_end: bool = False

    def describe(self) -> str:
        calls = [
            f"{self.tool_names.get(i, '?')}({''.join(parts)})"
            for i, parts in self.tool_arguments.items()
        ]
        end = "to its end" if self.read_to_end else "closed early"
        return (
            f"{self.deltas} deltas, {len(self.text)} chars, finish_reason="
            f"{self.finish_reason!r}, read {end}: text={self.text[:400]!r}"
            + (f" tool_calls={calls}" if calls else "")
        )


class _Recorded:
    __slots__ = ("_deltas", "_exchange")

    def __init__(self, deltas: AsyncIterator[ChatDelta], exchange: Exchange) -> None:
        self._deltas = deltas
        self._exchange = exchange

    def __aiter__(self) -> _Recorded:
        return self

    async def __anext__(self) -> ChatDelta:
        try:
            delta = await self._deltas.__anext__()
        except StopAsyncIteration:
            self._exchange.read_to_end = True
            raise
        exchange = self._exchange
        exchange.deltas += 1
        exchange.text += delta.content
        for call in delta.tool_calls:  # some servers repeat the name in every piece
            if call.name:
                exchange.tool_names.setdefault(call.index or 0, call.name)
            exchange.tool_arguments.setdefault(call.index or 0, []).append(call.arguments)
        if delta.finish_reason is not None:
            exchange.finish_reason = delta.finish_reason
        return delta


class RecordingModel:
    """A :class:`ChatModel` around another that notes every exchange (for the checks and
    for the report of what the model wrote)."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        exchange = Exchange(request)
        self.exchanges.append(exchange)
        async with self.inner.stream(request) as deltas:
            yield _Recorded(deltas, exchange)

    def report(self, title: str) -> None:
        print(f"\n--- {title}: {len(self.exchanges)} request(s)")
        for i, exchange in enumerate(self.exchanges):
            print(f"  [{i}] {exchange.describe()}")

    def check_streams(self) -> None:
        """A stream read to its end must say why it ended: one that stops without a
        finish_reason was broken off (e.g. the server failed after sending its headers)."""
        for i, exchange in enumerate(self.exchanges):
            if exchange.read_to_end:
                assert exchange.finish_reason is not None, (
                    f"request {i}: the stream ended without a finish_reason, so the server "
                    f"broke it off; {exchange.describe()}"
                )


# --- tools that note how they were called --------------------------------------------------


class Toolbox:
    """Two typed tools; every call is noted with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        calls = self.calls

        async def get_weather(city: str) -> dict[str, str]:
            """The weather forecast for a city.

            Args:
                city: the city's name.
            """
            calls.append(("get_weather", {"city": city}))
            return {"city": city, "sky": "sunny"}

        async def add(a: int, b: int) -> int:
            """Add two whole numbers.

            Args:
                a: the first number.
                b: the second number.
            """
            calls.append(("add", {"a": a, "b": b}))
            return a + b

        self.registry = ToolRegistry([get_weather, add])

    def valid(self, tool_name: str, kwargs: Any) -> bool:
        """Whether ``kwargs`` fit the tool's schema (checked here with jsonschema itself)."""
        schema = self.registry.get(tool_name).parameters
        return isinstance(kwargs, dict) and jsonschema.Draft202012Validator(schema).is_valid(kwargs)

    def check(self, records: Sequence[ToolExecutionRecord]) -> None:
        """Whatever was proposed became records that say what happened, and no tool ran with
        arguments that do not fit its schema."""
        for name, kwargs in self.calls:
            assert self.valid(name, kwargs), f"{name} ran with invalid arguments {kwargs!r}"
        unmatched = list(self.calls)
        for record in records:
            if record.tool_name not in self.registry:
                assert not record.success, record
                assert record.error and "no tool named" in record.error, record
            elif record.success:
                assert self.valid(record.tool_name, record.kwargs), record
                call = (record.tool_name, record.kwargs)
                assert call in unmatched, f"a successful record without its call: {record}"
                unmatched.remove(call)
            else:
                assert record.error, record
                assert (
                    not self.valid(record.tool_name, record.kwargs)
                    or "not run" in record.error
                    or "cancelled" in record.error
                ), f"a call with valid arguments failed: {record}"
        # a call without a successful record can only be one a cancellation cut short
        assert len(unmatched) <= sum(
            1 for r in records if not r.success and r.error and "cancelled" in r.error
        ), unmatched


def report_records(records: Sequence[ToolExecutionRecord]) -> None:
    for record in records:
        outcome = f"ok -> {record.result!r}" if record.success else f"FAILED: {record.error}"
        print(f"  record {record.tool_name}({record.kwargs!r}) [{record.purpose!r}]: {outcome}")


def decided(events: Sequence[FlowEvent]) -> list[PlanDecided]:
    return [e for e in events if isinstance(e, PlanDecided)]


def check_commands_recorded(
    events: Sequence[FlowEvent], records: Sequence[ToolExecutionRecord]
) -> None:
    """Every command of a plan that executed has its record."""
    planned = Counter(
        (c.purpose, c.tool_name)
        for e in decided(events)
        if e.next_action == "execute"
        for c in e.commands
    )
    made = Counter((r.purpose, r.tool_name) for r in records)
    assert not planned - made, f"commands without a record: {planned - made}"


# --- planners shaped for the tests ---------------------------------------------------------


class _SchemaPlanner(StructuredPlanner):
    """A :class:`StructuredPlanner` that asks for another schema (prompt and grammar)."""

    def schema_for(self, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def request(self, context: PlannerContext) -> ChatRequest:
        schema = self.schema_for(context.available_tools)
        return replace(
            super().request(context),
            messages=planner_messages(
                context,
                schema,
                system_prompt=self.system_prompt,
                max_result_chars=self.max_result_chars,
            ),
            structured_output=StructuredOutput(schema=schema, name="plan", strict=False),
        )


class FreeFormPlanner(_SchemaPlanner):
    """Any tool name, any arguments: the grammar keeps only the plan's shape, so the model
    can propose unknown tools and arguments that do not fit."""

    def schema_for(self, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return PlannerSchema([], strict=False).schema


class ResponseOnlyPlanner(_SchemaPlanner):
    """``next_action`` can only be ``response``, and a long ``padding`` follows it, so the
    reply behind the decision is longer than the token limit: reading it all would take
    the whole generation; the short-circuit needs the first characters only."""

    def schema_for(self, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        schema = copy.deepcopy(PlannerSchema(tools, strict=self.strict).schema)
        schema["properties"]["next_action"] = {"type": "string", "enum": ["response"]}
        schema["properties"]["padding"] = {
            "type": "array",
            "items": {"type": "integer"},
            "minItems": PADDING_ITEMS,
        }
        schema["required"] = [*schema["required"], "padding"]
        return schema


# --- structured output through the loop -----------------------------------------------------

PlannerKind = Literal["strict", "loose", "free"]


@pytest.mark.parametrize(
    ("kind", "mode", "streaming"),
    [
        # the built-in schema, strict: one grammar per tool, so arguments always fit
        pytest.param("strict", "json_object_schema", False, id="strict"),
        # the built-in schema, not strict: known tool names, free arguments (streamed, so
        # the commands complete before a cut-off still run, and fail, as records)
        pytest.param("loose", "json_object_schema", True, id="loose-streaming"),
        # any tool name, free arguments; "auto" must fall back from json_schema (HTTP 500)
        pytest.param("free", "auto", True, id="free-auto-streaming"),
    ],
)
async def test_structured_planner_through_the_loop(
    server: Server,
    kind: PlannerKind,
    mode: StructuredOutputMode | Literal["auto"],
    streaming: bool,
) -> None:
    toolbox = Toolbox()
    events: list[FlowEvent] = []
    async with openai_model(server, mode) as inner:
        model = RecordingModel(inner)
        if kind == "free":
            planner: StructuredPlanner = FreeFormPlanner(model, max_tokens=MAX_TOKENS)
        else:
            planner = StructuredPlanner(model, max_tokens=MAX_TOKENS, strict=kind == "strict")
        started = perf_counter()
        outcome: LoopResult | PlannerError
        try:
            outcome = await async_plan_and_execute(
                "What is the weather in Lisbon, and what is 2 + 3?",
                tools=toolbox.registry,
                planner=planner,
                max_turns=2,
                streaming_dispatch=streaming,
                timeout=RUN_TIMEOUT,
                on_event=events.append,
            )
        except PlannerError as exc:
            outcome = exc
        elapsed = perf_counter() - started
        settled = inner.structured_output_mode

    model.report(f"{kind} planner, mode {mode} (settled: {settled}), {elapsed:.1f} s")
    assert settled == "json_object_schema"  # "auto" fell back past the refused json_schema
    assert model.exchanges, "the planner made no request"
    model.check_streams()
    if isinstance(outcome, LoopResult):
        records = outcome.done_plans
        print(f"  outcome: {outcome.stop_reason} after {outcome.rounds} round(s)")
        report_records(records)
        assert outcome.stop_reason in ("answered", "max_turns", "no_commands")
        check_commands_recorded(events, records)
        if records:
            assert outcome.action_results is not None
            assert len(outcome.extra["tool_logs"]) == len(records)
        else:
            assert outcome.prompt == {}
    else:
        # the only other acceptable end: a plan cut off by the token limit, said clearly
        cause = outcome.__cause__
        records = outcome.done_plans
        print(f"  outcome: PlannerError: {outcome}")
        report_records(records)
        assert isinstance(cause, ModelOutputError), f"not a cut-off plan: {outcome!r}"
        last = model.exchanges[-1]
        assert last.finish_reason == "length", (
            f"the plan failed although the model was not cut off: {cause}; {last.describe()}"
        )
        assert "token limit" in str(cause), cause
        check_commands_recorded(events, records)
    toolbox.check(records)


# --- the short-circuit on a real connection --------------------------------------------------


def _log_size(log: Path | None) -> int:
    return log.stat().st_size if log is not None and log.exists() else 0


async def _server_saw_client_go(log: Path, since: int, timeout: float = 10.0) -> bool:
    """Whether llama-cpp-python's log says a client went away after offset ``since``."""
    with anyio.move_on_after(timeout):
        while True:
            text = (await anyio.Path(log).read_bytes())[since:].decode(errors="replace")
            if "Disconnected from client" in text:
                return True
            await anyio.sleep(0.2)
    return False


async def _read_all(model: ChatModel, request: ChatRequest) -> tuple[str, str | None]:
    """Stream ``request`` to its end: (text, finish_reason)."""
    text, finish = "", None
    async with model.stream(request) as deltas:
        async for delta in deltas:
            text += delta.content
            finish = delta.finish_reason or finish
    return text, finish


async def _follow_up(model: ChatModel) -> tuple[float, str, str | None]:
    """A small plain request, read to its end: (seconds, text, finish_reason)."""
    started = perf_counter()
    request = ChatRequest(messages=[{"role": "user", "content": "Say hello."}], max_tokens=8)
    text, finish = await _read_all(model, request)
    return perf_counter() - started, text, finish


async def test_short_circuit_closes_a_real_connection(server: Server) -> None:
    toolbox = Toolbox()
    async with openai_model(server) as inner:
        model = RecordingModel(inner)
        planner = ResponseOnlyPlanner(model, max_tokens=MAX_TOKENS)
        context = PlannerContext(
            user_input="What is the weather in Lisbon?",
            available_tools=toolbox.registry.specs(),
            max_rounds=3,
        )
        mark = _log_size(server.log)
        started = perf_counter()
        reply = await planner.plan(context)
        took = perf_counter() - started
        saw_go = await _server_saw_client_go(server.log, mark) if server.log is not None else None
        follow_up, text, finish = await _follow_up(inner)

        # the same planner through the loop, on the same client: the server goes on serving
        events: list[FlowEvent] = []
        result = await async_plan_and_execute(
            "What is the weather in Lisbon?",
            tools=toolbox.registry,
            planner=planner,
            max_turns=3,
            streaming_dispatch=True,
            timeout=RUN_TIMEOUT,
            on_event=events.append,
        )

    model.report(f"short-circuit: plan {took:.2f} s, follow-up {follow_up:.2f} s")
    print(f"  reply: {reply!r}; the server logged the client going: {saw_go}")
    print(f"  follow-up: finish_reason={finish!r} text={text!r}")
    assert isinstance(reply, PlannerReply)
    assert reply.short_circuited
    assert reply.output == {"next_action": "response", "execution_commands": []}
    # decided on the first characters of `{"next_action": "r...`, not the whole reply
    assert reply.chars_read <= 40, reply
    assert reply.decided_after is not None and reply.decided_after <= took
    first = model.exchanges[0]
    assert not first.read_to_end and first.finish_reason is None, first.describe()
    assert len(first.text) <= 60, first.describe()
    # the server stopped generating the abandoned reply: the next request is served at once
    assert finish is not None, "the follow-up request did not finish"
    assert follow_up < FOLLOW_UP_LIMIT, (
        f"the follow-up took {follow_up:.1f} s: was the server still generating the reply "
        "the planner had left?"
    )
    if saw_go is not None:
        assert saw_go, f"{server.log} does not show the server noticing the client going"
    plans = decided(events)
    assert [p.short_circuited for p in plans] == [True]
    assert result.stop_reason == "answered"
    assert result.done_plans == []
    assert result.prompt == {}
    assert toolbox.calls == []


# --- the structured-output modes of this server ---------------------------------------------


async def test_json_schema_is_refused_and_auto_falls_back(server: Server) -> None:
    async with openai_model(server, "json_schema") as model:
        request = ResponseOnlyPlanner(model).request(
            PlannerContext(user_input="hello", max_rounds=3)
        )
        with pytest.raises(ModelCallError) as refused:
            await _read_all(model, request)
    print(f"\n  json_schema: {refused.value}"[:400])
    # llama-cpp-python answers HTTP 500; "auto" moves on from any of these refusals
    assert refused.value.status in (400, 404, 415, 422, 500, 501)

    async with openai_model(server, "auto") as model:
        assert model.structured_output_mode is None
        planner = ResponseOnlyPlanner(model, max_tokens=MAX_TOKENS)
        reply = await planner.plan(PlannerContext(user_input="hello", max_rounds=3))
        assert model.structured_output_mode == "json_object_schema"
        # settled: the next request goes straight to the mode that works
        again = await planner.plan(PlannerContext(user_input="hello again", max_rounds=3))
    assert isinstance(reply, PlannerReply) and reply.short_circuited
    assert isinstance(again, PlannerReply) and again.short_circuited


# --- native tool calling ----------------------------------------------------------------------


def _tool_calling_planner() -> Callable[..., Any]:
    """``ToolCallingPlanner``, or a skip while it does not exist."""
    module = pytest.importorskip(
        "toolloop.planners._tool_calling", reason="the native tool-calling planner is not there"
    )
    planner: Callable[..., Any] = module.ToolCallingPlanner
    return planner


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streaming"])
async def test_tool_calling_planner_forced_call(server: Server, streaming: bool) -> None:
    planner_type = _tool_calling_planner()
    toolbox = Toolbox()
    events: list[FlowEvent] = []
    async with openai_model(server) as inner:
        model = RecordingModel(inner)
        # a named tool_choice forces the call (this server never calls with "auto")
        planner = planner_type(model, tool_choice="add", max_tokens=MAX_TOKENS)
        result = await async_plan_and_execute(
            "What is 2 + 3?",
            tools=toolbox.registry,
            planner=planner,
            max_turns=1,
            streaming_dispatch=streaming,
            timeout=RUN_TIMEOUT,
            on_event=events.append,
        )
    model.report(f"tool calling, tool_choice='add', streaming={streaming}")
    report_records(result.done_plans)
    model.check_streams()
    assert model.exchanges[0].request.tool_choice == {
        "type": "function",
        "function": {"name": "add"},
    }
    assert model.exchanges[0].tool_names, "the server did not call the forced tool"
    (plan,) = decided(events)
    assert plan.next_action == "execute"
    assert plan.commands and all(c.tool_name == "add" for c in plan.commands)
    assert result.stop_reason == "max_turns"
    assert result.rounds == 1
    assert len(result.done_plans) == len(plan.commands)
    assert all(r.tool_name == "add" for r in result.done_plans)
    check_commands_recorded(events, result.done_plans)
    toolbox.check(result.done_plans)


async def test_tool_calling_planner_sends_the_history_back(server: Server) -> None:
    """Round 2 carries round 1 as an assistant message with ``tool_calls`` and a ``tool``
    message per call: the server must accept it, and the stream must end properly."""
    planner_type = _tool_calling_planner()
    toolbox = Toolbox()
    events: list[FlowEvent] = []
    async with openai_model(server) as inner:
        model = RecordingModel(inner)

        def choice(context: PlannerContext) -> str:
            return "add" if context.round_index == 0 else "auto"

        planner = planner_type(model, tool_choice=choice, max_tokens=120)
        failure: str | None = None
        try:
            result = await async_plan_and_execute(
                "What is 2 + 3?",
                tools=toolbox.registry,
                planner=planner,
                max_turns=2,
                timeout=RUN_TIMEOUT,
                on_event=events.append,
            )
        except PlannerError as exc:
            failure = f"round {len(model.exchanges)} failed: {exc.__cause__ or exc}"[:800]
    model.report("tool calling, a forced round then an auto one")
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    report_records(result.done_plans)
    model.check_streams()
    assert len(model.exchanges) == 2
    history = model.exchanges[1].request.messages
    assert any(m.get("role") == "tool" for m in history)
    plans = decided(events)
    assert plans[0].next_action == "execute"
    assert result.stop_reason in ("answered", "max_turns")
    toolbox.check(result.done_plans)


# --- usage and the command line ------------------------------------------------------------


async def test_usage_totals_from_the_real_stream(server: Server) -> None:
    """Every request is counted; what the server reports (``include_usage``) is summed, what
    it does not is unknown, never zero; a budget of one request makes no second one."""
    toolbox = Toolbox()
    async with openai_model(server) as inner:
        model = RecordingModel(inner)
        planner = StructuredPlanner(model, max_tokens=MAX_TOKENS)
        cut: PlannerError | None = None
        try:
            result = await async_plan_and_execute(
                "What is 2 + 3?",
                tools=toolbox.registry,
                planner=planner,
                max_turns=2,
                timeout=RUN_TIMEOUT,
                usage_limits=UsageLimits(max_requests=1),
                on_usage_limit="finish",
            )
        except PlannerError as exc:  # a base model may ramble past max_tokens: its plan is cut
            if "token limit" not in str(exc):
                raise
            cut = exc
    model.report("usage totals, at most one request")
    if cut is not None:
        assert cut.state is not None and cut.state.usage is not None
        usage = cut.state.usage  # the run's usage is kept with the error
    else:
        usage = result.usage
    print(f"  usage: {usage!r}")
    assert len(model.exchanges) == 1 == usage.requests
    reported = usage.requests - usage.unreported_requests
    if reported:
        assert usage.input_tokens is not None and usage.input_tokens > 0
        assert usage.output_tokens is not None and usage.output_tokens > 0
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    else:  # this server does not report usage, or the short-circuit hung up first
        assert usage.total_tokens is None
    if cut is None:
        assert result.stop_reason in ("usage_limit", "answered", "no_commands", "invalid_plan")


CLI_TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


TOOLS = [add]
'''


def test_the_cli_finishes_a_run_with_max_tokens_and_a_required_tool(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against this server the CLI could not finish a run: the planner was fixed at 1,024
    tokens, and with ``tool_choice="auto"`` no tool ever ran. With ``--max-tokens`` and
    ``--tool-choice required`` it runs the tool and ends, its answer bounded (and said to be
    cut off when it is)."""
    import io

    from toolloop.cli import main

    (tmp_path / "real_cli_tools.py").write_text(CLI_TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    started = perf_counter()
    code = main(
        [
            "run",
            "What is 2 + 3?",
            "--tools",
            "real_cli_tools:TOOLS",
            "--base-url",
            server.url,
            "--model",
            server.model,
            "--planner",
            "tool-calling",
            "--tool-choice",
            "required",
            "--max-tokens",
            "64",
            "--max-turns",
            "1",
            "--timeout",
            str(RUN_TIMEOUT),
            "--answer",
            "--plain",
        ],
        stdout=out,
        stderr=err,
    )
    text = out.getvalue()
    print(text, err.getvalue(), f"({perf_counter() - started:.1f} s)")
    assert code == 0, err.getvalue()
    assert "stop: max_turns · 1 round" in text
    assert "ok    #0 add" in text or "FAIL  #0 add" in text  # the forced call became a record
    assert "\nanswer:\n" in text
    cut = "note: the answer was cut off by the token limit (64 tokens)" in text
    print(f"  answer cut off: {cut}")


@pytest.mark.anyio
@pytest.mark.parametrize("strategy", ["tool", "provider"])
async def test_a_structured_final_answer_from_the_real_model(server: Server, strategy: str) -> None:
    """The loop's final answer through each strategy against the real server: the answer
    fits the schema (retried with the errors when it does not), every try is counted."""
    from pydantic import BaseModel

    from toolloop.kernel import ProviderStrategy, ToolStrategy
    from toolloop.loop import final_answer
    from toolloop.testing import ScriptedPlanner

    class Sum(BaseModel):
        """The sum that was computed."""

        total: int

    toolbox = Toolbox()
    plan = {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": "add", "tool_name": "add", "tool_kwargs": {"a": 2, "b": 3}}
        ],
    }
    result = await async_plan_and_execute(
        "What is 2 + 3?",
        tools=toolbox.registry,
        planner=ScriptedPlanner([plan, {"next_action": "response"}]),
    )
    assert [r.result for r in result.done_plans] == [5]
    response_format = ToolStrategy(Sum) if strategy == "tool" else ProviderStrategy(Sum)
    async with openai_model(server) as model:
        with anyio.fail_after(RUN_TIMEOUT):
            answer = await final_answer(
                model, result, response_format=response_format, max_tokens=MAX_TOKENS
            )
    print(f"  {strategy}: {answer.structured_response!r} in {answer.tries} tries")
    assert isinstance(answer.structured_response, Sum)
    assert answer.usage is not None and answer.usage.requests == answer.tries >= 1


@pytest.mark.parametrize("agent", ["middleware", "status"])
def test_the_cli_runs_each_agent_against_the_real_model(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """``toolloop run --agent ...`` reads the real server's streams in each agent and ends
    with a stop reason (a small model's answer may be poor; the run still ends, said)."""
    import io

    from toolloop.cli import main

    (tmp_path / "real_cli_tools.py").write_text(CLI_TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [
            "run",
            "What is 2 + 3? Use the add tool.",
            "--agent",
            agent,
            "--tools",
            "real_cli_tools:TOOLS",
            "--base-url",
            server.url,
            "--model",
            server.model,
            "--max-tokens",
            str(MAX_TOKENS),
            "--max-turns",
            "6",
            "--store",
            str(tmp_path / "runs.db"),
            "--timeout",
            str(RUN_TIMEOUT),
            "--plain",
        ],
        stdout=out,
        stderr=err,
    )
    text = out.getvalue()
    print(text, err.getvalue())
    assert "Traceback" not in err.getvalue() + text
    if code == 0:
        assert "stop: " in text  # e.g. cut_off: a tiny model rambles past max_tokens
    elif code == 3:  # the status agent puts an answer it could not write to a human
        assert "paused: run " in text and "to continue: toolloop resume " in text
    else:  # a run that failed says so in one line, with the command that recovers it
        assert code == 1 and "toolloop recover" in err.getvalue() + text, (code, err.getvalue())


# --- streaming dispatch in the agents --------------------------------------------------------


class _Forced:
    """A :class:`ChatModel` around a recording one that narrows the status agent's decision
    schema to one call of ``get_weather`` with a city: a base model under a grammar then
    writes a call that can run (what it writes otherwise is nonsense)."""

    def __init__(self, inner: RecordingModel) -> None:
        self.inner = inner

    def stream(self, request: ChatRequest) -> Any:
        output = request.structured_output
        if output is not None and output.name == "decide":
            schema = copy.deepcopy(output.schema)
            properties = schema["properties"]
            properties["action"] = {"type": "string", "enum": ["call_tools"]}
            call = properties["tool_calls"]["items"]
            call["properties"]["arguments"] = {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            }
            call["properties"]["purpose"] = {"type": "string", "maxLength": 12}
            properties["tool_calls"]["minItems"] = 1
            properties["tool_calls"]["maxItems"] = 1
            properties["reason"] = {"type": "string", "minLength": 40, "maxLength": 80}
            request = replace(request, structured_output=replace(output, schema=schema))
        return self.inner.stream(request)


Seen = list[tuple[bool, str | None, int]]
"""At each tool start: whether the last stream was read to its end, its finish reason,
and how many deltas it had given."""


def _weather_probe(model: RecordingModel, seen: Seen) -> Any:
    async def get_weather(city: str) -> dict[str, str]:
        """The weather forecast for a city.

        Args:
            city: the city's name.
        """
        last = model.exchanges[-1]
        seen.append((last.read_to_end, last.finish_reason, last.deltas))
        return {"city": city, "sky": "sunny"}

    return get_weather


async def test_the_status_agent_starts_a_tool_before_the_decision_ends(server: Server) -> None:
    """With streaming dispatch, the decision's call starts the moment its object closes in
    the real stream: the model is still writing the decision's reason then."""
    from toolloop.status_agent import StatusAgent

    seen: Seen = []
    async with openai_model(server) as inner:
        model = RecordingModel(inner)
        agent = StatusAgent(
            tools=[_weather_probe(model, seen)],
            model=_Forced(model),
            analyze=lambda view: "the weather of a city",
            plan=lambda view: ["look it up"],
            reflect=lambda view: {"verdict": "finish", "note": "", "answer": "done"},
            streaming_dispatch=True,
            timeout=RUN_TIMEOUT,
        )
        result = await agent.run("The weather in Paris?")
    model.report("the status agent, streaming dispatch")
    assert result.text == "done"
    assert len(result.records) == 1 and result.records[0].success, result.records
    ((ended, finish, deltas),) = seen
    decision = model.exchanges[0]
    print(f"  the tool started after {deltas} of the decision's {decision.deltas} deltas")
    assert not ended and finish is None, "the tool started after the decision's stream ended"
    assert deltas < decision.deltas  # the model went on writing the decision


async def test_the_middleware_agent_starts_a_tool_as_its_arguments_close(server: Server) -> None:
    """A forced native tool call through the real server, with streaming dispatch: the
    call runs once, its record made. Whether it starts before the reply's end is read
    depends on the server: the arguments' last piece and the finish may come in one read
    (the order is reported; the status agent's test above proves it on a real stream)."""
    from toolloop.agents import create_agent

    seen: Seen = []
    async with openai_model(server) as inner:
        model = RecordingModel(inner)
        agent = create_agent(
            model,
            [_weather_probe(model, seen)],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=MAX_TOKENS,
            max_turns=1,
            streaming_dispatch=True,
            timeout=RUN_TIMEOUT,
        )
        result = await agent.run("The weather in Paris?")
    model.report("the middleware agent, streaming dispatch")
    assert model.exchanges[0].tool_names, "the server did not call the forced tool"
    assert result.stop_reason == "max_turns"
    assert len(result.records) == 1
    pieces = len(model.exchanges[0].tool_arguments.get(0, []))
    print(f"  the arguments came in {pieces} piece(s); the tool saw {seen}")
    assert len(seen) == (1 if result.records[0].success else 0)  # never more than once


async def test_a_run_as_a_tool_counts_the_childs_real_model_calls(server: Server) -> None:
    """A middleware agent calls another as a tool (the call forced) through the real
    server: the child's model calls are in the parent's events as a nested run and in its
    usage."""
    from toolloop.agents import create_agent
    from toolloop.kernel import ChildRunEvent

    events: list[FlowEvent] = []
    async with openai_model(server) as model:
        expert = create_agent(model, max_tokens=MAX_TOKENS, temperature=0.0, timeout=RUN_TIMEOUT)
        ask = expert.as_tool(name="ask_expert", description="Ask a geography expert one question.")
        parent = create_agent(
            model,
            [ask],
            tool_choice={"type": "function", "function": {"name": "ask_expert"}},
            max_tokens=MAX_TOKENS,
            temperature=0.0,
            max_turns=1,
            timeout=RUN_TIMEOUT,
        )
        result = await parent.run(
            'Ask the expert: "What is the capital of France?"', on_event=events.append
        )
    print(f"  the parent's record: {result.records}")
    (record,) = result.records
    assert record.tool_name == "ask_expert"
    assert record.success, record.error
    assert isinstance(record.result, str) and record.result  # the child's final text
    child_calls = [
        e for e in events if isinstance(e, ChildRunEvent) and e.event.kind == "model_call_finished"
    ]
    assert child_calls, "the child's model calls are not in the parent's events"
    assert {e.depth for e in child_calls} == {1}
    assert result.usage is not None
    assert result.usage.requests == 1 + len(child_calls)  # the parent's own call + the child's


async def test_a_cut_result_is_read_back_by_the_real_model(server: Server) -> None:
    """A result over max_result_chars is shown cut with its handle, kept whole; forced to
    call read_result next, the real model's call is answered: the slice it asked for, or,
    when it miswrites the handle or the bounds (a 270M model does), a failed record that
    says what was expected: never a crash or a silent miss."""
    from toolloop import tool

    hidden = "The password is BLUE-HERON-42."
    document = ("Filler sentence about nothing at all. " * 60)[:1900] + " " + hidden

    @tool
    def get_document() -> str:
        """Fetch the document."""
        return document

    def choice(context: Any) -> Any:
        name = "get_document" if context.round_index == 0 else "read_result"
        return {"type": "function", "function": {"name": name}}

    async with openai_model(server) as model:
        planner = _tool_calling_planner()(model, tool_choice=choice, max_tokens=MAX_TOKENS)
        result = await async_plan_and_execute(
            "Find the password in the document.",
            tools=[get_document],
            planner=planner,
            max_turns=2,
            max_result_chars=1000,
            timeout=RUN_TIMEOUT,
        )
    report_records(result.done_plans)
    first, *rest = result.done_plans
    assert first.tool_name == "get_document" and first.result == document  # kept whole
    assert rest and rest[0].tool_name == "read_result", "the model did not call read_result"
    read = rest[0]
    print(f"  read_result({read.kwargs}) -> {str(read.result)[:120]!r} {read.error or ''}")
    if read.success:  # a handle and an offset the run knows: the slice it asked for
        assert read.kwargs.get("handle") == "r:0"
        assert str(read.result).split("\n", 1)[1] in document
    else:  # a small model may miswrite the handle: refused, saying what was expected
        assert read.error is not None
        assert "handle" in read.error or "schema" in read.error, read.error


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_model"
RECORD_VAR = "TOOLLOOP_RECORD_FIXTURES"
"""Set to 1 to keep the traces of ``test_a_real_run_replays_offline`` in ``FIXTURES``: the
default suite replays them offline (``tests/testing/test_replay_recorded.py``)."""


@pytest.mark.parametrize("agent", ["loop", "middleware", "status"])
def test_a_real_run_replays_offline(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """A real run of each product, traced by ``toolloop run --trace``, replays offline with
    ``toolloop replay``: the real model's replies (short-circuited, cut off, malformed as a
    tiny model writes them) and the tool's results come from the trace, and today's code
    does what it did. With ``TOOLLOOP_RECORD_FIXTURES=1`` the trace is kept in
    ``tests/fixtures/real_model/``."""
    import io
    import shutil

    from toolloop.cli import main
    from toolloop.testing import Recording

    (tmp_path / "real_cli_tools.py").write_text(CLI_TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = tmp_path / f"{agent}.jsonl"
    flags = {  # small budgets; the middleware agent's tool call forced
        "loop": ["--max-turns", "1", "--max-tokens", str(MAX_TOKENS)],
        "middleware": ["--tool-choice", "required", "--max-turns", "2", "--max-tokens", "64"],
        "status": ["--max-turns", "8", "--max-tokens", str(MAX_TOKENS)],
    }[agent]
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [
            "run",
            "What is 2 + 3? Use the add tool.",
            "--agent",
            agent,
            "--tools",
            "real_cli_tools:TOOLS",
            "--base-url",
            server.url,
            "--model",
            server.model,
            "--timeout",
            str(RUN_TIMEOUT),
            "--trace",
            str(trace),
            "--plain",
            *flags,
        ],
        stdout=out,
        stderr=err,
    )
    print(out.getvalue(), err.getvalue())
    assert code in (0, 1, 3), err.getvalue()
    recording = Recording.from_trace(trace)
    calls = f"{len(recording.model_calls)} model calls, {len(recording.tool_calls)} tool calls"
    print(f"  recorded: {calls}, {recording.end.said()}")
    assert recording.model_calls

    out, err = io.StringIO(), io.StringIO()
    code = main(["replay", str(trace)], stdout=out, stderr=err)
    print(out.getvalue(), err.getvalue())
    assert code == 0, out.getvalue() + err.getvalue()
    assert "the code did what the recorded run did" in out.getvalue()
    if os.environ.get(RECORD_VAR):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trace, FIXTURES / f"{agent}.jsonl")
