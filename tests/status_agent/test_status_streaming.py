"""The status agent's model steps read as they stream: a decision's tool calls start the
moment each is complete (streaming dispatch), and a decision or a reflection is closed the
moment its choice is settled and the fields it keeps are whole (the short-circuit).

Order is proven with gates, never with time: the scripted stream waits at a gate until the
test opens it. Every ``fail_after`` is a hang guard.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from toolloop.checkpoints import Approve
from toolloop.errors import ModelOutputError, StepFailedError
from toolloop.flow import FlowEvent
from toolloop.runner import ToolCallFinished
from toolloop.status_agent import (
    LLMStatusSteps,
    StatusAgent,
    StatusAgentResult,
    StatusAgentState,
    StatusView,
)
from toolloop.testing import ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio

HANG = 10.0
"""Seconds of a hang guard: never reached when the code is right."""


def call(city: str, tool: str = "lookup") -> dict[str, Any]:
    return {"tool_name": tool, "arguments": {"city": city}, "purpose": city}


def decision(*calls: dict[str, Any], reason: str = "need them") -> str:
    return json.dumps(
        {"action": "call_tools", "tool_calls": list(calls), "reason": reason, "answer": None}
    )


def first_call_end(text: str) -> int:
    """Where the decision ``text``'s first call's object closes (the index after it)."""
    start = text.index('"tool_calls": [') + len('"tool_calls": [')
    depth = 0
    for at in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 0:
            return at + 1
    raise ValueError("no tool call in the decision")


def held_after_first_call(text: str, gate: anyio.Event) -> ScriptedChatReply:
    """The decision ``text`` in two pieces, cut right after its first call's object closes;
    the stream waits between them until ``gate`` is set."""
    cut = first_call_end(text)
    return ScriptedChatReply(chunks=(text[:cut], text[cut:]), gates={1: gate})


FINISH = json.dumps({"verdict": "finish", "note": "", "answer": "sunny both"})


def script(decide: ScriptedChatReply) -> list[Any]:
    return ["analysis", json.dumps({"steps": ["look up"]}), decide, FINISH]


class Lookup:
    """The tool ``lookup``: tells when each call starts, and whether the model's stream had
    ended by then; may be held until the test lets it end."""

    def __init__(self, model: ScriptedChatModel) -> None:
        self.model = model
        self.started: list[str] = []
        self.while_streaming: list[bool] = []
        self.exited: list[str] = []
        self.first = anyio.Event()
        self.hold: anyio.Event | None = None

    async def lookup(self, city: str) -> str:
        """Look a city up.

        Args:
            city: the city.
        """
        self.started.append(city)
        self.while_streaming.append(not self.model.streams[-1].completed)
        self.first.set()
        try:
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.exited.append(city)
        return f"{city}: sunny"


def send(to: str) -> str:
    """Send a mail.

    Args:
        to: the address.
    """
    return f"sent to {to}"


async def run_in(task_group: anyio.abc.TaskGroup, coro: Any, out: dict[str, Any]) -> None:
    async def run() -> None:
        out["result"] = await coro

    task_group.start_soon(run)


async def test_a_decision_s_call_starts_while_the_model_still_writes_it() -> None:
    release = anyio.Event()
    text = decision(call("Paris"), call("Rome"))
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    probe = Lookup(model)
    agent = StatusAgent(tools=[probe.lookup], model=model, streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()
        stream = model.streams[2]  # the decision's
        assert stream.held.is_set()
        assert not stream.completed
        release.set()
    result: StatusAgentResult = out["result"]
    assert probe.started == ["Paris", "Rome"]
    assert probe.while_streaming[0] is True
    assert result.text == "sunny both"
    assert [(r.call_id, r.record.result, r.source) for r in result.state.records] == [
        ("call-1", "Paris: sunny", "ran"),
        ("call-2", "Rome: sunny", "ran"),
    ]
    assert [t.node for t in result.state.history][-3:] == [
        "decision",
        "tool_execution",
        "reflection",
    ]


async def test_without_streaming_dispatch_no_call_starts_before_the_decision_ends() -> None:
    release = anyio.Event()
    text = decision(call("Paris"), call("Rome"))
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    probe = Lookup(model)
    agent = StatusAgent(tools=[probe.lookup], model=model)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await wait_all_tasks_blocked()
        assert model.streams[2].held.is_set()
        assert probe.started == []
        release.set()
    assert probe.started == ["Paris", "Rome"]
    assert probe.while_streaming == [False, False]
    assert out["result"].text == "sunny both"


async def test_a_call_that_needs_approval_waits_and_the_others_never_run_twice() -> None:
    release = anyio.Event()
    text = decision(call("Paris"), {"tool_name": "send", "arguments": {"to": "ada"}})
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    probe = Lookup(model)
    agent = StatusAgent(
        tools=[probe.lookup, send], model=model, needs_approval=["send"], streaming_dispatch=True
    )
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather and mail"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()
        release.set()
    paused: StatusAgentResult = out["result"]
    assert paused.paused
    assert paused.request is not None
    assert [c.tool_name for c in paused.request.tool_calls] == ["send"]
    assert [r.call_id for r in paused.state.records] == ["call-1"]  # ran, and kept
    done = await agent.resume(paused.run_id, Approve())
    assert probe.started == ["Paris"]  # not again
    assert done.text == "sunny both"
    assert [(r.call_id, r.record.result) for r in done.state.records] == [
        ("call-1", "Paris: sunny"),
        ("call-2", "sent to ada"),
    ]


async def test_a_call_off_the_schema_fails_mid_stream_and_never_runs() -> None:
    release = anyio.Event()
    bad = {"tool_name": "lookup", "arguments": {"city": 5}}
    text = decision(bad, call("Rome"))
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    probe = Lookup(model)
    finished: list[ToolCallFinished] = []

    def on_event(event: FlowEvent) -> None:
        if isinstance(event, ToolCallFinished):
            finished.append(event)

    agent = StatusAgent(
        tools=[probe.lookup], model=model, streaming_dispatch=True, on_event=on_event
    )
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await wait_all_tasks_blocked()
        assert model.streams[2].held.is_set()
        # while the decision is held: the call off the schema has its failed record
        assert [(e.call_id, e.record.success) for e in finished] == [("call-1", False)]
        release.set()
    result: StatusAgentResult = out["result"]
    assert probe.started == ["Rome"]
    first = result.state.records[0]
    assert first.call_id == "call-1"
    assert first.record.success is False
    assert "city" in (first.record.error or "")


async def test_a_decision_that_breaks_mid_stream_cuts_the_started_call_and_fails() -> None:
    release = anyio.Event()
    text = decision(call("Paris"), call("Rome"))
    cut = first_call_end(text)
    broken = ScriptedChatReply(chunks=(text[:cut], ', {"tool_name": oops'), gates={1: release})
    model = ScriptedChatModel(script(broken))
    probe = Lookup(model)
    probe.hold = anyio.Event()  # never set: the call is still running when the JSON breaks
    agent = StatusAgent(tools=[probe.lookup], model=model, streaming_dispatch=True)

    async def run_and_fail() -> None:
        with pytest.raises(StepFailedError) as info:
            await agent.run("weather")
        assert isinstance(info.value.__cause__, ModelOutputError)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(run_and_fail)
            await probe.first.wait()
            release.set()
    assert probe.started == ["Paris"]
    assert probe.exited == ["Paris"]  # cut off with the step: nothing is left running


async def test_cancelled_mid_stream_the_started_call_is_cut_and_no_task_is_left() -> None:
    release = anyio.Event()  # never set
    text = decision(call("Paris"), call("Rome"))
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    probe = Lookup(model)
    probe.hold = anyio.Event()  # never set
    agent = StatusAgent(tools=[probe.lookup], model=model, streaming_dispatch=True)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(agent.run, "weather")
            await probe.first.wait()
            task_group.cancel_scope.cancel()
    assert probe.exited == ["Paris"]
    assert model.streams[2].closed_early


async def test_a_call_is_journaled_before_it_starts() -> None:
    release = anyio.Event()
    text = decision(call("Paris"), call("Rome"))
    model = ScriptedChatModel(script(held_after_first_call(text, release)))
    states: list[tuple[str, str]] = []
    first = anyio.Event()

    async def lookup(city: str) -> str:
        """Look a city up.

        Args:
            city: the city.
        """
        checkpoint = await agent.store.get("run-1")
        assert checkpoint is not None
        entry = next(
            (e for e in checkpoint.journal if e.arguments == {"city": city}),
            None,
        )
        states.append((city, entry.state if entry is not None else "missing"))
        first.set()
        return f"{city}: sunny"

    agent = StatusAgent(tools=[lookup], model=model, streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather", run_id="run-1"), out)
        with anyio.fail_after(HANG):
            await first.wait()
        assert not model.streams[2].completed
        release.set()
    assert states == [("Paris", "started"), ("Rome", "started")]


async def test_a_decision_cut_off_and_asked_again_never_runs_a_call_twice() -> None:
    ran = anyio.Event()
    text = decision(call("Paris"), call("Rome"))
    first = first_call_end(text)
    cut = ScriptedChatReply(chunks=(text[:first], text[first:]), gates={1: ran}, error_after=1)
    again = decision(call("Paris"), call("Oslo"))  # Paris again, as call-1: the same call
    model = ScriptedChatModel(["analysis", json.dumps({"steps": ["x"]}), cut, again, FINISH])
    probe = Lookup(model)
    agent = StatusAgent(tools=[probe.lookup], model=model, streaming_dispatch=True)

    async def run_and_fail() -> None:
        with pytest.raises(StepFailedError):
            await agent.run("weather", run_id="run-3")

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(run_and_fail)
        with anyio.fail_after(HANG):
            while probe.exited != ["Paris"]:  # the call ran to its end (its outcome kept)
                await anyio.lowlevel.checkpoint()
            await wait_all_tasks_blocked()
        ran.set()
    result = await agent.recover("run-3")
    assert probe.started == ["Paris", "Oslo"]  # Paris not again
    # Oslo ran while the decision streamed; Paris, the journal's, waited for tool execution
    assert [(r.call_id, r.record.result, r.source) for r in result.state.records] == [
        ("call-2", "Oslo: sunny", "ran"),
        ("call-1", "Paris: sunny", "replayed"),
    ]


# -- the short-circuit -------------------------------------------------------------------------


def view() -> StatusView:
    return StatusView.of(StatusAgentState(user_input="weather"), [])


async def test_a_reflection_is_closed_once_its_verdict_and_note_are_read() -> None:
    never = anyio.Event()  # a gate the reader must never reach
    text = json.dumps(
        {"verdict": "continue", "note": "Rome next", "answer": "an answer nobody reads " * 20}
    )
    cut = text.index('"answer"')
    pieces = (text[:cut], *(text[i : i + 8] for i in range(cut, len(text), 8)))
    model = ScriptedChatModel([ScriptedChatReply(chunks=pieces, gates={1: never})])
    with anyio.fail_after(HANG):
        reflection = await LLMStatusSteps(model).reflect(view())
    assert (reflection.verdict, reflection.note, reflection.answer) == (
        "continue",
        "Rome next",
        None,
    )
    stream = model.streams[0]
    assert stream.closed_early
    assert stream.chunks_sent == 1 < stream.chunks_planned  # the answer's chunks: never
    assert not stream.held.is_set()


async def test_short_circuit_off_reads_the_whole_reflection() -> None:
    text = json.dumps({"verdict": "continue", "note": "Rome next", "answer": "read anyway"})
    model = ScriptedChatModel([ScriptedChatReply(content=text, chunk_size=5)])
    reflection = await LLMStatusSteps(model, short_circuit=False).reflect(view())
    assert reflection.answer == "read anyway"
    assert model.streams[0].completed


async def test_a_decision_to_ask_a_human_is_closed_once_its_reason_is_read() -> None:
    text = json.dumps(
        {"action": "ask_human", "tool_calls": [], "reason": "need consent", "answer": "x" * 200}
    )
    model = ScriptedChatModel([ScriptedChatReply(content=text, chunk_size=6)])
    decided = await LLMStatusSteps(model).decide(view())
    assert (decided.action, decided.reason, decided.answer) == ("ask_human", "need consent", None)
    stream = model.streams[0]
    assert stream.closed_early
    assert stream.chunks_sent < stream.chunks_planned


async def test_a_finish_is_read_to_its_answer() -> None:
    text = json.dumps({"verdict": "finish", "note": "done", "answer": "sunny"})
    model = ScriptedChatModel([ScriptedChatReply(content=text, chunk_size=5)])
    reflection = await LLMStatusSteps(model).reflect(view())
    assert (reflection.verdict, reflection.answer) == ("finish", "sunny")


async def test_a_reflection_that_is_not_json_fails_clearly() -> None:
    model = ScriptedChatModel(['{"verdict": "continue", "note": oops'])
    with pytest.raises(ModelOutputError, match="the reflect step asked the model for JSON"):
        await LLMStatusSteps(model).reflect(view())
