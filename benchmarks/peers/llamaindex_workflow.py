"""The plan/execute loop as a LlamaIndex workflow (``llama-index-workflows``).

LlamaIndex workflows are an event-driven step engine without a model or tool layer of their
own, so the loop is written the way their docs write a fan-out: a ``plan`` step asks the
scripted planner (the same outputs as toolloop's ``ScriptedPlanner``, looked up by round) and
sends one ``ToolCall`` event per command with ``ctx.send_event``; a ``call_tool`` step with
``num_workers=4`` runs each call and answers a ``ToolResult``; a ``collect`` step waits for
the round's results with ``ctx.collect_events`` and starts the next plan. State (round, done
results) lives in ``ctx.store``. The workflow is built once per tool delay and run with
``await workflow.run()`` (``timeout=None``: the default 45 s would cut the 10,000-run pass).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from .common import (
    CONCURRENCY,
    EXECUTING_ROUNDS,
    PLANNER_OUTPUTS,
    CheckFailed,
    RunFn,
    check_results,
    load,
    make_tools,
)

F = TypeVar("F", bound=Callable[..., Any])


def build(delay: float) -> RunFn:
    workflows = load("workflows")
    events = load("workflows.events")
    Context = workflows.Context
    StartEvent = events.StartEvent
    StopEvent = events.StopEvent
    step = workflows.step
    event_base: Any = events.Event
    workflow_base: Any = workflows.Workflow
    tools = {fn.__name__: fn for fn in make_tools(delay)}

    def step_of(accepts: Any, returns: Any, *, context: bool, workers: int = 4) -> Callable[[F], F]:
        """``@step``, given the event types that it otherwise reads from the annotations.

        The events are classes local to build() (the peer is imported lazily), which
        annotations cannot name for the type checker; the step gets them as annotations.
        """

        def decorate(fn: F) -> F:
            context_type = {"ctx": Context} if context else {}
            fn.__annotations__ = {**context_type, "ev": accepts, "return": returns}
            return cast(F, step(num_workers=workers)(fn))

        return decorate

    class Plan(event_base):  # type: ignore[misc]
        pass

    class ToolCall(event_base):  # type: ignore[misc]
        index: int
        purpose: str
        tool_name: str
        tool_kwargs: dict[str, Any]

    class ToolResult(event_base):  # type: ignore[misc]
        index: int
        purpose: str
        success: bool
        result: Any = None
        error: str | None = None

    class PlanExecuteLoop(workflow_base):  # type: ignore[misc]
        @step_of(StartEvent | Plan, ToolCall | StopEvent | None, context=True)
        async def plan(self, ctx: Any, ev: Any) -> Any:
            round_index = await ctx.store.get("round_index", 0)
            output = PLANNER_OUTPUTS[round_index]
            commands = output.get("execution_commands") or []
            if output.get("next_action") != "execute" or not commands:
                done = await ctx.store.get("done", [])
                return StopEvent(result={"results": done, "rounds": round_index})
            await ctx.store.set("pending", len(commands))
            for i, command in enumerate(commands):
                ctx.send_event(
                    ToolCall(
                        index=i,
                        purpose=command["purpose"],
                        tool_name=command["tool_name"],
                        tool_kwargs=command["tool_kwargs"],
                    )
                )
            return None

        @step_of(ToolCall, ToolResult, context=False, workers=CONCURRENCY)
        async def call_tool(self, ev: Any) -> Any:
            try:
                value = await tools[ev.tool_name](**ev.tool_kwargs)
            except Exception as exc:
                return ToolResult(
                    index=ev.index, purpose=ev.purpose, success=False, error=repr(exc)
                )
            return ToolResult(index=ev.index, purpose=ev.purpose, success=True, result=value)

        @step_of(ToolResult, Plan | None, context=True)
        async def collect(self, ctx: Any, ev: Any) -> Any:
            expected = await ctx.store.get("pending")
            results = ctx.collect_events(ev, [ToolResult] * expected)
            if results is None:
                return None
            results.sort(key=lambda r: r.index)
            done = await ctx.store.get("done", [])
            await ctx.store.set("done", [*done, *(r.model_dump() for r in results)])
            await ctx.store.set("round_index", await ctx.store.get("round_index", 0) + 1)
            return Plan()

    workflow = PlanExecuteLoop(timeout=None)

    async def run() -> None:
        outcome = await workflow.run()
        results = outcome["results"]
        if outcome["rounds"] != EXECUTING_ROUNDS or not all(r["success"] for r in results):
            raise CheckFailed(f"llamaindex run: {outcome!r}")
        check_results("llamaindex", [r["result"] for r in results])

    return run
