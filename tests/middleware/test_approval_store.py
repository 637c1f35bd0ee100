"""Human approval with a checkpoint store: the paused run is kept in the store and resumed
by its run id, once, by a new agent and a new store object on the same file (as another
process would)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolloop.agents import Agent, AgentModelError, create_agent
from toolloop.agents.middleware import HumanApprovalMiddleware
from toolloop.checkpoints import (
    CheckpointConflictError,
    CheckpointStore,
    MemoryCheckpointStore,
    RunNotFoundError,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.errors import ResumeError
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio

sent: list[str] = []


def send_email(to: str) -> str:
    """Send an email."""
    sent.append(to)
    return "sent"


def scripted() -> ScriptedChatModel:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "send_email", "arguments": json.dumps({"to": "ada"})}])
    model.add_reply("mailed")
    return model


def build(model: ScriptedChatModel, store: CheckpointStore) -> Agent:
    approval = HumanApprovalMiddleware({"send_email": True})
    return create_agent(model, [send_email], middleware=[approval], store=store)


async def test_a_paused_run_is_kept_and_resumed_once_from_another_store_object(
    tmp_path: Path,
) -> None:
    sent.clear()
    model = scripted()
    path = tmp_path / "runs.db"
    first_store = SQLiteCheckpointStore(path)
    paused = await build(model, first_store).run("mail ada", run_id="run-1", metadata={"who": "t"})
    await first_store.aclose()
    assert paused.paused and paused.run_id == "run-1"
    assert sent == []

    store = SQLiteCheckpointStore(path)  # "another process"
    checkpoint = await store.get("run-1")
    assert checkpoint is not None
    assert checkpoint.status == "paused"
    assert checkpoint.metadata == {"agent": "middleware", "who": "t"}
    request: Any = checkpoint.request  # what the run asks: the HumanRequest, as in every product
    assert request["kind"] == "approve_tool_calls"
    assert request["tool_calls"][0]["tool_name"] == "send_email"

    agent = build(model, store)
    done = await agent.resume("run-1", "approve")
    assert done.status == "completed"
    assert sent == ["ada"]
    stored = await store.get("run-1")
    assert stored is not None and stored.status == "completed"
    assert stored.result["text"] == "mailed"

    with pytest.raises(RunNotResumableError, match="completed"):
        await agent.resume("run-1", "approve")
    assert sent == ["ada"]  # never twice
    with pytest.raises(RunNotFoundError):
        await agent.resume("run-2", "approve")
    await store.aclose()


async def test_every_run_is_kept_and_ids_are_unique() -> None:
    store = MemoryCheckpointStore()
    agent = create_agent(ScriptedChatModel(["hi", "again"]), store=store)
    result = await agent.run("hello", run_id="r")
    assert (await store.run_ids(status="completed")) == ["r"]
    assert result.run_id == "r"
    with pytest.raises(CheckpointConflictError):
        await agent.run("hello", run_id="r")


async def test_a_bad_answer_writes_nothing_and_a_failed_run_is_marked() -> None:
    sent.clear()
    store = MemoryCheckpointStore()
    model = scripted()
    paused = await build(model, store).run("mail ada")
    before = await store.get(paused.run_id)
    with pytest.raises(ResumeError, match="a decision is Approve"):
        await build(model, store).resume(paused.run_id, [])
    assert await store.get(paused.run_id) == before

    model = ScriptedChatModel([RuntimeError("down")])
    agent = create_agent(model, store=store)
    with pytest.raises(AgentModelError, match="down"):
        await agent.run("hi", run_id="broken")
    failed = await store.get("broken")
    assert failed is not None and failed.status == "failed"
    assert "down" in (failed.error or "")


@pytest.mark.parametrize("form", ["object", "json", "data"])
async def test_a_stored_run_resumed_by_its_snapshot_goes_through_the_store(form: str) -> None:
    sent.clear()
    store = MemoryCheckpointStore()
    model = scripted()
    model.add_reply("mailed again")
    agent = build(model, store)
    paused = await agent.run("mail ada")
    assert paused.snapshot is not None
    snapshot: Any = paused.snapshot
    if form == "json":
        snapshot = json.dumps(paused.snapshot.model_dump(mode="json"))
    elif form == "data":
        snapshot = paused.snapshot.model_dump(mode="json")
    done = await agent.resume(snapshot, "approve")
    assert done.status == "completed"
    stored = await store.get(paused.run_id)
    assert stored is not None and stored.status == "completed"
    # the same paused moment again, by id or by another copy of the snapshot: never twice
    with pytest.raises(RunNotResumableError):
        await agent.resume(paused.run_id, "approve")
    with pytest.raises(RunNotResumableError):
        await agent.resume(paused.snapshot, "approve")
    assert sent == ["ada"]


async def test_a_run_id_without_a_store_is_a_clear_error() -> None:
    agent = create_agent(scripted(), [send_email])
    with pytest.raises(ResumeError, match="no store to find it in"):
        await agent.resume("run-1", "approve")
