"""The plan/execute loop written directly on Agently's TriggerFlow: the engine alone.

Wired as Agently's own action loop wires it, without its agent: a loop flow
(``flow.to(init)``, ``flow.when("PLAN").to(plan)``, ``flow.when("EXECUTE").to(execute)``)
whose ``execute`` step runs each round as an execution of a round flow,
``for_each(concurrency=4).to(call_tool).end_for_each().to(collect)``. ``plan`` looks the
scripted plan up by round (the same outputs as toolloop's ``ScriptedPlanner``) and emits
``EXECUTE`` with the commands, or stops; state (round, done records) lives in the execution's
state. The flows are built once per tool delay; each execution is
``create_execution(auto_close=False, record_store=False)``, ``async_start`` then
``async_close``, as Agently's action loop does.

Two shorter wirings were tried and set aside, since they would measure a quirk rather than the
engine: ``flow.async_start()`` auto-closes through a monitor that polls every 50 ms (idle time
added to every run), and one ``for_each`` in the loop flow itself, re-entered round after
round, holds a slot of its semaphore through the nested emits of the next round (the second
round then runs 3 calls at once, then 1: 300 ms instead of 200 with 100-ms tools).
"""

from __future__ import annotations

from typing import Any

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


def build(delay: float) -> RunFn:
    TriggerFlow = load("agently").TriggerFlow
    tools = {fn.__name__: fn for fn in make_tools(delay)}

    async def init(data: Any) -> None:
        await data.async_set_state("round_index", 0)
        await data.async_set_state("done", [])
        await data.async_emit("PLAN", None)

    async def plan(data: Any) -> None:
        round_index = data.get_state("round_index")
        output = PLANNER_OUTPUTS[round_index]
        commands = output.get("execution_commands") or []
        if output.get("next_action") == "execute" and commands:
            await data.async_emit("EXECUTE", commands)
        else:
            await data.async_set_state("rounds", round_index)

    async def call_tool(data: Any) -> dict[str, Any]:
        command = data.value
        purpose = command["purpose"]
        try:
            value = await tools[command["tool_name"]](**command["tool_kwargs"])
        except Exception as exc:
            return {"purpose": purpose, "success": False, "error": repr(exc)}
        return {"purpose": purpose, "success": True, "result": value}

    async def collect(data: Any) -> None:
        await data.async_set_state("results", data.value)

    round_flow = TriggerFlow(name="plan-execute-round")
    round_flow.for_each(concurrency=CONCURRENCY).to(call_tool).end_for_each().to(collect)

    async def execute(data: Any) -> None:
        execution = round_flow.create_execution(auto_close=False, record_store=False)
        await execution.async_start(data.value)
        results = (await execution.async_close())["results"]
        await data.async_set_state("done", [*data.get_state("done"), *results])
        await data.async_set_state("round_index", data.get_state("round_index") + 1)
        await data.async_emit("PLAN", None)

    flow = TriggerFlow(name="plan-execute-loop")
    flow.to(init)
    flow.when("PLAN").to(plan)
    flow.when("EXECUTE").to(execute)

    async def run() -> None:
        execution = flow.create_execution(auto_close=False, record_store=False)
        await execution.async_start(None)
        state = await execution.async_close()
        done = state["done"]
        if state.get("rounds") != EXECUTING_ROUNDS or not all(r["success"] for r in done):
            raise CheckFailed(f"triggerflow run: {state!r}")
        check_results("triggerflow", [r["result"] for r in done])

    return run
