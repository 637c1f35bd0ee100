"""``toolloop demo``: the loop on sample tools, live.

By default a scripted planner plans three rounds (a trip from Madrid: the weather in three
cities, the fares to the sunny ones, a currency conversion, with an unknown tool, bad
arguments and a failing tool along the way). With ``--http`` the same plan comes from a
model: a local OpenAI-compatible server (:class:`~toolloop.testing.FakeOpenAIServer`,
scripted, no network) streams it to :class:`~toolloop.planners.StructuredPlanner` through
the real ``openai`` client; tools start while the plan still streams, the last round is
short-circuited, and the final answer is streamed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any, TextIO

from .._demo import PLANNER, convert_currency, find_fare, get_weather
from ..loop import LoopResult, async_plan_and_execute
from ..planners import PlannerLike
from ._session import (
    Display,
    OnEvent,
    make_display,
    observe,
    print_result,
    stream_answer,
    terminal_width,
)

__all__ = ["DemoOptions", "async_demo"]

REQUEST = "Where should I go this weekend from Madrid: sunny, and a cheap train?"
TOOLS: list[Callable[..., Any]] = [get_weather, find_fare, convert_currency]

_ANSWER = (
    "Go to Lisbon: it is sunny (24 °C) and the train from Madrid is the cheapest of the sunny "
    "cities at 89 EUR (about 75.65 GBP). Faro is sunnier and warmer (27 °C) but costs 112 EUR. "
    "Porto is cloudy. (No JPY rate was available, and hotels cannot be booked here.)"
)


@dataclass
class DemoOptions:
    """The options of ``toolloop demo``."""

    http: bool = False
    trace: Path | None = None
    timeline: Path | None = None
    plain: bool = False
    view: int | None = None


def _command(purpose: str, tool: str, todo: str = "", **kwargs: Any) -> dict[str, Any]:
    return {"purpose": purpose, "tool_name": tool, "tool_kwargs": kwargs, "todo_suggestion": todo}


def _plans() -> list[dict[str, Any]]:
    """What the model "writes" in rounds 0 and 1 (the scripted planner's first two rounds)."""
    weather = [
        _command(f"weather in {city}", "get_weather", "compare the cities", city=city)
        for city in ("Lisbon", "Porto", "Faro")
    ]
    return [
        {
            "next_action": "execute",
            "execution_commands": [
                *weather,
                _command("a tool that does not exist", "book_hotel", city="Faro"),
                _command("weather with a bad argument", "get_weather", city="Faro", days="three"),
            ],
        },
        {
            "next_action": "execute",
            "execution_commands": [
                _command(
                    f"fare to {city}",
                    "find_fare",
                    "convert the cheapest fare",
                    origin="Madrid",
                    destination=city,
                )
                for city in ("Lisbon", "Faro")
            ]
            + [
                _command("fare in GBP", "convert_currency", amount=89.0, to="GBP"),
                _command("fare in JPY", "convert_currency", amount=89.0, to="JPY"),
            ],
        },
    ]


async def _run(
    options: DemoOptions,
    planner: PlannerLike,
    *,
    out: TextIO,
    display: Display,
    meta: Mapping[str, Any],
    timeout: float,
    streaming_dispatch: bool = False,
) -> LoopResult:
    """The demo's run, planned by ``planner`` and watched on ``display``; its result printed."""
    started = perf_counter()

    async def start(on_event: OnEvent) -> LoopResult:
        return await async_plan_and_execute(
            REQUEST,
            tools=TOOLS,
            planner=planner,
            max_turns=5,
            concurrency=3,
            timeout=timeout,
            streaming_dispatch=streaming_dispatch,
            on_event=on_event,
        )

    result, written = await observe(start, display=display, meta=meta, outputs=options)
    print_result(out, result, elapsed=perf_counter() - started, written=written)
    return result


async def async_demo(options: DemoOptions, *, out: TextIO) -> LoopResult:
    """Run the demo, writing its progress and result to ``out``."""
    display = make_display(out, plain=options.plain)
    display.message(f"request: {REQUEST}")
    if not options.http:
        display.message(
            "planner: scripted (toolloop.testing.ScriptedPlanner): two rounds of tools, then "
            "the answer"
        )
        display.message()
        meta = {"request": REQUEST, "planner": "scripted", "concurrency": 3}
        result = await _run(options, PLANNER, out=out, display=display, meta=meta, timeout=10)
        instruction = f"extra_instruction: {result.extra_instruction}"
        width = max(terminal_width(out) - 1, 40)
        if len(instruction) > width:
            instruction = instruction[: width - 3] + "..."
        out.write(f"\n{instruction}\n")
        out.write(
            "\nnext: toolloop demo --http   the same plan written by a model over HTTP:\n"
            "                             tools start while it streams, the short-circuit\n"
            "      toolloop view          and, in another terminal, toolloop demo --view\n"
            "                             8765: the run live in a browser\n"
        )
        return result
    return await _http_demo(options, out=out, display=display)


async def _http_demo(options: DemoOptions, *, out: TextIO, display: Display) -> LoopResult:
    from ..models import OpenAIChatModel
    from ..planners import StructuredPlanner
    from ..testing import FakeOpenAIServer

    async with FakeOpenAIServer(models=["demo-model"]) as server:
        for plan in _plans():
            server.add_reply(json.dumps(plan), chunk_size=12, tokens_per_second=90)
        # round 2: the model starts writing "response"; its first letter settles it
        server.add_reply(
            chunks=[
                '{"next_action": "',
                "r",
                "espo",
                'nse", ',
                '"execution_',
                'commands": ',
                "[]}",
            ],
            first_delay=0.1,
            delay=0.15,
        )
        server.add_reply(_ANSWER, chunk_size=5, tokens_per_second=60)
        display.message(
            f"planner: StructuredPlanner, streaming dispatch, over HTTP to a local scripted "
            f"OpenAI-compatible server at {server.base_url}"
        )
        display.message()
        meta = {
            "request": REQUEST,
            "planner": "StructuredPlanner, streaming dispatch (local scripted server)",
            "model": "demo-model",
            "concurrency": 3,
        }
        async with OpenAIChatModel("demo-model", base_url=server.base_url, max_retries=0) as model:
            result = await _run(
                options,
                StructuredPlanner(model),
                out=out,
                display=display,
                meta=meta,
                timeout=20,
                streaming_dispatch=True,
            )
            if len(server.streams) > 2:
                last_plan = await server.wait_stream_ended(2)
                out.write(
                    f"\nshort-circuit: round 2's plan was read for {last_plan.chunks_sent} of "
                    f"its {last_plan.chunks_planned} chunks, then the planner hung up "
                    f"(the server saw the client go: {last_plan.client_disconnected})\n"
                )
            await stream_answer(out, model, result)
    return result
