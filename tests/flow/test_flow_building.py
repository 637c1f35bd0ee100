"""Building and running flows: chaining, values, step kinds and arities, state, loops."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.errors import ResumeError
from toolloop.flow import Context, Flow, Step

pytestmark = pytest.mark.anyio


def add_one(value: int) -> int:
    return value + 1


async def double(value: int) -> int:
    await anyio.lowlevel.checkpoint()
    return value * 2


def frame_depth() -> int:
    """How many frames are on the stack below the caller."""
    depth, frame = 0, sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


async def test_chain_passes_each_result_to_the_next_step() -> None:
    seen: list[tuple[str, int]] = []

    def first(value: int) -> int:
        seen.append(("first", value))
        return value + 1

    async def second(value: int) -> int:
        seen.append(("second", value))
        return value * 10

    flow: Flow[dict[str, Any]] = Flow("chain")
    flow.start.to(first).to(second).end()
    result = await flow.run(4)

    assert result.status == "completed"
    assert not result.paused
    assert result.value == 50
    assert seen == [("first", 4), ("second", 5)]
    assert [e.step for e in result.trace] == ["first", "second", "end"]
    assert [e.event for e in result.trace] == ["start", "first", "second"]
    assert [e.outcome for e in result.trace] == ["ok", "ok", "ended"]
    assert all(e.ended >= e.started >= 0 for e in result.trace)
    assert result.snapshot is None
    assert result.waiting == []


async def test_start_straight_to_end_returns_the_input() -> None:
    flow: Flow[dict[str, Any]] = Flow("identity")
    flow.start.end()
    assert (await flow.run("same")).value == "same"
    assert (await flow.run()).value is None


async def test_sync_and_async_steps_mix_in_one_chain() -> None:
    flow: Flow[dict[str, Any]] = Flow("mixed")
    (
        flow.start.to(add_one)
        .to(double)
        .to(Step(add_one, name="add_one_again"))
        .to(Step(double, name="double_again"))
        .end()
    )
    assert (await flow.run(1)).value == ((1 + 1) * 2 + 1) * 2


async def test_the_same_function_chained_twice_is_one_step_so_it_forms_a_loop() -> None:
    # documented: a step already in the flow is linked, not copied; the second .to(add_one)
    # makes add_one hand its result both to double and to end
    async def slow_double(value: int) -> int:
        await anyio.sleep(0.05)
        return value * 2

    flow: Flow[dict[str, Any]] = Flow("relinked")
    flow.start.to(add_one).to(slow_double).to(add_one).end()
    assert flow.steps == ["add_one", "slow_double"]
    result = await flow.run(1)
    assert result.value == 2  # add_one -> end wins; slow_double, on the other path, is cancelled
    assert [(e.step, e.outcome) for e in result.trace] == [
        ("add_one", "ok"),
        ("end", "ended"),
        ("slow_double", "cancelled"),
    ]


async def test_step_arities_value_ctx_value_and_nothing() -> None:
    calls: list[str] = []

    def with_ctx(value: int, ctx: Context[dict[str, Any]]) -> int:
        calls.append(f"with_ctx {value} {ctx.step}")
        ctx.state["seen"] = value
        return value + 1

    async def value_only(value: int) -> int:
        calls.append(f"value_only {value}")
        return value + 1

    def nothing() -> str:
        calls.append("nothing")
        return "constant"

    async def defaults(value: str, ctx: Context[Any] | None = None, extra: int = 3) -> str:
        # a parameter with a default is not filled: the step gets (value) only
        calls.append(f"defaults {value} {ctx} {extra}")
        return value * 2

    flow: Flow[dict[str, Any]] = Flow("arity")
    flow.start.to(with_ctx).to(value_only).to(nothing).to(defaults).end()
    result = await flow.run(1)

    assert result.value == "constantconstant"
    assert calls == ["with_ctx 1 with_ctx", "value_only 2", "nothing", "defaults constant None 3"]
    assert result.state == {"seen": 1}


async def test_callable_objects_partials_and_bound_methods_are_steps() -> None:
    class Scale:
        def __init__(self, by: int) -> None:
            self.by = by

        async def __call__(self, value: int) -> int:
            await anyio.lowlevel.checkpoint()
            return value * self.by

    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def bump(self, value: int, ctx: Context[Any]) -> int:
            self.n += 1
            return value + self.n

    def add(amount: int, value: int) -> int:
        return value + amount

    async def async_add(amount: int, value: int) -> int:
        await anyio.lowlevel.checkpoint()
        return value + amount

    counter = Counter()
    flow: Flow[dict[str, Any]] = Flow("callables")
    (
        flow.start.to(Step(Scale(3), name="scale"))
        .to(counter.bump)
        .to(Step(functools.partial(add, 100), name="add100"))
        .to(Step(functools.partial(async_add, 1000), name="add1000"))
        .end()
    )
    assert (await flow.run(2)).value == 2 * 3 + 1 + 100 + 1000
    assert counter.n == 1


async def test_thread_step_runs_a_blocking_function_off_the_event_loop() -> None:
    import threading

    main = threading.get_ident()

    def blocking(value: int, ctx: Context[dict[str, Any]]) -> int:
        ctx.state["thread"] = threading.get_ident()
        return value + 1

    flow: Flow[dict[str, Any]] = Flow("thread")
    flow.start.to(Step(blocking, thread=True)).end()
    result = await flow.run(1)
    assert result.value == 2
    assert result.state["thread"] != main


async def test_deps_reach_every_step_and_state_can_be_given() -> None:
    def read(value: int, ctx: Context[dict[str, Any]]) -> int:
        ctx.state["id"] = ctx.execution_id
        return int(value * ctx.deps["factor"])

    flow: Flow[dict[str, Any]] = Flow("deps")
    flow.start.to(read).end()
    given_state: dict[str, Any] = {"kept": True}
    result = await flow.run(2, state=given_state, deps={"factor": 21})
    assert result.value == 42
    assert result.state is given_state
    assert given_state == {"kept": True, "id": result.execution_id}


@dataclass
class Tally:
    items: list[int] = field(default_factory=list)


async def test_each_execution_gets_its_own_state_even_when_concurrent() -> None:
    async def record(value: int, ctx: Context[Tally]) -> int:
        for i in range(5):
            ctx.state.items.append(value * 100 + i)
            await anyio.sleep(0.001)  # let the other execution interleave
        return value

    flow: Flow[Tally] = Flow("isolated", state=Tally)
    flow.start.to(record).end()
    results: dict[int, Tally] = {}

    async def run(value: int) -> None:
        results[value] = (await flow.run(value)).state

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 1)
        tg.start_soon(run, 2)

    assert results[1].items == [100, 101, 102, 103, 104]
    assert results[2].items == [200, 201, 202, 203, 204]
    assert results[1] is not results[2]
    # the flow keeps no state of its own: a third run starts fresh
    assert (await flow.run(3)).state.items == [300, 301, 302, 303, 304]


async def test_an_execution_runs_once_and_the_flow_is_reusable() -> None:
    flow: Flow[dict[str, Any]] = Flow("once")
    flow.start.to(add_one).end()
    execution = flow.execution()
    statuses = [execution.status]
    assert (await execution.run(1)).value == 2
    statuses.append(execution.status)
    assert statuses == ["new", "completed"]
    with pytest.raises(ResumeError, match="runs once"):
        await execution.run(1)
    assert [(await flow.run(i)).value for i in range(3)] == [1, 2, 3]
    ids = {flow.execution().id for _ in range(10)}
    assert len(ids) == 10


async def test_a_step_already_in_the_flow_is_linked_not_copied() -> None:
    def grow(value: int) -> int:
        return value + 1

    flow: Flow[dict[str, Any]] = Flow("link")
    flow.start.to(grow).if_(lambda v: v < 3, "grow").else_(Step(str, name="show"))
    flow.step("show").end()
    assert flow.steps == ["grow", "show"]
    result = await flow.run(0)
    assert result.value == "3"
    assert [e.step for e in result.trace if e.outcome == "ok"] == ["grow"] * 3 + ["show"]


async def test_a_loop_of_1000_rounds_does_not_nest() -> None:
    depths: list[int] = []

    def plan(value: int, ctx: Context[dict[str, Any]]) -> int:
        depths.append(frame_depth())
        ctx.state["rounds"] = ctx.state.get("rounds", 0) + 1
        return value

    async def execute(value: int) -> int:
        await anyio.lowlevel.checkpoint()
        depths.append(frame_depth())
        return value + 1

    def finish(value: int) -> int:
        return value

    flow: Flow[dict[str, Any]] = Flow("plan/execute")
    flow.start.to(plan).if_(lambda v: v < 1000, execute).else_(finish)
    flow.step(execute).to(plan)
    flow.step(finish).end()
    result = await flow.run(0)

    assert result.value == 1000
    assert result.state["rounds"] == 1001
    assert len(depths) == 2001
    assert len(set(depths[0::2])) == 1  # plan, every round at the same depth
    assert len(set(depths[1::2])) == 1  # execute too


async def test_an_emit_loop_of_1000_rounds_does_not_nest() -> None:
    depths: list[int] = []

    def tick(value: int, ctx: Context[dict[str, Any]]) -> int | None:
        depths.append(frame_depth())
        if value < 1000:
            ctx.emit("ticked", value + 1)
            return None
        return value

    flow: Flow[dict[str, Any]] = Flow("emit loop")
    flow.start.to(Step(tick, emits=["ticked"])).if_(lambda v: v is not None, Step(int, name="done"))
    flow.when("ticked").to("tick")
    flow.step("done").end()
    result = await flow.run(0)

    assert result.value == 1000
    assert len(depths) == 1001
    assert len(set(depths[1:])) == 1, "each emitted round runs at the same depth"


async def test_5000_rounds_run_without_recursion_errors() -> None:
    flow: Flow[dict[str, Any]] = Flow("long loop")
    flow.start.to(add_one).if_(lambda v: v < 5000, "add_one").else_(Step(str, name="show"))
    flow.step("show").end()
    with anyio.fail_after(20):
        result = await flow.run(0)
    assert result.value == "5000"
    assert len(result.trace) == 5000 * 2 + 2  # each round: add_one and its router; show, end


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "mul", "neg"]), st.integers(-5, 5), st.booleans()),
    min_size=1,
    max_size=12,
)


def make_op(i: int, kind: str, k: int, is_async: bool) -> Step:
    def apply(value: int) -> int:
        return value + k if kind == "add" else value * k if kind == "mul" else -value

    async def apply_async(value: int) -> int:
        await anyio.lowlevel.checkpoint()
        return apply(value)

    return Step(apply_async if is_async else apply, name=f"op{i}")


@settings(max_examples=40, deadline=None)
@given(ops=OPS, start=st.integers(-100, 100))
async def test_random_chains_compute_what_plain_python_does(
    ops: list[tuple[str, int, bool]], start: int
) -> None:
    flow: Flow[dict[str, Any]] = Flow("random chain")
    point = flow.start
    for i, (kind, k, is_async) in enumerate(ops):
        point = point.to(make_op(i, kind, k, is_async))
    point.end()

    expected = start
    for kind, k, _ in ops:
        expected = expected + k if kind == "add" else expected * k if kind == "mul" else -expected
    result = await flow.run(start)
    assert result.value == expected
    assert [e.step for e in result.trace] == [f"op{i}" for i in range(len(ops))] + ["end"]
