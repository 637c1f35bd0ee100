"""Streaming dispatch in the middleware agent: a tool call starts the moment its arguments
close in the model's stream, under the run's limits, hooks, schema check and journal.

Order is proven with gates, never with time: the scripted stream waits after a tool call is
complete until the test opens its gate, so a call that starts "while the model still writes"
is one that starts before the gate opens. Every ``fail_after`` is a hang guard.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from toolloop.agents import (
    AgentMiddleware,
    AgentModelError,
    AgentResult,
    ToolCallRequest,
    ToolMessage,
    create_agent,
)
from toolloop.agents.middleware import ToolCallLimitMiddleware
from toolloop.checkpoints import Approve, MemoryCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.models import OpenAIChatModel, UsageLimits
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import (
    FakeOpenAIServer,
    FakeReply,
    FakeToolCall,
    ScriptedChatModel,
    ScriptedChatReply,
)

pytestmark = [
    pytest.mark.anyio,
    # on trio the openai client leaves its inner async generators to the garbage collector
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

HANG = 10.0
"""Seconds of a hang guard: never reached when the code is right."""


def lookup_call(city: str, call_id: str | None = None) -> FakeToolCall:
    return FakeToolCall("lookup", f'{{"city": "{city}"}}', call_id)


def gated(reply: ScriptedChatReply, after_call: int, gate: anyio.Event) -> ScriptedChatReply:
    """``reply``, its stream held once tool call ``after_call`` is complete."""
    return dataclasses.replace(reply, gates={reply.tool_call_end(after_call): gate})


class Lookup:
    """The tool ``lookup``: tells when each call starts (and whether the model's stream had
    ended by then), and may be held until the test lets it end."""

    def __init__(self, model: ScriptedChatModel | None = None) -> None:
        self.model = model
        self.started: list[str] = []
        self.while_streaming: list[bool] = []
        self.first = anyio.Event()
        self.hold: anyio.Event | None = None
        self.exited: list[str] = []

    async def __call__(self, city: str) -> str:
        """Look a city up.

        Args:
            city: the city.
        """
        self.started.append(city)
        if self.model is not None:
            self.while_streaming.append(not self.model.streams[-1].completed)
        self.first.set()
        try:
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.exited.append(city)
        return f"{city}: sunny"


def lookup_tool(probe: Lookup) -> Any:
    async def lookup(city: str) -> str:
        """Look a city up.

        Args:
            city: the city.
        """
        return await probe(city)

    return lookup


async def run_in(task_group: anyio.abc.TaskGroup, coro: Any, out: dict[str, Any]) -> None:
    async def run() -> None:
        out["result"] = await coro

    task_group.start_soon(run)


async def test_a_call_starts_while_the_model_still_writes_the_reply() -> None:
    release = anyio.Event()
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    probe = Lookup(model)
    agent = create_agent(model, [lookup_tool(probe)], streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()  # the first call started: the stream is held
        stream = model.streams[0]
        assert stream.held.is_set()
        assert not stream.completed
        assert stream.chunks_sent < stream.chunks_planned
        release.set()
    result: AgentResult = out["result"]
    assert probe.started == ["Paris", "Rome"]
    assert probe.while_streaming[0] is True
    assert result.text == "done"
    assert [r.result for r in result.records] == ["Paris: sunny", "Rome: sunny"]
    answers = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in answers] == ["Paris: sunny", "Rome: sunny"]  # in call order
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "tool", "assistant"]


async def test_without_streaming_dispatch_no_call_starts_before_the_reply_ends() -> None:
    release = anyio.Event()
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    probe = Lookup(model)
    agent = create_agent(model, [lookup_tool(probe)])  # streaming_dispatch=False: the default
    assert agent.options.streaming_dispatch is False
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await wait_all_tasks_blocked()
        assert model.streams[0].held.is_set()
        assert probe.started == []  # the stream waits at the gate: no call started
        release.set()
    assert probe.started == ["Paris", "Rome"]
    assert probe.while_streaming == [False, False]
    assert out["result"].text == "done"


async def test_middleware_that_reads_whole_turns_keeps_the_calls_for_the_whole_turn() -> None:
    release = anyio.Event()
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    probe = Lookup(model)
    limit = ToolCallLimitMiddleware(run_limit=1)  # its after_model reads the whole turn
    agent = create_agent(model, [lookup_tool(probe)], middleware=[limit], streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await wait_all_tasks_blocked()
        assert model.streams[0].held.is_set()
        assert probe.started == []
        release.set()
    assert probe.started == ["Paris"]  # the limit held: the second call never ran
    records = out["result"].records  # in the order the calls were answered
    assert {r.kwargs["city"]: r.success for r in records} == {"Paris": True, "Rome": False}


async def test_arguments_off_the_schema_or_not_json_fail_mid_stream_and_never_run() -> None:
    release = anyio.Event()
    reply = ScriptedChatReply(
        tool_calls=(
            FakeToolCall("lookup", '{"city": 5}'),  # off the schema
            FakeToolCall("lookup", '{"city": "Par'),  # broken JSON: complete when the next starts
            FakeToolCall("nope", "{}"),  # no such tool
            lookup_call("Rome"),
        ),
        chunk_size=3,
    )
    model = ScriptedChatModel([gated(reply, 3, release), "done"])
    probe = Lookup(model)
    finished: list[ToolCallFinished] = []

    def on_event(event: FlowEvent) -> None:
        if isinstance(event, ToolCallFinished):
            finished.append(event)

    agent = create_agent(model, [lookup_tool(probe)], streaming_dispatch=True, on_event=on_event)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()
            await wait_all_tasks_blocked()
        # before the rest of the stream: the three bad calls have their failed records
        assert sorted(e.record.success for e in finished) == [False, False, False, True]
        release.set()
    result: AgentResult = out["result"]
    assert probe.started == ["Rome"]  # no bad call ran
    assert [r.success for r in result.records] == [False, False, False, True]
    errors = [r.error or "" for r in result.records[:3]]
    assert "city" in errors[0]
    assert "not valid JSON" in errors[1]
    assert "nope" in errors[2]
    assert len(finished) == 4  # one finish per call, never two


async def test_each_call_is_told_and_recorded_once() -> None:
    release = anyio.Event()
    cities = ["Paris", "Rome", "Oslo", "Lima"]
    reply = ScriptedChatReply(tool_calls=tuple(lookup_call(c) for c in cities), chunk_size=2)
    model = ScriptedChatModel([gated(reply, 1, release), "done"])
    probe = Lookup(model)
    events: list[FlowEvent] = []
    agent = create_agent(
        model, [lookup_tool(probe)], streaming_dispatch=True, concurrency=2, on_event=events.append
    )
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()
            await wait_all_tasks_blocked()
        assert sorted(probe.started) == ["Paris", "Rome"]  # two at once: concurrency=2
        release.set()
    result: AgentResult = out["result"]
    started = [e.call_id for e in events if isinstance(e, ToolCallStarted)]
    ended = [e.call_id for e in events if isinstance(e, ToolCallFinished)]
    ids = [call.id for call in result.messages[1].tool_calls]  # type: ignore[union-attr]
    assert sorted(started) == sorted(ended) == sorted(ids)
    assert len(set(ids)) == 4
    assert [r.kwargs["city"] for r in result.records] == cities
    assert sorted(probe.started) == sorted(cities)


async def test_wrap_tool_call_hooks_see_each_call_that_starts_early() -> None:
    release = anyio.Event()
    seen: list[str] = []

    class Audit(AgentMiddleware):
        async def wrap_tool_call(self, request: ToolCallRequest, handler: Any) -> Any:
            seen.append(request.tool_call.args["city"])
            return await handler(request)

    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    probe = Lookup(model)
    agent = create_agent(model, [lookup_tool(probe)], middleware=[Audit()], streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()
        assert seen == ["Paris"]
        release.set()
    assert seen == ["Paris", "Rome"]


async def test_cancelled_mid_stream_the_started_call_is_cut_and_no_task_is_left() -> None:
    release = anyio.Event()  # never set: the stream stays held
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release)])
    probe = Lookup(model)
    probe.hold = anyio.Event()  # never set: the tool waits until it is cancelled
    agent = create_agent(model, [lookup_tool(probe)], streaming_dispatch=True)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(agent.run, "weather")
            await probe.first.wait()
            task_group.cancel_scope.cancel()
    assert probe.exited == ["Paris"]  # the tool was cancelled, and ended, before the run did
    assert model.streams[0].closed_early


async def test_a_budget_that_ends_the_stream_leaves_one_record_per_started_call() -> None:
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([reply])
    probe = Lookup(model)
    probe.hold = anyio.Event()  # never set: a call that started is cut off with the stream
    agent = create_agent(
        model,
        [lookup_tool(probe)],
        streaming_dispatch=True,
        # one token a delta: the budget ends the stream right after the first call
        usage_limits=UsageLimits(max_output_tokens=reply.tool_call_end(0)),
        on_usage_limit="finish",
    )
    with anyio.fail_after(HANG):
        result = await agent.run("weather")
    assert result.stop_reason == "usage_limit"
    assert model.streams[0].closed_early
    assert len(result.records) == 1  # the call that started; the reply never came
    assert result.records[0].success is False
    assert probe.exited == probe.started  # nothing is left running


async def test_a_call_that_needs_approval_waits_for_the_turn_and_the_human() -> None:
    release = anyio.Event()
    reply = ScriptedChatReply(
        tool_calls=(lookup_call("Paris"), FakeToolCall("send", '{"to": "ada"}')), chunk_size=4
    )
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    probe = Lookup(model)
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a mail.

        Args:
            to: the address.
        """
        sent.append(to)
        return "sent"

    agent = create_agent(
        model, [lookup_tool(probe), send], needs_approval=["send"], streaming_dispatch=True
    )
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather and mail"), out)
        with anyio.fail_after(HANG):
            await probe.first.wait()  # the call that needs no approval starts early
        release.set()
    paused: AgentResult = out["result"]
    assert paused.paused
    assert paused.request is not None
    assert [c.tool_name for c in paused.request.tool_calls] == ["send"]
    assert sent == []
    assert paused.state.streamed  # what ran is kept, as JSON, with the paused snapshot
    assert paused.snapshot is not None
    snapshot = paused.snapshot.model_dump_json()  # as if in another process
    done = await agent.resume(snapshot, Approve())
    assert probe.started == ["Paris"]  # never run again
    assert sent == ["ada"]
    assert done.text == "done"
    assert [r.tool_name for r in done.records] == ["lookup", "send"]
    answers = [m for m in done.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in answers] == ["Paris: sunny", "sent"]
    assert not done.state.streamed


