"""What the structured planner's instant short-circuit and streaming dispatch buy, end to end.

Everything goes over real HTTP: a local ``FakeOpenAIServer`` streams scripted answers as
Server-Sent Events at a fixed token rate (one token = one 4-character delta), and the
planner talks to it through ``OpenAIChatModel``, i.e. the official ``openai`` client.

Part 1, time to decision on a response-only plan. The server streams a ~200-token answer,
``{"next_action": "response", "execution_commands": [], "reasoning": "..."}``, at 100
tokens/s (about 2 s for the whole body; the long ``reasoning`` tail is what a model in
``json_object`` mode likes to add, and the planner ignores it). ``StructuredPlanner.plan``
is timed with ``short_circuit=True`` and ``short_circuit=False``, median of several
repetitions (the two interleaved). Reported: the time from the call to its return and to
the moment the decision was known (``PlannerReply.decided_after``), the characters and
tokens read (``PlannerReply.chars_read``), on which token the decision fell counted from
the token carrying the first character of the ``next_action`` value, and what the server
saw: whether the client went away and how many SSE chunks it sent of those it planned.
Targets: the short-circuit returns >= 10x sooner than reading the whole body, and decides
within 2 tokens of the value. (With a server that enforces the strict JSON schema, a
response plan is only ``{"next_action": "response", "execution_commands": []}`` and the
short-circuit can only save those few tokens; the gain shown here is for the long tail.)

Part 2, streaming dispatch. One ``async_plan_and_execute`` run = one execute round whose
plan is scheduled to stream in T (0.5 s by default; 4 commands of similar size, closing at
0.33, 0.53, 0.76 and 1.00 of the stream) + one short response round (short-circuited);
each tool sleeps a multiple of T. The wall time of a run is compared with
``streaming_dispatch=False`` and ``True``, median of several repetitions (interleaved).
Dispatch can only overlap a tool with the rest of the stream when its command closes
before the stream ends, so the gain depends on where the slow tools sit in the plan;
three cases are run and all are printed:

- ``slow tool first``: the first command's tool takes T, the other three 0.1 T (a search
  planned first, quick lookups after it): ideally ~1.33 T instead of 2 T (+ the response
  round). The headline case; target: >= 30% lower wall time.
- ``spread, last short``: tools of T, T, T, 0.1 T: the command closing at ~3/4 of the
  plan bounds the round (~1.76 T instead of 2 T).
- ``worst case``: every tool takes T; the last command closes at the very end of the
  stream, so dispatch cannot win anything (2 T either way): it shows what dispatch costs.

T and the durations scale together, so only the ratios matter; at 4 characters a token the
plan is 239 tokens, i.e. ~480 tokens/s for T = 0.5 s (``--plan-seconds 2.4`` is ~100).
The "ideal" columns are the wall time with zero overhead: from the server's schedule (when
each command's closing brace, the plan's end and the response decision are sent) and the
tool durations, at the pace the server really kept (its plan stream's measured length over
the scheduled one; ``FakeOpenAIServer`` sleeps ``delay`` before each chunk, so its streams
run longer than scheduled), and "ovh" is the measured wall time minus that.

Every run is checked: the plan decided as scripted, one successful record per command in
the planned order, the right number of requests and what the server saw of each stream,
and (with dispatch) that every tool started before the plan was over.

Run it with::

    .venv/bin/python benchmarks/bench_planner.py                  # asyncio and trio
    .venv/bin/python benchmarks/bench_planner.py --backend trio   # one backend
    .venv/bin/python benchmarks/bench_planner.py --quick          # fewer repetitions
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from toolloop.flow import FlowEvent
from toolloop.loop import LoopResult, PlanDecided, async_plan_and_execute
from toolloop.models import OpenAIChatModel
from toolloop.planners import PlannerContext, PlannerReply, StructuredPlanner
from toolloop.runner import ToolCallStarted
from toolloop.testing import FakeOpenAIServer, StreamRecord
from toolloop.tools import Tool, ToolRegistry

# On trio, the openai client (httpx2) leaves internal async generators unfinalized when a
# stream is closed early; trio warns when the garbage collector finds them. Not ours.
warnings.filterwarnings(
    "ignore",
    message=r"Async generator '(openai|httpx2|httpcore2)\..* was garbage collected",
    category=ResourceWarning,
)

USER_INPUT = "Plan a weekend in Lisbon: the weather, a train from Madrid and the budget in USD."
CHARS_PER_TOKEN = 4

# Part 1
P1_TOKENS = 200
P1_TOKENS_PER_SECOND = 100.0
P1_TARGET_RATIO = 10.0
P1_TARGET_TOKENS_PAST_VALUE = 2

# Part 2
P2_PLAN_SECONDS = 0.5
P2_TARGET_LOWER = 0.30

_REASONING = (
    "The forecast for Lisbon came back sunny at 24 C for the next three days, the cheapest "
    "train from Madrid costs 89 EUR one way, and the hotel search found Casa Azul at 95 EUR "
    "a night, so every part of the question has an answer and no further tool call is "
    "needed; the budget for two nights is 89 + 89 + 2 x 95 = 368 EUR, about 397 USD. "
)


class CheckFailed(RuntimeError):
    """A run did not do what the benchmark measures."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def token_index(char_offset: int) -> int:
    """The 0-based token (content delta) that carries the character at ``char_offset``."""
    return char_offset // CHARS_PER_TOKEN


