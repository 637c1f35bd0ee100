"""Every capability of the run kernel (:mod:`toolloop.kernel`), under the same names, in each
of its three products: the loop, the middleware agent and the status agent.

Each test runs against each product through a small adapter (:class:`Product`) that scripts
the product's model the same way (a tool call, an answer, a hang) and calls its verbs (run,
resume, recover and their sync twins) with the same options. The model calls are real ones
in each product: the loop's planner (a :class:`~toolloop.planners.StructuredPlanner`), the
middleware agent's turns, and the status agent's decision step, which asks the model.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

import anyio
import pytest
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from toolloop import ExecutionTimeoutError
from toolloop.agents import AgentModelError, create_agent
from toolloop.checkpoints import (
    Approve,
    CheckpointStore,
    MemoryCheckpointStore,
    Reject,
    RequestedCall,
)
from toolloop.errors import (
    ExecutionError,
    ModelCallError,
    PlannerError,
    RateLimitedError,
    StepFailedError,
    ToolDefinitionError,
    UsageLimitError,
)
from toolloop.flow import ExecutionPaused, FlowEvent
from toolloop.kernel import (
    ENGINE_EVENTS,
    HUMAN_EVENT,
    Approval,
    CheckpointSaved,
    ChildRunEvent,
    ModelCallFinished,
    ModelCallStarted,
    RateLimitChanged,
    ResponseFormat,
    ResultKept,
    RetryScheduled,
    RunFinished,
    RunResult,
    RunStream,
    cut_off_error,
    interrupted_error,
    rejected_error,
)
from toolloop.loop import (
    AnswerWith,
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
    plan_and_execute,
    recover_plan_and_execute,
    resume_plan_and_execute,
    stream_plan_and_execute,
    stream_recover_plan_and_execute,
    stream_resume_plan_and_execute,
)
from toolloop.loop import as_tool as loop_as_tool
from toolloop.models import ChatModel, ChatRequest, ReplyReader, UsageLimits, stream_chat
from toolloop.planners import StructuredPlanner
from toolloop.ratelimit import RateLimit, RetryPolicy
from toolloop.runner import (
    SharedResults,
    ToolCallFinished,
    ToolCallStarted,
    ToolExecutionRecord,
    ToolProgress,
    cancelled_error,
)
from toolloop.status_agent import LLMStatusSteps, StatusAgent, StatusChanged, StatusView
from toolloop.testing import (
    FakeToolCall,
    ManualClock,
    ReplayMismatch,
    ScriptedChatModel,
    ScriptedChatReply,
    replay,
)
from toolloop.tools import RunContext, Tool, ToolRegistry, async_call_tool, tool
from toolloop.tracing import TraceRecorder

pytestmark = pytest.mark.anyio

Tools = Sequence[Callable[..., Any]]
Backend = Literal["asyncio", "trio"]
Streamed = AbstractAsyncContextManager[RunStream[Any]]
"""What a product's stream verbs give: the run's stream, in an ``async with`` block."""

CANCELLED = "the run's cancellation"
"""What cut a call off when its run was cancelled (the journal's words)."""


# -- the products, behind one interface ------------------------------------------------------


class Product:
    """One product of the kernel: its model, scripted, and its verbs, called alike."""

    name = ""
    handles: tuple[str, ...] = ()
    model_error: type[ExecutionError] = ExecutionError
    """What the product raises when its model call fails (or outlives ``model_timeout``)."""
    reviews_failed_calls = False
    """Whether a failed tool call goes to a human's review (the status agent's route for
    any failed call) rather than straight back to the model."""
    answers_before_structured = True
    """Whether the run answers (ends its turns) before its structured answer is asked for
    (the loop's final answer, the status agent's conversation); the middleware agent's
    structured answer is its last turn."""
    pause_step = ""
    """The ``step`` of the checkpoint a run tells as it pauses in its first turn."""
    statuses: tuple[str, ...] = ()
    """The statuses a run that asks for one approved call of ``send``, then answers, goes
    through (the status agent's; the other products have none)."""

    def __init__(self) -> None:
        self.model = ScriptedChatModel()
        self.response_format: ResponseFormat | None = None
        """The runs' ``response_format`` (each product's own way to take it)."""

    def script_structured(self, name: str, **arguments: Any) -> None:
        """The next model call answers by calling the structured-output tool ``name``."""
        self.model.add_reply(tool_calls=[{"name": name, "arguments": json.dumps(arguments)}])

    def script_tool_call(self, tool: str, **arguments: Any) -> None:
        """The next model call asks for one call of ``tool``."""
        raise NotImplementedError

    def script_answer(self, text: str) -> None:
        """The next model call answers ``text`` (no tool call)."""
        raise NotImplementedError

    def script_held_calls(self, calls: Sequence[tuple[str, dict[str, Any]]], gate: Any) -> None:
        """The next model call asks for ``calls``; its stream waits once the first one is
        complete, until ``gate`` (an ``anyio.Event``) is set."""
        raise NotImplementedError

    def model_decides(self) -> None:
        """The product's model writes its decisions as it streams them (the status agent:
        its own decision step, not this test's); a no-op where it always does."""

    def script_hang(self) -> None:
        """The next model call never ends (past any model_timeout: a hang guard, 120x)."""
        self.model.add_reply("never", first_delay=60)

    def script_failure(self) -> None:
        """The next model call fails (the server refuses the request)."""
        self.model.add_error(ModelCallError("the server said 400: bad request", status=400))

    async def run(self, tools: Tools, **options: Any) -> RunResult:
        raise NotImplementedError

    async def resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> RunResult:
        raise NotImplementedError

    async def recover(self, run_id: str, tools: Tools, **options: Any) -> RunResult:
        raise NotImplementedError

    def as_tool(self, tools: Tools, name: str, **options: Any) -> Tool:
        """The product as a tool of another run (its runs with ``options``)."""
        raise NotImplementedError

    def run_sync(self, tools: Tools, *, backend: Backend, **options: Any) -> RunResult:
        raise NotImplementedError

    def resume_sync(
        self, run_id: str, decision: object, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        raise NotImplementedError

    def recover_sync(
        self, run_id: str, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        raise NotImplementedError

    def stream(self, tools: Tools, **options: Any) -> Streamed:
        raise NotImplementedError

    def stream_resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> Streamed:
        raise NotImplementedError

    def stream_recover(self, run_id: str, tools: Tools, **options: Any) -> Streamed:
        raise NotImplementedError


REQUEST = "mail ada"


def first_item_end(text: str, key: str) -> int:
    """Where the first object of the list ``key`` of the JSON ``text`` closes (after it)."""
    depth = 0
    for at in range(text.index(f'"{key}": [') + len(key) + 5, len(text)):
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 0:
            return at + 1
    raise ValueError(f"no item in {key!r}")


class Loop(Product):
    """The loop: each model call is a plan of its StructuredPlanner (read to its end, so
    that an answer's ``content`` is the result's text)."""

    name = "loop"
    model_error = PlannerError
    pause_step = "round 0 plan"
    handles = ("r:0", "r:1", "r:2")
    """The handles of the run's first results (the loop: a record's place in done_plans)."""

    def planner(self) -> StructuredPlanner:
        return StructuredPlanner(self.model, short_circuit=False)

    def answering(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.response_format is None:
            return options
        return {"answer_with": AnswerWith(self.model, response_format=self.response_format)} | (
            options
        )

    def script_tool_call(self, tool: str, **arguments: Any) -> None:
        command = {"purpose": f"call {tool}", "tool_name": tool, "tool_kwargs": arguments}
        plan = {"next_action": "execute", "execution_commands": [command]}
        self.model.add_reply(json.dumps(plan))

    def script_answer(self, text: str) -> None:
        self.model.add_reply(json.dumps({"content": text, "next_action": "response"}))

    def script_held_calls(self, calls: Sequence[tuple[str, dict[str, Any]]], gate: Any) -> None:
        commands = [
            {"purpose": f"call {tool}", "tool_name": tool, "tool_kwargs": arguments}
            for tool, arguments in calls
        ]
        text = json.dumps({"next_action": "execute", "execution_commands": commands})
        cut = first_item_end(text, "execution_commands")
        self.model.add_reply(chunks=(text[:cut], text[cut:]), gates={1: gate})

    async def run(self, tools: Tools, **options: Any) -> RunResult:
        return await async_plan_and_execute(
            REQUEST, planner=self.planner(), tools=tools, **self.answering(options)
        )

    def as_tool(self, tools: Tools, name: str, **options: Any) -> Tool:
        return loop_as_tool(
            planner=self.planner(), tools=tools, name=name, description="a loop", **options
        )

    async def resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> RunResult:
        return await async_resume_plan_and_execute(
            run_id, decision, planner=self.planner(), tools=tools, **options
        )

    async def recover(self, run_id: str, tools: Tools, **options: Any) -> RunResult:
        return await async_recover_plan_and_execute(
            run_id, planner=self.planner(), tools=tools, **self.answering(options)
        )

    def run_sync(self, tools: Tools, *, backend: Backend, **options: Any) -> RunResult:
        return plan_and_execute(
            REQUEST, planner=self.planner(), tools=tools, backend=backend, **options
        )

    def resume_sync(
        self, run_id: str, decision: object, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        return resume_plan_and_execute(
            run_id, decision, planner=self.planner(), tools=tools, backend=backend, **options
        )

    def recover_sync(
        self, run_id: str, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        return recover_plan_and_execute(
            run_id, planner=self.planner(), tools=tools, backend=backend, **options
        )

    def stream(self, tools: Tools, **options: Any) -> Streamed:
        return stream_plan_and_execute(
            REQUEST, planner=self.planner(), tools=tools, **self.answering(options)
        )

    def stream_resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> Streamed:
        return stream_resume_plan_and_execute(
            run_id, decision, planner=self.planner(), tools=tools, **options
        )

    def stream_recover(self, run_id: str, tools: Tools, **options: Any) -> Streamed:
        return stream_recover_plan_and_execute(
            run_id, planner=self.planner(), tools=tools, **self.answering(options)
        )


class ToolCalling(Product):
    """A product whose model asks for tools with tool calls."""

    handles = ("r:c1", "r:c2", "r:c3")
    """The handles of the run's first results (the middleware agent: the model's call ids)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def script_tool_call(self, tool: str, **arguments: Any) -> None:
        self.asked += 1
        call = {"name": tool, "arguments": json.dumps(arguments), "id": f"c{self.asked}"}
        self.model.add_reply(tool_calls=[call])

    def script_answer(self, text: str) -> None:
        self.model.add_reply(text)

    def script_held_calls(self, calls: Sequence[tuple[str, dict[str, Any]]], gate: Any) -> None:
        asked = [FakeToolCall(tool, json.dumps(arguments)) for tool, arguments in calls]
        end = ScriptedChatReply(tool_calls=tuple(asked), chunk_size=4).tool_call_end(0)
        self.model.add_reply(tool_calls=asked, chunk_size=4, gates={end: gate})


class Agent(ToolCalling):
    """The middleware agent (one made per call, with that call's tools: it keeps no run)."""

    name = "agent"
    model_error = AgentModelError
    pause_step = "model"
    answers_before_structured = False

    async def run(self, tools: Tools, **options: Any) -> RunResult:
        agent = create_agent(self.model, tools, response_format=self.response_format)
        return await agent.run(REQUEST, **options)

    async def resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> RunResult:
        return await create_agent(self.model, tools).resume(run_id, decision, **options)

    async def recover(self, run_id: str, tools: Tools, **options: Any) -> RunResult:
        agent = create_agent(self.model, tools, response_format=self.response_format)
        return await agent.recover(run_id, **options)

    def as_tool(self, tools: Tools, name: str, **options: Any) -> Tool:
        return create_agent(self.model, tools, **options).as_tool(name=name, description="agent")

    def run_sync(self, tools: Tools, *, backend: Backend, **options: Any) -> RunResult:
        return create_agent(self.model, tools).run_sync(REQUEST, backend=backend, **options)

    def resume_sync(
        self, run_id: str, decision: object, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        agent = create_agent(self.model, tools)
        return agent.resume_sync(run_id, decision, backend=backend, **options)

    def recover_sync(
        self, run_id: str, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        return create_agent(self.model, tools).recover_sync(run_id, backend=backend, **options)

    def stream(self, tools: Tools, **options: Any) -> Streamed:
        agent = create_agent(self.model, tools, response_format=self.response_format)
        return agent.stream(REQUEST, **options)

    def stream_resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> Streamed:
        return create_agent(self.model, tools).stream_resume(run_id, decision, **options)

    def stream_recover(self, run_id: str, tools: Tools, **options: Any) -> Streamed:
        agent = create_agent(self.model, tools, response_format=self.response_format)
        return agent.stream_recover(run_id, **options)


class Status(ToolCalling):
    """The status agent: its decision step asks the model (a tool call becomes the call to
    run, text the answer); the other steps think without one. The reflection goes on to the
    next decision after tool calls, and finishes once a decision answered. Every agent made
    here shares the store of the first (its own, in memory, unless a call gives one)."""

    name = "status"
    model_error = StepFailedError
    reviews_failed_calls = True
    pause_step = "human_intervention"
    statuses = (
        "analysis_completed",
        "decision_ready",
        "waiting_for_human",
        "ready_for_execution",
        "tools_completed",
        "continue",
        "decision_completed",
        "reflection_completed",
    )
    handles = ("r:call-1", "r:call-2", "r:call-3")
    """The handles of the run's first results (the status agent: its call ids)."""

    def __init__(self) -> None:
        super().__init__()
        self.store: CheckpointStore | None = None
        self.decides_by_model = False
        self.views: list[StatusView] = []
        """What each decision saw."""

    def model_decides(self) -> None:
        self.decides_by_model = True

    def script_answer(self, text: str) -> None:
        if not self.decides_by_model:
            return super().script_answer(text)
        finish = {"action": "finish", "tool_calls": [], "reason": "", "answer": text}
        self.model.add_reply(json.dumps(finish))

    def script_held_calls(self, calls: Sequence[tuple[str, dict[str, Any]]], gate: Any) -> None:
        assert self.decides_by_model, "the status agent's own decision step streams"
        asked = [{"tool_name": t, "arguments": a, "purpose": t} for t, a in calls]
        text = json.dumps(
            {"action": "call_tools", "tool_calls": asked, "reason": "", "answer": None}
        )
        cut = first_item_end(text, "tool_calls")
        self.model.add_reply(chunks=(text[:cut], text[cut:]), gates={1: gate})

    async def decide(self, view: StatusView) -> dict[str, Any]:
        self.views.append(view)
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

    @staticmethod
    def reflect(view: StatusView) -> dict[str, Any]:
        return {"verdict": "continue" if view.last_records else "finish"}

    def agent(self, tools: Tools, **defaults: Any) -> StatusAgent:
        steps: dict[str, Any] = {"converse": lambda view: "nothing to say"}
        if self.response_format is not None:
            steps = {"model": self.model, "response_format": self.response_format}
        if self.decides_by_model:
            steps["model"] = self.model  # its own decision step asks it
        agent = StatusAgent(
            tools=tools,
            analyze=lambda view: "the user wants a mail sent",
            plan=lambda view: ["send the mail"],
            decide=None if self.decides_by_model else self.decide,
            reflect=self.reflect,
            **steps,
            store=self.store,
            **defaults,
        )
        self.store = agent.store
        return agent

    async def run(self, tools: Tools, **options: Any) -> RunResult:
        return await self.agent(tools).run(REQUEST, **options)

    async def resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> RunResult:
        return await self.agent(tools).resume(run_id, decision, **options)

    async def recover(self, run_id: str, tools: Tools, **options: Any) -> RunResult:
        return await self.agent(tools).recover(run_id, **options)

    def as_tool(self, tools: Tools, name: str, **options: Any) -> Tool:
        return self.agent(tools, **options).as_tool(name=name, description="a status agent")

    def run_sync(self, tools: Tools, *, backend: Backend, **options: Any) -> RunResult:
        return self.agent(tools).run_sync(REQUEST, backend=backend, **options)

    def resume_sync(
        self, run_id: str, decision: object, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        return self.agent(tools).resume_sync(run_id, decision, backend=backend, **options)

    def recover_sync(
        self, run_id: str, tools: Tools, *, backend: Backend, **options: Any
    ) -> RunResult:
        return self.agent(tools).recover_sync(run_id, backend=backend, **options)

    def stream(self, tools: Tools, **options: Any) -> Streamed:
        return self.agent(tools).stream(REQUEST, **options)

    def stream_resume(
        self, run_id: str, decision: object, tools: Tools, **options: Any
    ) -> Streamed:
        return self.agent(tools).stream_resume(run_id, decision, **options)

    def stream_recover(self, run_id: str, tools: Tools, **options: Any) -> Streamed:
        return self.agent(tools).stream_recover(run_id, **options)


PRODUCTS: tuple[type[Product], ...] = (Loop, Agent, Status)


EACH = [pytest.param(product, id=product.name) for product in PRODUCTS]
"""The three products as parameters (ids ``loop``, ``agent``, ``status``)."""


# -- the tools ---------------------------------------------------------------------------------


class Mailer:
    """``send`` notes every call; with ``hold`` it then waits forever (after setting
    ``inside``) until ``hold`` is cleared for a later call."""

    def __init__(self, *, hold: bool = False, inside: anyio.Event | None = None) -> None:
        self.sent: list[str] = []
        self.hold = hold
        self.inside = inside

    async def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.sent.append(to)
        if self.inside is not None:
            self.inside.set()
        if self.hold:
            await anyio.sleep_forever()
        return f"sent to {to}"

    @property
    def tools(self) -> list[Callable[..., Any]]:
        return [self.send]


def of(events: list[FlowEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def sends(result: RunResult) -> list[ToolExecutionRecord]:
    return [r for r in result.records if r.tool_name == "send"]


# -- streaming dispatch ----------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
@pytest.mark.parametrize("streaming", [True, False], ids=["dispatch", "whole"])
async def test_streaming_dispatch_starts_a_call_while_the_model_still_writes(
    make: type[Product], streaming: bool
) -> None:
    product, mailer = make(), Mailer(inside=anyio.Event())
    product.model_decides()
    release = anyio.Event()
    product.script_held_calls([("send", {"to": "ada"}), ("send", {"to": "bob"})], release)
    product.script_answer("sent")
    done: list[RunResult] = []

    async def run() -> None:
        done.append(await product.run(mailer.tools, streaming_dispatch=streaming))

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(run)
        with anyio.fail_after(10):  # a hang guard
            if streaming:
                assert mailer.inside is not None
                await mailer.inside.wait()
            await anyio.wait_all_tasks_blocked()
        held = [s for s in product.model.streams if s.held.is_set()]
        assert len(held) == 1 and not held[0].completed  # the model still writes
        assert mailer.sent == (["ada"] if streaming else [])
        release.set()
    (result,) = done
    assert mailer.sent == ["ada", "bob"]
    assert [r.success for r in sends(result)] == [True, True]
    assert result.text == "sent"


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_the_options_are_the_kernel_s_with_its_checks(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    with pytest.raises(ValueError, match=r"^concurrency must be at least 1, got 0$"):
        await product.run(mailer.tools, concurrency=0)
    with pytest.raises(TypeError, match="concurency"):
        await product.run(mailer.tools, concurency=2)
    with pytest.raises(TypeError, match="max_rounds") as old:
        await product.run(mailer.tools, max_rounds=3)
    assert "max_turns" in str(old.value)  # the error says its new name
    refused: list[tuple[dict[str, Any], str]] = [
        ({"timeout": float("nan")}, "timeout must be a number of seconds above 0"),
        ({"model_timeout": True}, "model_timeout must be a number of seconds above 0"),
        ({"concurrency": True}, "concurrency must be an int"),
        ({"max_turns": 2.5}, "max_turns must be an int"),
        ({"store": "runs.db"}, "store must be a CheckpointStore"),
        ({"run_id": 5}, "run_id must be a non-empty str"),
        ({"on_event": "print"}, "on_event must be a callable"),
    ]
    for given, said in refused:
        with pytest.raises((TypeError, ValueError), match=said):
            await product.run(mailer.tools, **given)
    assert product.model.requests == [] and mailer.sent == []  # nothing ran


@pytest.mark.parametrize("make", EACH)
async def test_max_turns_0_runs_no_tool(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    result = await product.run(mailer.tools, max_turns=0)
    assert (result.status, result.stop_reason) == ("completed", "max_turns")
    assert mailer.sent == [] and result.records == []


# -- budgets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_a_spent_budget_raises_by_default(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await product.run(mailer.tools, usage_limits=UsageLimits(max_requests=1))
    assert len(product.model.requests) == 1  # the second call was refused before it was made
    assert mailer.sent == ["ada"]


@pytest.mark.parametrize("make", EACH)
async def test_a_spent_budget_finishes_the_run_when_asked(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    result = await product.run(
        mailer.tools, usage_limits=UsageLimits(max_requests=1), on_usage_limit="finish"
    )
    assert (result.status, result.stop_reason) == ("completed", "usage_limit")
    assert result.usage.requests == 1 and len(product.model.requests) == 1
    assert mailer.sent == ["ada"]


@pytest.mark.parametrize("make", EACH)
async def test_the_budget_holds_across_a_pause(make: type[Product]) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    paused = await product.run(mailer.tools, store=store, needs_approval=["send"])
    assert paused.paused and paused.usage.requests == 1
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await product.resume(
            paused.run_id,
            Approve(),
            mailer.tools,
            store=store,
            usage_limits=UsageLimits(max_requests=1),
        )
    # the approved call ran; the model call after it was refused: the one before counts
    assert mailer.sent == ["ada"] and len(product.model.requests) == 1


# -- timeouts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_a_timeout_finishes_the_run_and_keeps_the_call_it_cut_off(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer(hold=True, inside=anyio.Event())
    product.script_tool_call("send", to="ada")
    product.script_answer("never asked")
    events: list[FlowEvent] = []
    result = await product.run(
        mailer.tools, timeout=1.0, on_timeout="finish", on_event=events.append
    )
    assert mailer.inside is not None and mailer.inside.is_set()
    assert (result.status, result.stop_reason) == ("completed", "timeout")
    (record,) = sends(result)
    assert not record.success and record.kwargs == {"to": "ada"} and record.error
    assert [e.stop_reason for e in of(events, RunFinished)] == ["timeout"]


@pytest.mark.parametrize("make", EACH)
async def test_a_timeout_raises_by_default(make: type[Product]) -> None:
    product, mailer = make(), Mailer(hold=True, inside=anyio.Event())
    product.script_tool_call("send", to="ada")
    with pytest.raises(ExecutionTimeoutError):
        await product.run(mailer.tools, timeout=1.0)
    assert mailer.inside is not None and mailer.inside.is_set()


@pytest.mark.parametrize("make", EACH)
async def test_model_timeout_fails_the_run_with_the_product_s_model_error(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer()
    product.script_hang()
    with pytest.raises(ExecutionError) as caught:
        await product.run(mailer.tools, model_timeout=0.5)
    error = caught.value
    assert isinstance(error, product.model_error)
    said = f"{error} | {error.__cause__}"
    assert re.search(r"did not (answer|finish)\b.*within 0\.5 s", said), said
    assert mailer.sent == [] and len(product.model.requests) == 1


@pytest.mark.parametrize("make", EACH)
async def test_a_model_call_past_model_timeout_fails_as_a_model_call_error(
    make: type[Product],
) -> None:
    """The run options' docs: a step (model call) that outlives ``model_timeout`` fails as
    a model call that failed does (a ModelCallError), whose words say so."""
    product = make()
    product.script_hang()
    with pytest.raises(ExecutionError) as caught:
        await product.run(Mailer().tools, model_timeout=0.5)
    cause = caught.value.__cause__
    assert isinstance(cause, ModelCallError)
    assert re.search(r"did not finish\b.*within 0\.5 s", str(cause)), str(cause)


@pytest.mark.parametrize("make", EACH)
async def test_a_call_the_timeout_cut_off_reads_the_same_in_every_product(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer(hold=True, inside=anyio.Event())
    product.script_tool_call("send", to="ada")
    result = await product.run(mailer.tools, timeout=1.0, on_timeout="finish")
    assert mailer.inside is not None and mailer.inside.is_set()
    (record,) = sends(result)
    assert record.error == cut_off_error("send", "timeout")
    assert record.error.startswith(cancelled_error("send"))  # the runner's words, and why


# -- durability and approval -----------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_a_durable_run_pauses_for_approval_and_resumes_by_the_request_s_call_ids(
    make: type[Product],
) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    paused = await product.run(mailer.tools, store=store, needs_approval=["send"])
    assert paused.paused and paused.status == "paused" and paused.stop_reason is None
    assert paused.request is not None and paused.request.kind == "approve_tool_calls"
    (asked,) = paused.request.tool_calls
    assert (asked.tool_name, asked.arguments) == ("send", {"to": "ada"})
    assert mailer.sent == []
    stored = await store.get(paused.run_id)
    assert stored is not None and stored.status == "paused"

    events: list[FlowEvent] = []
    done = await product.resume(
        paused.run_id, Approve(), mailer.tools, store=store, on_event=events.append
    )
    assert [e.call_id for e in of(events, ToolCallStarted)] == [asked.call_id]
    assert mailer.sent == ["ada"]  # once
    assert (done.status, done.stop_reason, done.run_id) == ("completed", "answered", paused.run_id)
    stored = await store.get(paused.run_id)
    assert stored is not None and stored.status == "completed"


@pytest.mark.parametrize("make", EACH)
async def test_a_run_as_a_tool_answers_its_parent_and_pauses_it_for_a_human(
    make: type[Product],
) -> None:
    parent, child, mailer, store = make(), make(), Mailer(), MemoryCheckpointStore()
    child.script_tool_call("send", to="ada")
    child.script_answer("mailed ada")
    parent.script_tool_call("helper", request="mail ada")
    parent.script_answer("done")
    helper = child.as_tool(mailer.tools, "helper", needs_approval=["send"])
    paused = await parent.run([helper], store=store)
    assert paused.paused and paused.request is not None
    assert paused.request.details["child"]["tool_name"] == "helper"
    (asked,) = paused.request.tool_calls
    assert (asked.tool_name, asked.arguments) == ("send", {"to": "ada"})
    assert mailer.sent == []
    events: list[FlowEvent] = []
    done = await parent.resume(
        paused.run_id, Approve(), [helper], store=store, on_event=events.append
    )
    assert mailer.sent == ["ada"]  # once
    assert (done.status, done.stop_reason) == ("completed", "answered")
    (record,) = done.records
    assert (record.tool_name, record.result) == ("helper", "mailed ada")
    nested = of(events, ChildRunEvent)
    assert {e.parent_run_id for e in nested} == {paused.run_id}
    started = [e.event for e in nested if isinstance(e.event, ToolCallStarted)]
    assert [e.call_id for e in started] == [asked.call_id]  # the request's ids, the events'
    calls = len(parent.model.requests) + len(child.model.requests)
    assert done.usage.requests == calls  # the child's model calls are the parent's too


@pytest.mark.parametrize("make", EACH)
async def test_recovering_a_completed_run_gives_its_result_and_runs_nothing(
    make: type[Product],
) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    done = await product.run(mailer.tools, store=store)
    assert done.stop_reason == "answered" and mailer.sent == ["ada"]
    asked = len(product.model.requests)
    again = await product.recover(done.run_id, mailer.tools, store=store)
    assert (again.run_id, again.status, again.stop_reason, again.text) == (
        done.run_id,
        "completed",
        "answered",
        done.text,
    )
    assert mailer.sent == ["ada"] and len(product.model.requests) == asked


@pytest.mark.parametrize("make", EACH)
async def test_a_rejected_call_never_runs_and_says_so_in_the_kernel_s_words(
    make: type[Product],
) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("not sent")
    product.script_answer("not sent")
    paused = await product.run(mailer.tools, store=store, needs_approval=["send"])
    assert paused.paused
    done = await product.resume(
        paused.run_id, Reject(message="not today"), mailer.tools, store=store
    )
    assert mailer.sent == []
    (record,) = sends(done)
    assert not record.success and record.error is not None
    assert rejected_error("send", "not today") in record.error
    assert "a human rejected this call of 'send'" in record.error


@pytest.mark.parametrize("make", EACH)
async def test_needs_approval_takes_a_mapping_with_the_decisions_allowed(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    paused = await product.run(
        mailer.tools,
        store=MemoryCheckpointStore(),
        needs_approval={"send": Approval(allowed=("approve", "reject"))},
    )
    assert paused.request is not None
    (asked,) = paused.request.tool_calls
    assert asked.tool_name == "send" and asked.allowed == ["approve", "reject"]
    assert mailer.sent == []


@pytest.mark.parametrize("make", EACH)
async def test_needs_approval_takes_a_rule_on_the_arguments(make: type[Product]) -> None:
    def to_bob(call: RequestedCall) -> bool:
        return call.arguments.get("to") == "bob"

    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_tool_call("send", to="bob")
    paused = await product.run(mailer.tools, store=MemoryCheckpointStore(), needs_approval=to_bob)
    assert mailer.sent == ["ada"]  # asked no one
    assert paused.paused and paused.request is not None
    assert [(c.tool_name, c.arguments) for c in paused.request.tool_calls] == [
        ("send", {"to": "bob"})
    ]


# -- unknown outcomes ----------------------------------------------------------------------------


async def crashed(product: Product, store: MemoryCheckpointStore) -> tuple[Mailer, str]:
    """A durable run cancelled from outside while ``send`` runs: its intent is journaled,
    its outcome is not, and the run stays ``running`` in the store. The mailer (which does
    not hold any more) and the call's id."""
    mailer = Mailer(hold=True, inside=anyio.Event())
    events: list[FlowEvent] = []
    product.script_tool_call("send", to="ada")
    run = functools.partial(
        product.run, mailer.tools, store=store, run_id="crashed", on_event=events.append
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        assert mailer.inside is not None
        with anyio.fail_after(30):  # a hang guard
            await mailer.inside.wait()
        tg.cancel_scope.cancel()
    stored = await store.get("crashed")
    assert stored is not None and stored.status == "running"
    assert mailer.sent == ["ada"]
    (started,) = of(events, ToolCallStarted)
    mailer.hold = False
    return mailer, started.call_id


@pytest.mark.parametrize("make", EACH)
async def test_unknown_outcome_fail_does_not_run_the_call_again(make: type[Product]) -> None:
    product, store = make(), MemoryCheckpointStore()
    mailer, call_id = await crashed(product, store)
    product.script_answer("it may have gone")
    recovered = await product.recover("crashed", mailer.tools, store=store, unknown_outcome="fail")
    assert mailer.sent == ["ada"]  # not again
    (record,) = sends(recovered)
    assert not record.success and record.error is not None
    assert interrupted_error(call_id, "send", CANCELLED) in record.error
    assert "may or may not have taken effect" in record.error


@pytest.mark.parametrize("make", EACH)
async def test_unknown_outcome_fail_goes_on_as_after_any_failed_call(
    make: type[Product],
) -> None:
    """The kernel's UnknownOutcome docs: under ``"fail"`` the call ends as a failed record
    that says what cut it off, and the run goes on as after any failed call: the model
    decides (the status agent first puts failed calls to a human's review)."""
    product, store = make(), MemoryCheckpointStore()
    mailer, _ = await crashed(product, store)
    asked = len(product.model.requests)
    product.script_answer("it may have gone")
    recovered = await product.recover("crashed", mailer.tools, store=store, unknown_outcome="fail")
    assert mailer.sent == ["ada"]  # not run again
    if product.reviews_failed_calls:
        assert recovered.request is not None and recovered.request.kind == "review"
        assert "1 tool call(s) failed" in recovered.request.reason
        recovered = await product.resume("crashed", "continue", mailer.tools, store=store)
    assert len(product.model.requests) == asked + 1
    assert (recovered.status, recovered.stop_reason, recovered.text) == (
        "completed",
        "answered",
        "it may have gone",
    )
    assert mailer.sent == ["ada"]


@pytest.mark.parametrize("make", EACH)
async def test_unknown_outcome_ask_puts_the_call_to_a_human(make: type[Product]) -> None:
    product, store = make(), MemoryCheckpointStore()
    mailer, call_id = await crashed(product, store)
    product.script_answer("asked")
    recovered = await product.recover("crashed", mailer.tools, store=store, unknown_outcome="ask")
    assert mailer.sent == ["ada"]  # not again, on its own
    assert recovered.paused and recovered.request is not None
    assert recovered.request.kind == "interrupted_tool_calls"
    assert [(c.call_id, c.tool_name) for c in recovered.request.tool_calls] == [(call_id, "send")]
    # worded the same in every product (what it asks of the human: from what it allows)
    assert recovered.request.reason.startswith(
        "1 tool call(s) were interrupted: the run's cancellation ended them while they ran, "
        "before their outcome was recorded, so they may or may not have taken effect. They "
        "were not run again: approve (or edit) to run them again, "
    ), recovered.request.reason


@pytest.mark.parametrize("make", EACH)
async def test_unknown_outcome_retry_runs_an_idempotent_call_again(make: type[Product]) -> None:
    product, store = make(), MemoryCheckpointStore()
    mailer, _ = await crashed(product, store)
    product.script_answer("sent")
    recovered = await product.recover(
        "crashed", mailer.tools, store=store, unknown_outcome="retry", idempotent_tools=["send"]
    )
    assert mailer.sent == ["ada", "ada"]  # once more
    (record,) = sends(recovered)
    assert record.success and record.result == "sent to ada"
    assert (recovered.status, recovered.stop_reason) == ("completed", "answered")


# -- idempotency keys --------------------------------------------------------------------------


class KeyedMailer(Mailer):
    """A mailer whose ``send`` notes its call's idempotency key, as an outside system that
    does a side effect once per key would be handed it."""

    def __init__(self, *, hold: bool = False, inside: anyio.Event | None = None) -> None:
        super().__init__(hold=hold, inside=inside)
        self.keys: list[str] = []

    async def keyed_send(self, to: str, ctx: RunContext[Any]) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.keys.append(ctx.idempotency_key)
        return await self.send(to)

    @property
    def tools(self) -> list[Callable[..., Any]]:
        send = tool(name="send")(self.keyed_send)
        return [send]


@pytest.mark.parametrize("make", EACH)
async def test_a_call_s_idempotency_key_is_the_same_when_it_runs_again(
    make: type[Product],
) -> None:
    product, store = make(), MemoryCheckpointStore()
    mailer = KeyedMailer(hold=True, inside=anyio.Event())
    product.script_tool_call("send", to="ada")
    run = functools.partial(product.run, mailer.tools, store=store, run_id="keyed")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        assert mailer.inside is not None
        with anyio.fail_after(30):  # a hang guard
            await mailer.inside.wait()
        tg.cancel_scope.cancel()  # cut off while the call runs: its outcome unknown
    mailer.hold = False
    product.script_answer("sent")
    recovered = await product.recover(
        "keyed", mailer.tools, store=store, unknown_outcome="retry", idempotent_tools=["send"]
    )
    assert recovered.stop_reason == "answered" and mailer.sent == ["ada", "ada"]
    first, again = mailer.keys
    assert first == again  # the same call: an outside system does its effect once
    assert re.fullmatch("[0-9a-f]{32}", first)


@pytest.mark.parametrize("make", EACH)
async def test_every_other_call_has_another_idempotency_key(make: type[Product]) -> None:
    product, mailer = make(), KeyedMailer()
    product.script_tool_call("send", to="ada")
    product.script_tool_call("send", to="ada")  # the same arguments, another call
    product.script_answer("sent twice")
    await product.run(mailer.tools, run_id="one")
    other = make()
    other.script_tool_call("send", to="ada")
    other.script_answer("sent")
    await other.run(mailer.tools, run_id="two")  # the same call of another run
    assert len(mailer.keys) == 3 and len(set(mailer.keys)) == 3, mailer.keys


async def test_a_tool_called_outside_a_run_gets_a_fresh_key_per_call() -> None:
    mailer = KeyedMailer()
    (send,) = mailer.tools
    assert isinstance(send, Tool)
    await async_call_tool(send, {"to": "ada"})
    await async_call_tool(send, {"to": "ada"})
    assert len(set(mailer.keys)) == 2


# -- deps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_deps_reach_a_tool_s_run_context(make: type[Product]) -> None:
    seen: list[tuple[Any, str]] = []

    def whoami(ctx: RunContext[Any]) -> str:
        """Say who runs."""
        seen.append((ctx.deps, ctx.run_id))
        return "me"

    deps = {"db": object()}
    product = make()
    product.script_tool_call("whoami")
    product.script_answer("it is me")
    result = await product.run([whoami], deps=deps)
    assert result.status == "completed" and result.run_id
    assert len(seen) == 1 and seen[0][0] is deps and seen[0][1] == result.run_id
    assert [r.result for r in result.records] == ["me"]


# -- rate limits and retries ------------------------------------------------------------------

NOW = RetryPolicy(backoff=0, jitter=0)
"""Retries without a wait."""


def refused(retry_after: float | None = None) -> ModelCallError:
    return ModelCallError("HTTP 429: slow down", status=429, retry_after=retry_after)


class Refusing(Mailer):
    """``send`` refused for its rate ``times`` times, then sent."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    async def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.sent.append(to)
        if len(self.sent) <= self.times:
            raise RateLimitedError("the mail server is busy", retry_after=0)
        return f"sent to {to}"


@pytest.mark.parametrize("make", EACH)
async def test_a_model_call_refused_for_its_rate_is_tried_again_every_try_told(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer()
    product.model.add_error(refused())
    product.script_answer("done")
    limit = RateLimit(10, name="model")
    events: list[FlowEvent] = []
    result = await product.run(
        mailer.tools, model_rate_limit=limit, model_retry=NOW, on_event=events.append
    )
    assert result.status == "completed" and len(product.model.requests) == 2
    started = [(e.call_index, e.attempt) for e in of(events, ModelCallStarted)]
    assert started == [(0, 1), (0, 2)]
    finished = of(events, ModelCallFinished)
    assert [(e.attempt, e.error is None) for e in finished] == [(1, False), (2, True)]
    (retry,) = of(events, RetryScheduled)
    assert (retry.target, retry.call_index, retry.attempt, retry.status, retry.wait) == (
        "model",
        0,
        1,
        429,
        0.0,
    )
    (change,) = of(events, RateLimitChanged)
    assert (change.name, change.reason, change.rate, change.backoffs) == ("model", "backoff", 9, 1)
    assert result.usage.requests == 2  # the refused try is a request of the run


@pytest.mark.parametrize("make", EACH)
async def test_model_retries_stop_at_the_run_s_budget(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    for _ in range(3):
        product.model.add_error(refused())
    product.script_answer("never asked")
    result = await product.run(
        mailer.tools,
        model_retry=RetryPolicy(tries=5, backoff=0),
        usage_limits=UsageLimits(max_requests=2),
        on_usage_limit="finish",
    )
    assert result.stop_reason == "usage_limit" and len(product.model.requests) == 2


@pytest.mark.parametrize("make", EACH)
async def test_model_retries_never_wait_past_the_run_s_timeout(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.model.add_error(refused(retry_after=50))  # the next try would come after it
    product.script_answer("never asked")
    with pytest.raises(ExecutionError) as caught:
        await product.run(mailer.tools, model_retry=NOW, timeout=30)
    error = caught.value
    assert isinstance(error, product.model_error)
    assert isinstance(error.__cause__, ModelCallError) and error.__cause__.status == 429
    assert len(product.model.requests) == 1  # failed at once, with the server's answer


@pytest.mark.parametrize("make", EACH)
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
async def test_an_idempotent_tool_is_retried_and_its_record_keeps_its_tries(
    make: type[Product], durable: bool
) -> None:
    product, mailer = make(), Refusing(times=1)
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    events: list[FlowEvent] = []
    limit = RateLimit(concurrency=2, name="mail")
    result = await product.run(
        mailer.tools,
        idempotent_tools=["send"],
        tool_retry=NOW,
        rate_limits={"send": limit},
        on_event=events.append,
        store=MemoryCheckpointStore() if durable else None,
    )
    (record,) = sends(result)
    assert record.success and record.attempts == 2 and mailer.sent == ["ada", "ada"]
    (retry,) = of(events, RetryScheduled)
    assert (retry.target, retry.tool_name, retry.attempt) == ("tool", "send", 1)
    assert "the mail server is busy" in retry.error
    assert (limit.admitted, limit.refused, limit.in_flight) == (2, 1, 0)
    (ended,) = of(events, ToolCallFinished)
    assert ended.record.attempts == 2


@pytest.mark.parametrize("make", EACH)
async def test_a_tool_that_is_not_idempotent_is_never_retried(make: type[Product]) -> None:
    product, mailer = make(), Refusing(times=1)
    product.script_tool_call("send", to="ada")
    product.script_answer("not sent")
    events: list[FlowEvent] = []
    result = await product.run(mailer.tools, tool_retry=NOW, on_event=events.append)
    (record,) = sends(result)
    assert not record.success and record.attempts == 1 and mailer.sent == ["ada"]
    assert of(events, RetryScheduled) == []


class Gated(Mailer):
    """``send`` notes every call, then waits for ``gate``."""

    def __init__(self, gate: anyio.Event) -> None:
        super().__init__()
        self.gate = gate

    async def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.sent.append(to)
        await self.gate.wait()
        return f"sent to {to}"


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds, looking each time every task waits."""
    while not condition():
        await anyio.wait_all_tasks_blocked()


@pytest.mark.parametrize("make", EACH)
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
async def test_identical_calls_of_two_runs_at_once_run_the_tool_once(
    make: type[Product], durable: bool
) -> None:
    """Two runs at once make the same call of a tool of ``shared_results``: its body runs
    once; each run keeps its own record (the one that waited says so), its own events and
    (durable) its own journal entry."""
    gate = anyio.Event()
    mailer = Gated(gate)
    shared = SharedResults()
    products = [make(), make()]
    for product in products:
        product.script_tool_call("send", to="ada")
        product.script_answer("sent")
    store = MemoryCheckpointStore() if durable else None
    results: list[RunResult] = []
    events: list[list[FlowEvent]] = [[], []]

    async def run(n: int) -> None:
        results.append(
            await products[n].run(
                mailer.tools,
                shared_results={"send": shared},
                on_event=events[n].append,
                store=store,
            )
        )

    with anyio.fail_after(20):  # (a hang guard)
        async with anyio.create_task_group() as tg:
            for n in range(2):
                tg.start_soon(run, n)
            await until(lambda: shared.waiting == 1)  # one runs the tool, one waits for it
            gate.set()
    assert mailer.sent == ["ada"] and (shared.runs, shared.joined, shared.waiting) == (1, 1, 0)
    records = [record for result in results for record in sends(result)]
    assert [(r.success, r.result) for r in records] == [(True, "sent to ada")] * 2
    assert sorted(str(r.shared) for r in records) == ["None", "in_flight"]
    for told in events:
        (started,) = of(told, ToolCallStarted)
        (finished,) = of(told, ToolCallFinished)
        assert finished.call_id == started.call_id and finished.record.success
    if store is not None:
        for result in results:
            checkpoint = await store.get(result.run_id)
            assert checkpoint is not None
            (entry,) = [e for e in checkpoint.journal if e.tool_name == "send"]
            assert entry.state == "finished"


@pytest.mark.parametrize("make", EACH)
async def test_a_cached_result_serves_a_later_run_and_a_failure_is_never_cached(
    make: type[Product],
) -> None:
    """With a ``ttl``, a later run's identical call takes the cached result (its record
    says so, the tool does not run); a failed call is not cached: the next one runs."""
    clock = ManualClock()
    shared = SharedResults(ttl=60, clock=clock)
    mailer = Refusing(times=1)  # the first call fails

    async def run() -> ToolExecutionRecord:
        product = make()
        product.script_tool_call("send", to="ada")
        product.script_answer("done")
        (record,) = sends(await product.run(mailer.tools, shared_results={"send": shared}))
        return record

    failed = await run()
    assert not failed.success and failed.shared is None
    ran = await run()
    assert ran.success and ran.shared is None and mailer.sent == ["ada", "ada"]
    cached = await run()
    assert cached.success and cached.shared == "cache" and cached.result == ran.result
    assert mailer.sent == ["ada", "ada"] and (shared.runs, shared.hits) == (2, 1)
    clock.advance(61)  # expired: it runs again
    again = await run()
    assert again.shared is None and mailer.sent == ["ada", "ada", "ada"]


async def test_one_rate_limit_is_shared_by_runs_of_every_product() -> None:
    """One limiter for the runs of the three products at once: at most one model call open
    at a time among them all, every try admitted by it, and a refusal in one run's call
    (told in that run's events) holds the others back for its ``Retry-After``."""
    limit = RateLimit(concurrency=1, adaptive=False, name="shared")
    products = [make() for make in PRODUCTS]
    open_now, most = 0, 0

    class Counted:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aenter__(self) -> Any:
            nonlocal open_now, most
            deltas = await self.inner.__aenter__()
            open_now += 1
            most = max(most, open_now)
            await anyio.sleep(0.01)  # (room for another run's call to overlap, if it could)
            return deltas

        async def __aexit__(self, *exc: Any) -> Any:
            nonlocal open_now
            open_now -= 1
            return await self.inner.__aexit__(*exc)

    def counted(stream: Callable[[ChatRequest], Any]) -> Callable[[ChatRequest], Any]:
        return lambda request: Counted(stream(request))

    products[1].model.add_error(refused(retry_after=0.05))  # the agent's first try
    for product in products:
        product.model.stream = counted(product.model.stream)  # type: ignore[method-assign,assignment]
        product.script_tool_call("send", to=product.name)
        product.script_answer("sent")
    mailers = [Mailer() for _ in products]
    results: dict[str, RunResult] = {}
    events: dict[str, list[FlowEvent]] = {p.name: [] for p in products}

    async def run(product: Product, mailer: Mailer) -> None:
        results[product.name] = await product.run(
            mailer.tools,
            model_rate_limit=limit,
            model_retry=NOW,
            on_event=events[product.name].append,
        )

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for product, mailer in zip(products, mailers, strict=True):
                tg.start_soon(run, product, mailer)
    assert all(r.status == "completed" for r in results.values())
    calls = sum(len(p.model.requests) for p in products)
    assert most == 1 and limit.admitted == calls and limit.in_flight == 0
    assert limit.refused == 1
    (held,) = of(events["agent"], RateLimitChanged)
    assert (held.name, held.reason) == ("shared", "hold")
    assert of(events["loop"], RateLimitChanged) == of(events["status"], RateLimitChanged) == []
    assert [m.sent for m in mailers] == [["loop"], ["agent"], ["status"]]


# -- events and result -------------------------------------------------------------------------


@pytest.mark.parametrize("make", EACH)
async def test_a_completed_run_tells_its_model_calls_tool_calls_checkpoints_and_end(
    make: type[Product],
) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    events: list[FlowEvent] = []
    result = await product.run(mailer.tools, store=MemoryCheckpointStore(), on_event=events.append)
    assert result.stop_reason == "answered"
    assert [e.call_index for e in of(events, ModelCallStarted)] == [0, 1]
    finished = of(events, ModelCallFinished)
    assert [e.call_index for e in finished] == [0, 1] and finished[0].error is None
    assert of(events, CheckpointSaved)
    started, ended = of(events, ToolCallStarted), of(events, ToolCallFinished)
    assert len(started) == 1 and [e.call_id for e in ended] == [started[0].call_id]
    assert started[0].command.tool_name == "send" and ended[0].record == result.records[0]
    (end,) = of(events, RunFinished)
    assert (end.stop_reason, end.records) == (result.stop_reason, len(result.records))
    assert end.usage is not None and end.usage.requests == 2
    assert events.index(end) > max(events.index(e) for e in [*finished, *ended])


@pytest.mark.parametrize("pause", [False, True])
@pytest.mark.parametrize("make", EACH)
async def test_a_recorded_run_replays_through_the_code_as_it_is(
    make: type[Product], pause: bool
) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    options: dict[str, Any] = {"needs_approval": ["send"]} if pause else {}
    recorder = TraceRecorder()
    recorded = await product.run(
        mailer.tools, store=MemoryCheckpointStore(), on_event=recorder, **options
    )
    assert recorded.paused == pause and len(mailer.sent) == (0 if pause else 1)

    again = make()

    async def run(model: ChatModel, tools: ToolRegistry) -> RunResult:
        again.model = model  # type: ignore[assignment]  # the replay's model, not a script
        return await again.run(list(tools), store=MemoryCheckpointStore(), **options)

    replayed = await replay(recorder.trace, run, tools=mailer.tools)
    assert len(mailer.sent) == (0 if pause else 1)  # the tool did not run again
    assert replayed.paused == pause
    assert replayed.records == recorded.records
    # the code changed: the tool's schema now refuses the recorded call
    longer = {"type": "object", "properties": {"to": {"type": "string", "minLength": 5}}}
    strict = Tool(name="send", description="Send.", parameters=longer, function=mailer.send)
    refused = r"send \[\d+\.0\] is refused now|send .* \(not run: .* a call the recording does not"
    with pytest.raises(ReplayMismatch, match=refused):  # (a paused run never ran it)
        await replay(recorder.trace, run, tools=[strict])
    assert len(mailer.sent) == (0 if pause else 1)


async def paused_on_send(make: type[Product]) -> tuple[Any, list[FlowEvent]]:
    """A run of ``make`` paused for a human on a call of ``send``, and its events."""
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    events: list[FlowEvent] = []
    paused = await product.run(
        mailer.tools,
        store=MemoryCheckpointStore(),
        needs_approval=["send"],
        on_event=events.append,
    )
    return paused, events


@pytest.mark.parametrize("make", EACH)
async def test_a_paused_run_ends_its_events_with_the_pause(make: type[Product]) -> None:
    paused, events = await paused_on_send(make)
    assert paused.paused and paused.request is not None
    assert isinstance(events[-1], ExecutionPaused)
    assert of(events, RunFinished) == [] and of(events, ToolCallStarted) == []
    assert [e.call_index for e in of(events, ModelCallStarted)] == [0]


@pytest.mark.parametrize("make", EACH)
async def test_the_pause_event_carries_what_the_run_asks(make: type[Product]) -> None:
    paused, events = await paused_on_send(make)
    assert paused.request is not None
    (pause,) = of(events, ExecutionPaused)
    assert pause.requests == [paused.request.model_dump(mode="json")]
    # worded the same in every product
    assert paused.request.reason == "1 tool call(s) need your approval before they run (send)"
    assert pause.waiting_for == [HUMAN_EVENT]  # one name for it in every product


@pytest.mark.parametrize("make", EACH)
async def test_a_pause_the_store_keeps_is_told_as_a_checkpoint(make: type[Product]) -> None:
    paused, events = await paused_on_send(make)  # its first turn pauses
    assert paused.paused
    own = [e for e in events if type(e) not in ENGINE_EVENTS]
    saved, pause = own[-2:]  # the checkpoint, last before the pause
    assert isinstance(pause, ExecutionPaused)
    assert isinstance(saved, CheckpointSaved) and saved.step == make.pause_step
    assert own.index(saved) > own.index(of(own, ModelCallFinished)[-1])


async def approved_run(make: type[Product]) -> tuple[list[FlowEvent], list[FlowEvent]]:
    """A run of ``make`` that asks for one call of ``send``, paused for its approval, then
    resumed with it: the events of each session."""
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    before: list[FlowEvent] = []
    paused = await product.run(
        mailer.tools, store=store, needs_approval=["send"], on_event=before.append
    )
    assert paused.paused
    after: list[FlowEvent] = []
    done = await product.resume(
        paused.run_id, Approve(), mailer.tools, store=store, on_event=after.append
    )
    assert (done.status, done.stop_reason, mailer.sent) == ("completed", "answered", ["ada"])
    return before, after


@pytest.mark.parametrize("make", EACH)
async def test_a_change_of_status_is_told_once(make: type[Product]) -> None:
    before, after = await approved_run(make)
    told = [e.status for e in of([*before, *after], StatusChanged)]
    assert all(a != b for a, b in itertools.pairwise(told))  # one change, one event
    assert told == list(make.statuses)


@pytest.mark.parametrize("make", EACH)
async def test_a_resumed_run_s_clock_goes_on_from_its_pause(make: type[Product]) -> None:
    before, after = await approved_run(make)
    (pause,) = of(before, ExecutionPaused)
    assert pause.at > 0
    assert after[0].at == pytest.approx(pause.at)  # not 0 again: the time run before counts
    times = [e.at for e in after]
    assert times == sorted(times)


@pytest.mark.parametrize("make", EACH)
async def test_a_recovered_run_s_clock_goes_on_from_its_last_checkpoint(
    make: type[Product],
) -> None:
    """A run cut off after a checkpoint (its model call fails) and recovered: its events go
    on from the time it had run when that checkpoint was taken, not from 0 again."""
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_failure()
    before: list[FlowEvent] = []
    with pytest.raises(product.model_error):
        await product.run(mailer.tools, store=store, run_id="cut", on_event=before.append)
    checkpoint = await store.get("cut")
    assert checkpoint is not None
    ran = checkpoint.snapshot.elapsed  # taken just before its CheckpointSaved was told
    assert 0 < ran <= of(before, CheckpointSaved)[-1].at
    product.script_answer("sent")
    after: list[FlowEvent] = []
    done = await product.recover("cut", mailer.tools, store=store, on_event=after.append)
    assert (done.status, done.stop_reason, mailer.sent) == ("completed", "answered", ["ada"])
    assert after[0].at == pytest.approx(ran)  # the time run up to the checkpoint counts
    times = [e.at for e in after]
    assert times == sorted(times)


@pytest.mark.parametrize("make", EACH)
async def test_a_tool_s_report_is_a_progress_event_of_its_call(make: type[Product]) -> None:
    told: list[str] = []

    async def send(ctx: RunContext[None], to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        told.append(ctx.call_id)
        ctx.report("sending", to=to)
        return f"sent to {to}"

    product = make()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    events: list[FlowEvent] = []
    result = await product.run([send], on_event=events.append)
    assert result.stop_reason == "answered"
    (progress,) = of(events, ToolProgress)
    (started,) = of(events, ToolCallStarted)
    assert (progress.message, progress.data, progress.tool_name) == (
        "sending",
        {"to": "ada"},
        "send",
    )
    assert progress.execution_id == result.run_id
    assert progress.round_index == started.round_index  # the turn of the call it reports on
    assert started.call_id  # the call it reports on, by the id the events tell it by
    assert told == [started.call_id] and progress.call_id == started.call_id
    assert progress.purpose == started.command.purpose
    assert (
        events.index(started)
        < events.index(progress)
        < events.index(of(events, ToolCallFinished)[0])
    )


@pytest.mark.parametrize("make", EACH)
async def test_the_result_is_the_kernel_s_run_result(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    product.script_answer("Ada has her mail.")
    result = await product.run(mailer.tools)
    assert isinstance(result, RunResult)
    assert isinstance(result.run_id, str) and result.run_id
    assert (result.status, result.paused, result.stop_reason, result.request) == (
        "completed",
        False,
        "answered",
        None,
    )
    assert result.usage.requests == 2
    (record,) = result.records
    assert isinstance(record, ToolExecutionRecord)
    assert (record.tool_name, record.kwargs, record.success, record.result) == (
        "send",
        {"to": "ada"},
        True,
        "sent to ada",
    )
    assert result.text == "Ada has her mail."


class Receipt(BaseModel):
    """Who has their mail."""

    to: str


@pytest.mark.parametrize("make", EACH)
async def test_a_structured_answer_is_retried_counted_and_kept(make: type[Product]) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.response_format = Receipt
    product.script_tool_call("send", to="ada")
    if product.answers_before_structured:
        product.script_answer("Ada has her mail.")
    product.script_structured("Receipt", to=["ada"])  # fails the schema: sent back
    product.script_structured("Receipt", to="ada")
    done = await product.run(mailer.tools, store=store)
    assert (done.status, mailer.sent) == ("completed", ["ada"])
    assert done.structured_response == Receipt(to="ada")  # the same field of every result
    assert done.text is not None and Receipt.model_validate_json(done.text) == Receipt(to="ada")
    assert done.usage.requests == len(product.model.requests)  # every try counted
    told = product.model.requests[-1].messages
    assert any(m["role"] == "tool" and "does not fit Receipt" in str(m["content"]) for m in told), (
        told
    )
    again = await product.recover(done.run_id, mailer.tools, store=store)
    assert to_jsonable_python(again.structured_response) == {"to": "ada"}
    assert again.usage == done.usage and mailer.sent == ["ada"]


# -- the sync twins -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("make", EACH)
def test_the_sync_twins_take_the_same_options_on_either_backend(
    make: type[Product], backend: Backend
) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    paused = product.run_sync(
        mailer.tools,
        backend=backend,
        store=store,
        needs_approval=["send"],
        usage_limits=UsageLimits(max_requests=5),
        max_turns=4,
    )
    assert paused.paused and mailer.sent == []
    done = product.resume_sync(paused.run_id, Approve(), mailer.tools, backend=backend, store=store)
    assert (done.status, done.stop_reason) == ("completed", "answered")
    assert mailer.sent == ["ada"] and done.usage.requests == 2

    # a run whose model call failed is recovered: the call is made again
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_failure()
    with pytest.raises(product.model_error):
        product.run_sync(mailer.tools, backend=backend, store=store, run_id="failed")
    stored = anyio.run(store.get, "failed", backend=backend)
    assert stored is not None and stored.status == "failed"
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    recovered = product.recover_sync("failed", mailer.tools, backend=backend, store=store)
    assert (recovered.status, recovered.stop_reason) == ("completed", "answered")
    assert mailer.sent == ["ada"] and len(product.model.requests) == 3


# -- streaming ---------------------------------------------------------------------------------


class Gate:
    """``send`` waits for ``gate`` (set by the test once it saw the call start), or, with
    ``hold``, forever; ``inside`` is set once it waits, ``cancelled`` notes a cancellation
    and ``left`` is set when the call ends, however it ends."""

    def __init__(self, *, hold: bool = False) -> None:
        self.gate = anyio.Event()
        self.inside = anyio.Event()
        self.left = anyio.Event()
        self.hold = hold
        self.sent: list[str] = []
        self.cancelled: list[str] = []

    async def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.inside.set()
        try:
            if self.hold:
                await anyio.sleep_forever()
            await self.gate.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(to)
            raise
        finally:
            self.left.set()
        self.sent.append(to)
        return f"sent to {to}"

    @property
    def tools(self) -> list[Callable[..., Any]]:
        return [self.send]


async def read(stream: RunStream[Any]) -> list[FlowEvent]:
    """Every event of ``stream``, to its end (a hang guard: 10 s)."""
    with anyio.fail_after(10):
        return [event async for event in stream]


@pytest.mark.parametrize("make", EACH)
async def test_a_stream_tells_the_events_while_the_run_is_in_progress(
    make: type[Product],
) -> None:
    product, gated = make(), Gate()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    events: list[FlowEvent] = []
    with anyio.fail_after(10):  # a hang guard
        async with product.stream(gated.tools) as run:
            async for event in run:
                events.append(event)
                if isinstance(event, ToolCallStarted):
                    # the tool waits for the gate, which only this reader opens: the run is
                    # still in progress while its events arrive
                    await gated.inside.wait()
                    assert gated.sent == [] and not of(events, ToolCallFinished)
                    with pytest.raises(RuntimeError, match="the run has not finished"):
                        run.result  # noqa: B018
                    gated.gate.set()
    result = run.result
    assert (result.status, result.stop_reason, gated.sent) == ("completed", "answered", ["ada"])
    (started,) = of(events, ToolCallStarted)
    (finished,) = of(events, ToolCallFinished)
    (end,) = of(events, RunFinished)
    assert events.index(started) < events.index(finished) < events.index(end)
    assert finished.record == result.records[0]


@pytest.mark.parametrize("make", EACH)
async def test_a_stream_s_result_is_what_run_returns(make: type[Product]) -> None:
    results: list[RunResult] = []
    for streamed in (False, True):
        product, mailer = make(), Mailer()
        product.script_tool_call("send", to="ada")
        product.script_answer("sent")
        options: dict[str, Any] = {"run_id": "same", "store": MemoryCheckpointStore()}
        if streamed:
            async with product.stream(mailer.tools, **options) as run:
                await read(run)
            results.append(run.result)
        else:
            results.append(await product.run(mailer.tools, **options))
    ran, streamed_result = results
    assert type(streamed_result) is type(ran)
    assert stable(streamed_result.model_dump(mode="json")) == stable(ran.model_dump(mode="json"))


def stable(data: Any) -> Any:
    """``data`` without what differs from one run to the next: times, and the message ids
    the middleware agent makes up."""
    if isinstance(data, dict):
        return {
            key: "msg" if key == "id" and str(value).startswith("msg_") else stable(value)
            for key, value in data.items()
            if key not in ("at", "started", "ended", "duration")
        }
    if isinstance(data, list):
        return [stable(value) for value in data]
    return data


@pytest.mark.parametrize("make", EACH)
async def test_leaving_a_stream_early_cancels_the_run(make: type[Product]) -> None:
    product, gated = make(), Gate(hold=True)
    product.script_tool_call("send", to="ada")
    with anyio.fail_after(10):  # a hang guard
        async with product.stream(gated.tools) as run:
            async for event in run:
                if isinstance(event, ToolCallStarted):
                    await gated.inside.wait()
                    break
    # the block was left once the run's task ended: the tool saw its cancellation by then
    assert gated.left.is_set() and gated.cancelled == ["ada"] and gated.sent == []
    with pytest.raises(RuntimeError, match="cancelled when its block was left"):
        run.result  # noqa: B018


@pytest.mark.parametrize("make", EACH)
async def test_a_stream_raises_the_run_s_error_as_its_block_exits(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_failure()
    events: list[FlowEvent] = []

    async def consume() -> None:
        async with product.stream(mailer.tools) as run:
            events.extend(await read(run))  # the events end: the run is over
            with pytest.raises(RuntimeError, match=r"the run raised \w+, so it has no result"):
                run.result  # noqa: B018

    with pytest.raises(product.model_error):
        await consume()
    assert [e.call_index for e in of(events, ModelCallFinished)] == [0]
    assert of(events, ModelCallFinished)[0].error is not None
    assert of(events, RunFinished) == []


@pytest.mark.parametrize("make", EACH)
async def test_an_error_of_the_stream_s_block_is_raised_as_it_is(make: type[Product]) -> None:
    product, gated = make(), Gate(hold=True)
    product.script_tool_call("send", to="ada")

    async def consume() -> None:
        async with product.stream(gated.tools) as run:
            async for event in run:
                if isinstance(event, ToolCallStarted):
                    await gated.inside.wait()
                    raise LookupError("mine")

    with anyio.fail_after(10), pytest.raises(LookupError, match=r"^mine$"):  # in no group
        await consume()
    assert gated.cancelled == ["ada"]  # the run was cancelled


@pytest.mark.parametrize("make", EACH)
async def test_a_stream_gives_every_event_to_the_caller_s_on_event_too(
    make: type[Product],
) -> None:
    for engine_events in (True, False):
        product, mailer = make(), Mailer()
        product.script_tool_call("send", to="ada")
        product.script_answer("sent")
        seen: list[FlowEvent] = []
        async with product.stream(
            mailer.tools, on_event=seen.append, engine_events=engine_events
        ) as run:
            streamed = await read(run)
        assert run.result.status == "completed"
        assert any(type(e) in ENGINE_EVENTS for e in seen)  # on_event sees the engine's
        if engine_events:
            assert streamed == seen
        else:  # the run's own events only: model and tool calls, progress, the end
            assert streamed == [e for e in seen if type(e) not in ENGINE_EVENTS]
            assert of(streamed, ToolCallStarted) and of(streamed, ModelCallStarted)
            assert isinstance(streamed[-1], RunFinished)


@pytest.mark.parametrize("make", EACH)
async def test_a_paused_run_streams_its_pause_and_its_resume_streams_the_rest(
    make: type[Product],
) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    async with product.stream(
        mailer.tools, store=store, needs_approval=["send"], engine_events=False
    ) as run:
        paused_events = await read(run)
    paused = run.result
    assert paused.status == "paused" and paused.request is not None and mailer.sent == []
    pause = paused_events[-1]  # the last event, the only pause
    assert isinstance(pause, ExecutionPaused) and of(paused_events, ExecutionPaused) == [pause]
    assert pause.requests == [paused.request.model_dump(mode="json")]

    async with product.stream_resume(
        paused.run_id, Approve(), mailer.tools, store=store, engine_events=False
    ) as resumed:
        events = await read(resumed)
    done = resumed.result
    assert (done.status, done.stop_reason, mailer.sent) == ("completed", "answered", ["ada"])
    (started,) = of(events, ToolCallStarted)
    assert started.call_id == paused.request.tool_calls[0].call_id
    assert isinstance(events[-1], RunFinished) and events[-1].stop_reason == "answered"


@pytest.mark.parametrize("make", EACH)
async def test_a_recovered_run_streams_too(make: type[Product]) -> None:
    product, mailer, store = make(), Mailer(), MemoryCheckpointStore()
    product.script_failure()
    with pytest.raises(product.model_error):
        await product.run(mailer.tools, store=store, run_id="failed")
    product.script_tool_call("send", to="ada")
    product.script_answer("sent")
    async with product.stream_recover("failed", mailer.tools, store=store) as run:
        events = await read(run)
    recovered = run.result
    assert (recovered.status, recovered.stop_reason, mailer.sent) == (
        "completed",
        "answered",
        ["ada"],
    )
    assert recovered.run_id == "failed"
    assert of(events, ToolCallFinished)[0].record == sends(recovered)[0]
    (end,) = of(events, RunFinished)
    assert end.records == len(recovered.records)


# -- bad values, kept or refused the same in every product ----------------------------------------


class Odd:
    """Tools whose values or arguments JSON cannot hold as they are."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def raw(self) -> bytes:
        """Bytes that are no UTF-8."""
        self.ran.append("raw")
        return b"\xff\xfe"

    def loop(self) -> dict[str, Any]:
        """A dict that contains itself."""
        self.ran.append("loop")
        cycle: dict[str, Any] = {}
        cycle["self"] = cycle
        return cycle

    def keep(self, data: dict[str, Any]) -> str:
        """Keep any data.

        Args:
            data: what to keep.
        """
        self.ran.append("keep")
        return "kept"

    @property
    def tools(self) -> list[Callable[..., Any]]:
        return [self.raw, self.loop, self.keep]


@pytest.mark.parametrize("make", EACH)
async def test_a_durable_run_keeps_a_tool_value_json_cannot_hold(make: type[Product]) -> None:
    product, odd, store = make(), Odd(), MemoryCheckpointStore()
    product.script_tool_call("raw")
    product.script_tool_call("loop")
    product.script_answer("kept them")
    result = await product.run(odd.tools, store=store, run_id="odd")
    assert (result.status, result.stop_reason, odd.ran) == (
        "completed",
        "answered",
        ["raw", "loop"],
    )
    assert [r.success for r in result.records] == [True, True]
    assert result.records[0].result == b"\xff\xfe"  # the value as it came, in memory
    stored = await store.get("odd")  # and the store reads back what it kept
    assert stored is not None and stored.status == "completed"
    again = await product.recover("odd", odd.tools, store=store)
    assert again.text == "kept them" and odd.ran == ["raw", "loop"]


@pytest.mark.parametrize("make", EACH)
async def test_arguments_no_journal_can_keep_never_run_and_the_run_stays_readable(
    make: type[Product],
) -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(200):
        inner["x"] = {}
        inner = inner["x"]
    product, odd, store = make(), Odd(), MemoryCheckpointStore()
    product.script_tool_call("keep", data=deep)
    product.script_answer("could not")
    result = await product.run(odd.tools, store=store, run_id="deep")
    assert odd.ran == []  # never run
    (record,) = result.records
    assert not record.success and "64 levels" in str(record.error)
    assert await store.get("deep") is not None  # the run's checkpoint reads back


@pytest.mark.parametrize("make", EACH)
async def test_a_call_that_cannot_run_is_not_put_to_a_human(make: type[Product]) -> None:
    product, mailer = make(), Mailer()
    product.script_tool_call("send", to=5)  # off the schema: ``to`` is a str
    product.script_answer("it failed")
    result = await product.run(mailer.tools, store=MemoryCheckpointStore(), needs_approval=True)
    assert mailer.sent == []
    if result.request is not None:  # the status agent puts failed calls to a review
        assert product.reviews_failed_calls and result.request.kind == "review"
    (record,) = result.records
    assert not record.success and "do not fit its schema" in str(record.error)


@pytest.mark.parametrize("make", EACH)
async def test_an_approval_rule_that_raises_puts_the_call_to_a_human(
    make: type[Product],
) -> None:
    def over_100(call: RequestedCall) -> bool:
        return bool(call.arguments["amount"] > 100)  # ``send`` has no amount: KeyError

    product, mailer = make(), Mailer()
    product.script_tool_call("send", to="ada")
    paused = await product.run(mailer.tools, store=MemoryCheckpointStore(), needs_approval=over_100)
    assert mailer.sent == [] and paused.paused and paused.request is not None
    (asked,) = paused.request.tool_calls
    assert "the approval rule raised KeyError" in asked.why


# -- big results kept whole --------------------------------------------------------------------

PAGE = "".join(f"{i:06d}" for i in range(1000))
"""A result of 6,000 characters, each slice of it telling where it is."""


async def fetch() -> str:
    """Fetch the page."""
    return PAGE


def sliced(record: ToolExecutionRecord) -> str:
    """The text a ``read_result`` record holds (after its first line, which says where)."""
    assert record.tool_name == "read_result" and record.success, record.error
    head, _, text = record.result.partition("\n")
    assert head.startswith("[r:")
    return str(text)


@pytest.mark.parametrize("make", EACH)
async def test_a_long_result_is_kept_whole_and_read_by_slices(make: type[Product]) -> None:
    product = make()
    product.script_tool_call("fetch")
    product.script_tool_call("read_result", handle=product.handles[0], offset=2000, length=30)
    product.script_tool_call("read_result", handle=product.handles[0], offset=5990)
    product.script_answer("read")
    events: list[FlowEvent] = []
    result = await product.run([fetch], on_event=events.append)
    fetched, first, last = result.records
    assert fetched.result == PAGE  # kept whole
    assert sliced(first) == PAGE[2000:2030]
    assert sliced(last) == PAGE[5990:]
    assert "of 6,000; the end of the result" in last.result
    (kept,) = of(events, ResultKept)
    assert (kept.tool_name, kept.handle, kept.shown, kept.total) == (
        "fetch",
        product.handles[0],
        2000,
        6000,
    )
    (finished,) = [e for e in of(events, ToolCallFinished) if e.record.tool_name == "fetch"]
    assert kept.call_id == finished.call_id


def strings(value: Any) -> list[str]:
    """The strings of ``value``, those of JSON text in it too."""
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return [value]
        return strings(inner) if isinstance(inner, (dict, list)) else [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return []


def shown(product: Product, k: int) -> tuple[str, list[str]]:
    """What the ``k``-th model call (the status agent: decision) of the run was shown: the
    texts of its prompt and the names of the tools it was offered."""
    if isinstance(product, Status):
        view = product.views[k]
        request = LLMStatusSteps(product.model).request("decide", view)  # its model's prompt
        return "\n".join(strings(request.messages)), [t["name"] for t in view.tools]
    request = product.model.requests[k]
    text = "\n".join(strings(request.messages))
    if request.tools:
        return text, [t["function"]["name"] for t in request.tools]
    schema = request.structured_output
    assert schema is not None  # the loop's planner: the tools are the plan's schema's
    return text, re.findall(r'"enum": \["(\w+)"\]', json.dumps(schema.schema))


@pytest.mark.parametrize("make", EACH)
async def test_the_model_is_shown_the_head_and_offered_read_result_once_a_result_is_cut(
    make: type[Product],
) -> None:
    product = make()
    product.script_tool_call("fetch")
    product.script_answer("read")
    await product.run([fetch])
    before, offered_before = shown(product, 0)
    after, offered_after = shown(product, 1)
    assert offered_before == ["fetch"] and "read_result" not in before
    assert offered_after == ["fetch", "read_result"]
    handle = product.handles[0]
    line = (
        "[cut for the model: shown 2,000 of 6,000 characters; read the rest with "
        f'read_result(handle="{handle}", offset=2000)]'
    )
    assert line in after
    assert PAGE[:2000] in after and PAGE[2000:2100] not in after


@pytest.mark.parametrize("make", EACH)
async def test_a_slice_out_of_range_is_a_failed_call_that_says_why(make: type[Product]) -> None:
    product = make()
    product.script_tool_call("fetch")
    product.script_tool_call("read_result", handle=product.handles[0], offset=6000)
    product.script_tool_call("read_result", handle="r:nothing")
    product.script_tool_call("read_result", handle=product.handles[0], offset=-1)
    product.script_answer("gave up")
    result = await product.run([fetch], needs_approval=())
    reads = [r for r in result.records if r.tool_name == "read_result"]
    if isinstance(product, Status):  # its first failed call goes to a human's review
        (past,) = reads
        assert not past.success and "offset 6,000 is past the end" in str(past.error)
        return
    past, unknown, negative = reads
    assert not past.success and "offset 6,000 is past the end" in str(past.error)
    assert "has 6,000 characters" in str(past.error)
    assert not unknown.success and "no kept result has the handle 'r:nothing'" in str(unknown.error)
    assert not negative.success and "offset" in str(negative.error)
    assert "do not fit its schema" in str(negative.error)  # refused before it ran


@pytest.mark.parametrize("make", EACH)
@pytest.mark.parametrize("backend_store", ["memory", "sqlite"])
async def test_a_resumed_run_reads_the_results_kept_before_its_pause(
    make: type[Product], backend_store: str, tmp_path: Any
) -> None:
    from toolloop.checkpoints import SQLiteCheckpointStore

    product, mailer = make(), Mailer()
    store: CheckpointStore = (
        MemoryCheckpointStore()
        if backend_store == "memory"
        else SQLiteCheckpointStore(str(tmp_path / "runs.db"))
    )
    product.script_tool_call("fetch")
    product.script_tool_call("send", to="ada")
    tools = [fetch, *mailer.tools]
    paused = await product.run(tools, store=store, needs_approval=["send"])
    assert paused.paused
    product.script_tool_call("read_result", handle=product.handles[0], offset=4000, length=12)
    product.script_answer("done")
    done = await product.resume(paused.run_id, Approve(), tools, store=store)
    assert done.status == "completed" and mailer.sent == ["ada"]
    (slice_,) = [r for r in done.records if r.tool_name == "read_result"]
    assert sliced(slice_) == PAGE[4000:4012]


@pytest.mark.parametrize("make", EACH)
async def test_a_tool_of_the_built_in_s_name_is_refused_unless_nothing_is_cut(
    make: type[Product],
) -> None:
    def read_result(handle: str) -> str:
        """Mine.

        Args:
            handle: a handle.
        """
        return f"mine: {handle}"

    product = make()
    with pytest.raises(ToolDefinitionError, match="max_result_chars=None"):
        await product.run([read_result])
    product.script_tool_call("read_result", handle="x")
    product.script_answer("ok")
    result = await product.run([read_result], max_result_chars=None)
    (record,) = result.records
    assert record.result == "mine: x"


@pytest.mark.parametrize("make", EACH)
async def test_with_no_limit_a_result_is_shown_whole_and_nothing_is_kept(
    make: type[Product],
) -> None:
    product = make()
    product.script_tool_call("fetch")
    product.script_tool_call("read_result", handle=product.handles[0])
    product.script_answer("ok")
    events: list[FlowEvent] = []
    result = await product.run([fetch], max_result_chars=None, on_event=events.append)
    assert of(events, ResultKept) == []
    reads = [r for r in result.records if r.tool_name == "read_result"]
    assert not reads[0].success and "max_result_chars is None" in str(reads[0].error)


async def bad() -> Any:
    """Return what JSON cannot hold, and much of it."""
    cycle: list[Any] = [float("nan")]
    cycle.append(cycle)
    return {"bytes": b"\xff" * 1000, "cycle": cycle, "n": float("inf"), "text": "x" * 20_000_000}


@pytest.mark.parametrize("make", EACH)
async def test_a_huge_odd_result_is_kept_and_read_without_a_crash(make: type[Product]) -> None:
    product = make()
    product.script_tool_call("bad")
    product.script_tool_call("read_result", handle=product.handles[0], offset=0, length=40)
    product.script_answer("ok")
    events: list[FlowEvent] = []
    result = await product.run([bad], on_event=events.append)
    first = result.records[1]
    assert sliced(first).startswith('{"bytes": "\\\\xff\\\\xff')
    (kept,) = of(events, ResultKept)
    assert kept.total > 20_000_000


async def test_read_result_outside_a_run_that_keeps_results_says_there_is_nothing_to_read() -> None:
    from toolloop.kernel import ReadResultError, read_result_tool

    with pytest.raises(ReadResultError, match="keeps no long results"):
        await read_result_tool().execute({"handle": "r:0"})
