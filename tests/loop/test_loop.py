from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolloop import ExecutionTimeoutError, PlannerError, ToolExecutionRecord
from toolloop.flow import FlowEvent
from toolloop.kernel import RunFinished
from toolloop.loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
    async_plan_and_execute,
    plan_and_execute,
    stream_plan_and_execute,
)
from toolloop.planners import PlannerContext
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import ScriptedPlanner

pytestmark = pytest.mark.anyio


def cmd(tool: str, purpose: str | None = None, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": purpose or f"{tool} {kwargs}", "tool_name": tool, "tool_kwargs": kwargs}


def execute(*commands: dict[str, Any]) -> dict[str, Any]:
    return {"next_action": "execute", "execution_commands": list(commands)}


RESPONSE = {"next_action": "response"}


class Probe:
    """Tools that count how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.calls: list[tuple[str, Any]] = []
        self.cancelled = 0
        self.finished = 0

    async def work(self, n: int, delay: float = 0.02) -> int:
        """Square a number slowly.

        Args:
            n: the number.
            delay: seconds to take.
        """
        self.calls.append(("work", n))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await anyio.sleep(delay)
        except BaseException:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        self.finished += 1
        return n * n


async def test_three_rounds_records_in_order_and_context() -> None:
    probe = Probe()
    planner = ScriptedPlanner(
        [
            execute(cmd("work", "a", n=1, delay=0.03), cmd("work", "b", n=2, delay=0.0)),
            execute(cmd("work", "c", n=3)),
            RESPONSE,
        ]
    )
    result = await async_plan_and_execute(
        "square things",
        tools=[probe.work],
        planner=planner,
        max_turns=5,
        user_extra_requirement="be brief",
    )
    assert result.stop_reason == "answered"
    assert result.rounds == 2
    assert [r.purpose for r in result.done_plans] == ["a", "b", "c"]
    assert [r.result for r in result.done_plans] == [1, 4, 9]
    assert result.action_results == {"a": 1, "b": 4, "c": 9}
    ctx0, ctx1, ctx2 = planner.calls
    assert (ctx0.round_index, ctx1.round_index, ctx2.round_index) == (0, 1, 2)
    assert ctx0.done_plans == [] and ctx0.last_round_result == []
    assert [r.purpose for r in ctx1.last_round_result] == ["a", "b"]
    assert [r.purpose for r in ctx2.last_round_result] == ["c"]
    assert [r.purpose for r in ctx2.done_plans] == ["a", "b", "c"]
    assert ctx0.max_rounds == 5 and ctx0.user_extra_requirement == "be brief"
    assert ctx0.user_input == "square things"
    (spec,) = ctx0.available_tools
    assert spec["name"] == "work" and spec["parameters"]["required"] == ["n"]


async def test_max_rounds_is_checked_before_the_planner_is_called() -> None:
    probe = Probe()
    calls: list[int] = []

    def planner(ctx: PlannerContext) -> dict[str, Any]:
        calls.append(ctx.round_index)
        return execute(cmd("work", n=ctx.round_index, delay=0))

    result = await async_plan_and_execute("x", tools=[probe.work], planner=planner, max_turns=2)
    assert calls == [0, 1]
    assert result.stop_reason == "max_turns"
    assert result.rounds == 2
    assert len(result.done_plans) == 2


async def test_zero_rounds_injects_nothing() -> None:
    planner = ScriptedPlanner([execute(cmd("work", n=1))])
    result = await async_plan_and_execute("x", tools=[Probe().work], planner=planner, max_turns=0)
    assert planner.calls == []
    assert result.stop_reason == "max_turns"
    assert result.prompt == {} and result.extra == {}


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (RESPONSE, "answered"),
        ({"use_tool": False, "execution_commands": [cmd("work", n=1)]}, "use_tool_false"),
        ({"next_action": "execute", "execution_commands": []}, "no_commands"),
        ("garbage", "invalid_plan"),
        ([{"tool_name": "work"}], "invalid_plan"),
        (None, "invalid_plan"),
    ],
)
async def test_stop_conditions(output: Any, reason: str) -> None:
    probe = Probe()
    result = await async_plan_and_execute(
        "x", tools=[probe.work], planner=ScriptedPlanner([output])
    )
    assert result.stop_reason == reason
    assert result.done_plans == [] and probe.calls == []
    assert result.prompt == {}


async def test_concurrency_limit_is_exact() -> None:
    probe = Probe()
    commands = [cmd("work", f"p{i}", n=i) for i in range(10)]
    result = await async_plan_and_execute(
        "x", tools=[probe.work], planner=ScriptedPlanner([execute(*commands)]), concurrency=3
    )
    assert probe.peak == 3
    assert [r.result for r in result.done_plans] == [i * i for i in range(10)]


async def test_a_shared_limiter_holds_across_runs() -> None:
    probe = Probe()
    limiter = anyio.CapacityLimiter(2)
    planner = ScriptedPlanner([execute(*[cmd("work", f"p{i}", n=i) for i in range(4)])])
    results: list[Any] = []

    async def one() -> None:
        results.append(
            await async_plan_and_execute(
                "x", tools=[probe.work], planner=planner, concurrency=4, limiter=limiter
            )
        )

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert probe.peak == 2
    assert all(len(r.done_plans) == 4 for r in results)


async def test_runs_of_one_registry_keep_their_own_limits() -> None:
    """Runs of one registry share its executor only when their limits are the same: runs
    at once with other limits each keep theirs, exactly."""
    from toolloop.tools import Tool, ToolRegistry

    limits = (2, 3, 2, 3)
    probes = [Probe() for _ in limits]

    async def work(n: int, run: int) -> int:
        """Count the calls of one run.

        Args:
            n: the number.
            run: which run's probe counts the call.
        """
        return int(await probes[run].work(n))

    registry = ToolRegistry([Tool.from_function(work)])

    async def one(run: int) -> None:
        commands = [cmd("work", f"p{i}", n=i, run=run) for i in range(8)]
        result = await async_plan_and_execute(
            "x",
            tools=registry,
            planner=ScriptedPlanner([execute(*commands)]),
            concurrency=limits[run],
        )
        assert [r.result for r in result.done_plans] == [i * i for i in range(8)]

    async with anyio.create_task_group() as tg:
        for run in range(len(limits)):
            tg.start_soon(one, run)
    assert [probe.peak for probe in probes] == list(limits)


async def test_bad_commands_become_records_and_tools_do_not_run() -> None:
    probe = Probe()
    planner = ScriptedPlanner(
        [
            execute(
                cmd("work", "good", n=2, delay=0),
                cmd("nope", "unknown"),
                cmd("work", "bad type", n="two"),
                cmd("work", "extra arg", n=1, color="red"),
                {"purpose": "not an object", "tool_name": "work", "tool_kwargs": [1]},
            ),
        ]
    )
    result = await async_plan_and_execute("x", tools=[probe.work], planner=planner)
    records = result.done_plans
    assert [r.purpose for r in records] == [
        "good", "unknown", "bad type", "extra arg", "not an object"
    ]  # fmt: skip
    assert [r.success for r in records] == [True, False, False, False, False]
    assert probe.calls == [("work", 2)]
    errors = [r.error or "" for r in records[1:]]
    assert "nope" in errors[0] and "work" in errors[0]
    assert "n" in errors[1] and "two" in errors[1]
    assert "color" in errors[2]
    assert "must be an object" in errors[3]


async def test_a_tool_that_raises_or_times_out_becomes_a_record() -> None:
    def boom(x: int) -> int:
        raise ValueError(f"bad {x}")

    async def slow() -> str:
        await anyio.sleep(10)
        return "never"

    planner = ScriptedPlanner([execute(cmd("boom", x=1), cmd("slow"))])
    with anyio.fail_after(5):
        result = await async_plan_and_execute(
            "x", tools=[boom, slow], planner=planner, tool_timeout=0.05
        )
    boom_rec, slow_rec = result.done_plans
    assert not boom_rec.success and "ValueError" in (boom_rec.error or "")
    assert "bad 1" in (boom_rec.error or "")
    assert not slow_rec.success and "0.05" in (slow_rec.error or "")


async def test_planner_error_keeps_done_plans() -> None:
    planner = ScriptedPlanner([execute(cmd("work", n=3, delay=0)), RuntimeError("model down")])
    with pytest.raises(PlannerError) as info:
        await async_plan_and_execute("x", tools=[Probe().work], planner=planner)
    err = info.value
    assert [r.result for r in err.done_plans] == [9]
    assert isinstance(err.__cause__, RuntimeError)
    assert "model down" in str(err) and "round 1" in str(err)


async def test_planner_timeout_is_a_planner_error() -> None:
    async def stuck(ctx: PlannerContext) -> Any:
        await anyio.sleep(10)

    with anyio.fail_after(5), pytest.raises(PlannerError, match=r"within 0\.05 s"):
        await async_plan_and_execute("x", planner=stuck, model_timeout=0.05)


async def test_whole_run_timeout_is_enforced_and_keeps_records() -> None:
    probe = Probe()
    planner = ScriptedPlanner(
        [execute(cmd("work", "fast", n=2, delay=0)), execute(cmd("work", "slow", n=3, delay=10))]
    )
    start = anyio.current_time()
    with anyio.fail_after(5), pytest.raises(ExecutionTimeoutError) as info:  # the tool: 10 s
        await async_plan_and_execute("x", tools=[probe.work], planner=planner, timeout=0.3)
    assert anyio.current_time() - start >= 0.3 - 1e-3  # at the deadline, not before
    state = info.value.state
    assert [r.purpose for r in state.done_plans] == ["fast", "slow"]
    assert state.done_plans[1].success is False
    assert "cancel" in (state.done_plans[1].error or "")
    assert probe.running == 0 and probe.cancelled == 1


async def test_timeout_can_finish_with_the_records_so_far() -> None:
    planner = ScriptedPlanner(
        [execute(cmd("work", "fast", n=2, delay=0)), execute(cmd("work", "slow", n=3, delay=10))]
    )
    result = await async_plan_and_execute(
        "x", tools=[Probe().work], planner=planner, timeout=0.2, on_timeout="finish"
    )
    assert result.stop_reason == "timeout"
    assert result.action_results is not None
    assert result.action_results["fast"] == 4
    assert "error" in result.action_results["slow"]


async def test_outside_cancellation_leaves_no_tool_running() -> None:
    probe = Probe()
    planner = ScriptedPlanner([execute(*[cmd("work", n=i, delay=10) for i in range(3)])])
    with anyio.move_on_after(0.1) as scope:
        await async_plan_and_execute("x", tools=[probe.work], planner=planner)
    assert scope.cancelled_caught
    assert probe.running == 0
    assert probe.cancelled == 3


async def test_events_tell_the_story_in_order() -> None:
    seen: list[FlowEvent] = []
    planner = ScriptedPlanner([execute(cmd("work", "a", n=1, delay=0)), RESPONSE])
    await async_plan_and_execute("x", tools=[Probe().work], planner=planner, on_event=seen.append)
    loop_events = [
        e
        for e in seen
        if isinstance(
            e,
            (
                RoundStarted,
                PlanDecided,
                ToolCallStarted,
                ToolCallFinished,
                RoundFinished,
                RunFinished,
            ),
        )
    ]
    assert [e.kind for e in loop_events] == [
        "round_started",
        "plan_decided",
        "tool_call_started",
        "tool_call_finished",
        "round_finished",
        "round_started",
        "plan_decided",
        "run_finished",
    ]
    decided = loop_events[1]
    assert isinstance(decided, PlanDecided) and decided.commands[0].purpose == "a"
    finished = loop_events[-1]
    assert isinstance(finished, RunFinished)
    assert (finished.stop_reason, finished.turns, finished.records) == ("answered", 1, 1)
    assert [e.at for e in seen] == sorted(e.at for e in seen)


async def test_stream_of_events() -> None:
    planner = ScriptedPlanner([execute(cmd("work", "a", n=4, delay=0)), RESPONSE])
    kinds: list[str] = []
    async with stream_plan_and_execute("x", tools=[Probe().work], planner=planner) as run:
        async for event in run:
            kinds.append(event.kind)
    assert kinds[0] == "execution_started" and kinds[-1] == "execution_finished"
    assert "tool_call_finished" in kinds
    assert run.result.action_results == {"a": 16}


async def test_stream_left_early_cancels_the_run() -> None:
    probe = Probe()
    planner = ScriptedPlanner([execute(cmd("work", n=1, delay=10))])
    with anyio.fail_after(5):
        async with stream_plan_and_execute("x", tools=[probe.work], planner=planner) as run:
            async for event in run:
                if event.kind == "tool_call_started":
                    break
    assert probe.running == 0 and probe.cancelled == 1
    with pytest.raises(RuntimeError, match="was cancelled when its block was left"):
        run.result  # noqa: B018


async def test_stream_raises_the_run_error() -> None:
    planner = ScriptedPlanner([RuntimeError("nope")])

    async def consume() -> None:
        async with stream_plan_and_execute("x", planner=planner) as run:
            async for _ in run:
                pass

    with pytest.raises(PlannerError):
        await consume()


async def test_records_are_pydantic_and_kept_in_tool_logs() -> None:
    planner = ScriptedPlanner([execute(cmd("work", "a", n=5, delay=0))])
    result = await async_plan_and_execute("x", tools=[Probe().work], planner=planner)
    (record,) = result.done_plans
    assert isinstance(record, ToolExecutionRecord)
    assert result.extra["tool_logs"] == [record.model_dump(mode="json")]
    assert set(result.extra["tool_logs"][0]) == {
        "purpose", "tool_name", "kwargs", "todo_suggestion", "next", "success", "result", "error",
        "error_type", "traceback",  # set when the tool raised: for the developer, not the model
        "attempts",  # the tries the call took (a tool_retry)
        "shared",  # where a shared call's outcome came from (shared_results)
    }  # fmt: skip


async def test_sync_twin_refuses_to_run_inside_a_loop() -> None:
    with pytest.raises(RuntimeError, match="async_plan_and_execute"):
        plan_and_execute("x", planner=ScriptedPlanner([]))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_twin_runs(backend: Any) -> None:
    def double(n: int) -> int:
        return 2 * n

    result = plan_and_execute(
        "x",
        backend=backend,
        tools=[double],
        planner=ScriptedPlanner([execute(cmd("double", "d", n=21))]),
    )
    assert result.action_results == {"d": 42}


@pytest.mark.parametrize("option", ["on_timeout", "on_usage_limit"])
async def test_a_misspelt_choice_is_refused_before_anything_runs(option: str) -> None:
    probe = Probe()
    planner = ScriptedPlanner([execute(cmd("work", n=1, delay=0)), RESPONSE])
    with pytest.raises(ValueError, match=f"{option} must be 'raise' or 'finish', got 'raises'"):
        await async_plan_and_execute(
            "x",
            tools=[probe.work],
            planner=planner,
            **{option: "raises"},  # type: ignore[arg-type]
        )
    assert probe.calls == []
