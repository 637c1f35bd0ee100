"""Recovering a run from its last checkpoint (in this process): no tool runs twice, a call
cut short follows the run's unknown_outcome (a failed record, run again if idempotent, or
put to a human), and the loop guard ends runs that go nowhere."""

from __future__ import annotations

import functools
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

from toolloop import ExecutionTimeoutError
from toolloop.checkpoints import (
    Approve,
    Continue,
    MemoryCheckpointStore,
    Reject,
    RunNotResumableError,
)
from toolloop.errors import StepFailedError
from toolloop.flow import FlowEvent
from toolloop.status_agent import LoopGuardTripped
from toolloop.status_agent._agent import StatusAgent

pytestmark = pytest.mark.anyio


class Crash(Exception):
    pass


class FlakyStore(MemoryCheckpointStore):
    """A store whose next checkpoint write fails once it is armed."""

    armed = False

    async def put(self, checkpoint: Any, *, expected_revision: int | None) -> Any:
        if self.armed:
            self.armed = False
            raise Crash("the checkpoint write failed")
        return await super().put(checkpoint, expected_revision=expected_revision)


def crash_on(store: FlakyStore, kind: str, **match: Any) -> Any:
    """An observer that makes the run's next checkpoint write fail, at the first event of
    ``kind`` (like a crash between that moment and the next checkpoint)."""
    fired: list[bool] = []

    def observe(event: FlowEvent) -> None:
        if (
            event.kind == kind
            and not fired
            and all(getattr(event, k) == v for k, v in match.items())
        ):
            fired.append(True)
            store.armed = True

    return observe


async def test_a_failure_after_the_outcome_and_before_the_checkpoint_replays_the_call() -> None:
    tools = Tools()
    decide = Scripted(calls(call("search", query="q")), finish("done"))
    reflect = Scripted({"verdict": "continue"}, {"verdict": "finish"})
    store = FlakyStore()
    agent = make_agent(tools, decide=decide, reflect=reflect, store=store)
    with pytest.raises(StepFailedError) as info:
        await agent.run("x", run_id="r", on_event=crash_on(store, "tool_call_finished"))
    assert isinstance(info.value.__cause__, Crash)
    checkpoint = await agent.store.get("r")
    assert checkpoint is not None
    assert checkpoint.status == "failed"
    assert checkpoint.snapshot.state["node"] == "decision"  # the last node checkpointed
    assert [e.state for e in checkpoint.journal if e.tool_name == "search"] == ["finished"]

    result = await agent.recover("r")
    assert result.status == "completed"
    assert tools.calls == [("search", {"query": "q"})]  # once
    assert result.state.records[0].source == "replayed"
    assert result.records[0].result == "results for q"
    assert path_of(result)[-4:] == [
        "tool_execution:tools_completed",
        "reflection:continue",
        "decision:decision_completed",
        "reflection:reflection_completed",
    ]
    again = await agent.recover("r")  # completed: its stored result, nothing runs again
    assert (again.text, again.stop_reason, again.records) == (
        result.text,
        result.stop_reason,
        result.records,
    )


async def test_a_failed_step_is_retried_from_the_last_checkpoint() -> None:
    tools = Tools()
    reflect = Scripted(RuntimeError("model overloaded"), {"verdict": "finish", "answer": "ok"})
    agent = make_agent(tools, decide=Scripted(calls(call("search", query="q"))), reflect=reflect)
    with pytest.raises(StepFailedError, match="model overloaded"):
        await agent.run("x", run_id="r")
    failed = await agent.store.get("r")
    assert failed is not None and failed.error is not None
    assert "model overloaded" in failed.error
    result = await agent.recover("r")
    assert result.text == "ok"
    assert tools.calls == [("search", {"query": "q"})]
    assert len(reflect.views) == 2


def deploy_agent(
    runs: list[str], decide: Scripted, started: anyio.Event | None = None, **options: Any
) -> StatusAgent:
    async def deploy(version: str) -> str:
        """Deploy a version.

        Args:
            version: which.
        """
        runs.append(version)
        if started is not None:
            started.set()
        if len(runs) == 1:  # the first call hangs, until the run is cut off
            await anyio.sleep_forever()
        return f"deployed {version}"

    return StatusAgent(
        tools=[deploy],
        analyze=lambda view: "",
        plan=lambda view: ["deploy"],
        decide=decide,
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "",
        **options,
    )


