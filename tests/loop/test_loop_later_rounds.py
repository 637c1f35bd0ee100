"""Faults in a later round, after workers served an earlier one: a failing call is a record
and the others go on; the run's timeout and a cancelled caller reach the calls the run's
own task and its workers run, and every command keeps its record."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.loop import async_plan_and_execute, stream_plan_and_execute
from toolloop.planners import Dispatch, PlannerContext
from toolloop.testing import ScriptedPlanner

pytestmark = pytest.mark.anyio

HANG_GUARD = 10  # seconds; the runs here take milliseconds


def cmd(purpose: str, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": purpose, "tool_name": "step", "tool_kwargs": kwargs}


def rounds(count: int, calls: int) -> list[dict[str, Any]]:
    plans: list[dict[str, Any]] = [
        {
            "next_action": "execute",
            "execution_commands": [cmd(f"r{r}c{c}", r=r, c=c) for c in range(calls)],
        }
        for r in range(count)
    ]
    return [*plans, {"next_action": "response"}]


class StreamedScript(ScriptedPlanner):
    """A scripted planner that streams: it hands over each command of its plan before it
    returns the plan, as a planner reading a model's stream does."""

    async def plan_streaming(self, context: PlannerContext, dispatch: Dispatch) -> Any:
        plan = await self.plan(context)
        for position, command in enumerate(plan.get("execution_commands") or ()):
            dispatch(position, command)
            await anyio.lowlevel.checkpoint()  # the rest of the plan is still on its way
        return plan


class RoundGate:
    """Each call of a round waits until ``width`` calls of that round run at once, so a
    round can only finish with ``width`` calls in flight together (one per task)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.arrived: dict[int, int] = {}
        self.full: dict[int, anyio.Event] = {}
        self.blocked_from: int | None = None  # calls of this round and later never end
        self.fail_r1c1 = False  # call 1 of round 1 raises at once
        self.cancelled = 0

    async def step(self, r: int, c: int) -> str:
        """One step of a round.

        Args:
            r: the round.
            c: the call.
        """
        if self.fail_r1c1 and (r, c) == (1, 1):
            raise ValueError("call 1 of round 1 fails")
        full = self.full.setdefault(r, anyio.Event())
        self.arrived[r] = self.arrived.get(r, 0) + 1
        if self.arrived[r] == self.width:
            full.set()
        try:
            await full.wait()
            if self.blocked_from is not None and r >= self.blocked_from:
                await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        return f"{r}.{c}"


async def test_a_failing_call_in_a_later_round_is_a_record_and_the_others_go_on() -> None:
    gate = RoundGate(width=3)  # call 1 of round 1 fails at once; the other three meet
    gate.fail_r1c1 = True
    with anyio.fail_after(HANG_GUARD):
        result = await async_plan_and_execute(
            "go", tools=[gate.step], planner=ScriptedPlanner(rounds(3, 4)), concurrency=4
        )
    failed = [r for r in result.done_plans if not r.success]
    assert [r.purpose for r in failed] == ["r1c1"]
    assert "call 1 of round 1 fails" in (failed[0].error or "")
    assert sum(r.success for r in result.done_plans) == 11
    assert result.stop_reason == "answered"


@pytest.mark.parametrize("streaming", [False, True], ids=["planned", "streamed"])
async def test_a_timeout_in_a_later_round_keeps_every_record_and_ends_every_worker(
    streaming: bool,
) -> None:
    """Round 0 runs on the run's task and three workers; round 1's calls never end, so
    only the run's timeout stops them: every command still has its record, and the run
    returns, which it does only once its task group (and so every worker) has ended."""
    gate = RoundGate(width=4)
    gate.blocked_from = 1
    with anyio.fail_after(HANG_GUARD):
        if streaming:
            planner = StreamedScript(rounds(2, 4))
            async with stream_plan_and_execute(
                "go",
                tools=[gate.step],
                planner=planner,
                concurrency=4,
                timeout=0.5,
                on_timeout="finish",
                streaming_dispatch=True,
            ) as stream:
                async for _ in stream:
                    pass
            result = stream.result
        else:
            result = await async_plan_and_execute(
                "go",
                tools=[gate.step],
                planner=ScriptedPlanner(rounds(2, 4)),
                concurrency=4,
                timeout=0.5,
                on_timeout="finish",
            )
    assert result.stop_reason == "timeout"
    assert len(result.done_plans) == 8
    assert [r.success for r in result.done_plans] == [True] * 4 + [False] * 4
    assert all("cancelled" in (r.error or "") for r in result.done_plans[4:])
    assert gate.cancelled == 4


async def test_cancelling_the_caller_mid_round_cancels_every_call_of_the_round() -> None:
    gate = RoundGate(width=4)
    gate.blocked_from = 1
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await async_plan_and_execute(
                    "go", tools=[gate.step], planner=ScriptedPlanner(rounds(2, 4)), concurrency=4
                )

            tg.start_soon(run)
            await gate.full.setdefault(1, anyio.Event()).wait()  # round 1's 4 calls started
            tg.cancel_scope.cancel()
    assert gate.cancelled == 4  # the run's own call and its three workers' calls
