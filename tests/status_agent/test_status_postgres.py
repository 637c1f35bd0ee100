"""The status agent on PostgreSQL: a run paused by one worker is resumed by another (another
store object, its own connections and leases), and of two workers answering at once exactly
one does: the tool runs once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from postgres_cluster import fresh_schema
from status_support import Scripted, Tools, call, calls, finish, make_agent

from toolloop.checkpoints import (
    Approve,
    CheckpointStore,
    PostgresCheckpointStore,
    RunNotResumableError,
)
from toolloop.status_agent import StatusAgent

pytestmark = pytest.mark.anyio


def mail_agent(store: CheckpointStore, tools: Tools) -> StatusAgent:
    decide = Scripted(calls(call("send_mail", "tell Ada", to="ada", body="hi")), finish("sent"))
    return make_agent(tools, decide=decide, store=store, needs_approval=["send_mail"])


@pytest.fixture
async def url_and_schema(postgres_url: str) -> AsyncIterator[tuple[str, str]]:
    async with fresh_schema(postgres_url) as schema:
        yield postgres_url, schema


async def test_paused_on_one_worker_answered_by_two_others_runs_once(
    url_and_schema: tuple[str, str],
) -> None:
    url, schema = url_and_schema
    tools = Tools()
    async with PostgresCheckpointStore(url, schema=schema) as worker_a:
        paused = await mail_agent(worker_a, tools).run("Mail Ada", run_id="run-1")
        assert paused.paused and tools.calls == []
        assert not worker_a.holds_lease("run-1")  # a paused run is nobody's
    outcomes: list[Any] = []
    async with (
        PostgresCheckpointStore(url, schema=schema) as worker_b,
        PostgresCheckpointStore(url, schema=schema) as worker_c,
    ):

        async def resume(store: CheckpointStore) -> None:
            try:
                outcomes.append(await mail_agent(store, tools).resume("run-1", Approve()))
            except RunNotResumableError as exc:
                outcomes.append(exc)

        with anyio.fail_after(60):  # a hang guard
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, worker_b)
                tg.start_soon(resume, worker_c)
        stored = await worker_b.get("run-1")
    assert sorted(type(o).__name__ for o in outcomes) == [
        "RunNotResumableError",
        "StatusAgentResult",
    ]
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hi"})]
    assert stored is not None and stored.status == "completed"
