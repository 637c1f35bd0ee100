"""RunContext: a tool's run context is injected (never in its schema, never from the model),
typed over the caller's deps, with the run id, the round, the purpose, and progress reports
(from async tools and from sync tools in worker threads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from typing_extensions import assert_type

from toolloop import Tool, async_plan_and_execute, tool
from toolloop.agents import create_agent
from toolloop.errors import ToolDefinitionError
from toolloop.flow import FlowEvent
from toolloop.runner import Executor, ToolCommand, ToolProgress
from toolloop.testing import ScriptedChatModel, ScriptedPlanner
from toolloop.tools import RunContext, ToolRegistry, async_call_tool

pytestmark = pytest.mark.anyio


@dataclass
class Deps:
    """What a caller hands its tools: here, a fake database."""

    rows: dict[str, int]
    asked: list[str]


async def lookup(key: str, ctx: RunContext[Deps]) -> int:
    """Look a key up.

    Args:
        key: the key.
    """
    assert_type(ctx.deps, Deps)  # checked by mypy strict: RunContext[Deps] types its deps
    ctx.deps.asked.append(key)
    ctx.report("looking up", key=key)
    return ctx.deps.rows[key]


def where(ctx: RunContext[None], label: str = "") -> dict[str, Any]:
    """Where the call runs (sync: in a worker thread).

    Args:
        label: a label.
    """
    ctx.report(f"in round {ctx.round_index}")
    return {
        "run_id": ctx.run_id,
        "round": ctx.round_index,
        "purpose": ctx.purpose,
        "tool": ctx.tool_name,
        "label": label,
    }


def plan(*commands: dict[str, Any]) -> dict[str, Any]:
    return {"next_action": "execute", "execution_commands": list(commands)}


def test_the_context_parameter_is_not_in_the_schema() -> None:
    made = Tool.from_function(lookup)
    assert made.context_parameter == "ctx"
    assert made.parameters["properties"] == {"key": {"type": "string", "description": "the key."}}
    assert made.parameters["required"] == ["key"]
    assert Tool.from_function(where).parameters["properties"].keys() == {"label"}
    assert ToolRegistry([lookup]).takes_context


def test_a_tool_without_a_context_pays_nothing() -> None:
    def plain(x: int) -> int:
        """Echo.

        Args:
            x: a number.
        """
        return x

    made = Tool.from_function(plain)
    assert made.context_parameter is None
    assert not ToolRegistry([made]).takes_context
    arguments = made.validate({"x": 1})
    assert made.with_context(arguments, "p") is arguments  # no copy, nothing added


def test_an_optional_context_is_a_context() -> None:
    def maybe(x: int, ctx: RunContext[Deps] | None = None) -> int:
        """Maybe.

        Args:
            x: a number.
        """
        return x if ctx is None else x + len(ctx.deps.rows)

    made = Tool.from_function(maybe)
    assert made.context_parameter == "ctx"
    assert made.parameters["properties"].keys() == {"x"}
    assert maybe(1) == 1  # still callable by hand


def test_two_context_parameters_are_refused() -> None:
    def twice(a: RunContext[None], b: RunContext[None]) -> None:
        """Twice."""

    with pytest.raises(ToolDefinitionError, match="two RunContext parameters"):
        Tool.from_function(twice)


async def test_the_loop_hands_each_call_its_context() -> None:
    deps = Deps(rows={"a": 1, "b": 2}, asked=[])
    events: list[FlowEvent] = []
    planner = ScriptedPlanner(
        [
            plan({"purpose": "first", "tool_name": "lookup", "tool_kwargs": {"key": "a"}}),
            plan(
                {"purpose": "second", "tool_name": "lookup", "tool_kwargs": {"key": "b"}},
                {"purpose": "where", "tool_name": "where", "tool_kwargs": {"label": "x"}},
            ),
            {"next_action": "response"},
        ]
    )
    result = await async_plan_and_execute(
        "?", tools=[lookup, where], planner=planner, deps=deps, on_event=events.append
    )
    assert [r.result for r in result.done_plans[:2]] == [1, 2]
    assert deps.asked == ["a", "b"]
    assert result.done_plans[2].result == {
        "run_id": result.run_id,
        "round": 1,
        "purpose": "where",
        "tool": "where",
        "label": "x",
    }
    progress = [e for e in events if isinstance(e, ToolProgress)]
    told = [(p.round_index, p.call_id, p.tool_name, p.purpose, p.message, p.data) for p in progress]
    assert told[0] == (0, "0.0", "lookup", "first", "looking up", {"key": "a"})
    # round 1's two calls run at once: either may report first
    assert sorted(told[1:], key=lambda t: t[1]) == [
        (1, "1.0", "lookup", "second", "looking up", {"key": "b"}),
        (1, "1.1", "where", "where", "in round 1", {}),
    ]
    assert {p.execution_id for p in progress} == {result.run_id}


async def test_the_model_cannot_pass_a_context() -> None:
    deps = Deps(rows={"a": 1}, asked=[])
    planner = ScriptedPlanner(
        [
            plan(
                {
                    "purpose": "forged",
                    "tool_name": "lookup",
                    "tool_kwargs": {"key": "a", "ctx": {"deps": "evil"}},
                }
            ),
            {"next_action": "response"},
        ]
    )
    result = await async_plan_and_execute("?", tools=[lookup], planner=planner, deps=deps)
    record = result.done_plans[0]
    assert not record.success and "ctx" in (record.error or "")
    assert deps.asked == []  # the tool did not run


async def test_reports_from_a_thread_reach_the_run_on_its_event_loop() -> None:
    seen: list[ToolProgress] = []

    @tool(thread=True)
    def slow(ctx: RunContext[None], steps: int) -> int:
        """Work in steps.

        Args:
            steps: how many.
        """
        for i in range(steps):
            ctx.report(f"step {i}", i=i)
        return steps

    def on_event(event: FlowEvent) -> None:
        if isinstance(event, ToolProgress):
            seen.append(event)

    planner = ScriptedPlanner(
        [
            plan({"purpose": "go", "tool_name": "slow", "tool_kwargs": {"steps": 3}}),
            {"next_action": "response"},
        ]
    )
    result = await async_plan_and_execute("?", tools=[slow], planner=planner, on_event=on_event)
    assert result.done_plans[0].result == 3
    assert [(e.message, e.data) for e in seen] == [
        ("step 0", {"i": 0}),
        ("step 1", {"i": 1}),
        ("step 2", {"i": 2}),
    ]


async def test_outside_a_run_the_context_is_empty() -> None:
    made = Tool.from_function(where)
    value = await async_call_tool(made, {"label": "solo"})
    assert value == {"run_id": "", "round": 0, "purpose": "where", "tool": "where", "label": "solo"}
    executor = Executor([made])
    record = await executor.call(ToolCommand(purpose="p", tool_name="where", tool_kwargs={}))
    assert record.success and record.result["purpose"] == "p"


async def test_an_explicit_tool_gets_its_context_too() -> None:
    async def handler(q: str, ctx: RunContext[str]) -> str:
        return f"{ctx.deps}:{q}"

    explicit = Tool(
        name="search",
        description="Search.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        function=handler,
    )
    assert explicit.context_parameter == "ctx"
    planner = ScriptedPlanner(
        [
            plan({"purpose": "s", "tool_name": "search", "tool_kwargs": {"q": "x"}}),
            {"next_action": "response"},
        ]
    )
    result = await async_plan_and_execute("?", tools=[explicit], planner=planner, deps="db")
    assert result.done_plans[0].result == "db:x"


async def test_the_agent_hands_its_tools_the_deps() -> None:
    deps = Deps(rows={"a": 41}, asked=[])
    events: list[FlowEvent] = []
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "lookup", "arguments": '{"key": "a"}', "id": "c1"}])
    model.add_reply("It is 41.")
    agent = create_agent(model, [lookup])
    result = await agent.run("What is a?", deps=deps, on_event=events.append)
    assert result.text == "It is 41."
    assert deps.asked == ["a"]
    progress = [e for e in events if isinstance(e, ToolProgress)]
    told = [(p.round_index, p.call_id, p.purpose, p.message) for p in progress]
    assert told == [(0, "c1", "lookup", "looking up")]  # its call's id, and its tool's name
