"""Every product runs its tool calls through the one runner, so every product honours
``concurrency`` and a shared ``CapacityLimiter`` exactly: peaks measured with a counter,
order proven with gates (no clock)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop import StatusAgent, async_plan_and_execute, create_agent
from toolloop.planners import Dispatch, PlannerContext
from toolloop.testing import ScriptedChatModel, ScriptedPlanner
from toolloop.tools import Tool, tool

pytestmark = pytest.mark.anyio

CALLS = 6


class Gate:
    """A tool that counts the calls running at once, and holds them until the test opens
    the gate, once ``expected`` of them run together."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.running = self.peak = self.done = 0
        self.reached = anyio.Event()
        self.opened = anyio.Event()

    def tool(self) -> Tool:
        @tool(name="work")
        async def work(n: int) -> int:
            """Do some work.

            Args:
                n: which piece.
            """
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                if self.running >= self.expected:
                    self.reached.set()
                await self.opened.wait()
            finally:
                self.running -= 1
            self.done += 1
            return n

        return work

    async def hold_then_open(self) -> None:
        """Once the limit is reached, give the runner every chance to start one call too
        many, then let them all finish."""
        with anyio.fail_after(30):  # a hang guard only
            await self.reached.wait()
        for _ in range(100):
            await anyio.lowlevel.checkpoint()
        self.opened.set()


def commands() -> list[dict[str, Any]]:
    return [
        {"purpose": f"piece {n}", "tool_name": "work", "tool_kwargs": {"n": n}}
        for n in range(CALLS)
    ]


class StreamingScript:
    """A streaming planner: hands each command over before it returns the plan."""

    def __init__(self) -> None:
        self.rounds = 0

    async def plan(self, context: PlannerContext) -> dict[str, Any]:
        return await self.plan_streaming(context, lambda i, raw: None)

    async def plan_streaming(self, context: PlannerContext, dispatch: Dispatch) -> dict[str, Any]:
        self.rounds += 1
        if self.rounds > 1:
            return {"next_action": "response"}
        plan = {"next_action": "execute", "execution_commands": commands()}
        for i, raw in enumerate(plan["execution_commands"]):
            dispatch(i, raw)
            await anyio.lowlevel.checkpoint()
        return plan


async def run_loop(work: Tool, limiter: anyio.CapacityLimiter | None, streaming: bool) -> int:
    planner: Any = (
        StreamingScript()
        if streaming
        else ScriptedPlanner([{"next_action": "execute", "execution_commands": commands()}])
    )
    result = await async_plan_and_execute(
        "work",
        tools=[work],
        planner=planner,
        concurrency=2 if limiter is None else 4,
        limiter=limiter,
        streaming_dispatch=streaming,
    )
    assert sorted(r.result for r in result.done_plans) == list(range(CALLS))
    return len(result.done_plans)


def tool_calls() -> list[dict[str, Any]]:
    return [{"name": "work", "arguments": f'{{"n": {n}}}'} for n in range(CALLS)]


async def run_agent(work: Tool, limiter: anyio.CapacityLimiter | None, streaming: bool) -> int:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=tool_calls())
    model.add_reply("done")
    agent = create_agent(model, [work], concurrency=2 if limiter is None else 4, limiter=limiter)
    result = await agent.run("work")
    answers = [m for m in result.messages if m.role == "tool"]
    assert sorted(int(m.content) for m in answers) == list(range(CALLS))
    return len(answers)


async def run_status_agent(
    work: Tool, limiter: anyio.CapacityLimiter | None, streaming: bool
) -> int:
    decisions = iter(
        [
            {
                "action": "call_tools",
                "tool_calls": [
                    {"tool_name": "work", "arguments": {"n": n}, "purpose": f"piece {n}"}
                    for n in range(CALLS)
                ],
            },
            {"action": "finish", "answer": "done"},
        ]
    )
    agent = StatusAgent(
        tools=[work],
        analyze=lambda view: "work to do",
        plan=lambda view: ["work"],
        decide=lambda view: next(decisions),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "hello",
        concurrency=2 if limiter is None else 4,
        limiter=limiter,
    )
    result = await agent.run("work")
    assert sorted(r.record.result for r in result.state.records) == list(range(CALLS))
    return len(result.state.records)


Product = Callable[[Tool, "anyio.CapacityLimiter | None", bool], Awaitable[int]]
PRODUCTS: dict[str, tuple[Product, bool]] = {
    "loop": (run_loop, False),
    "loop-streaming": (run_loop, True),
    "agent": (run_agent, False),
    "status-agent": (run_status_agent, False),
}


@pytest.mark.parametrize("product", list(PRODUCTS))
async def test_concurrency_holds_exactly(product: str) -> None:
    run, streaming = PRODUCTS[product]
    gate = Gate(expected=2)
    ran: list[int] = []

    async def go() -> None:
        ran.append(await run(gate.tool(), None, streaming))

    async with anyio.create_task_group() as tg:
        tg.start_soon(go)
        await gate.hold_then_open()
    assert ran == [CALLS]
    assert gate.done == CALLS
    assert gate.peak == 2


@pytest.mark.parametrize("product", list(PRODUCTS))
async def test_a_shared_limiter_holds_across_runs(product: str) -> None:
    run, streaming = PRODUCTS[product]
    limiter = anyio.CapacityLimiter(3)
    gate = Gate(expected=3)  # two runs of concurrency 4 each, three tokens between them
    ran: list[int] = []

    async def go() -> None:
        ran.append(await run(gate.tool(), limiter, streaming))

    async with anyio.create_task_group() as tg:
        tg.start_soon(go)
        tg.start_soon(go)
        await gate.hold_then_open()
    assert ran == [CALLS, CALLS]
    assert gate.done == 2 * CALLS
    assert gate.peak == 3
    assert limiter.borrowed_tokens == 0
