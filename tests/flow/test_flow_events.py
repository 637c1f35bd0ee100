"""Observers: the async stream of typed events, callbacks, and events of one's own."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import anyio.lowlevel
import pytest

from toolloop.errors import StepFailedError
from toolloop.flow import (
    Context,
    EventEmitted,
    Execution,
    ExecutionFailed,
    ExecutionFinished,
    ExecutionPaused,
    ExecutionStarted,
    Flow,
    FlowEvent,
    StepFailed,
    StepFinished,
    StepStarted,
)

pytestmark = pytest.mark.anyio


class ProgressNoted(FlowEvent):
    kind: Literal["progress_noted"] = "progress_noted"
    percent: int


async def read_all(execution: Execution[Any], value: Any = None) -> tuple[list[FlowEvent], Any]:
    """Run while a reader drains ``execution.events()``; the stream must end by itself."""
    events: list[FlowEvent] = []
    outcome: list[Any] = []

    async def reader() -> None:
        async with execution.events() as stream:
            async for event in stream:
                events.append(event)

    async def runner() -> None:
        try:
            outcome.append(await execution.run(value))
        except Exception as exc:
            outcome.append(exc)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.lowlevel.checkpoint()
            tg.start_soon(runner)
    return events, outcome[0]


def parse(value: str) -> int:
    return int(value)


async def square(value: int, ctx: Context[dict[str, Any]]) -> int:
    ctx.publish(ProgressNoted(execution_id=ctx.execution_id, at=ctx.elapsed(), percent=50))
    await anyio.lowlevel.checkpoint()
    return value * value


async def test_the_stream_tells_the_run_in_order_and_then_ends() -> None:
    flow: Flow[dict[str, Any]] = Flow("observed")
    flow.start.to(parse).to(square).end()
    execution = flow.execution()
    events, result = await read_all(execution, "7")

    assert result.value == 49
    assert [e.kind for e in events] == [
        "execution_started",
        "step_started",
        "step_finished",
        "step_started",
        "progress_noted",
        "step_finished",
        "execution_finished",
    ]
    started, s1, f1, s2, progress, f2, finished = events
    assert isinstance(started, ExecutionStarted)
    assert started.flow == "observed"
    assert isinstance(s1, StepStarted)
    assert (s1.step, s1.event) == ("parse", "start")
    assert isinstance(f1, StepFinished)
    assert f1.step == "parse"
    assert f1.duration >= 0
    assert isinstance(s2, StepStarted)
    assert (s2.step, s2.event) == ("square", "parse")
    assert isinstance(progress, ProgressNoted)
    assert progress.percent == 50
    assert isinstance(f2, StepFinished)
    assert isinstance(finished, ExecutionFinished)
    assert {e.execution_id for e in events} == {execution.id}
    ats = [e.at for e in events]
    assert ats == sorted(ats)
    assert finished.duration >= f2.at


async def test_a_failure_is_told_and_the_stream_ends() -> None:
    def explode(value: int) -> None:
        raise ValueError("no")

    flow: Flow[dict[str, Any]] = Flow("failing")
    flow.start.to(parse).to(explode).end()
    events, outcome = await read_all(flow.execution(), "1")
    assert isinstance(outcome, StepFailedError)
    assert [e.kind for e in events] == [
        "execution_started",
        "step_started",
        "step_finished",
        "step_started",
        "step_failed",
        "execution_failed",
    ]
    failed = events[4]
    assert isinstance(failed, StepFailed)
    assert (failed.step, failed.error) == ("explode", "ValueError: no")
    assert isinstance(events[5], ExecutionFailed)
    assert "step 'explode' raised ValueError: no" in events[5].error


async def test_emitted_events_and_pauses_are_told() -> None:
    def ask(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.emit("asked", value)
        ctx.pause("answered", {"q": value})

    flow: Flow[dict[str, Any]] = Flow("asking")
    flow.start.to(ask, emits=["asked"])
    flow.when("asked").to(lambda v: None, name="log")
    flow.when("answered", external=True).to(lambda v: v, name="use").end()
    execution = flow.execution()
    events, result = await read_all(execution, "why?")
    assert result.paused
    kinds = [e.kind for e in events]
    assert kinds[0] == "execution_started"
    assert kinds[-1] == "execution_paused"
    emitted = [e for e in events if isinstance(e, EventEmitted)]
    assert [(e.event, e.by) for e in emitted] == [("asked", "ask")]
    paused = events[-1]
    assert isinstance(paused, ExecutionPaused)
    assert paused.waiting_for == ["answered"]
    assert paused.requests == [{"q": "why?"}]

    # the resumed session has a stream of its own; an outside event has by=None
    seen: list[FlowEvent] = []
    execution.subscribe(seen.append)
    await execution.resume("answered", "because")
    assert [e.kind for e in seen] == [
        "execution_started",
        "step_started",
        "step_finished",
        "execution_finished",
    ]


async def test_subscribe_calls_back_inline_until_unsubscribed() -> None:
    flow: Flow[dict[str, Any]] = Flow("callbacks")
    flow.start.to(parse).to(square).end()
    execution = flow.execution()
    kinds: list[str] = []
    unsubscribe = execution.subscribe(lambda e: kinds.append(e.kind))

    def stop_after_first_step(event: FlowEvent) -> None:
        if isinstance(event, StepFinished):
            unsubscribe()

    execution.subscribe(stop_after_first_step)
    await execution.run("3")
    assert kinds == ["execution_started", "step_started", "step_finished"]
    unsubscribe()  # twice is harmless


async def test_external_events_and_emit_chains_are_told_with_their_source() -> None:
    async def wait(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.deps.set()  # an anyio.Event: the test may now poke
        await anyio.sleep(5)

    flow: Flow[dict[str, Any]] = Flow("told")
    flow.start.to(parse).emit("parsed")
    flow.when("parsed").to(wait)
    flow.when("poke", external=True).to(lambda v: v, name="poked").end()
    ready = anyio.Event()
    execution = flow.execution(deps=ready)
    seen: list[EventEmitted] = []
    execution.subscribe(lambda e: seen.append(e) if isinstance(e, EventEmitted) else None)
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(execution.run, "1")
            await ready.wait()
            execution.emit("poke", "x")
    assert [(e.event, e.by) for e in seen] == [("parsed", "parse"), ("poke", None)]


async def test_streams_end_on_cancellation_and_are_empty_after_the_end() -> None:
    async def forever(value: Any) -> None:
        await anyio.sleep(10)

    flow: Flow[dict[str, Any]] = Flow("cancel me")
    flow.start.to(forever).end()
    execution = flow.execution()
    kinds: list[str] = []
    stream = execution.events()

    async def reader() -> None:
        async with stream:
            async for event in stream:
                kinds.append(event.kind)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            with anyio.move_on_after(0.02):
                await execution.run()
    assert kinds == ["execution_started", "step_started"]
    assert execution.status == "cancelled"

    async with execution.events() as after:
        assert [e async for e in after] == []


async def test_a_reader_that_leaves_early_does_not_stall_the_run() -> None:
    flow: Flow[dict[str, Any]] = Flow("early leaver")
    flow.start.to(parse).to(square).end()
    execution = flow.execution()
    stream = execution.events(buffer=1)  # a small buffer that nobody reads: events are dropped
    first = execution.events()
    await first.aclose()
    result = await execution.run("5")
    assert result.value == 25
    got = [e async for e in stream]  # read to its end, a stream closes itself
    assert [e.kind for e in got] == ["execution_started"]
    await first.aclose()  # closing twice is harmless


async def test_events_are_frozen_models_that_serialize() -> None:
    event = StepStarted(execution_id="x", at=0.5, step="plan", event="start")
    assert event.model_dump(mode="json") == {
        "kind": "step_started",
        "execution_id": "x",
        "at": 0.5,
        "step": "plan",
        "event": "start",
    }
    with pytest.raises(ValueError, match="frozen"):
        event.step = "other"  # type: ignore[misc]


@pytest.mark.parametrize("breaks_on", [StepStarted, StepFinished, EventEmitted])
async def test_an_observer_that_raises_is_logged_by_name_and_the_run_goes_on(
    breaks_on: type[FlowEvent], caplog: pytest.LogCaptureFixture
) -> None:
    def emit_and_parse(value: str, ctx: Context[dict[str, Any]]) -> int:
        ctx.emit("noted", value)
        return int(value)

    flow: Flow[dict[str, Any]] = Flow("fragile observer")
    flow.start.to(emit_and_parse, emits=["noted"]).to(square).end()
    flow.when("noted").to(lambda v: None, name="ignore")
    execution = flow.execution()
    seen: list[str] = []

    def fragile_observer(event: FlowEvent) -> None:
        seen.append(event.kind)
        if isinstance(event, breaks_on):
            raise RuntimeError("observer broke")

    execution.subscribe(fragile_observer)
    with caplog.at_level("WARNING", logger="toolloop"):
        result = await execution.run("2")
    assert result.value == 4
    assert execution.status == "completed"
    assert "execution_finished" in seen  # it kept receiving events
    failures = [r for r in caplog.records if r.name == "toolloop"]
    assert failures, "the observer's error was not logged"
    assert "fragile_observer" in failures[0].getMessage()
    assert failures[0].exc_info is not None


def test_an_async_callback_is_refused_at_once() -> None:
    async def on_event(event: FlowEvent) -> None:
        pass

    class Sink:
        async def __call__(self, event: FlowEvent) -> None:
            pass

    flow: Flow[dict[str, Any]] = Flow("async observer")
    flow.start.to(square).end()
    for callback in (on_event, Sink()):
        with pytest.raises(TypeError, match="is async, but callbacks are called inline"):
            flow.execution().subscribe(callback)  # type: ignore[arg-type]


async def test_a_pause_decided_by_a_task_ends_the_run_paused_for_its_observers() -> None:
    """``Execution.pause`` (a run as a tool that paused for a human pauses the run that
    called it): the session raises the given error, its status is ``paused`` and its
    observers are told ``ExecutionPaused`` with what it waits for and asks, never
    ``ExecutionFailed``; what still ran was cancelled."""
    from toolloop.errors import ExecutionError

    flow: Flow[dict[str, Any]] = Flow("paused from a task")
    held, running = anyio.Event(), anyio.Event()
    cut: list[str] = []

    async def other(value: Any, ctx: Context[dict[str, Any]]) -> None:
        try:
            running.set()
            await held.wait()
        finally:
            cut.append("other")

    async def asks(value: Any, ctx: Context[dict[str, Any]]) -> None:
        await running.wait()
        execution.pause(
            ExecutionError("a child asks a human"),
            waiting_for="human_decision",
            request={"kind": "approve_tool_calls"},
        )
        await anyio.lowlevel.checkpoint()  # cancelled here, with the session

    flow.start.to(asks).end()
    flow.start.to(other).end()
    execution = flow.execution()
    events, outcome = await read_all(execution)
    assert isinstance(outcome, ExecutionError) and str(outcome) == "a child asks a human"
    assert execution.status == "paused" and cut == ["other"]
    assert not any(isinstance(e, ExecutionFailed) for e in events)
    ended = events[-1]
    assert isinstance(ended, ExecutionPaused)
    assert ended.waiting_for == ["human_decision"]
    assert ended.requests == [{"kind": "approve_tool_calls"}]
    execution.pause(ExecutionError("again"), waiting_for="x", request=None)  # ended: no-op
    assert execution.status == "paused"
