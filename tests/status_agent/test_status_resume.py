"""Resuming a paused run: the decision applies once; bad input is a clear error and leaves
the store as it was."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from status_support import Scripted, Tools, call, calls, finish, make_agent

from toolloop.checkpoints import (
    Approve,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    Continue,
    CorruptCheckpointError,
    DecisionError,
    Edit,
    MemoryCheckpointStore,
    RunNotFoundError,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowSnapshot
from toolloop.status_agent._agent import StatusAgent, StatusAgentResult

pytestmark = pytest.mark.anyio


def mail_agent(store: CheckpointStore, tools: Tools) -> StatusAgent:
    decide = Scripted(calls(call("send_mail", "tell Ada", to="ada", body="hi")), finish("sent"))
    return make_agent(tools, decide=decide, store=store, needs_approval=["send_mail"])


async def paused_run(store: CheckpointStore) -> tuple[StatusAgent, StatusAgentResult, Tools]:
    tools = Tools()
    agent = mail_agent(store, tools)
    paused = await agent.run("Mail Ada", run_id="run-1", metadata={"user": "ada"})
    assert paused.paused
    return agent, paused, tools


async def stored(store: CheckpointStore, run_id: str = "run-1") -> Checkpoint:
    checkpoint = await store.get(run_id)
    assert checkpoint is not None
    return checkpoint


async def test_the_pause_checkpoints_the_whole_state_and_the_question() -> None:
    store = MemoryCheckpointStore()
    agent, paused, _ = await paused_run(store)
    checkpoint = await stored(store)
    assert checkpoint.status == "paused"
    assert checkpoint.flow == "status_agent"
    assert checkpoint.metadata == {"agent": "status", "user": "ada"}
    assert checkpoint.owner is None
    assert checkpoint.snapshot.state == paused.state.model_dump(mode="json")
    assert [w.event for w in checkpoint.snapshot.waiting] == ["human_decision"]
    assert paused.request is not None
    assert checkpoint.request == paused.request.model_dump(mode="json")
    assert await agent.request("run-1") == paused.request
    # another agent object on the same store resumes it
    other = mail_agent(store, Tools())
    result = await other.resume("run-1", "approve")
    assert result.status == "completed"


async def test_unknown_run() -> None:
    agent = make_agent()
    with pytest.raises(RunNotFoundError, match="no run 'ghost'"):
        await agent.resume("ghost", Approve())
    with pytest.raises(RunNotFoundError):
        await agent.recover("ghost")
    with pytest.raises(RunNotFoundError):
        await agent.request("ghost")


async def test_resuming_twice_is_refused_and_changes_nothing() -> None:
    store = MemoryCheckpointStore()
    agent, _paused, tools = await paused_run(store)
    await agent.resume("run-1", Approve())
    before = await stored(store)
    with pytest.raises(RunNotResumableError, match="is completed, not paused"):
        await agent.resume("run-1", Approve())
    assert await stored(store) == before
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hi"})]


async def test_two_concurrent_resumes_one_wins_the_tool_runs_once() -> None:
    store = MemoryCheckpointStore()
    agent, _paused, tools = await paused_run(store)
    outcomes: list[Any] = []

    async def resume() -> None:
        try:
            outcomes.append(await agent.resume("run-1", Approve()))
        except RunNotResumableError as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(resume)
        tg.start_soon(resume)
    errors = [o for o in outcomes if isinstance(o, RunNotResumableError)]
    assert len(errors) == 1
    assert "resumed by someone else since it was read" in str(errors[0])
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hi"})]


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Continue(), "a 'continue' decision does not fit it"),
        ("maybe", "a decision's kind is one of"),
        (42, "a decision is Approve"),
        (Edit(arguments={"call-7": {"to": "bob", "body": "hi"}}), r"got \['call-7'\]"),
        (Edit(arguments={"call-1": {"to": "bob"}}), "do not fit tool 'send_mail'"),
        ({"kind": "edit", "arguments": "bob"}, "the 'edit' decision is malformed"),
    ],
)
async def test_a_decision_that_does_not_fit_changes_nothing(decision: Any, message: str) -> None:
    store = MemoryCheckpointStore()
    agent, _paused, tools = await paused_run(store)
    before = await stored(store)
    with pytest.raises(DecisionError, match=message):
        await agent.resume("run-1", decision)
    assert await stored(store) == before
    assert tools.calls == []
    assert (await agent.resume("run-1", Approve())).status == "completed"


async def test_an_approval_does_not_fit_a_review() -> None:
    store = MemoryCheckpointStore()
    agent = make_agent(decide=Scripted({"action": "ask_human", "reason": "?"}), store=store)
    paused = await agent.run("x", run_id="r")
    before = await stored(store, "r")
    with pytest.raises(DecisionError, match=r"does not fit it: answer with one of \['continue'"):
        await agent.resume(paused.run_id, Approve())
    assert await stored(store, "r") == before


async def test_wrong_states_say_what_to_do_instead() -> None:
    store = MemoryCheckpointStore()
    agent, _paused, _ = await paused_run(store)
    with pytest.raises(RunNotResumableError, match="it is paused: resume it with a decision"):
        await agent.recover("run-1")
    with pytest.raises(CheckpointConflictError, match="already has a checkpoint"):
        await agent.run("again", run_id="run-1")
    # a run of another flow, in the same store
    foreign = Checkpoint(
        run_id="other",
        flow="agent",
        status="paused",
        snapshot=FlowSnapshot(flow="agent", execution_id="other", state={}),
    )
    before = await store.put(foreign, expected_revision=None)
    with pytest.raises(RunNotResumableError, match="is a run of flow 'agent', not of the status"):
        await agent.resume("other", Approve())
    assert await stored(store, "other") == before


async def test_a_corrupt_checkpoint_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointStore(path) as store:
        agent, _paused, tools = await paused_run(store)
        revision = (await stored(store)).revision
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE checkpoints SET data = 'garbage' WHERE run_id = 'run-1'")
        conn.close()
        with pytest.raises(
            CorruptCheckpointError, match="checkpoint of run 'run-1' cannot be read"
        ):
            await agent.resume("run-1", Approve())
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT data, status, revision FROM checkpoints").fetchall() == [
                ("garbage", "paused", revision)
            ]
        conn.close()
        assert tools.calls == []


async def test_a_snapshot_that_does_not_fit_the_agent_is_corrupt() -> None:
    store = MemoryCheckpointStore()
    agent, _paused, tools = await paused_run(store)
    checkpoint = await stored(store)
    bad_state = {**checkpoint.snapshot.state, "status": "dancing"}
    snapshot = checkpoint.snapshot.model_copy(update={"state": bad_state})
    before = await store.put(
        checkpoint.model_copy(update={"snapshot": snapshot}), expected_revision=checkpoint.revision
    )
    with pytest.raises(CorruptCheckpointError, match="does not restore into flow 'status_agent'"):
        await agent.resume("run-1", Approve())
    assert (await stored(store)).model_copy(update={"journal": []}) == before
    # paused, but for something else than a human
    waits = checkpoint.snapshot.model_copy(update={"waiting": []})
    await store.put(
        checkpoint.model_copy(update={"snapshot": waits}), expected_revision=before.revision
    )
    with pytest.raises(CorruptCheckpointError, match="paused but not for a human decision"):
        await agent.resume("run-1", Approve())
    assert tools.calls == []


async def test_one_decision_per_call_approves_one_and_rejects_the_other() -> None:
    store = MemoryCheckpointStore()
    tools = Tools()
    decide = Scripted(
        calls(
            call("send_mail", "tell Ada", to="ada", body="hi"),
            call("send_mail", "tell Bob", to="bob", body="hi"),
        ),
        finish("sent one"),
    )
    agent = make_agent(tools, decide=decide, store=store, needs_approval=["send_mail"])
    paused = await agent.run("Mail Ada and Bob", run_id="r")
    assert paused.request is not None
    ada, bob = (c.call_id for c in paused.request.tool_calls)
    done = await agent.resume(
        "r", {ada: Edit(arguments={ada: {"to": "ada", "body": "hello"}}), bob: "reject"}
    )
    assert done.status == "completed"
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hello"})]  # bob's never ran
    sources = {r.call_id: r.source for r in done.state.records}
    assert sources == {ada: "ran", bob: "rejected"}
    # the checkpoint kept the answer as JSON, and a process that died mid-resume reads it back
    checkpoint = await stored(store, "r")
    assert checkpoint.status == "completed"
