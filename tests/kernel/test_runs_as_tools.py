"""A run as a tool of another run (:func:`toolloop.kernel.as_tool`), for every product as
the parent and as the child: the child's answer, its usage in the parent's and held to the
parent's budget at every depth, the parent's limiter, cancellation, the child's events in
the parent's stream, the bounds of depth and fan-out."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from toolloop.agents import create_agent
from toolloop.checkpoints import Approve, DecisionError, MemoryCheckpointStore, Reject
from toolloop.errors import UsageLimitError
from toolloop.flow import ExecutionFailed, ExecutionPaused, FlowEvent
from toolloop.kernel import HUMAN_EVENT, ChildRunEvent, RunFinished, RunResult
from toolloop.loop import as_tool as loop_as_tool
from toolloop.loop import (
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
)
from toolloop.models import ChatRequest, ReplyReader, UsageLimits, stream_chat
from toolloop.planners import StructuredPlanner
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.status_agent import StatusAgent, StatusView
from toolloop.testing import ScriptedChatModel
from toolloop.tools import Tool

pytestmark = pytest.mark.anyio

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
Tools = Sequence[Callable[..., Any] | Tool]
BOUNDS = ("max_depth", "max_children")


class Product:
    """A product with a scripted model: a run of it, and it as a tool."""

    name = ""

    def __init__(self) -> None:
        self.model = ScriptedChatModel()
        self.asked = 0

    def call(self, tool: str, **arguments: Any) -> None:
        """The next model call asks for one call of ``tool``."""
        self.asked += 1
        call = {"name": tool, "arguments": json.dumps(arguments), "id": f"c{self.asked}"}
        self.model.add_reply(tool_calls=[call], usage=USAGE)

    def answer(self, text: str) -> None:
        """The next model call answers ``text``."""
        self.model.add_reply(text, usage=USAGE)

    async def run(self, tools: Tools, request: str, **options: Any) -> RunResult:
        raise NotImplementedError

    async def recover(self, tools: Tools, run_id: str, **options: Any) -> RunResult:
        raise NotImplementedError

    async def resume(
        self, tools: Tools, run_id: str, decision: object, **options: Any
    ) -> RunResult:
        raise NotImplementedError

    def as_tool(self, tools: Tools, name: str, **given: Any) -> Tool:
        """The product as a tool (``given``: its run options, ``max_depth``...)."""
        raise NotImplementedError


class Loop(Product):
    name = "loop"

    def planner(self) -> StructuredPlanner:
        return StructuredPlanner(self.model, short_circuit=False)

    def call(self, tool: str, **arguments: Any) -> None:
        command = {"purpose": f"call {tool}", "tool_name": tool, "tool_kwargs": arguments}
        plan = {"next_action": "execute", "execution_commands": [command]}
        self.model.add_reply(json.dumps(plan), usage=USAGE)

    def answer(self, text: str) -> None:
        self.model.add_reply(json.dumps({"content": text, "next_action": "response"}), usage=USAGE)

    async def run(self, tools: Tools, request: str, **options: Any) -> RunResult:
        return await async_plan_and_execute(request, planner=self.planner(), tools=tools, **options)

    async def recover(self, tools: Tools, run_id: str, **options: Any) -> RunResult:
        return await async_recover_plan_and_execute(
            run_id, planner=self.planner(), tools=tools, **options
        )

    async def resume(
        self, tools: Tools, run_id: str, decision: object, **options: Any
    ) -> RunResult:
        return await async_resume_plan_and_execute(
            run_id, decision, planner=self.planner(), tools=tools, **options
        )

    def as_tool(self, tools: Tools, name: str, **given: Any) -> Tool:
        return loop_as_tool(
            planner=self.planner(), tools=tools, name=name, description="a loop", **given
        )


class Agent(Product):
    name = "agent"

    async def run(self, tools: Tools, request: str, **options: Any) -> RunResult:
        return await create_agent(self.model, tools).run(request, **options)

    async def recover(self, tools: Tools, run_id: str, **options: Any) -> RunResult:
        return await create_agent(self.model, tools).recover(run_id, **options)

    async def resume(
        self, tools: Tools, run_id: str, decision: object, **options: Any
    ) -> RunResult:
        return await create_agent(self.model, tools).resume(run_id, decision, **options)

    def as_tool(self, tools: Tools, name: str, **given: Any) -> Tool:
        bounds = {k: given.pop(k) for k in BOUNDS if k in given}
        agent = create_agent(self.model, tools, **given)
        return agent.as_tool(name=name, description="an agent", **bounds)


class Status(Product):
    """The status agent, whose decision step asks the model (a tool call: the call to run;
    text: the answer)."""

    name = "status"

    async def decide(self, view: StatusView) -> dict[str, Any]:
        request = ChatRequest(messages=[{"role": "user", "content": view.user_input}])
        reader = ReplyReader()
        async with stream_chat(self.model, request) as deltas:
            async for delta in deltas:
                reader.feed(delta)
        reply = reader.reply()
        if reply.tool_calls:
            asked = [
                {"tool_name": c.name, "arguments": json.loads(c.arguments), "purpose": c.name}
                for c in reply.tool_calls
            ]
            return {"action": "call_tools", "tool_calls": asked}
        return {"action": "finish", "answer": reply.text}

    def agent(self, tools: Tools, **options: Any) -> StatusAgent:
        return StatusAgent(
            tools=tools,
            analyze=lambda view: "a request",
            plan=lambda view: ["answer it"],
            decide=self.decide,
            reflect=lambda view: {"verdict": "continue" if view.last_records else "finish"},
            converse=lambda view: "nothing to say",
            **options,
        )

    async def run(self, tools: Tools, request: str, **options: Any) -> RunResult:
        return await self.agent(tools).run(request, **options)

    async def recover(self, tools: Tools, run_id: str, **options: Any) -> RunResult:
        return await self.agent(tools).recover(run_id, **options)

    async def resume(
        self, tools: Tools, run_id: str, decision: object, **options: Any
    ) -> RunResult:
        return await self.agent(tools).resume(run_id, decision, **options)

    def as_tool(self, tools: Tools, name: str, **given: Any) -> Tool:
        bounds = {k: given.pop(k) for k in BOUNDS if k in given}
        agent = self.agent(tools, **given)
        return agent.as_tool(name=name, description="a status agent", **bounds)


PRODUCTS: tuple[type[Product], ...] = (Loop, Agent, Status)
EACH = [pytest.param(p, id=p.name) for p in PRODUCTS]
PAIRS = [
    pytest.param(parent, child, id=f"{parent.name}-{child.name}")
    for parent in PRODUCTS
    for child in PRODUCTS
]


class Mailer:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.sent.append(to)
        return f"sent to {to}"


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_child_answers_its_parent_and_its_usage_and_events_are_the_parent_s(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.answer("mailed ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    events: list[FlowEvent] = []
    helper = child.as_tool([mailer.send], "helper")
    with anyio.fail_after(30):  # a hang guard
        result = await parent.run([helper], "get ada mailed", on_event=events.append)
    assert mailer.sent == ["ada"]
    (record,) = result.records
    assert record.tool_name == "helper"
    assert record.success, record.error
    assert record.result == "mailed ada"
    assert result.text is not None
    calls = len(parent.model.requests) + len(child.model.requests)
    assert result.usage.requests == calls
    assert result.usage.total_tokens == 15 * calls
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    nested = [e for e in events if isinstance(e, ChildRunEvent)]
    assert nested
    assert {(e.call_id, e.depth, e.tool_name, e.parent_run_id) for e in nested} == {
        (started.call_id, 1, "helper", result.run_id)
    }
    assert all(e.execution_id == result.run_id for e in nested)
    child_calls = [e.event for e in nested if isinstance(e.event, ToolCallStarted)]
    assert [c.command.tool_name for c in child_calls] == ["send"]
    (finished,) = [e.event for e in nested if isinstance(e.event, RunFinished)]
    assert finished.usage is not None and finished.usage.requests == len(child.model.requests)
    (own,) = [e for e in events if isinstance(e, RunFinished)]
    assert own.usage == result.usage


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_the_parent_s_budget_holds_before_every_model_call_at_depth_2(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child, grandchild = parent_kind(), child_kind(), child_kind()
    grandchild.call("send", to="ada")
    grandchild.answer("mailed ada")  # the 4th model call: past the budget, never made
    child.call("deeper", request="mail ada")
    child.answer("asked")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    deeper = grandchild.as_tool([mailer.send], "deeper")
    helper = child.as_tool([deeper], "helper")
    with anyio.fail_after(30), pytest.raises(UsageLimitError) as raised:
        await parent.run([helper], "get ada mailed", usage_limits=UsageLimits(max_requests=3))
    assert mailer.sent == ["ada"]
    made = [len(p.model.requests) for p in (parent, child, grandchild)]
    assert made == [1, 1, 1]
    assert raised.value.usage is not None
    assert raised.value.usage.requests == 3


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_spent_budget_finishes_the_parent_when_asked(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.answer("mailed ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    helper = child.as_tool([mailer.send], "helper")
    with anyio.fail_after(30):
        result = await parent.run(
            [helper],
            "get ada mailed",
            usage_limits=UsageLimits(max_requests=2),
            on_usage_limit="finish",
        )
    assert result.stop_reason == "usage_limit"
    assert result.usage.requests == 2
    assert [len(p.model.requests) for p in (parent, child)] == [1, 1]
    assert mailer.sent == ["ada"]


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_child_s_tools_take_the_parent_s_limiter_without_starving(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.answer("mailed ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    limiter = anyio.CapacityLimiter(1)
    seen: list[float] = []

    async def send(to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        seen.append(limiter.borrowed_tokens)
        return await mailer.send(to)

    helper = child.as_tool([send], "helper")
    with anyio.fail_after(30):  # a call of the child holding a token would hang here
        result = await parent.run([helper], "get ada mailed", limiter=limiter)
    assert result.records[0].success
    assert seen == [1]  # the child's tool call held the parent's one token
    assert limiter.borrowed_tokens == 0


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_cancelling_the_parent_cancels_the_child_s_tool(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    parent, child = parent_kind(), child_kind()
    child.call("wait")
    parent.call("helper", request="wait")
    inside = anyio.Event()
    ended: list[str] = []

    async def wait() -> str:
        """Wait."""
        inside.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("cancelled")
        return "never"

    helper = child.as_tool([wait], "helper")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parent.run, [helper], "wait")
            await inside.wait()
            tg.cancel_scope.cancel()
    assert ended == ["cancelled"]


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_run_at_max_depth_starts_no_child(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child, grandchild = parent_kind(), child_kind(), child_kind()
    grandchild.call("send", to="ada")
    child.call("deeper", request="mail ada")
    child.answer("could not")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    deeper = grandchild.as_tool([mailer.send], "deeper", max_depth=1)
    helper = child.as_tool([deeper], "helper")
    events: list[FlowEvent] = []
    with anyio.fail_after(30):
        # (a status agent child puts its failed call to a human: its parent's call fails)
        await parent.run([helper], "get ada mailed", on_event=events.append)
    assert mailer.sent == []
    assert grandchild.model.requests == []
    failed = [
        e.event.record
        for e in events
        if isinstance(e, ChildRunEvent) and isinstance(e.event, ToolCallFinished)
    ]
    (record,) = failed
    assert not record.success
    assert "max_depth=1" in (record.error or "")


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_child_failing_on_its_own_budget_fails_the_call_not_the_parent(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.call("send", to="bob")  # past the child's own budget: never asked
    parent.call("helper", request="mail ada")
    parent.answer("done")
    helper = child.as_tool([mailer.send], "helper", usage_limits=UsageLimits(max_requests=1))
    with anyio.fail_after(30):  # a hang guard
        result = await parent.run([helper], "get ada mailed")
    assert mailer.sent == ["ada"]
    assert len(child.model.requests) == 1
    # (a status agent parent puts its failed call to a human: it ends there)
    (record,) = result.records
    assert not record.success
    assert "UsageLimitError" in (record.error or "")
    assert "max_requests=1" in (record.error or "")


async def test_as_tool_refuses_bounds_below_1() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        Agent().as_tool([], "helper", max_depth=0)
    with pytest.raises(ValueError, match="max_children"):
        Agent().as_tool([], "helper", max_children=0)


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_durable_parent_recovered_resumes_its_child_without_running_a_tool_twice(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    store = MemoryCheckpointStore()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.call("wait")
    child.answer("mailed ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    mailer, inside, hold, waits = Mailer(), anyio.Event(), [True], []

    async def wait() -> str:
        """Wait for the mail to arrive."""
        waits.append("wait")
        inside.set()
        if hold[0]:
            await anyio.sleep_forever()
        return "arrived"

    # the child may make its wait again (an idempotent tool); never its send
    helper = child.as_tool(
        [mailer.send, wait], "helper", unknown_outcome="retry", idempotent_tools=["wait"]
    )
    with anyio.fail_after(30):  # a hang guard
        async with anyio.create_task_group() as tg:  # the process "dies" while wait runs
            tg.start_soon(
                functools.partial(parent.run, [helper], "mail", store=store, run_id="crashed")
            )
            await inside.wait()
            tg.cancel_scope.cancel()
    children = [r for r in await store.run_ids() if r.startswith("crashed.helper.")]
    assert len(children) == 1
    for run_id in ("crashed", children[0]):
        stored = await store.get(run_id)
        assert stored is not None and stored.status == "running"
    hold[0] = False
    events: list[FlowEvent] = []
    with anyio.fail_after(30):
        recovered = await parent.recover([helper], "crashed", store=store, on_event=events.append)
    assert mailer.sent == ["ada"]  # the child's send was not made again
    assert waits == ["wait", "wait"]
    (record,) = recovered.records
    assert record.success, record.error
    assert record.result == "mailed ada"
    nested = [e for e in events if isinstance(e, ChildRunEvent)]
    assert {e.run_id for e in nested} == {children[0]}
    (finished,) = [e.event for e in nested if isinstance(e.event, RunFinished)]
    assert finished.records == 2  # the child went on from its checkpoint: send and wait
    # every model call counted once: the parent's and the child's, before and after the crash
    assert recovered.usage.requests == len(parent.model.requests) + len(child.model.requests)
    stored = await store.get(children[0])
    assert stored is not None and stored.status == "completed"


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_child_paused_for_a_human_fails_the_call_of_a_parent_without_a_store(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    if parent_kind is Status:
        pytest.skip("the status agent always has a store (a memory store by default)")
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    store = MemoryCheckpointStore()  # the child's own: it pauses there
    helper = child.as_tool([mailer.send], "helper", needs_approval=["send"], store=store)
    events: list[FlowEvent] = []
    with anyio.fail_after(30):
        result = await parent.run([helper], "mail", on_event=events.append)
    assert result.status == "completed"
    assert mailer.sent == []
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert not finished.record.success
    assert "paused for a human" in (finished.record.error or "")
    (paused,) = await store.run_ids(status="paused")
    assert paused in (finished.record.error or "")


@pytest.mark.parametrize("unknown_outcome", ["fail", "ask"])
@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_child_paused_for_a_human_pauses_its_parent_resumed_with_the_decision(
    parent_kind: type[Product], child_kind: type[Product], unknown_outcome: str
) -> None:
    """(The parent's call of the child, made again when it is resumed, is no call cut off
    to ask a human about, whatever its ``unknown_outcome``.)"""
    store = MemoryCheckpointStore()
    mailer = Mailer()
    parent, child = parent_kind(), child_kind()
    child.call("send", to="ada")
    child.answer("mailed ada")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    helper = child.as_tool([mailer.send], "helper", needs_approval=["send"])
    told: list[FlowEvent] = []
    with anyio.fail_after(30):
        paused = await parent.run(
            [helper],
            "mail",
            store=store,
            run_id="lead",
            unknown_outcome=unknown_outcome,
            on_event=told.append,
        )
    assert paused.status == "paused"
    # the parent's events end paused, as any pause does: never failed
    own = [e for e in told if not isinstance(e, ChildRunEvent)]
    assert not any(isinstance(e, ExecutionFailed) for e in own)
    ended = own[-1]
    assert isinstance(ended, ExecutionPaused) and ended.waiting_for == [HUMAN_EVENT]
    assert ended.requests[0]["kind"] == "approve_tool_calls"
    assert mailer.sent == []
    asked = paused.request
    assert asked is not None and asked.kind == "approve_tool_calls"
    child_id = asked.details["child"]["run_id"]
    assert child_id.startswith("lead.helper.")
    assert asked.details["child"]["tool_name"] == "helper"
    (call,) = asked.tool_calls
    assert call.tool_name == "send"
    for run_id in ("lead", child_id):
        stored = await store.get(run_id)
        assert stored is not None and stored.status == "paused"
    with pytest.raises(DecisionError):  # a decision that does not fit: nothing changes
        await parent.resume([helper], "lead", {"no such call": Approve()}, store=store)
    assert (await store.get("lead")).status == "paused"  # type: ignore[union-attr]
    events: list[FlowEvent] = []
    with anyio.fail_after(30):
        done = await parent.resume(
            [helper],
            "lead",
            Approve(),
            store=store,
            on_event=events.append,
            unknown_outcome=unknown_outcome,
        )
    assert done.status == "completed", done.request
    assert mailer.sent == ["ada"]  # once
    (record,) = done.records
    assert record.success, record.error
    assert record.result == "mailed ada"
    started = [
        e.event
        for e in events
        if isinstance(e, ChildRunEvent) and isinstance(e.event, ToolCallStarted)
    ]
    assert [(e.call_id, e.command.tool_name) for e in started] == [(call.call_id, "send")]
    assert {e.run_id for e in events if isinstance(e, ChildRunEvent)} == {child_id}
    for run_id in ("lead", child_id):
        stored = await store.get(run_id)
        assert stored is not None and stored.status == "completed"
    assert len(parent.model.requests) == 2  # its first model call was not made again
    calls = len(parent.model.requests) + len(child.model.requests)
    assert done.usage.requests == calls  # the child's calls before its pause too


@pytest.mark.parametrize(("parent_kind", "child_kind"), PAIRS)
async def test_a_grandchild_s_pause_rejected_through_the_top_run(
    parent_kind: type[Product], child_kind: type[Product]
) -> None:
    store = MemoryCheckpointStore()
    mailer = Mailer()
    parent, child, grandchild = parent_kind(), child_kind(), child_kind()
    grandchild.call("send", to="ada")
    grandchild.answer("did not mail")
    child.call("deeper", request="mail ada")
    child.answer("asked")
    parent.call("helper", request="mail ada")
    parent.answer("done")
    deeper = grandchild.as_tool([mailer.send], "deeper", needs_approval=["send"])
    helper = child.as_tool([deeper], "helper")
    with anyio.fail_after(30):
        paused = await parent.run([helper], "mail", store=store, run_id="top")
    assert paused.status == "paused"
    asked = paused.request
    assert asked is not None
    child_id = asked.details["child"]["run_id"]
    assert child_id.startswith("top.helper.")
    below = asked.details["child"]["details"]["child"]["run_id"]
    assert below.startswith(f"{child_id}.deeper.")
    with anyio.fail_after(30):
        done = await parent.resume([helper], "top", Reject(message="not now"), store=store)
    assert done.status == "completed", done.request
    assert mailer.sent == []
    (record,) = done.records
    assert record.success, record.error
    assert record.result == "asked"
    for run_id in ("top", child_id, below):
        stored = await store.get(run_id)
        assert stored is not None and stored.status == "completed"