async def test_a_durable_run_journals_each_call_before_it_starts() -> None:
    release = anyio.Event()
    store = MemoryCheckpointStore()
    reply = ScriptedChatReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
    model = ScriptedChatModel([gated(reply, 0, release), "done"])
    journaled: list[tuple[str, str]] = []
    first = anyio.Event()

    async def lookup(city: str) -> str:
        """Look a city up.

        Args:
            city: the city.
        """
        checkpoint = await store.get("run-1")
        assert checkpoint is not None
        entries = [e for e in checkpoint.journal if e.tool_name == "lookup"]
        mine = [e for e in entries if e.arguments == {"city": city}]
        journaled.append((city, mine[0].state if mine else "missing"))
        first.set()
        return f"{city}: sunny"

    agent = create_agent(model, [lookup], store=store, streaming_dispatch=True)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as task_group:
        await run_in(task_group, agent.run("weather", run_id="run-1"), out)
        with anyio.fail_after(HANG):
            await first.wait()
        assert not model.streams[0].completed
        release.set()
    assert journaled == [("Paris", "started"), ("Rome", "started")]
    checkpoint = await store.get("run-1")
    assert checkpoint is not None
    assert {e.state for e in checkpoint.journal if e.tool_name == "lookup"} == {"finished"}
    assert out["result"].text == "done"


