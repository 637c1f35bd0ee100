"""The status agent as a product of the run kernel: its options (defaults, per-call
overrides), budgets across pauses and recoveries, what a timeout does, max_turns,
model_timeout, the sync twins, the events every run publishes and the result base."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from status_support import (
    Scripted,
    Tools,
    call,
    calls,
    finish,
    make_agent,
    path_of,
    paying_step,
    ten_tokens,
)

from toolloop.checkpoints import Approve, MemoryCheckpointStore, Stop
from toolloop.errors import (
    ExecutionTimeoutError,
    ModelCallError,
    StepFailedError,
    UsageLimitError,
)
from toolloop.flow import ExecutionPaused, FlowEvent
from toolloop.kernel import (
    CheckpointSaved,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunResult,
)
from toolloop.models import UsageLimits
from toolloop.runner import RunResult as ResultFamily
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.status_agent import StatusAgent, StatusAgentResult, StatusChanged
from toolloop.testing import ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio

MAIL = calls(call("send_mail", "tell Ada", to="ada", body="hi"))


async def hang(view: Any) -> Any:
    """A step (or a tool) that never ends on its own."""
    await anyio.sleep_forever()


# -- budgets ---------------------------------------------------------------------------------


def default_steps_model() -> ScriptedChatModel:
    """Answers the default steps of a run that needs no tool: analysis, plan, answer."""
    usage = {"prompt_tokens": 4, "completion_tokens": 1}
    return ScriptedChatModel(
        [
            ScriptedChatReply("a greeting", usage=usage),
            ScriptedChatReply(json.dumps({"steps": []}), usage=usage),
            ScriptedChatReply("Hello, Ada!", usage=usage),
        ]
    )


async def test_a_spent_budget_raises_or_finishes_the_run() -> None:
    model = default_steps_model()
    agent = StatusAgent(model=model, usage_limits=UsageLimits(max_requests=1))
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await agent.run("hi", run_id="r")
    assert len(model.requests) == 1  # the plan's call was not made
    stored = await agent.store.get("r")
    assert stored is not None and stored.status == "failed"  # recover it, with more budget

    model = default_steps_model()
    agent = StatusAgent(
        model=model, usage_limits=UsageLimits(max_requests=1), on_usage_limit="finish"
    )
    events: list[FlowEvent] = []
    result = await agent.run("hi", run_id="r", on_event=events.append)
    assert (result.status, result.stop_reason, result.text) == ("completed", "usage_limit", None)
    assert result.state.stop_reason == "usage_limit"
    assert result.usage.requests == 1 and len(model.requests) == 1
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["usage_limit"]
    stored = await agent.store.get("r")
    assert stored is not None and stored.status == "completed"
    assert (stored.result["text"], stored.result["stop_reason"]) == (None, "usage_limit")


async def test_the_budget_holds_across_a_pause() -> None:
    def paused_agent(model: ScriptedChatModel, tools: Tools) -> StatusAgent:
        return make_agent(
            tools,
            analyze=paying_step(model, "mail ada"),
            plan=paying_step(model, ["mail"]),
            decide=Scripted(MAIL, finish("sent")),
            reflect=paying_step(model, {"verdict": "finish"}),
            needs_approval=["send_mail"],
        )

    model, tools = ten_tokens(), Tools()
    agent = paused_agent(model, tools)
    paused = await agent.run("mail ada", run_id="r")
    assert paused.paused and paused.usage.requests == 2
    # the resume's budget counts the two calls made before the pause
    budget = UsageLimits(max_requests=2)
    with pytest.raises(UsageLimitError, match="max_requests=2"):
        await agent.resume("r", Approve(), usage_limits=budget)
    assert len(model.requests) == 2 and len(tools.calls) == 1  # the tool ran, reflect did not

    model, tools = ten_tokens(), Tools()
    agent = paused_agent(model, tools)
    await agent.run("mail ada", run_id="r")
    done = await agent.resume("r", Approve(), usage_limits=budget, on_usage_limit="finish")
    assert (done.status, done.stop_reason) == ("completed", "usage_limit")
    assert (done.usage.requests, done.usage.total_tokens) == (2, 20)
    assert len(model.requests) == 2 and done.records[0].success


async def test_the_budget_holds_across_a_recovery() -> None:
    def failing_agent(model: ScriptedChatModel, **options: Any) -> StatusAgent:
        plan = Scripted(
            paying_step(model, ValueError("no plan in that answer")),
            *[paying_step(model, [])] * 2,  # asked again by each recovery: over the budget
        )
        return make_agent(analyze=paying_step(model, "hi"), plan=plan, **options)

    model = ten_tokens()
    agent = failing_agent(model)
    with pytest.raises(StepFailedError, match="no plan in that answer"):
        await agent.run("hi", run_id="r")
    budget = UsageLimits(max_requests=2)  # both calls were made (one by the failed step)
    with pytest.raises(UsageLimitError):
        await agent.recover("r", usage_limits=budget)
    assert len(model.requests) == 2
    # failed again: a recovery with the budget finishing the run ends it there
    done = await agent.recover("r", usage_limits=budget, on_usage_limit="finish")
    assert (done.stop_reason, done.usage.requests, len(model.requests)) == ("usage_limit", 2, 2)
    # and the agent's own budget is the default of every call
    agent = failing_agent(ten_tokens(), usage_limits=budget, on_usage_limit="finish")
    with pytest.raises(StepFailedError):
        await agent.run("hi", run_id="r")
    assert (await agent.recover("r")).stop_reason == "usage_limit"


# -- timeouts and max_turns ----------------------------------------------------------------


async def test_a_timeout_finishes_the_run_when_asked() -> None:
    events: list[FlowEvent] = []
    agent = make_agent(plan=Scripted([], []), converse=hang, on_timeout="finish")
    result = await agent.run("x", run_id="r", timeout=0.1, on_event=events.append)
    assert (result.status, result.stop_reason, result.text) == ("completed", "timeout", None)
    assert path_of(result) == ["analysis:analysis_completed", "planning:conversation_ready"]
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["timeout"]
    stored = await agent.store.get("r")
    assert stored is not None and stored.status == "completed"
    # the same run with on_timeout="raise" (this call's option): it fails, to be recovered
    with pytest.raises(ExecutionTimeoutError):
        await agent.run("x", run_id="r2", timeout=0.1, on_timeout="raise")
    failed = await agent.store.get("r2")
    assert failed is not None and failed.status == "failed"


async def test_a_timeout_that_cuts_tools_off_keeps_their_records() -> None:
    tools_started = anyio.Event()

    async def deploy(version: str) -> str:
        """Deploy.

        Args:
            version: which.
        """
        tools_started.set()
        await anyio.sleep_forever()
        raise AssertionError("never")

    agent = StatusAgent(
        tools=[deploy],
        analyze=lambda view: "",
        plan=lambda view: ["deploy"],
        decide=Scripted(calls(call("deploy", version="1.2"))),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "",
        on_timeout="finish",
        timeout=0.2,
    )
    result = await agent.run("deploy")
    assert tools_started.is_set()
    assert result.stop_reason == "timeout"
    (record,) = result.state.records
    assert (record.call_id, record.source, record.record.success) == (
        "call-1",
        "interrupted",
        False,
    )
    assert "deploy" in str(record.record.error)


async def test_max_turns_holds_across_a_pause() -> None:
    tools = Tools()
    agent = make_agent(tools, decide=Scripted(MAIL), needs_approval=True, max_turns=4)
    paused = await agent.run("mail Ada")
    assert paused.paused and paused.state.steps == 4
    done = await agent.resume(paused.run_id, Approve())
    assert (done.stop_reason, done.state.steps) == ("max_turns", 4)  # the bound, exactly
    assert done.state.stop_detail is not None and "(max_turns)" in done.state.stop_detail
    assert tools.calls == []
    # a call's own max_turns over the agent's
    result = await make_agent(max_turns=4).run("x", max_turns=2)
    assert (result.stop_reason, len(result.state.history)) == ("max_turns", 2)


async def test_model_timeout_fails_a_step_as_a_model_error() -> None:
    decide = Scripted(hang, finish("in time"))
    agent = make_agent(decide=decide, model_timeout=0.1)
    with pytest.raises(StepFailedError) as info:
        await agent.run("x", run_id="r")
    assert isinstance(info.value.__cause__, ModelCallError)
    said = "the decide step did not finish within 0.1 s (model_timeout)"
    assert said in str(info.value)
    result = await agent.recover("r")  # the step is asked again
    assert (result.text, len(decide.views)) == ("in time", 2)
    # the conversation's failure goes to a human, as a model error there does
    agent = make_agent(plan=Scripted([]), converse=hang, model_timeout=0.1)
    paused = await agent.run("hi")
    assert paused.request is not None and paused.request.kind == "review"
    assert "ModelCallError: the converse step did not finish within 0.1 s" in (
        paused.request.reason
    )


# -- per-call options ------------------------------------------------------------------------


async def test_a_call_s_options_override_the_agent_s() -> None:
    met = anyio.Event()

    async def meet(name: str) -> str:
        """Wait for the other one.

        Args:
            name: who.
        """
        if name == "a":
            with anyio.fail_after(10):  # a hang guard: b runs beside a only at concurrency 2
                await met.wait()
        else:
            met.set()
        return name

    agent = StatusAgent(
        tools=[meet],
        analyze=lambda view: "",
        plan=lambda view: ["meet"],
        decide=Scripted(calls(call("meet", name="a"), call("meet", name="b"))),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "",
        concurrency=1,
    )
    result = await agent.run("meet", concurrency=2)
    assert [r.result for r in result.records] == ["a", "b"]

    tools = Tools()
    other = MemoryCheckpointStore()
    agent = make_agent(tools, decide=Scripted(MAIL, finish("sent")), needs_approval=True)
    paused = await agent.run("mail", run_id="r", store=other)
    assert await agent.store.get("r") is None and await other.get("r") is not None
    assert await agent.request("r", store=other) == paused.request
    done = await agent.resume("r", Approve(), store=other)
    assert done.status == "completed" and len(tools.calls) == 1
    with pytest.raises(ValueError, match="names another run than the one continued"):
        await agent.resume("r", Approve(), run_id="x")
    with pytest.raises(TypeError, match=r"no run option named 'concurency'; did you mean"):
        await agent.run("x", concurency=2)  # type: ignore[call-arg]


async def test_a_call_s_tool_timeout() -> None:
    agent = StatusAgent(
        tools=[hang_tool],
        analyze=lambda view: "",
        plan=lambda view: ["wait"],
        decide=Scripted(calls(call("hang_tool"))),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "",
    )
    paused = await agent.run("wait", tool_timeout=0.1)  # a failed call: the review
    (record,) = paused.records
    assert record.error == "tool 'hang_tool' did not finish within 0.1 s; it was cancelled"


async def hang_tool() -> str:
    """Never ends."""
    await anyio.sleep_forever()
    raise AssertionError("never")


# -- the sync twins --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_sync_twins(backend: Any) -> None:
    tools = Tools()
    agent = make_agent(tools, decide=Scripted(MAIL, finish("sent")), needs_approval=["send_mail"])
    paused = agent.run_sync("mail Ada", run_id="r", backend=backend)
    assert paused.paused and tools.calls == []
    done = agent.resume_sync("r", Approve(), backend=backend)
    assert done.status == "completed" and len(tools.calls) == 1

    reflect = Scripted(RuntimeError("model overloaded"), {"verdict": "finish", "answer": "ok"})
    agent = make_agent(decide=Scripted(MAIL), reflect=reflect)
    with pytest.raises(StepFailedError, match="model overloaded"):
        agent.run_sync("x", run_id="r", backend=backend)
    assert agent.recover_sync("r", backend=backend).text == "ok"


async def test_the_sync_twins_refuse_a_running_event_loop(anyio_backend: str) -> None:
    agent = make_agent()
    with pytest.raises(
        RuntimeError, match=f"run_sync\\(\\) was called inside a running {anyio_backend}"
    ):
        agent.run_sync("x")
    with pytest.raises(RuntimeError, match=r"use `await agent\.resume"):
        agent.resume_sync("r", Approve())
    with pytest.raises(RuntimeError, match=r"use `await agent\.recover"):
        agent.recover_sync("r")


# -- events and result -----------------------------------------------------------------------


async def test_a_run_tells_its_model_calls_checkpoints_and_end() -> None:
    events: list[FlowEvent] = []
    result = await StatusAgent(model=default_steps_model()).run("hi", on_event=events.append)
    assert result.text == "Hello, Ada!"
    assert [e.call_index for e in events if isinstance(e, ModelCallStarted)] == [0, 1, 2]
    finished = [e for e in events if isinstance(e, ModelCallFinished)]
    assert [e.text for e in finished] == ["a greeting", '{"steps": []}', "Hello, Ada!"]
    assert all(e.usage is not None and e.usage.total_tokens == 5 for e in finished)
    nodes = [t.node for t in result.state.history]
    assert [e.node for e in events if isinstance(e, StatusChanged)] == nodes
    assert [e.step for e in events if isinstance(e, CheckpointSaved)] == nodes
    for changed, saved in zip(
        [e for e in events if isinstance(e, StatusChanged)],
        [e for e in events if isinstance(e, CheckpointSaved)],
        strict=True,
    ):
        assert events.index(changed) < events.index(saved)
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert (end.stop_reason, end.records, end.turns) == ("answered", 0, 3)
    assert end.usage is not None and end.usage.requests == 3
    assert events.index(end) == len(events) - 2 and events[-1].kind == "execution_finished"
    assert all(e.execution_id == result.run_id for e in events)


async def test_a_paused_run_ends_with_the_engine_s_pause_and_its_request() -> None:
    events: list[FlowEvent] = []
    agent = make_agent(decide=Scripted(MAIL, finish("sent")), needs_approval=["send_mail"])
    paused = await agent.run("mail Ada", on_event=events.append)
    last = events[-1]
    assert isinstance(last, ExecutionPaused)
    assert paused.request is not None and last.requests == [paused.request.model_dump(mode="json")]
    kinds = [e.kind for e in events]
    assert "human_input_requested" not in kinds and "run_finished" not in kinds
    assert "checkpoint_saved" in kinds
    # the request's call ids are the events' and the decisions'
    events.clear()
    done = await agent.resume(paused.run_id, Approve(), on_event=events.append)
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    ended = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [e.call_id for e in started] == [c.call_id for c in paused.request.tool_calls]
    assert events.index(ended[0]) == events.index(started[0]) + 1
    assert [e.call_id for e in ended] == ["call-1"] and ended[0].source == "ran"
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["answered"]
    assert done.records[0].success


async def test_the_result_is_the_kernel_s_run_result() -> None:
    tools = Tools()
    agent = make_agent(tools, decide=Scripted(MAIL, finish("sent")), needs_approval=True)
    paused = await agent.run("mail Ada")
    assert isinstance(paused, RunResult) and isinstance(paused, ResultFamily)
    assert (paused.status, paused.paused, paused.stop_reason, paused.text) == (
        "paused",
        True,
        None,
        None,
    )
    done = await agent.resume(paused.run_id, Stop(message="not today"))
    assert isinstance(done, StatusAgentResult) and isinstance(done, RunResult)
    assert (done.text, done.stop_reason, done.records) == ("not today", "stopped", [])
    assert "answer" not in StatusAgentResult.model_fields
    assert done.usage == done.state.usage