def content_sent_at(char_offset: int, delay: float) -> float:
    """When the server's schedule sends the character at ``char_offset`` (role chunk at 0)."""
    return (token_index(char_offset) + 1) * delay


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# -- tools ------------------------------------------------------------------------------------


def make_registry(durations: Sequence[float]) -> ToolRegistry:
    """Four typed async tools; the i-th sleeps ``durations[i]`` seconds."""
    d_search, d_weather, d_fare, d_convert = durations

    async def web_search(query: str, max_results: int = 5) -> dict[str, Any]:
        """Search the web.

        Args:
            query: what to search for.
            max_results: how many results to return.
        """
        await anyio.sleep(d_search)
        return {"query": query, "results": [f"result {i}" for i in range(max_results)]}

    async def get_weather(city: str, days: int = 3) -> dict[str, Any]:
        """The forecast for a city.

        Args:
            city: the city's name.
            days: how many days ahead.
        """
        await anyio.sleep(d_weather)
        return {"city": city, "days": days, "max_c": 24, "sky": "sunny"}

    async def find_fare(origin: str, destination: str) -> dict[str, Any]:
        """The cheapest train fare between two cities, in EUR.

        Args:
            origin: where the trip starts.
            destination: where it ends.
        """
        await anyio.sleep(d_fare)
        return {"from": origin, "to": destination, "eur": 89.0}

    async def convert_currency(amount: float, to: str) -> dict[str, Any]:
        """Convert an amount in EUR to another currency.

        Args:
            amount: the amount in EUR.
            to: the ISO code of the target currency.
        """
        await anyio.sleep(d_convert)
        return {"amount": round(amount * 1.08, 2), "currency": to}

    functions: list[Callable[..., Awaitable[dict[str, Any]]]] = [
        web_search,
        get_weather,
        find_fare,
        convert_currency,
    ]
    return ToolRegistry(Tool.from_function(fn) for fn in functions)


COMMANDS: list[dict[str, Any]] = [
    {
        "purpose": "find hotels in central Lisbon with prices for the weekend",
        "tool_name": "web_search",
        "tool_kwargs": {"query": "hotel Lisbon Baixa weekend price per night", "max_results": 5},
        "todo_suggestion": "pick the best-rated hotel under 150 EUR a night",
    },
    {
        "purpose": "weather forecast in Lisbon for the next three days",
        "tool_name": "get_weather",
        "tool_kwargs": {"city": "Lisbon", "days": 3},
        "todo_suggestion": "say whether to pack for rain or for sun",
    },
    {
        "purpose": "cheapest train fare from Madrid to Lisbon this Friday",
        "tool_name": "find_fare",
        "tool_kwargs": {"origin": "Madrid", "destination": "Lisbon"},
        "todo_suggestion": "add the return fare twice to the budget",
    },
    {
        "purpose": "the expected trip budget of 450 EUR converted to US dollars",
        "tool_name": "convert_currency",
        "tool_kwargs": {"amount": 450.0, "to": "USD"},
        "todo_suggestion": "give the user the budget in both currencies",
    },
]