async def cut_off_turn(again: ScriptedChatReply) -> tuple[Any, Lookup, ScriptedChatModel]:
    """An agent whose first model call fails once its first call ran (the outcome
    journaled); the model answers ``again``, then "done", when the run is recovered."""
    store = MemoryCheckpointStore()
    ran = anyio.Event()
    first = ScriptedChatReply(
        tool_calls=(lookup_call("Paris", "c1"), lookup_call("Rome", "c2")), chunk_size=4
    )
    cut = first.tool_call_end(0)  # the stream fails right after the first call, once it ran
    model = ScriptedChatModel(
        [dataclasses.replace(first, error_after=cut, gates={cut: ran}), again, "done"]
    )
    probe = Lookup(model)
    agent = create_agent(model, [lookup_tool(probe)], store=store, streaming_dispatch=True)

    async def run_and_fail() -> None:
        with pytest.raises(AgentModelError, match="cut"):
            await agent.run("weather", run_id="run-2")

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(run_and_fail)
        with anyio.fail_after(HANG):
            while probe.exited != ["Paris"]:  # the call ran to its end (its outcome kept)
                await anyio.lowlevel.checkpoint()
            await wait_all_tasks_blocked()
        ran.set()
    assert probe.started == ["Paris"]
    return agent, probe, model


