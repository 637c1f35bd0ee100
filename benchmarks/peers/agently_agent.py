"""Agently's agent action loop (``async_get_action_result``), which runs on TriggerFlow.

Agently's agent has the same plan/execute loop as toolloop (``done_plans``,
``execution_commands``, one record per command) on its ``TriggerFlowActionFlow``. Its seam
for a planner of one's own is ``register_action_planning_handler``: the handler returns the
scripted plan of ``context["round_index"]`` (the same outputs as toolloop's
``ScriptedPlanner``), so no model request is built and no model output is parsed, as in
toolloop's run. The agent is built once per tool delay, with the four functions registered
through ``use_tools``, and each run gets a prompt of its own and calls
``await agent.async_get_action_result(prompt, max_turns=5, concurrency=4,
store_for_reply=False)``.
"""

from __future__ import annotations

from typing import Any

from .common import (
    CONCURRENCY,
    MAX_ROUNDS,
    PLANNER_OUTPUTS,
    USER_INPUT,
    CheckFailed,
    RunFn,
    check_results,
    load,
    make_tools,
)


def build(delay: float) -> RunFn:
    agently = load("agently")
    Agently = agently.Agently
    agent = Agently.create_agent()
    agent.use_tools(make_tools(delay))

    async def planning_handler(context: dict[str, Any], request: dict[str, Any]) -> Any:
        round_index = context["round_index"]
        if round_index >= len(PLANNER_OUTPUTS):
            return {"next_action": "response"}
        return PLANNER_OUTPUTS[round_index]

    agent.register_action_planning_handler(planning_handler)

    async def run() -> None:
        prompt = Agently.create_prompt()
        prompt.set("input", USER_INPUT)
        records = await agent.async_get_action_result(
            prompt, max_turns=MAX_ROUNDS, concurrency=CONCURRENCY, store_for_reply=False
        )
        if not all(r.get("success") for r in records):
            raise CheckFailed(f"agently run: {records!r}")
        check_results("agently", [r.get("result") for r in records])

    return run
