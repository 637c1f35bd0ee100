"""A step runs through one body, whatever its options: a timeout that does not expire, a
worker thread, a fan-out around it, or a chain started by the execution itself or by an
event change nothing of what comes out (result, trace, events, errors, cancellation).

A step without a timeout in a chain is run by the chain driver in its parts; in a fan-out,
or with a timeout, by ``StepNode.run`` whole: the tests below hold the two equal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.errors import ExecutionError
from toolloop.flow import Context, Flow, FlowEvent, Step

pytestmark = pytest.mark.anyio


class Broken(RuntimeError):
    pass


async def async_double(value: int, ctx: Context[dict[str, Any]]) -> int:
    await anyio.lowlevel.checkpoint()
    ctx.state["seen"] = value
    return value * 2


def sync_double(value: int, ctx: Context[dict[str, Any]]) -> int:
    ctx.state["seen"] = value
    return value * 2


async def async_broken(value: int) -> int:
    await anyio.lowlevel.checkpoint()
    raise Broken(f"no {value}")


def sync_broken(value: int) -> int:
    raise Broken(f"no {value}")


def no_argument() -> int:
    return 7


KINDS: dict[str, Callable[..., Any]] = {
    "async": async_double,
    "sync": sync_double,
    "async raises": async_broken,
    "sync raises": sync_broken,
    "no argument": no_argument,
}


def _options(kind: str) -> list[str]:
    sync = kind in ("sync", "sync raises", "no argument")
    return ["plain", "timeout", *(["thread", "thread and timeout"] if sync else [])]


def _step(kind: str, option: str) -> Step:
    timeout = 60.0 if "timeout" in option else None
    return Step(KINDS[kind], name="work", timeout=timeout, thread="thread" in option)


def _shape(events: list[FlowEvent]) -> list[tuple[Any, ...]]:
    """The events without their times and ids."""
    return [
        (e.kind, getattr(e, "step", None), getattr(e, "event", None), getattr(e, "error", None))
        for e in events
    ]


async def _run(kind: str, option: str, *, fan_out: bool) -> tuple[Any, ...]:
    """What an execution of ``start -> work -> end`` (or ``start -> for_each(work) -> end``,
    with one item) comes to: its outcome, state, trace and events, without times."""
    flow: Flow[dict[str, Any]] = Flow(f"{kind} {option}", state=dict)
    step = _step(kind, option)
    if fan_out:
        flow.start.for_each(step, name="each").to(lambda results: results[0]).end()
    else:
        flow.start.to(step).end()
    execution = flow.execution()
    events: list[FlowEvent] = []
    execution.subscribe(events.append)
    outcome: Any
    try:
        outcome = (await execution.run([3] if fan_out else 3)).value
    except ExecutionError as exc:
        outcome = (
            type(exc).__name__,
            str(exc),
            type(exc.__cause__).__name__,
            exc.__suppress_context__,
        )
    trace = [(e.step, e.event, e.outcome, e.detail) for e in execution.trace if e.step == "work"]
    shape = [e for e in _shape(events) if e[1] in (None, "work")]
    return outcome, dict(execution.state), trace, shape


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_step_comes_to_the_same_with_any_option(kind: str) -> None:
    plain = await _run(kind, "plain", fan_out=False)
    for option in _options(kind):
        assert await _run(kind, option, fan_out=False) == plain, option


@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_step_in_a_fan_out_comes_to_what_it_comes_to_in_a_chain(kind: str) -> None:
    chain = await _run(kind, "plain", fan_out=False)
    for option in _options(kind):
        outcome, state, trace, events = await _run(kind, option, fan_out=True)
        assert (state, trace) == chain[1:3], option
        assert [e for e in events if e[1] == "work"] == [e for e in chain[3] if e[1] == "work"]
        assert outcome == chain[0], option  # the same value, or the same failure


@pytest.mark.parametrize("option", ["plain", "timeout"])
async def test_a_cancelled_step_is_traced_the_same_with_any_option(option: str) -> None:
    entered = anyio.Event()
    cleaned: list[str] = []

    async def waits(value: int) -> int:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append(option)
        return value

    flow: Flow[dict[str, Any]] = Flow("cancelled", state=dict)
    flow.start.to(Step(waits, name="work", timeout=60.0 if option == "timeout" else None)).end()
    execution = flow.execution()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(execution.run, 1)
            await entered.wait()
            tg.cancel_scope.cancel()
    assert cleaned == [option]
    assert execution.status == "cancelled"
    assert [(e.step, e.outcome) for e in execution.trace] == [("work", "cancelled")]


async def test_a_chain_runs_the_same_from_the_start_and_from_an_event() -> None:
    """The execution drives the chain after ``start`` and the chain of an emitted event with
    the same loop: the same steps, outcomes and state either way."""

    def first(value: int, ctx: Context[dict[str, Any]]) -> int:
        ctx.state.setdefault("order", []).append(("first", value))
        return value + 1

    async def second(value: int, ctx: Context[dict[str, Any]]) -> int:
        await anyio.lowlevel.checkpoint()
        ctx.state.setdefault("order", []).append(("second", value))
        return value * 10

    direct: Flow[dict[str, Any]] = Flow("direct", state=dict)
    direct.start.to(first).to(second).end()
    via_event: Flow[dict[str, Any]] = Flow("via event", state=dict)
    via_event.start.emit("go")
    via_event.when("go").to(first).to(second).end()

    one = await direct.execution().run(1)
    other = await via_event.execution().run(1)
    assert one.value == other.value == 20
    assert one.state == other.state == {"order": [("first", 1), ("second", 2)]}
    steps = [(e.step, e.outcome) for e in one.trace]
    assert [(e.step, e.outcome) for e in other.trace if e.step in ("first", "second", "end")] == (
        steps
    )
