"""The three products' jobs (LoopJob, AgentJob, StatusAgentJob), in this process (no
cluster), take their items and options alike: a request or a mapping with ``user_input``
and run options (``run_id``...), a paused run resumed (``resume`` and ``decision``) or a run
recovered (``recover``) by another actor through the job's store, made in each actor; the
actor's limiter and event forwarding for each run."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any

import anyio
import pytest
import ray_support as rs

from toolloop.checkpoints import Approve, SQLiteCheckpointStore
from toolloop.flow import ExecutionPaused, FlowEvent
from toolloop.kernel import RunFinished
from toolloop.runner import ToolCallFinished

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'toolloop[ray]'")

from toolloop.ray import Host

pytestmark = pytest.mark.anyio

PRODUCTS = ("loop", "middleware", "status")


def actor(job: Any) -> Any:
    """The job as an actor gets it: pickled, then set up there."""
    shipped = pickle.loads(pickle.dumps(job))
    shipped.setup()
    return shipped


async def closing(*jobs: Any) -> None:
    for job in jobs:
        await job._store.aclose()


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_run_paused_on_one_actor_is_resumed_and_recovered_on_others(
    product: str, tmp_path: Path
) -> None:
    job = rs.mail_job(
        product,
        options={"needs_approval": ["send"]},
        store=functools.partial(SQLiteCheckpointStore, tmp_path / "runs.db"),
    )
    first, second, third = actor(job), actor(job), actor(job)
    events: list[FlowEvent] = []
    limiter = anyio.CapacityLimiter(2)
    host = Host(limiter=limiter, on_event=events.append, actor_index=0)
    try:
        paused = await first.run({"user_input": "mail ada", "run_id": "r1"}, host)
        assert (paused.run_id, paused.status) == ("r1", "paused")
        assert paused.request is not None
        (asked,) = paused.request.tool_calls
        assert (asked.tool_name, asked.arguments) == ("send", {"to": "ada"})

        done = await second.run({"resume": "r1", "decision": Approve()}, host)
        assert (done.run_id, done.status, done.stop_reason) == ("r1", "completed", "answered")
        (record,) = [r for r in done.records if r.tool_name == "send"]
        assert record.success and record.result == "sent to ada"

        again = await third.run({"recover": "r1"}, host)  # completed: its stored result
        assert (again.run_id, again.status, again.text) == ("r1", "completed", done.text)
        finished = [e for e in events if isinstance(e, ToolCallFinished)]
        assert [e.record.kwargs for e in finished] == [{"to": "ada"}]  # the tool ran once
        assert len([e for e in events if isinstance(e, ExecutionPaused)]) == 1
        assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["answered"]
    finally:
        await closing(first, second, third)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_an_item_s_options_go_over_the_job_s_and_the_host_s_limiter_holds(
    product: str,
) -> None:
    seen: list[tuple[str, int]] = []
    limiter = anyio.CapacityLimiter(3)

    def sending(to: str) -> None:  # the tools' deps: each call tells who it mails
        seen.append((to, limiter.borrowed_tokens))  # and holds the actor's limiter

    job = actor(rs.mail_job(product, options={"max_turns": 0}))
    host = Host(limiter=limiter, on_event=None, actor_index=0)
    stopped = await job.run("mail ada", host)  # the job's option: no turn at all
    assert (stopped.stop_reason, stopped.records) == ("max_turns", [])
    item = {"user_input": "mail ada", "max_turns": 20, "run_id": "mine", "deps": sending}
    done = await job.run(item, host)
    assert (done.run_id, done.stop_reason) == ("mine", "answered")
    assert seen == [("ada", 1)]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_an_item_that_is_no_call_says_what_an_item_is(product: str) -> None:
    job = actor(rs.mail_job(product))
    host = Host(limiter=None, on_event=None, actor_index=0)
    with pytest.raises(ValueError, match="needs its decision"):
        await job.run({"resume": "r1"}, host)
    with pytest.raises(ValueError, match=r"an item is one call.*\['user_input', 'recover'\]"):
        await job.run({"user_input": "mail ada", "recover": "r1"}, host)


async def test_a_mapping_without_a_call_is_a_message_for_the_middleware_agent_only() -> None:
    host = Host(limiter=None, on_event=None, actor_index=0)
    message = {"role": "user", "content": "mail ada"}
    result = await actor(rs.mail_job("middleware")).run(message, host)
    assert result.stop_reason == "answered" and result.text == "sent"
    for product in ("loop", "status"):
        with pytest.raises(ValueError, match="a mapping item names its call"):
            await actor(rs.mail_job(product)).run(message, host)
