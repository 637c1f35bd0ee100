"""Fan-out and fan-in: batch and for_each (results in order, a limit held exactly)."""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.errors import StepFailedError
from toolloop.flow import Context, Flow, Step

pytestmark = pytest.mark.anyio


class Gauge:
    """Counts the calls running at once and remembers the most ever seen."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.calls = 0

    async def hold(self, seconds: float) -> None:
        self.running += 1
        self.calls += 1
        self.most = max(self.most, self.running)
        try:
            await anyio.sleep(seconds)
        finally:
            self.running -= 1


async def test_for_each_returns_results_in_item_order() -> None:
    async def square(value: int) -> int:
        await anyio.sleep(random.uniform(0, 0.005))  # finish in a scrambled order
        return value * value

    flow: Flow[dict[str, Any]] = Flow("squares")
    flow.start.for_each(square).to(sum).end()
    flow_list: Flow[dict[str, Any]] = Flow("squares list")
    flow_list.start.for_each(square).end()

    assert (await flow_list.run(range(20))).value == [i * i for i in range(20)]
    assert (await flow.run([1, 2, 3])).value == 14
    result = await flow_list.run([])
    assert result.value == []
    assert [e.step for e in result.trace] == ["end"]


@pytest.mark.parametrize("limit", [1, 3, 7])
async def test_for_each_holds_its_limit_exactly(limit: int) -> None:
    gauge = Gauge()

    async def work(value: int) -> int:
        await gauge.hold(0.002)
        return -value

    flow: Flow[dict[str, Any]] = Flow("limited")
    flow.start.for_each(work, limit=limit).end()
    result = await flow.run(range(25))
    assert result.value == [-i for i in range(25)]
    assert gauge.calls == 25
    assert gauge.most == limit
    assert gauge.running == 0


async def test_for_each_without_a_limit_runs_everything_at_once() -> None:
    gauge = Gauge()

    async def work(value: int) -> int:
        await gauge.hold(0.01)
        return value

    flow: Flow[dict[str, Any]] = Flow("unlimited")
    flow.start.for_each(work).end()
    with anyio.fail_after(1):
        await flow.run(range(100))
    assert gauge.most == 100


async def test_batch_gives_every_step_the_same_value_results_in_step_order() -> None:
    async def slow_upper(value: str) -> str:
        await anyio.sleep(0.02)
        return value.upper()

    def reverse(value: str) -> str:
        return value[::-1]

    async def length(value: str, ctx: Context[dict[str, Any]]) -> int:
        ctx.state["measured"] = True
        return len(value)

    flow: Flow[dict[str, Any]] = Flow("batch")
    flow.start.batch(slow_upper, reverse, length).end()
    result = await flow.run("abc")
    assert result.value == ["ABC", "cba", 3]
    assert result.state == {"measured": True}
    # the trace is in finishing order; each child was triggered by the point before the batch
    steps = [e.step for e in result.trace]
    assert sorted(steps[:2]) == ["length", "reverse"]  # trio runs new tasks in any order
    assert steps[2:] == ["slow_upper", "end"]
    assert {e.event for e in result.trace[:3]} == {"start"}
    assert result.trace[-1].event == "batch"


async def test_batch_holds_its_limit_exactly() -> None:
    gauge = Gauge()

    def worker(i: int) -> Step:
        async def work(value: int) -> int:
            await gauge.hold(0.002)
            return value + i

        return Step(work, name=f"worker {i}")

    flow: Flow[dict[str, Any]] = Flow("limited batch")
    flow.start.batch(*(worker(i) for i in range(10)), limit=2, name="workers").end()
    result = await flow.run(100)
    assert result.value == [100 + i for i in range(10)]
    assert gauge.most == 2


async def test_fan_out_results_feed_the_next_step() -> None:
    def words(value: str) -> list[str]:
        return value.split()

    async def shout(word: str) -> str:
        await anyio.lowlevel.checkpoint()
        return word.upper() + "!"

    flow: Flow[dict[str, Any]] = Flow("pipeline")
    flow.start.to(words).for_each(shout, limit=2).to(" ".join).end()
    assert (await flow.run("hi there you")).value == "HI! THERE! YOU!"


async def test_a_failing_item_fails_the_execution_and_cancels_its_siblings() -> None:
    started: list[int] = []
    cancelled: list[int] = []
    finished: list[int] = []

    async def fragile(value: int) -> int:
        started.append(value)
        try:
            if len(started) == 3:  # the third to start (trio starts them in any order)
                await anyio.sleep(0.01)
                raise ValueError(f"item {value} is bad")
            await anyio.sleep_forever()
            finished.append(value)
            return value
        except anyio.get_cancelled_exc_class():
            cancelled.append(value)
            raise

    flow: Flow[dict[str, Any]] = Flow("fragile")
    flow.start.for_each(fragile, limit=4).end()
    with anyio.fail_after(30):  # a hang guard
        with pytest.raises(StepFailedError) as info:
            await flow.run(range(8))
    err = info.value
    bad = started[2]
    assert err.step == "fragile"
    assert isinstance(err.__cause__, ValueError)
    assert f"item {bad} is bad" in str(err)
    # the four that held a slot started; the failure cancelled the other three, and no item
    # waiting for a slot started after it
    assert len(started) == 4
    assert sorted(cancelled) == sorted(set(started) - {bad})
    assert finished == []
    # the error carries the whole story: the failure and the siblings it cancelled
    outcomes = sorted(e.outcome for e in err.trace)
    assert outcomes == ["cancelled", "cancelled", "cancelled", "failed"]


async def test_for_each_of_something_not_iterable_names_the_node() -> None:
    flow: Flow[dict[str, Any]] = Flow("not iterable")
    flow.start.for_each(str, name="each item").end()
    with pytest.raises(StepFailedError) as info:
        await flow.run(42)
    assert info.value.step == "each item"
    assert "expected an iterable value, got int" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)


async def test_two_chains_from_one_point_run_concurrently() -> None:
    gauge = Gauge()

    async def left(value: int) -> int:
        await gauge.hold(0.02)
        return value

    async def right(value: int) -> int:
        await gauge.hold(0.02)
        return value

    flow: Flow[dict[str, Any]] = Flow("fork")
    head = flow.start.to(Step(int, name="head"))
    head.to(left)
    head.to(right)
    flow.collect(left, right).end()
    result = await flow.run("5")
    assert result.value == {"left": 5, "right": 5}
    assert gauge.most == 2