async def test_a_turn_cut_off_and_asked_again_never_runs_a_call_twice() -> None:
    """Recovering the run asks the model again: the same call, under another id, is the
    journal's (answered from it); another call gets an id of its own."""
    again = ScriptedChatReply(
        tool_calls=(lookup_call("Paris", "other"), lookup_call("Oslo", "c1")), chunk_size=4
    )
    agent, probe, _ = await cut_off_turn(again)
    result = await agent.recover("run-2")
    assert probe.started == ["Paris", "Oslo"]  # Paris not again
    assert result.text == "done"
    answers = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert answers == ["Paris: sunny", "Oslo: sunny"]
    ids = [c.id for c in result.messages[1].tool_calls]
    assert ids[0] == "c1"  # Paris is the journal's c1: it answers it
    assert ids[1] not in ("c1", "other")  # Oslo runs under an id of its own


async def test_another_call_under_a_journaled_id_runs_under_a_key_of_its_own() -> None:
    again = ScriptedChatReply(tool_calls=(lookup_call("Oslo", "c1"),), chunk_size=4)
    agent, probe, _ = await cut_off_turn(again)
    result = await agent.recover("run-2")
    assert probe.started == ["Paris", "Oslo"]  # Oslo ran: the journal's c1 is another call
    answers = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert answers == ["Oslo: sunny"]  # never Paris's outcome
    ids = [c.id for c in result.messages[1].tool_calls]
    assert ids == ["c1~1"]


async def test_over_http_a_call_starts_before_the_server_sends_the_rest() -> None:
    release = anyio.Event()
    started = anyio.Event()
    async with FakeOpenAIServer() as server:
        reply = FakeReply(tool_calls=(lookup_call("Paris"), lookup_call("Rome")), chunk_size=4)
        server.add_reply(
            tool_calls=reply.tool_calls,
            chunk_size=4,
            gates={reply.tool_call_end(0): release},
        )
        server.add_reply("done")
        seen: list[bool] = []

        async def lookup(city: str) -> str:
            """Look a city up.

            Args:
                city: the city.
            """
            seen.append(server.streams[0].ended.is_set())
            started.set()
            return f"{city}: sunny"

        async with OpenAIChatModel("fake", base_url=server.base_url, max_retries=0) as model:
            agent = create_agent(model, [lookup], streaming_dispatch=True)
            out: dict[str, Any] = {}
            async with anyio.create_task_group() as task_group:
                await run_in(task_group, agent.run("weather"), out)
                with anyio.fail_after(HANG):
                    await started.wait()
                assert server.streams[0].held.is_set()
                assert not server.streams[0].ended.is_set()
                release.set()
    assert seen[0] is False
    assert out["result"].text == "done"