async def cancelled_while_deploying(agent: StatusAgent, started: anyio.Event) -> str:
    """Run ``agent`` and cancel the run while its tool runs; the run's id."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "deploy 1.2"))
        await started.wait()
        tg.cancel_scope.cancel()  # the run is cancelled while the tool runs
    (run_id,) = await agent.store.run_ids(status="running")
    return run_id


async def test_a_call_cut_short_is_interrupted_and_put_to_a_human_when_asked() -> None:
    started = anyio.Event()
    runs: list[str] = []
    decide = Scripted(
        calls(call("deploy", version="1.2")),
        finish("not deployed"),
        calls(call("deploy", version="1.2")),
    )
    agent = deploy_agent(runs, decide, started)
    run_id = await cancelled_while_deploying(agent, started)
    checkpoint = await agent.store.get(run_id)
    assert checkpoint is not None
    # the call's intent, and a note of what cut it off
    assert [(e.tool_name, e.state) for e in checkpoint.journal] == [
        ("deploy", "started"),
        ("<cut off>", "finished"),
    ]

    paused = await agent.recover(run_id, unknown_outcome="ask")  # this call's own policy
    assert runs == ["1.2"]  # not run again
    assert paused.status == "paused"
    request = paused.request
    assert request is not None and request.kind == "interrupted_tool_calls"
    assert [(c.call_id, c.arguments) for c in request.tool_calls] == [
        ("call-1", {"version": "1.2"})
    ]
    assert "may or may not have taken effect" in request.reason
    assert "the run's cancellation ended them while they ran" in request.reason
    assert "process stopped" not in request.reason
    assert paused.state.records[0].source == "interrupted"
    journal = (await agent.store.get(run_id)).journal  # type: ignore[union-attr]
    assert [e.state for e in journal if e.tool_name == "deploy"] == ["interrupted"]

    done = await agent.resume(run_id, Reject(message="it did deploy; leave it"))
    assert done.text == "not deployed"
    assert runs == ["1.2"]
    assert decide.views[1].notes[-1].text == "it did deploy; leave it"


async def test_a_call_cut_short_fails_by_default_and_the_reflection_sees_a_failed_call() -> None:
    started = anyio.Event()
    runs: list[str] = []
    decide = Scripted(calls(call("deploy", version="1.2")), finish("not deployed"))
    agent = deploy_agent(runs, decide, started)
    run_id = await cancelled_while_deploying(agent, started)

    paused = await agent.recover(run_id)
    assert runs == ["1.2"]  # not run again
    (record,) = paused.state.records
    assert (record.source, record.record.success) == ("interrupted", False)
    said = (
        "call 'call-1' of tool 'deploy' was interrupted: the run's cancellation ended it while "
        "it ran, before its outcome was recorded, so it may or may not have taken effect; it "
        "was not run again"
    )
    assert record.record.error == said
    request = paused.request  # a failed call: the status agent's review, as for any failure
    assert request is not None and request.kind == "review"
    assert request.details["failed"] == [
        {"call_id": "call-1", "tool_name": "deploy", "error": said}
    ]
    journal = (await agent.store.get(run_id)).journal  # type: ignore[union-attr]
    assert [e.state for e in journal if e.tool_name == "deploy"] == ["interrupted"]
    done = await agent.resume(run_id, Continue())
    assert done.text == "not deployed" and runs == ["1.2"]
    assert decide.views[1].records[0].record.error == said  # the decision step saw it


async def test_a_call_cut_short_runs_again_under_retry_only_when_idempotent() -> None:
    started = anyio.Event()
    runs: list[str] = []
    decide = Scripted(calls(call("deploy", version="1.2")), finish("deployed"))
    agent = deploy_agent(runs, decide, started, unknown_outcome="retry")
    run_id = await cancelled_while_deploying(agent, started)
    paused = await agent.recover(run_id)  # deploy is not named idempotent: as "fail"
    assert runs == ["1.2"]
    assert paused.state.records[0].source == "interrupted"

    started, runs = anyio.Event(), []
    retried = deploy_agent(
        runs,
        Scripted(calls(call("deploy", version="1.2")), finish("deployed")),
        started,
        unknown_outcome="retry",
        idempotent_tools=["deploy"],
    )
    run_id = await cancelled_while_deploying(retried, started)
    result = await retried.recover(run_id)
    assert runs == ["1.2", "1.2"]  # run again, under its journaled intent
    (record,) = result.state.records
    assert (record.call_id, record.source, record.record.result) == (
        "call-1",
        "ran",
        "deployed 1.2",
    )
    journal = (await retried.store.get(run_id)).journal  # type: ignore[union-attr]
    assert [e.state for e in journal if e.tool_name == "deploy"] == ["finished"]


class Die(BaseException):
    """Stands for the process dying: nothing catches it."""


async def test_an_approved_interrupted_call_runs_again_under_a_new_id() -> None:
    runs: list[str] = []

    def charge(card: str) -> str:
        """Charge a card.

        Args:
            card: which.
        """
        runs.append(card)
        if len(runs) == 1:
            raise Die  # after the effect, before the outcome is journaled
        return f"charged {card}"

    agent = StatusAgent(
        tools=[charge],
        analyze=lambda view: "",
        plan=lambda view: ["charge"],
        decide=Scripted(calls(call("charge", card="visa")), finish("charged twice, on purpose")),
        reflect=Scripted({"verdict": "continue"}, {"verdict": "finish"}),
        converse=lambda view: "",
        unknown_outcome="ask",
    )
    died: list[BaseException] = []
    try:
        await agent.run("x", run_id="r")
    except BaseException as exc:  # the engine's task group carries it in a group
        died.append(exc)
    assert "Die()" in repr(died)
    paused = await agent.recover("r")
    assert runs == ["visa"]
    assert paused.request is not None and paused.request.kind == "interrupted_tool_calls"
    result = await agent.resume("r", Approve(message="run it again"))
    assert result.status == "completed"
    assert runs == ["visa", "visa"]
    assert [(r.call_id, r.source) for r in result.state.records] == [
        ("call-1", "interrupted"),
        ("call-2", "ran"),
    ]
    assert result.text == "charged twice, on purpose"


async def test_a_decision_being_delivered_when_the_run_broke_is_delivered_again() -> None:
    store = FlakyStore()
    tools = Tools()
    decide = Scripted(calls(call("send_mail", to="ada", body="hi")), finish("sent"))
    agent = make_agent(tools, decide=decide, store=store, needs_approval=True)
    paused = await agent.run("mail", run_id="r")
    broken = crash_on(store, "status_changed", node="human_intervention")
    with pytest.raises(StepFailedError):
        await agent.resume("r", Approve(), on_event=broken)
    checkpoint = await store.get("r")
    assert checkpoint is not None
    assert (checkpoint.status, checkpoint.resume_event) == ("failed", "human_decision")
    with pytest.raises(RunNotResumableError, match="failed"):
        await agent.resume("r", Approve())
    result = await agent.recover("r")
    assert result.status == "completed"
    assert result.state.decisions == [Approve()]
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hi"})]
    assert len(path_of(result)) == len(path_of(paused)) + 4


async def test_a_run_still_running_is_not_recovered() -> None:
    release = anyio.Event()
    reached = anyio.Event()

    async def slow(view: Any) -> str:
        reached.set()
        await release.wait()
        return "done"

    agent = make_agent(plan=Scripted([]), converse=slow)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "x", run_id="r"))
        await reached.wait()
        with pytest.raises(RunNotResumableError, match="still runs it"):
            await agent.recover("r")
        release.set()
    checkpoint = await agent.store.get("r")
    assert checkpoint is not None and checkpoint.status == "completed"


async def test_a_timeout_fails_the_run_and_recovery_goes_on() -> None:
    async def slow(view: Any) -> str:
        await anyio.sleep(5)
        return "late"

    agent = make_agent(plan=Scripted([], []), converse=Scripted(slow, "in time"))
    with pytest.raises(ExecutionTimeoutError):
        await agent.run("x", run_id="r", timeout=0.05)
    result = await agent.recover("r")
    assert result.text == "in time"


# -- the loop guard -------------------------------------------------------------------------


async def test_a_cycle_without_progress_ends_with_a_reason() -> None:
    reflect = Scripted(*[{"verdict": "continue"}] * 10)
    agent = make_agent(decide=Scripted(*[calls()] * 10), reflect=reflect)
    result = await agent.run("x")
    assert result.status == "completed"
    assert result.stop_reason == "guard"
    reason = result.state.stop_detail
    assert reason is not None
    assert reason.startswith("'decision' was reached 3 times with no progress")
    assert "decision → reflection → decision" in reason
    assert path_of(result)[-1] == "reflection:continue"
    checkpoint = await agent.store.get(result.run_id)
    assert checkpoint is not None and checkpoint.status == "completed"


async def test_replanning_the_same_plan_forever_ends_too() -> None:
    reflect = Scripted(*[{"verdict": "replan"}] * 10)
    events: list[FlowEvent] = []
    agent = make_agent(decide=Scripted(*[calls()] * 10), reflect=reflect)
    result = await agent.run("x", on_event=events.append)
    assert result.stop_reason == "guard"
    reason = result.state.stop_detail
    assert reason is not None
    assert "was reached 3 times with no progress" in reason
    assert "reflection → planning → decision" in reason
    (tripped,) = [e for e in events if isinstance(e, LoopGuardTripped)]
    assert tripped.reason == reason


async def test_progress_is_not_a_cycle_but_max_turns_bounds_every_run() -> None:
    counter = iter(range(100))
    reflect = Scripted(*[lambda view: {"verdict": "continue", "note": f"n{next(counter)}"}] * 30)
    agent = make_agent(decide=Scripted(*[calls()] * 30), reflect=reflect, max_turns=12)
    result = await agent.run("x")
    assert result.stop_reason == "max_turns"
    assert result.state.stop_detail is not None
    assert result.state.stop_detail.startswith("the run took 12 steps (max_turns)")
    assert len(result.state.history) == 12


# -- usage: every model call made before a pause, a failure or a crash counts -------------


async def test_the_usage_of_a_paused_run_is_kept_by_its_checkpoint() -> None:
    model = ten_tokens()
    agent = make_agent(
        analyze=paying_step(model, "mail ada"),
        plan=paying_step(model, ["mail"]),
        decide=Scripted(calls(call("send_mail", to="ada", body="hi")), finish("sent")),
        needs_approval=["send_mail"],
    )
    paused = await agent.run("mail ada", run_id="r")
    assert paused.paused and paused.usage.requests == 2
    stored = await agent.store.get("r")
    assert stored is not None and stored.snapshot.state["usage"]["requests"] == 2
    done = await agent.resume("r", Approve())
    assert done.status == "completed" and len(model.requests) == 2
    assert (done.usage.requests, done.usage.total_tokens) == (2, 20)


async def test_a_step_that_failed_after_its_model_call_counts_after_recovery() -> None:
    model = ten_tokens()
    plan = Scripted(paying_step(model, ValueError("no plan in that answer")), [])
    agent = make_agent(analyze=paying_step(model, "hi"), plan=plan)
    with pytest.raises(StepFailedError, match="no plan in that answer"):
        await agent.run("hi", run_id="r")
    result = await agent.recover("r")
    assert result.text == "hello!" and len(model.requests) == 2
    assert (result.usage.requests, result.usage.total_tokens) == (2, 20)


async def test_a_call_the_runs_timeout_ended_says_so_after_recovery() -> None:
    runs: list[str] = []
    decide = Scripted(calls(call("deploy", version="1.2")), finish("not deployed"))
    agent = deploy_agent(runs, decide)
    with pytest.raises(ExecutionTimeoutError):
        await agent.run("deploy 1.2", run_id="r", timeout=0.5)
    paused = await agent.recover("r", unknown_outcome="ask")
    assert runs == ["1.2"]  # not run again
    request = paused.request
    assert request is not None and request.kind == "interrupted_tool_calls"
    assert "the run's timeout of 0.5 s ended them while they ran" in request.reason
    assert "process stopped" not in request.reason
    error = str(paused.state.records[0].record.error)
    assert "was interrupted: the run's timeout of 0.5 s ended it while it ran" in error


async def test_a_call_its_tools_timeout_ended_says_so() -> None:
    async def deploy(version: str) -> str:
        """Deploy a version.

        Args:
            version: which.
        """
        await anyio.sleep(10)
        return f"deployed {version}"

    agent = StatusAgent(
        tools=[deploy],
        analyze=lambda view: "",
        plan=lambda view: ["deploy"],
        decide=Scripted(calls(call("deploy", version="1.2"))),
        reflect=lambda view: {"verdict": "finish"},
        converse=lambda view: "",
        tool_timeout=0.2,
    )
    paused = await agent.run("deploy 1.2", run_id="r")
    record = paused.state.records[0]
    assert record.source == "ran"
    assert record.record.error == "tool 'deploy' did not finish within 0.2 s; it was cancelled"
