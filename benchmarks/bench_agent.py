"""What the middleware agent costs over a hand-written anyio model ↔ tools loop doing the same.

The workload, the same for every side (the loop benchmark's, in tool-calling form): a model
that streams three replies (reply 1: four tool calls, reply 2: four more, reply 3: a final
answer without tool calls) over four typed async tools; each reply's calls run
concurrently, at most four at once.

The model is a replay double: each ``stream(request)`` hands over the pre-built deltas of the
reply for that turn (one ``anyio.lowlevel.checkpoint()`` per delta, as a network stream
would yield), keeps nothing, and is shared by every side, so only what each side does with
the deltas differs.

- ``agent``: ``await agent.run(...)`` of ``create_agent(model, tools, concurrency=4)`` built
  once. It does all it promises: typed messages, tool calls put together from the stream,
  each call its own task under the limit, arguments checked against the tool's JSON schema,
  the routing rules, the flow engine's trace.
- ``agent + middleware``: the same with three no-op middleware (a sync ``before_model``, an
  async ``after_model``, a ``wrap_model_call`` and a ``wrap_tool_call``): the cost of hooks.
- ``baseline``: the minimal honest hand-written loop: OpenAI-style message dicts, tool-call
  pieces joined by index, ``json.loads`` of the arguments, the calls in an anyio task group
  under a ``CapacityLimiter(4)``, tool messages appended in call order. No schema check.
- ``langgraph``: LangChain's ``create_agent`` on LangGraph is not a dependency of toolloop;
  the script prints "skipped: langgraph not installed" without it (a LangGraph side, which
  needs a replaying ``BaseChatModel``, is not written yet).

Every run is checked (8 tool answers that succeeded, the final text), so nothing is measured
that did not really happen.

- W1, overhead: 0-ms tools (they return at once), runs in a row after a warm-up;
  milliseconds per run, median of the repetitions (the sides interleaved).
- W2, latency: 50 ms tools; wall time of one run / ideal (2 x 50 ms); median.

Run it with::

    .venv/bin/python benchmarks/bench_agent.py                  # asyncio and trio
    .venv/bin/python benchmarks/bench_agent.py --backend trio   # one backend
    .venv/bin/python benchmarks/bench_agent.py --quick          # fewer runs
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
from bench_loop import make_tools  # the same four tools as the loop's benchmark

from toolloop.agents import (
    Agent,
    AgentMiddleware,
    AgentResult,
    AgentState,
    Command,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    Runtime,
    ToolCallRequest,
    ToolHandler,
    ToolMessage,
    create_agent,
)
from toolloop.models import ChatDelta, ChatRequest
from toolloop.testing import FakeToolCall, ScriptedChatReply
from toolloop.tools import Tool, ToolRegistry

USER_INPUT = "Plan a weekend in Lisbon: weather, trains, a hotel and the budget."
CONCURRENCY = 4
CALLS_PER_RUN = 8
FINAL = "Lisbon it is: sunny, 89 EUR by train, Casa Azul at 95 EUR a night."
W2_TOOL_SECONDS = 0.05


# -- the workload ---------------------------------------------------------------------------


def _call(name: str, **args: Any) -> FakeToolCall:
    return FakeToolCall(name, json.dumps(args))


REPLIES: list[list[ChatDelta]] = [
    ScriptedChatReply(
        tool_calls=(
            _call("get_weather", city="Lisbon"),
            _call("get_weather", city="Porto", days=2),
            _call("find_fare", origin="Madrid", destination="Lisbon"),
            _call("find_fare", origin="Madrid", destination="Porto"),
        )
    ).deltas(),
    ScriptedChatReply(
        tool_calls=(
            _call("find_hotel", city="Lisbon", nights=2),
            _call("find_hotel", city="Porto", nights=2, max_eur=120.0),
            _call("convert_currency", amount=450.0, to="USD"),
            _call("convert_currency", amount=450.0, to="GBP"),
        )
    ).deltas(),
    ScriptedChatReply(content=FINAL, chunk_size=16).deltas(),
]


class ReplayModel:
    """A ChatModel that replays the reply of the turn (the assistant messages so far)."""

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        yield _Deltas(REPLIES[turn])


class _Deltas:
    __slots__ = ("_deltas", "_i")

    def __init__(self, deltas: list[ChatDelta]) -> None:
        self._deltas = deltas
        self._i = 0

    def __aiter__(self) -> _Deltas:
        return self

    async def __anext__(self) -> ChatDelta:
        i = self._i
        if i >= len(self._deltas):
            raise StopAsyncIteration
        self._i = i + 1
        await anyio.lowlevel.checkpoint()
        return self._deltas[i]


class NoOp(AgentMiddleware):
    def before_model(self, state: AgentState, runtime: Runtime) -> None:
        return None

    async def after_model(self, state: AgentState, runtime: Runtime) -> None:
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        return await handler(request)

    async def wrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command:
        return await handler(request)


class Sides:
    """What each side needs for runs with tools of one delay."""

    def __init__(self, delay: float) -> None:
        model = ReplayModel()
        self.functions = make_tools(delay)
        self.by_name = {fn.__name__: fn for fn in self.functions}
        registry = ToolRegistry(Tool.from_function(fn) for fn in self.functions)
        self.openai_tools = registry.openai_tools()
        self.model = model
        self.agent: Agent = create_agent(model, registry, concurrency=CONCURRENCY)
        self.agent_mw: Agent = create_agent(
            model, registry, concurrency=CONCURRENCY, middleware=[NoOp()]
        )


# -- the sides -----------------------------------------------------------------------------


class CheckFailed(RuntimeError):
    """A run did not do the work the benchmark measures."""


def check_agent(result: AgentResult) -> None:
    answers = [m for m in result.messages if isinstance(m, ToolMessage)]
    if (
        len(answers) != CALLS_PER_RUN
        or not all(m.status == "success" for m in answers)
        or result.text != FINAL
    ):
        raise CheckFailed(f"agent run: {result!r}: {[m.content for m in answers]}")


async def agent_run(sides: Sides) -> None:
    check_agent(await sides.agent.run(USER_INPUT))


async def agent_mw_run(sides: Sides) -> None:
    check_agent(await sides.agent_mw.run(USER_INPUT))


async def baseline_run(sides: Sides) -> None:
    """The hand-written loop: stream a reply, run its calls concurrently, repeat."""
    limiter = anyio.CapacityLimiter(CONCURRENCY)
    tools = sides.by_name
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER_INPUT}]
    answered = 0

    async def call(results: list[dict[str, Any]], i: int, call: dict[str, Any]) -> None:
        async with limiter:
            function = call["function"]
            try:
                value = await tools[function["name"]](**json.loads(function["arguments"]))
                content = json.dumps(value)
            except Exception as exc:
                content = f"Error: {exc!r}"
            results[i] = {"role": "tool", "tool_call_id": call["id"], "content": content}

    while True:
        request = ChatRequest(messages=messages, tools=sides.openai_tools, tool_choice="auto")
        content: list[str] = []
        pieces: dict[int, dict[str, Any]] = {}
        async with sides.model.stream(request) as deltas:
            async for delta in deltas:
                if delta.content:
                    content.append(delta.content)
                for piece in delta.tool_calls:
                    got = pieces.setdefault(
                        piece.index or 0, {"id": piece.id, "name": "", "args": []}
                    )
                    if piece.name:
                        got["name"] = piece.name
                    got["args"].append(piece.arguments)
        calls = [
            {
                "id": p["id"],
                "type": "function",
                "function": {"name": p["name"], "arguments": "".join(p["args"])},
            }
            for p in pieces.values()
        ]
        messages.append({"role": "assistant", "content": "".join(content), "tool_calls": calls})
        if not calls:
            break
        results: list[dict[str, Any]] = [{}] * len(calls)
        async with anyio.create_task_group() as tg:
            for i, c in enumerate(calls):
                tg.start_soon(call, results, i, c)
        messages.extend(results)
        answered += len(results)
    if answered != CALLS_PER_RUN or messages[-1]["content"] != FINAL:
        raise CheckFailed(f"baseline run: {messages!r}")


def langgraph_installed() -> bool:
    """Whether LangChain's create_agent (on LangGraph) can be imported here."""
    try:
        import langchain.agents  # type: ignore[import-not-found]  # noqa: F401
        import langgraph  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


