"""Failures, timeouts and cancellation: real cancel scopes, clear errors, no orphan task."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop import ExecutionTimeoutError
from toolloop.errors import ExecutionError, ExecutionStalledError, RunError, StepFailedError
from toolloop.flow import Context, Flow, Step

pytestmark = pytest.mark.anyio


class Probe:
    """Records whether a step finished or was cancelled."""

    def __init__(self) -> None:
        self.started = 0
        self.finished = 0
        self.cancelled = 0
        self._waiting: list[tuple[int, anyio.Event]] = []

    async def until_started(self, count: int) -> None:
        """Wait until ``count`` probed steps have started (a hang guard bounds it)."""
        if self.started < count:
            event = anyio.Event()
            self._waiting.append((count, event))
            with anyio.fail_after(30):
                await event.wait()

    def step(self, name: str, seconds: float) -> Step:
        async def sleepy(value: Any) -> Any:
            self.started += 1
            for count, event in self._waiting:
                if self.started >= count:
                    event.set()
            try:
                await anyio.sleep(seconds)
            except anyio.get_cancelled_exc_class():
                self.cancelled += 1
                raise
            self.finished += 1
            return value

        return Step(sleepy, name=name)


def quick(value: int, ctx: Context[dict[str, Any]]) -> int:
    ctx.state["quick"] = value
    return value + 1


async def test_a_step_that_raises_fails_the_execution_with_trace_and_state() -> None:
    class Broken(RuntimeError):
        pass

    def explode(value: int, ctx: Context[dict[str, Any]]) -> int:
        ctx.state["before"] = "kept"
        raise Broken("the disk is full")

    flow: Flow[dict[str, Any]] = Flow("failing")
    flow.start.to(quick).to(explode).end()
    execution = flow.execution()
    with pytest.raises(StepFailedError) as info:
        await execution.run(1)
    err = info.value
    assert isinstance(err, ExecutionError)
    assert isinstance(err, RunError)
    assert err.step == "explode"
    assert isinstance(err.__cause__, Broken)
    assert str(err) == "step 'explode' raised Broken: the disk is full"
    assert [(e.step, e.outcome) for e in err.trace] == [("quick", "ok"), ("explode", "failed")]
    assert err.trace[1].detail == "Broken: the disk is full"
    assert err.state == {"quick": 1, "before": "kept"}
    assert execution.status == "failed"
    assert execution.trace == err.trace
    assert execution.state is err.state


async def test_a_failure_cancels_the_rest_of_the_execution() -> None:
    probe = Probe()

    async def explode(value: Any) -> None:
        await probe.until_started(1)
        raise ValueError("no")

    flow: Flow[dict[str, Any]] = Flow("failing fork")
    flow.start.to(probe.step("long", 10)).end()
    flow.start.to(explode).end()
    with anyio.fail_after(30):  # a hang guard
        with pytest.raises(StepFailedError, match="'explode'"):
            await flow.run(1)
    assert (probe.started, probe.cancelled, probe.finished) == (1, 1, 0)


async def test_a_stalled_execution_says_so() -> None:
    def drop(value: Any) -> None:
        return None

    flow: Flow[dict[str, Any]] = Flow("stalls")
    flow.start.to(drop).if_(lambda v: v is not None, Step(str, name="show"))
    flow.step("show").end()
    execution = flow.execution()
    with pytest.raises(ExecutionStalledError, match="'stalls' ran out of steps") as info:
        await execution.run(1)
    assert [e.step for e in info.value.trace] == ["drop", "drop?"]
    assert execution.status == "failed"


async def test_whole_execution_timeout_cancels_a_sleeping_step_at_the_deadline() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("slow")
    flow.start.to(quick).to(probe.step("sleeper", 10)).end()
    execution = flow.execution()
    t0 = time.perf_counter()
    with pytest.raises(ExecutionTimeoutError) as info:
        await execution.run(1, timeout=0.1)
    elapsed = time.perf_counter() - t0
    assert elapsed >= 0.1 - 1e-3  # not before the deadline
    assert elapsed < 5  # a hang guard: the step alone would sleep 10 s
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.timeout == 0.1
    assert err.step is None
    assert "'slow' did not finish within 0.1 s" in str(err)
    assert [(e.step, e.outcome) for e in err.trace] == [("quick", "ok"), ("sleeper", "cancelled")]
    assert 0.1 - 1e-3 <= err.trace[-1].ended < 5
    assert err.state == {"quick": 1}
    assert (probe.cancelled, probe.finished) == (1, 0)
    assert execution.status == "failed"


async def test_whole_execution_timeout_cancels_every_branch_and_fan_out() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("wide")
    flow.start.batch(probe.step("a", 10), probe.step("b", 10)).end()
    flow.start.for_each(probe.step("c", 10), limit=2, name="each").end()
    with pytest.raises(ExecutionTimeoutError):
        await flow.run([1, 2, 3], timeout=0.5)  # the four start at once, well before it
    assert (probe.started, probe.cancelled, probe.finished) == (4, 4, 0)


async def test_an_execution_that_ends_in_time_is_not_a_timeout() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("in time")
    flow.start.to(probe.step("brief", 0.01)).end()
    assert (await flow.run(5, timeout=1)).value == 5


async def test_per_step_timeout_names_the_step() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("step timeout")
    flow.start.to(quick, timeout=1).to(
        Step(probe.step("think", 10).fn, name="think", timeout=0.05)
    ).end()
    t0 = time.perf_counter()
    with pytest.raises(ExecutionTimeoutError) as info:
        await flow.run(1, timeout=5)
    assert time.perf_counter() - t0 < 4  # the step's timeout, not the run's 5 s (or its 10 s)
    err = info.value
    assert err.step == "think"
    assert err.timeout == 0.05
    assert str(err) == "step 'think' did not finish within 0.05 s and was cancelled"
    assert [(e.step, e.outcome) for e in err.trace] == [("quick", "ok"), ("think", "timeout")]
    assert (probe.cancelled, probe.finished) == (1, 0)


async def test_per_step_timeout_in_a_fan_out_names_the_step() -> None:
    async def lookup(value: int) -> int:
        await anyio.sleep(60 if value == 2 else 0)  # value 2 never makes its 0.05 s
        return value

    flow: Flow[dict[str, Any]] = Flow("fan timeout")
    flow.start.for_each(Step(lookup, timeout=0.05)).end()
    with pytest.raises(ExecutionTimeoutError) as info:
        await flow.run([1, 2, 3])
    assert info.value.step == "lookup"


async def test_a_thread_step_past_its_timeout_is_a_timeout() -> None:
    # a thread cannot be interrupted: the step returns late, but it did not meet its deadline
    def blocking(value: int) -> int:
        time.sleep(0.15)
        return value

    flow: Flow[dict[str, Any]] = Flow("thread timeout")
    flow.start.to(blocking, thread=True, timeout=0.05).end()
    with pytest.raises(ExecutionTimeoutError) as info:
        await flow.run(1)
    assert info.value.step == "blocking"


async def test_ctx_end_ends_the_execution_and_cancels_the_rest() -> None:
    probe = Probe()

    async def decide(value: int, ctx: Context[dict[str, Any]]) -> int:
        await anyio.sleep(0.01)
        ctx.end(f"decided {value}")
        await anyio.sleep(5)  # never gets here: the end cancels this step too
        return value

    flow: Flow[dict[str, Any]] = Flow("early end")
    flow.start.to(decide).to(probe.step("after", 0)).end()
    flow.start.to(probe.step("slow", 10)).end()
    with anyio.fail_after(30):  # a hang guard
        result = await flow.run(7)
    assert result.value == "decided 7"
    assert (probe.started, probe.cancelled, probe.finished) == (1, 1, 0)
    assert sorted((e.step, e.outcome) for e in result.trace) == [
        ("decide", "cancelled"),
        ("slow", "cancelled"),
    ]


async def test_first_end_wins() -> None:
    async def fast(value: int) -> str:
        return "fast"

    async def slow(value: int) -> str:
        await anyio.sleep_forever()  # the first end cancels it
        return "slow"

    flow: Flow[dict[str, Any]] = Flow("race")
    flow.start.to(slow).end()
    flow.start.to(fast).end()
    assert (await flow.run(1)).value == "fast"


async def test_outside_cancellation_leaves_no_task_running() -> None:
    probe = Probe()

    def fan(value: int, ctx: Context[dict[str, Any]]) -> list[int]:
        ctx.emit("side", value)
        return [value] * 3

    flow: Flow[dict[str, Any]] = Flow("cancelled")
    flow.start.to(fan, emits=["side"]).for_each(probe.step("item", 10), name="items").end()
    flow.when("side").to(probe.step("side_step", 10)).end()
    flow.start.to(probe.step("branch", 10)).end()

    execution = flow.execution()
    tasks_before = len(anyio.get_running_tasks())
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            with anyio.CancelScope() as scope:
                cancel.append(scope)
                await execution.run(1)
            caught.append(scope.cancelled_caught)

        cancel: list[anyio.CancelScope] = []
        caught: list[bool] = []
        tg.start_soon(run)
        await probe.until_started(5)  # every branch is in its step
        cancel[0].cancel()
    assert caught == [True]
    assert len(anyio.get_running_tasks()) == tasks_before
    assert (probe.started, probe.cancelled, probe.finished) == (5, 5, 0)
    assert execution.status == "cancelled"
    assert sorted(e.step for e in execution.trace if e.outcome == "cancelled") == [
        "branch",
        "item",
        "item",
        "item",
        "side_step",
    ]
    for _ in range(100):  # nothing wakes up later either
        await anyio.lowlevel.checkpoint()
    assert probe.finished == 0


async def test_outside_cancellation_while_a_run_is_in_a_task_group() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("in group")
    flow.start.to(probe.step("wait", 10)).end()
    tasks_before = len(anyio.get_running_tasks())
    async with anyio.create_task_group() as tg:
        tg.start_soon(flow.run, 1)
        await probe.until_started(1)
        assert len(anyio.get_running_tasks()) > tasks_before
        tg.cancel_scope.cancel()
    assert len(anyio.get_running_tasks()) == tasks_before
    assert (probe.started, probe.cancelled) == (1, 1)


async def test_timeout_leaves_no_task_running() -> None:
    probe = Probe()
    flow: Flow[dict[str, Any]] = Flow("timed out")
    flow.start.batch(*(probe.step(f"s{i}", 10) for i in range(5))).end()
    tasks_before = len(anyio.get_running_tasks())
    with pytest.raises(ExecutionTimeoutError):
        await flow.run(1, timeout=0.5)  # the five start at once, well before it
    assert len(anyio.get_running_tasks()) == tasks_before
    assert probe.cancelled == 5
