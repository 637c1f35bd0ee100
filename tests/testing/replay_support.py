"""Recorded runs of each product, for the replay tests: a scripted model, two tools, and
a way to build each product on any model and tools (what a replay is given)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from toolloop.agents import (
    AgentMiddleware,
    AssistantMessage,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    create_agent,
)
from toolloop.kernel import RunResult
from toolloop.loop import async_plan_and_execute
from toolloop.models import ChatModel
from toolloop.planners import PlannerContext, PlannerReply, StructuredPlanner
from toolloop.status_agent import LLMStatusSteps, StatusAgent, StatusDecision, StatusView
from toolloop.testing import ScriptedChatModel
from toolloop.tools import Tool, ToolRegistry
from toolloop.tracing import TRACE_VALUE_CHARS, TraceRecorder

PRODUCTS = ("loop", "agent", "status")
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
REQUEST = "Weather in Lisbon and Porto?"

RAN: list[tuple[str, dict[str, Any]]] = []
"""The real tools' calls (a replayed tool does not run its function)."""


async def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city.

    Args:
        city: the city's name.
    """
    RAN.append(("get_weather", {"city": city}))
    if city == "Atlantis":
        raise LookupError(f"no city named {city}")
    return {"city": city, "temp_c": 21 if city == "Lisbon" else 17}


def fahrenheit(celsius: float) -> float:
    """Celsius in Fahrenheit.

    Args:
        celsius: degrees Celsius.
    """
    RAN.append(("fahrenheit", {"celsius": celsius}))
    return celsius * 9 / 5 + 32


TOOLS: list[Callable[..., Any]] = [get_weather, fahrenheit]

Build = Callable[[ChatModel, ToolRegistry], Awaitable[RunResult]]


def scripted(product: str, cities: Sequence[str] = ("Lisbon", "Porto")) -> ScriptedChatModel:
    """The model of a run of ``product``: one turn calls ``get_weather`` for each city, the
    next answers."""
    model = ScriptedChatModel()
    if product == "loop":
        commands = [
            {"purpose": f"weather {c}", "tool_name": "get_weather", "tool_kwargs": {"city": c}}
            for c in cities
        ]
        model.add_reply(
            json.dumps({"next_action": "execute", "execution_commands": commands}),
            chunk_size=7,
            usage=USAGE,
        )
        answer: dict[str, Any] = {"next_action": "response", "execution_commands": []}
        model.add_reply(
            json.dumps({**answer, "pad": "x" * 80}),
            chunk_size=5,
            usage=USAGE,
        )
    elif product == "agent":
        calls = [
            {"id": f"call_{i}", "name": "get_weather", "arguments": json.dumps({"city": c})}
            for i, c in enumerate(cities)
        ]
        model.add_reply("Let me look.", tool_calls=calls, chunk_size=4, usage=USAGE)
        model.add_reply("21 °C in Lisbon, 17 °C in Porto.", chunk_size=6, usage=USAGE)
    else:
        requests: list[dict[str, Any]] = [
            {"tool_name": "get_weather", "arguments": {"city": c}, "purpose": f"weather {c}"}
            for c in cities
        ]
        decision = {"action": "call_tools", "tool_calls": requests, "reason": "", "answer": None}
        model.add_reply("the user wants the weather", usage=USAGE)
        model.add_reply(json.dumps({"steps": ["look up the weather"]}), usage=USAGE)
        model.add_reply(json.dumps(decision), chunk_size=9, usage=USAGE)
        model.add_reply(
            json.dumps({"verdict": "finish", "note": "", "answer": "21 and 17 °C"}), usage=USAGE
        )
    return model


def builder(product: str, **options: Any) -> Build:
    """Makes and runs ``product`` on the model and tools it is given."""

    async def build(model: ChatModel, tools: ToolRegistry) -> RunResult:
        if product == "loop":
            return await async_plan_and_execute(
                REQUEST, planner=StructuredPlanner(model), tools=tools, **options
            )
        if product == "agent":
            return await create_agent(model, tools).run(REQUEST, **options)
        return await StatusAgent(model=model, tools=tools).run(REQUEST, **options)

    return build


async def record(
    product: str,
    path: Path,
    *,
    model: ChatModel | None = None,
    tools: Sequence[Tool | Callable[..., Any]] | ToolRegistry = TOOLS,
    max_value_chars: int | None = TRACE_VALUE_CHARS,
    **options: Any,
) -> RunResult:
    """Run ``product`` for real (a scripted model, the real tools) and write its trace."""
    recorder = TraceRecorder(meta={"product": product}, max_value_chars=max_value_chars)
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(list(tools))
    try:
        return await builder(product, on_event=recorder, **options)(
            model or scripted(product), registry
        )
    finally:  # a run that raised is recorded too
        recorder.write(path)


def _lower(arguments: dict[str, Any]) -> dict[str, Any]:
    return {k: v.lower() if isinstance(v, str) else v for k, v in arguments.items()}


def changed_builder(product: str) -> Build:
    """``product`` with a code change: the model's tool arguments are normalized another way
    (lowercased) before the calls are made."""
    if product == "loop":

        class Lowered:
            def __init__(self, inner: StructuredPlanner) -> None:
                self.inner = inner

            async def plan(self, context: PlannerContext) -> Any:
                reply = await self.inner.plan(context)
                output = reply.output if isinstance(reply, PlannerReply) else reply
                if isinstance(output, dict):
                    commands = [
                        {**c, "tool_kwargs": _lower(c.get("tool_kwargs") or {})}
                        for c in output.get("execution_commands") or []
                    ]
                    output = {**output, "execution_commands": commands}
                return output

        async def loop(model: ChatModel, tools: ToolRegistry) -> RunResult:
            planner = Lowered(StructuredPlanner(model))
            return await async_plan_and_execute(REQUEST, planner=planner, tools=tools)

        return loop
    if product == "agent":

        class Lowercase(AgentMiddleware):
            async def wrap_model_call(
                self, request: ModelRequest, handler: ModelHandler
            ) -> ModelResponse | AssistantMessage:
                answer = await handler(request)
                message = answer.message if isinstance(answer, ModelResponse) else answer
                calls = [c.model_copy(update={"args": _lower(c.args)}) for c in message.tool_calls]
                return message.model_copy(update={"tool_calls": calls})

        async def agent(model: ChatModel, tools: ToolRegistry) -> RunResult:
            return await create_agent(model, tools, middleware=[Lowercase()]).run(REQUEST)

        return agent

    async def status(model: ChatModel, tools: ToolRegistry) -> RunResult:
        steps = LLMStatusSteps(model)

        async def decide(view: StatusView) -> StatusDecision:
            decision = await steps.decide(view)
            calls = [
                c.model_copy(update={"arguments": _lower(c.arguments)}) for c in decision.tool_calls
            ]
            return decision.model_copy(update={"tool_calls": calls})

        return await StatusAgent(model=model, tools=tools, decide=decide).run(REQUEST)

    return status