# -- bodies -----------------------------------------------------------------------------------


def response_body(tokens: int) -> str:
    """A response-only plan of about ``tokens`` tokens: the decision first, a long tail."""
    head = '{"next_action": "response", "execution_commands": [], "reasoning": "'
    tail = '"}'
    room = tokens * CHARS_PER_TOKEN - len(head) - len(tail)
    text = (_REASONING * (room // len(_REASONING) + 1))[:room].rstrip()
    body = head + text + tail
    check(json.loads(body)["next_action"] == "response", "the response body is not valid JSON")
    return body


SHORT_RESPONSE = '{"next_action": "response", "execution_commands": []}'


def execute_body() -> tuple[str, list[int]]:
    """The execute plan of part 2, and the offset of each command's closing brace."""
    body = '{"next_action": "execute", "execution_commands": ['
    closes: list[int] = []
    for i, command in enumerate(COMMANDS):
        if i:
            body += ", "
        body += json.dumps(command)
        closes.append(len(body) - 1)
    body += "]}"
    check(
        json.loads(body) == {"next_action": "execute", "execution_commands": COMMANDS},
        "the execute body does not read back as the commands",
    )
    return body, closes


def value_offset(body: str, value: str) -> int:
    """Offset of the first character of ``next_action``'s value ``value`` in ``body``."""
    return body.index(f'"next_action": "{value}"') + len('"next_action": "')


# -- part 1: time to decision -----------------------------------------------------------------


@dataclass
class DecisionSample:
    returned: float
    """Seconds from calling ``plan()`` to its return."""
    decided: float
    """``PlannerReply.decided_after``."""
    chars_read: int
    hangup_after: float | None
    """Seconds from ``plan()`` returning to the server seeing the client go."""
    record: StreamRecord


async def one_decision(
    server: FakeOpenAIServer, planner: StructuredPlanner, context: PlannerContext, body: str
) -> DecisionSample:
    index = len(server.streams)
    server.add_reply(body, chunk_size=CHARS_PER_TOKEN, tokens_per_second=P1_TOKENS_PER_SECOND)
    started = time.monotonic()
    reply = await planner.plan(context)
    returned = time.monotonic()
    record = await server.wait_stream_ended(index, timeout=10.0)
    check(isinstance(reply, PlannerReply), f"plan() returned {type(reply).__name__}")
    check(reply.decided_after is not None, "the planner did not note when it decided")
    assert reply.decided_after is not None
    output = reply.output
    check(
        isinstance(output, dict) and output.get("next_action") == "response",
        f"the plan did not decide 'response': {output!r}",
    )
    if planner.short_circuit:
        check(reply.short_circuited, "short_circuit=True did not short-circuit")
        check(output == {"next_action": "response", "execution_commands": []}, repr(output))
        check(record.client_disconnected, f"the server did not see the client go: {record}")
        check(record.chunks_sent < record.chunks_planned, f"every chunk was sent: {record}")
        check(reply.chars_read < len(body), "the short-circuit read the whole body")
    else:
        check(not reply.short_circuited, "short_circuit=False short-circuited")
        check(output == json.loads(body), "the whole body was not read back")
        check(record.completed and not record.client_disconnected, f"stream: {record}")
        check(record.chunks_sent == record.chunks_planned, f"chunks missing: {record}")
        check(reply.chars_read == len(body), f"read {reply.chars_read} of {len(body)} chars")
    hangup = None
    if record.disconnected_at is not None:
        hangup = record.disconnected_at - returned
    return DecisionSample(returned - started, reply.decided_after, reply.chars_read, hangup, record)


@dataclass
class DecisionResult:
    on: list[DecisionSample] = field(default_factory=list)
    off: list[DecisionSample] = field(default_factory=list)
    body: str = ""
    delay: float = 0.0
    planned_seconds: float = 0.0


async def bench_decision(
    model: OpenAIChatModel, server: FakeOpenAIServer, reps: int
) -> DecisionResult:
    body = response_body(P1_TOKENS)
    registry = make_registry([0.0] * 4)
    context = PlannerContext(
        user_input=USER_INPUT,
        available_tools=registry.specs(),
        round_index=1,
        max_rounds=5,
    )
    planners = {
        True: StructuredPlanner(model, short_circuit=True),
        False: StructuredPlanner(model, short_circuit=False),
    }
    tokens = -(-len(body) // CHARS_PER_TOKEN)
    result = DecisionResult(
        body=body,
        delay=1.0 / P1_TOKENS_PER_SECOND,
        # the role chunk at 0, then each content delta and the finish chunk one delay apart
        planned_seconds=(tokens + 1) / P1_TOKENS_PER_SECOND,
    )
    for planner in planners.values():  # warm-up: connection, schemas, imports
        server.add_reply(body, chunk_size=CHARS_PER_TOKEN, tokens_per_second=1e5)
        await planner.plan(context)
        await server.wait_stream_ended(-1)
    for _ in range(reps):
        result.on.append(await one_decision(server, planners[True], context, body))
        result.off.append(await one_decision(server, planners[False], context, body))
    return result


# -- part 2: streaming dispatch ---------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    tool_seconds: tuple[float, ...]
    """Per command, in plan order, as multiples of T."""
    headline: bool = False


SCENARIOS = (
    Scenario("slow tool first", (1.0, 0.1, 0.1, 0.1), headline=True),
    Scenario("spread, last short", (1.0, 1.0, 1.0, 0.1)),
    Scenario("worst case: all equal", (1.0, 1.0, 1.0, 1.0)),
)


@dataclass(frozen=True)
class Schedule:
    """When the server's schedule sends what matters in part 2 (seconds from its start)."""

    delay: float
    tokens: int
    plan_end: float
    """The execute plan's finish chunk: the plan is over."""
    closes_at: tuple[float, ...]
    """Each command's closing brace."""
    response_decided_at: float
    """The token that settles the response round's ``next_action``."""

    @classmethod
    def build(cls, body: str, closes: Sequence[int], plan_seconds: float) -> Schedule:
        tokens = -(-len(body) // CHARS_PER_TOKEN)
        # the role chunk at 0, then the content deltas and the finish chunk one delay apart
        delay = plan_seconds / (tokens + 1)
        return cls(
            delay=delay,
            tokens=tokens,
            plan_end=(tokens + 1) * delay,
            closes_at=tuple(content_sent_at(offset, delay) for offset in closes),
            response_decided_at=content_sent_at(value_offset(SHORT_RESPONSE, "response"), delay),
        )

    def ideal(self, tools: Sequence[float], *, dispatch: bool, pace: float = 1.0) -> float:
        """The wall time of a run with zero overhead, the stream ``pace`` times slower."""
        plan = self.plan_end * pace
        respond = self.response_decided_at * pace
        if not dispatch:
            return plan + max(tools) + respond
        ends = (c * pace + t for c, t in zip(self.closes_at, tools, strict=True))
        return max(plan, *ends) + respond


@dataclass
class RunSample:
    wall: float
    first_tool_at: float
    """Seconds from the call to the first tool's start."""
    started_during_plan: int
    """Round-0 commands that started before round 0's plan was decided."""
    plan_stream: float
    """Seconds the server took to send the execute plan (its own clock)."""
    ideal: float
    """The zero-overhead wall time at the pace the server really kept."""


async def one_run(
    server: FakeOpenAIServer,
    planner: StructuredPlanner,
    registry: ToolRegistry,
    body: str,
    schedule: Schedule,
    tools: Sequence[float],
    *,
    dispatch: bool,
    delay: float | None = None,
) -> RunSample:
    requests = len(server.requests)
    streams = len(server.streams)
    delay = schedule.delay if delay is None else delay
    server.add_reply(body, chunk_size=CHARS_PER_TOKEN, delay=delay)
    server.add_reply(SHORT_RESPONSE, chunk_size=CHARS_PER_TOKEN, delay=delay)
    starts: list[float] = []
    decided: dict[int, tuple[float, PlanDecided]] = {}

    def on_event(event: FlowEvent) -> None:
        now = time.monotonic()
        if isinstance(event, ToolCallStarted) and event.round_index == 0:
            starts.append(now)
        elif isinstance(event, PlanDecided):
            decided[event.round_index] = (now, event)

    started = time.monotonic()
    result: LoopResult = await async_plan_and_execute(
        USER_INPUT,
        tools=registry,
        planner=planner,
        max_turns=3,
        concurrency=4,
        streaming_dispatch=dispatch,
        on_event=on_event,
    )
    wall = time.monotonic() - started
    records = result.done_plans
    check(result.stop_reason == "answered", f"stop_reason={result.stop_reason!r}")
    check(result.rounds == 1, f"{result.rounds} executing rounds, expected 1")
    check(
        [r.tool_name for r in records] == [c["tool_name"] for c in COMMANDS],
        f"records out of order: {[r.tool_name for r in records]}",
    )
    check(all(r.success for r in records), f"errors: {[r.error for r in records]}")
    check(len(server.requests) == requests + 2, "expected two planner requests")
    plan_stream = await server.wait_stream_ended(streams)
    response_stream = await server.wait_stream_ended(streams + 1)
    check(plan_stream.completed, f"the execute plan was not read to the end: {plan_stream}")
    check(response_stream.client_disconnected, f"no short-circuit: {response_stream}")
    check(set(decided) == {0, 1}, f"plans decided in rounds {sorted(decided)}")
    check(decided[0][1].next_action == "execute", "round 0 did not decide 'execute'")
    check(decided[1][1].short_circuited, "round 1 did not short-circuit")
    check(len(starts) == len(COMMANDS), f"{len(starts)} tools started")
    during = sum(1 for at in starts if at < decided[0][0])
    if dispatch:
        check(during == len(COMMANDS), f"only {during} tools started while the plan streamed")
    else:
        check(during == 0, f"{during} tools started before the plan was decided")
    assert plan_stream.ended_at is not None
    streamed = plan_stream.ended_at - plan_stream.started_at
    pace = streamed / (schedule.plan_end * delay / schedule.delay)
    ideal = schedule.ideal(tools, dispatch=dispatch, pace=pace)
    return RunSample(wall, min(starts) - started, during, streamed, ideal)


@dataclass
class ScenarioResult:
    scenario: Scenario
    tool_seconds: tuple[float, ...]
    without: list[RunSample] = field(default_factory=list)
    with_: list[RunSample] = field(default_factory=list)


@dataclass
class DispatchResult:
    plan_seconds: float
    schedule: Schedule
    scenarios: list[ScenarioResult] = field(default_factory=list)


async def bench_dispatch(
    model: OpenAIChatModel, server: FakeOpenAIServer, cfg: Config
) -> DispatchResult:
    body, closes = execute_body()
    schedule = Schedule.build(body, closes, cfg.plan_seconds)
    out = DispatchResult(cfg.plan_seconds, schedule)
    planner = StructuredPlanner(model)
    for scenario in SCENARIOS:
        tools = tuple(m * cfg.plan_seconds for m in scenario.tool_seconds)
        registry = make_registry(tools)
        res = ScenarioResult(scenario, tools)
        for dispatch in (False, True):  # warm-up, with a fast stream
            await one_run(
                server, planner, registry, body, schedule, tools, dispatch=dispatch, delay=1e-5
            )
        for _ in range(cfg.reps):  # interleaved
            for dispatch, samples in ((False, res.without), (True, res.with_)):
                samples.append(
                    await one_run(
                        server, planner, registry, body, schedule, tools, dispatch=dispatch
                    )
                )
        out.scenarios.append(res)
    return out


# -- driving ----------------------------------------------------------------------------------


@dataclass
class Config:
    reps: int = 7
    plan_seconds: float = P2_PLAN_SECONDS


@dataclass
class Report:
    backend: str
    decision: DecisionResult | None = None
    dispatch: DispatchResult | None = None


async def bench_backend(cfg: Config, report: Report) -> None:
    async with FakeOpenAIServer() as server:
        model = OpenAIChatModel(
            "fake-model", base_url=server.base_url, structured_output="json_object"
        )
        async with model:
            report.decision = await bench_decision(model, server, cfg.reps)
            report.dispatch = await bench_dispatch(model, server, cfg)


# -- printing ---------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """Aligned text; ``align`` has one letter per column: ``l`` flush left, ``r`` right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(w) if a == "l" else cell.rjust(w)
            for cell, w, a in zip(cells, widths, align, strict=True)
        ]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def yes(met: bool) -> str:
    return "yes" if met else "MISSED"


def print_decision(result: DecisionResult, missed: list[str], backend: str) -> None:
    body = result.body
    n_tokens = -(-len(body) // CHARS_PER_TOKEN)
    value_at = value_offset(body, "response")
    on, off = result.on, result.off
    returned_on = median([s.returned for s in on])
    returned_off = median([s.returned for s in off])
    ratio = returned_off / returned_on

    def column(samples: list[DecisionSample]) -> list[str]:
        reads = {s.chars_read for s in samples}
        check(len(reads) == 1, f"chars read differ between repetitions: {sorted(reads)}")
        chars = reads.pop()
        records = [s.record for s in samples]
        gone = sum(r.client_disconnected for r in records)
        sent = median([r.chunks_sent for r in records])
        hangups = [s.hangup_after for s in samples if s.hangup_after is not None]
        return [
            ms(median([s.returned for s in samples])),
            ms(median([s.decided for s in samples])),
            f"{chars} / {len(body)}",
            f"{token_index(chars - 1) + 1} / {n_tokens}",
            f"+{token_index(chars - 1) - token_index(value_at)}",
            f"{gone}/{len(samples)}" + (" (client went)" if gone else " (completed)"),
            f"{sent:g} / {records[0].chunks_planned}",
            ms(median(hangups)) if hangups else "-",
            ms(median([r.ended_at - r.started_at for r in records if r.ended_at is not None])),
        ]

    labels = [
        "plan() returned after (ms)",
        "decision known after (ms, decided_after)",
        "characters read / body",
        "tokens read / body",
        "returned after token (+n from the value's first)",
        "server: client went away",
        "server: SSE chunks sent / planned",
        "server saw the hang-up (ms after return)",
        "server: stream lasted (ms)",
    ]
    cols_on, cols_off = column(on), column(off)
    rows = [[label, a, b] for label, a, b in zip(labels, cols_on, cols_off, strict=True)]
    past = token_index(on[0].chars_read - 1) - token_index(value_at)
    deciding_chunk = (token_index(on[0].chars_read - 1) + 1) * result.delay
    print(
        f"\n1. Time to decision, response-only plan: {len(body)} chars = {n_tokens} tokens "
        f"at {P1_TOKENS_PER_SECOND:g} tokens/s ({result.planned_seconds:.2f} s to stream); "
        f"median of {len(on)}"
    )
    print(table(["", "short_circuit=True", "short_circuit=False"], rows, align="lrr"))
    print(
        f"server schedule: the deciding token is sent at {ms(deciding_chunk)} ms, "
        f"the whole body at {ms(result.planned_seconds)} ms"
    )
    met_ratio = ratio >= P1_TARGET_RATIO
    met_past = past <= P1_TARGET_TOKENS_PAST_VALUE
    print(
        f"returned {ratio:.1f}x sooner with the short-circuit "
        f"(target >= {P1_TARGET_RATIO:g}x: {yes(met_ratio)}); decided and returned on "
        f"token +{past} of the value (target <= +{P1_TARGET_TOKENS_PAST_VALUE}: {yes(met_past)})"
    )
    if not met_ratio:
        missed.append(f"{backend}: short-circuit {ratio:.1f}x sooner")
    if not met_past:
        missed.append(f"{backend}: short-circuit decided on token +{past}")


def print_dispatch(result: DispatchResult, missed: list[str], backend: str) -> None:
    t = result.plan_seconds
    sched = result.schedule
    streamed = median([r.plan_stream for res in result.scenarios for r in res.without + res.with_])
    print(
        f"\n2. Streaming dispatch: one execute round (4 commands, {sched.tokens} tokens "
        f"scheduled to stream in T = {ms(t)} ms at {1 / sched.delay:,.0f} tokens/s; the server "
        f"really took {ms(streamed)} ms) + a response round (decision scheduled at "
        f"{ms(sched.response_decided_at)} ms); median of {len(result.scenarios[0].with_)}"
    )
    print(
        "commands close at "
        + ", ".join(f"{c / sched.plan_end:.2f}" for c in sched.closes_at)
        + " of the plan; wall = async_plan_and_execute(...) from call to return"
    )
    header = [
        "scenario",
        "tools x T",
        "off ms",
        "on ms",
        "on/off",
        "lower by",
        "ideal off",
        "ideal on",
        "ideal lower",
        "ovh off",
        "ovh on",
        "1st tool off",
        "1st tool on",
        "in plan",
        "target",
    ]
    rows: list[list[str]] = []
    nominal: list[str] = []
    for res in result.scenarios:
        off = median([s.wall for s in res.without])
        on = median([s.wall for s in res.with_])
        ideal_off = median([s.ideal for s in res.without])
        ideal_on = median([s.ideal for s in res.with_])
        lower = 1 - on / off
        target = ""
        if res.scenario.headline:
            met = lower >= P2_TARGET_LOWER
            target = f">= {P2_TARGET_LOWER:.0%} lower: {yes(met)}"
            if not met:
                missed.append(f"{backend}: dispatch, {res.scenario.name}: {lower:.0%} lower")
        rows.append(
            [
                res.scenario.name,
                " ".join(f"{m:g}" for m in res.scenario.tool_seconds),
                ms(off),
                ms(on),
                f"{on / off:.2f}",
                f"{lower:.0%}",
                ms(ideal_off),
                ms(ideal_on),
                f"{1 - ideal_on / ideal_off:.0%}",
                ms(median([s.wall - s.ideal for s in res.without])),
                ms(median([s.wall - s.ideal for s in res.with_])),
                ms(median([s.first_tool_at for s in res.without])),
                ms(median([s.first_tool_at for s in res.with_])),
                f"{min(s.started_during_plan for s in res.with_)}/{len(COMMANDS)}",
                target,
            ]
        )
        n_off = sched.ideal(res.tool_seconds, dispatch=False)
        n_on = sched.ideal(res.tool_seconds, dispatch=True)
        nominal.append(f"{res.scenario.name} {ms(n_off)} -> {ms(n_on)} ({1 - n_on / n_off:.0%})")
    print(table(header, rows, align="llrrrrrrrrrrrrl"))
    print(
        "off/on: streaming_dispatch False/True. ideal: the wall time with zero overhead at the "
        "pace the server really kept\n(its plan stream, scaled); ovh: wall - ideal. 1st tool: "
        "when the first tool started, from the call.\nin plan: tools started before the plan "
        "was decided (with dispatch, fewest over the runs).\nideal at the scheduled pace, "
        "off -> on: " + "; ".join(nominal)
    )


def environment(backend: str) -> str:
    return (
        f"python {platform.python_version()}, anyio {package_version('anyio')}, "
        f"openai {package_version('openai')}, httpx2 {package_version('httpx2')}, "
        f"trio {package_version('trio')}, backend {backend}, {platform.system()} "
        f"{platform.machine()}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("asyncio", "trio", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 7")
    parser.add_argument(
        "--plan-seconds",
        type=float,
        default=P2_PLAN_SECONDS,
        help=f"T of part 2: how long the execute plan streams (default {P2_PLAN_SECONDS})",
    )
    args = parser.parse_args(argv)
    cfg = Config(reps=3 if args.quick else 7, plan_seconds=args.plan_seconds)
    backends = ("asyncio", "trio") if args.backend == "both" else (args.backend,)
    missed: list[str] = []
    for backend in backends:
        report = Report(backend)
        run: Callable[[Config, Report], Awaitable[None]] = bench_backend
        anyio.run(run, cfg, report, backend=backend)
        print(f"\n== {environment(backend)} ==")
        assert report.decision is not None and report.dispatch is not None
        print_decision(report.decision, missed, backend)
        print_dispatch(report.dispatch, missed, backend)
        sys.stdout.flush()
    print("\nall targets met" if not missed else "\ntargets missed:\n  " + "\n  ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
