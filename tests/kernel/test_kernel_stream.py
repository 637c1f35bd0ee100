"""The kernel's stream of a run (:func:`toolloop.kernel.stream_run`), on any run call: the
products' own streams are tested in ``test_every_product.py``."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop.flow import FlowEvent, StepStarted
from toolloop.kernel import ENGINE_EVENTS, OnEvent, RunFinished, stream_run

pytestmark = pytest.mark.anyio


def step(at: float) -> StepStarted:
    return StepStarted(execution_id="r", at=at, step="s", event="start")


def finished(at: float) -> RunFinished:
    return RunFinished(execution_id="r", at=at, stop_reason="answered", records=0)


async def test_the_call_gets_a_forwarder_and_the_caller_s_on_event_gets_every_event() -> None:
    seen: list[FlowEvent] = []
    given: dict[str, Any] = {}

    async def call(*, on_event: OnEvent, deps: object) -> str:
        given["deps"] = deps
        on_event(step(0.0))
        await anyio.lowlevel.checkpoint()
        on_event(finished(0.1))
        return "done"

    async with stream_run(call, {"on_event": seen.append, "deps": "db"}) as run:
        events = [event async for event in run]
    assert given == {"deps": "db"}
    assert events == seen == [step(0.0), finished(0.1)]
    assert run.result == "done"


async def test_an_on_event_that_raises_does_not_keep_an_event_from_the_stream() -> None:
    def broken(event: FlowEvent) -> None:
        raise RuntimeError("observer")

    async def call(*, on_event: OnEvent) -> int:
        for at in (0.0, 0.1):
            try:
                on_event(finished(at))
            except RuntimeError:
                pass  # (a run logs an observer that raises, and goes on)
        return 1

    async with stream_run(call, {"on_event": broken}) as run:
        events = [event async for event in run]
    assert events == [finished(0.0), finished(0.1)] and run.result == 1


async def test_engine_events_false_leaves_out_only_the_engine_s_events() -> None:
    async def call(*, on_event: OnEvent) -> None:
        on_event(step(0.0))
        on_event(finished(0.1))

    async with stream_run(call, {}, engine_events=False) as run:
        events = [event async for event in run]
    assert events == [finished(0.1)]
    assert StepStarted in ENGINE_EVENTS and RunFinished not in ENGINE_EVENTS


async def test_the_result_is_there_once_the_events_ended_and_not_before() -> None:
    go = anyio.Event()

    async def call(*, on_event: OnEvent) -> str:
        on_event(step(0.0))
        await go.wait()
        return "late"

    with anyio.fail_after(10):  # a hang guard
        async with stream_run(call, {}) as run:
            async for event in run:
                assert event == step(0.0)
                with pytest.raises(RuntimeError, match="has not finished; read its events"):
                    run.result  # noqa: B018
                go.set()
    assert run.result == "late"


async def test_leaving_before_the_events_end_cancels_the_call_and_waits_for_it() -> None:
    ended: list[str] = []

    async def call(*, on_event: OnEvent) -> str:
        on_event(step(0.0))
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("cancelled")
        return "never"

    with anyio.fail_after(10):  # a hang guard
        async with stream_run(call, {}) as run:
            async for _ in run:
                break
    assert ended == ["cancelled"]
    with pytest.raises(RuntimeError, match="cancelled when its block was left"):
        run.result  # noqa: B018