Side = Callable[[Sides], Coroutine[Any, Any, None]]
SIDES: dict[str, Side] = {
    "baseline": baseline_run,
    "agent": agent_run,
    "agent + middleware": agent_mw_run,
}


# -- measuring ------------------------------------------------------------------------------


async def in_a_row(side: Side, sides: Sides, runs: int) -> float:
    gc.collect()
    started = time.perf_counter()
    for _ in range(runs):
        await side(sides)
    return (time.perf_counter() - started) / runs


async def w1(runs: int, repetitions: int) -> dict[str, float]:
    sides = Sides(0.0)
    for side in SIDES.values():  # warm up (and check) each side
        await in_a_row(side, sides, 50)
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    for _ in range(repetitions):
        for name, side in SIDES.items():
            times[name].append(await in_a_row(side, sides, runs))
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


async def w2(repetitions: int) -> dict[str, float]:
    sides = Sides(W2_TOOL_SECONDS)
    ideal = 2 * W2_TOOL_SECONDS
    walls: dict[str, list[float]] = {name: [] for name in SIDES}
    for _ in range(repetitions):
        for name, side in SIDES.items():
            started = time.perf_counter()
            await side(sides)
            walls[name].append((time.perf_counter() - started) / ideal)
    return {name: statistics.median(w) for name, w in walls.items()}


async def bench(backend: str, quick: bool) -> None:
    runs, repetitions = (300, 3) if quick else (2000, 5)
    print(f"\n== backend: {backend} ==")
    print(
        f"W1 overhead: 3 model replies, 8 tool calls of 0 ms; ms per run, median of "
        f"{repetitions} x {runs} runs"
    )
    figures = await w1(runs, repetitions)
    base = figures["baseline"]
    for name, ms in figures.items():
        print(f"  {name:<20} {ms:8.3f} ms/run   {ms / base:5.2f}x baseline")
    print(f"W2 latency: {W2_TOOL_SECONDS * 1000:.0f} ms tools; wall / ideal (2 rounds), median")
    for name, ratio in (await w2(5 if quick else 9)).items():
        print(f"  {name:<20} {ratio:8.3f}")
    if not langgraph_installed():
        print("  langgraph            skipped: langgraph not installed")
    else:  # no replaying BaseChatModel was written for it: say so rather than guess
        print("  langgraph            installed, but this script has no LangGraph side yet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["asyncio", "trio"], action="append")
    parser.add_argument("--quick", action="store_true", help="fewer runs and repetitions")
    args = parser.parse_args()
    for backend in args.backend or ["asyncio", "trio"]:
        anyio.run(bench, backend, args.quick, backend=backend)


if __name__ == "__main__":
    main()
