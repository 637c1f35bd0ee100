"""Replaying a durable run from its store: each product (the loop, the middleware agent,
the status agent) on SQLite and PostgreSQL, a run that ran straight through and one that
paused for a human and was resumed; what the store keeps (replies whole, results only
once); a divergence said as a trace replay says it; a store run that kept nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from toolloop.agents import create_agent
from toolloop.checkpoints import (
    Approve,
    CheckpointStore,
    JournalEntry,
    MemoryCheckpointStore,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowSnapshot
from toolloop.kernel import REPLAY_NOTE, RunResult
from toolloop.loop import async_plan_and_execute, async_resume_plan_and_execute
from toolloop.models import ChatModel
from toolloop.planners import StructuredPlanner
from toolloop.pytest_plugin import ReplayFixture
from toolloop.status_agent import StatusAgent
from toolloop.testing import ReplayError, ReplayMismatch, ScriptedChatModel, StoredRun, replay
from toolloop.tools import ToolRegistry

pytestmark = pytest.mark.anyio

PRODUCTS = ("loop", "agent", "status")
SECRET = "sk-" + "a1b2c3d4" * 4

SENT: list[str] = []


async def send(to: str) -> dict[str, Any]:
    """Send a mail.

    Args:
        to: who gets it.
    """
    SENT.append(to)
    return {"sent_to": to, "receipt": "r-1", "token_used": SECRET}


def scripted(product: str, to: str = "ada") -> ScriptedChatModel:
    model = ScriptedChatModel()
    if product == "loop":
        command = {"purpose": "mail", "tool_name": "send", "tool_kwargs": {"to": to}}
        model.add_reply(
            json.dumps({"next_action": "execute", "execution_commands": [command]}), chunk_size=5
        )
        model.add_reply(json.dumps({"next_action": "response", "content": "sent"}))
    elif product == "agent":
        model.add_reply(
            "Sending.",
            tool_calls=[{"id": "c1", "name": "send", "arguments": json.dumps({"to": to})}],
            chunk_size=3,
        )
        model.add_reply("Sent to ada.")
    else:
        call = {"tool_name": "send", "arguments": {"to": to}, "purpose": "mail"}
        decision = {"action": "call_tools", "tool_calls": [call], "reason": "", "answer": None}
        model.add_reply("the user wants a mail sent")
        model.add_reply(json.dumps({"steps": ["send the mail"]}))
        model.add_reply(json.dumps(decision), chunk_size=7)
        model.add_reply(json.dumps({"verdict": "finish", "note": "", "answer": "sent"}))
    return model


def builder(
    product: str, store: CheckpointStore, *, pause: bool
) -> Callable[[ChatModel, ToolRegistry], Awaitable[RunResult]]:
    """Runs ``product`` durably in ``store`` (``pause``: the mail waits for a human, who
    approves it: the run is resumed)."""
    options: dict[str, Any] = {"needs_approval": ["send"]} if pause else {}

    async def build(model: ChatModel, tools: ToolRegistry) -> RunResult:
        if product == "loop":
            planner = StructuredPlanner(model, short_circuit=False)
            result: RunResult = await async_plan_and_execute(
                "mail ada", planner=planner, tools=tools, store=store, **options
            )
            if result.paused:
                assert result.run_id is not None
                result = await async_resume_plan_and_execute(
                    result.run_id, Approve(), planner=planner, tools=tools, store=store
                )
            return result
        if product == "agent":
            agent = create_agent(model, tools)
            result = await agent.run("mail ada", store=store, **options)
            if result.paused:
                assert result.run_id is not None
                result = await agent.resume(result.run_id, Approve(), store=store)
            return result
        status = StatusAgent(model=model, tools=tools, store=store)
        result = await status.run("mail ada", **options)
        if result.paused:
            assert result.run_id is not None
            result = await status.resume(result.run_id, Approve())
        return result

    return build


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CheckpointStore]:
    if request.param == "sqlite":
        async with SQLiteCheckpointStore(tmp_path / "runs.db", keep_replies=True) as sqlite:
            yield sqlite
        return
    from postgres_cluster import fresh_schema

    from toolloop.checkpoints import PostgresCheckpointStore

    url = request.getfixturevalue("postgres_url")
    async with (
        fresh_schema(url) as schema,
        PostgresCheckpointStore(url, schema=schema, keep_replies=True) as pg,
    ):
        yield pg


async def recorded(product: str, store: CheckpointStore, *, pause: bool) -> RunResult:
    registry = ToolRegistry([send])
    result: RunResult = await builder(product, store, pause=pause)(scripted(product), registry)
    assert result.stop_reason == "answered"
    assert SENT == ["ada"]
    SENT.clear()
    return result


@pytest.mark.parametrize("pause", [False, True], ids=["straight", "paused_and_resumed"])
@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_durable_run_replays_from_its_store(
    product: str, pause: bool, store: CheckpointStore
) -> None:
    result = await recorded(product, store, pause=pause)
    assert result.run_id is not None
    stored = StoredRun(store, result.run_id)
    recording = await stored.read()
    assert len(recording.model_calls) == (4 if product == "status" else 2)
    assert [(c.tool_name, c.ran, c.result["sent_to"]) for c in recording.tool_calls] == [
        ("send", True, "ada")
    ]
    assert recording.tool_calls[0].result["token_used"] == "[redacted]"  # scrubbed, as a trace
    assert recording.end.status == "completed"

    again = MemoryCheckpointStore()  # the replayed run is durable too (it may pause)
    replayed = await replay(stored, builder(product, again, pause=pause), tools=[send])
    assert replayed.stop_reason == "answered"
    assert SENT == []  # the result came from the store: the mail was not sent again


@pytest.mark.parametrize("product", PRODUCTS)
async def test_the_store_keeps_each_reply_whole_and_each_result_once(product: str) -> None:
    store = MemoryCheckpointStore(keep_replies=True)
    result = await recorded(product, store, pause=True)
    assert result.run_id is not None
    checkpoint = await store.get(result.run_id)
    assert checkpoint is not None
    notes = [e.outcome for e in checkpoint.journal if e.tool_name == REPLAY_NOTE]
    events = [event for note in notes for event in note["events"]]
    finished = [e for e in events if e["kind"] == "model_call_finished"]
    assert len(finished) == (4 if product == "status" else 2)
    text = {"loop": '"next_action": "execute"', "agent": "Sending.", "status": "mail sent"}
    assert any(text[product] in e["text"] for e in finished)
    # one note per model call, one per session's end (paused, then completed)
    assert len(notes) == len(finished) + 2
    calls = [e for e in events if e["kind"] == "tool_call_finished"]
    assert [c.get("journaled") for c in calls] == [True]
    assert calls[0]["record"]["result"] is None  # the journal holds it
    assert SECRET not in json.dumps(notes)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_divergence_from_a_stored_run_shows_the_diff(product: str) -> None:
    store = MemoryCheckpointStore(keep_replies=True)
    result = await recorded(product, store, pause=False)
    assert result.run_id is not None
    stored = StoredRun(store, result.run_id, label="the mail run")

    async def changed(model: ChatModel, tools: ToolRegistry) -> RunResult:
        # today's code offers the model one more tool
        more = ToolRegistry([*tools, stamp])
        return await builder(product, MemoryCheckpointStore(), pause=False)(model, more)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(stored, changed, tools=[send], compare_requests="exact")
    said = "the replay of the mail run diverged: model call #0 asks something else: "
    assert str(caught.value).startswith(said)
    assert caught.value.turn == 0
    assert "- " in caught.value.diff
    assert "+ " in caught.value.diff
    assert SENT == []


def stamp(text: str) -> str:
    """Stamp a text.

    Args:
        text: the text.
    """
    return f"[{text}]"


async def test_a_run_that_kept_nothing_cannot_be_replayed() -> None:
    store = MemoryCheckpointStore(keep_replies=True)
    snapshot = FlowSnapshot(flow="f", execution_id="old", state={})
    from toolloop.checkpoints import CheckpointedRun

    await CheckpointedRun.begin(store, run_id="old", flow="f", snapshot=snapshot)
    with pytest.raises(ReplayError, match="keeps no model replies"):
        await replay(StoredRun(store, "old"), builder("agent", store, pause=False))
    with pytest.raises(ReplayError, match="has no run 'nope'"):
        await replay(StoredRun(store, "nope"), builder("agent", store, pause=False))


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_store_not_made_to_keep_replies_keeps_only_the_journal(product: str) -> None:
    store = MemoryCheckpointStore()  # keep_replies is off by default: durable runs cost less
    result = await recorded(product, store, pause=False)
    assert result.run_id is not None
    checkpoint = await store.get(result.run_id)
    assert checkpoint is not None
    assert all(entry.tool_name != REPLAY_NOTE for entry in checkpoint.journal)
    with pytest.raises(ReplayError, match="keep_replies=True"):
        await replay(StoredRun(store, result.run_id), builder(product, store, pause=False))


async def test_a_note_kept_with_the_next_write_survives_a_failing_store_write() -> None:
    # a store that fails to write what the run keeps of itself does not fail the run
    class Refusing(MemoryCheckpointStore):
        async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
            if entry.tool_name == REPLAY_NOTE:
                raise OSError("disk full")
            return await super().record_intent(run_id, entry)

    store = Refusing(keep_replies=True)
    result = await builder("agent", store, pause=False)(scripted("agent"), ToolRegistry([send]))
    assert result.stop_reason == "answered"
    SENT.clear()


async def test_the_fixture_replays_a_stored_run(tmp_path: Path) -> None:
    store = MemoryCheckpointStore(keep_replies=True)
    result = await recorded("agent", store, pause=True)
    assert result.run_id is not None
    fixture = ReplayFixture(tmp_path)
    replayed = await fixture(
        StoredRun(store, result.run_id),
        builder("agent", MemoryCheckpointStore(keep_replies=True), pause=True),
        tools=[send],
    )
    assert replayed.stop_reason == "answered"
