"""Many runs over Ray actors, on the suite's real local cluster: the same results as in one
process, events forwarded, outcomes streamed, an actor killed mid-batch (runs retried or
reported, never missing), on asyncio and trio."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import pytest
import ray
import ray_support as rs

from toolloop import LoopResult, async_plan_and_execute
from toolloop.checkpoints import Approve, SQLiteCheckpointStore
from toolloop.kernel import RunFinished
from toolloop.loop import RoundStarted
from toolloop.ray import AgentJob, LoopJob, RayRunPool, RunOutcome, StatusAgentJob
from toolloop.runner import ToolCallFinished

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.usefixtures("ray_local")]

HANG_GUARD = 90
SMALL = {"num_cpus": 0}  # actors that take no CPU from the 2-CPU cluster's scheduler
TOPICS = ["tea", "volcanoes", "owls", "bridges", "jazz", "glaciers", "ink", "comets"]


def essence(result: LoopResult) -> Any:
    """What a run decided and got, without its id and timings."""
    return (
        result.user_input,
        result.stop_reason,
        result.rounds,
        [(r.purpose, r.tool_name, r.kwargs, r.success, r.result) for r in result.done_plans],
        result.prompt,
    )


async def test_results_equal_the_single_process_run() -> None:
    job = LoopJob(planner=rs.plan_for, tools=[rs.lookup], options={"max_turns": 3})
    local = [
        await async_plan_and_execute(
            topic, tools=[rs.lookup], planner=rs.plan_for(topic), max_turns=3
        )
        for topic in TOPICS
    ]
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(
            job, actors=2, runs_per_actor=3, chunk=2, actor_options=SMALL
        ) as pool:
            streamed = [outcome async for outcome in pool.map(TOPICS)]
            again = await pool.run_all(TOPICS)
    assert sorted(o.index for o in streamed) == list(range(len(TOPICS)))  # each once
    assert [o.index for o in again] == list(range(len(TOPICS)))
    assert all(o.ok and o.attempts == 1 for o in streamed)
    assert {o.actor for o in streamed} == {0, 1}  # spread over both actors
    assert [essence(o.result) for o in again] == [essence(r) for r in local]
    by_index = {o.index: o for o in streamed}
    assert [essence(by_index[i].result) for i in range(len(TOPICS))] == [essence(r) for r in local]


async def test_events_of_every_run_are_forwarded() -> None:
    job = LoopJob(planner=rs.plan_for, tools=[rs.lookup])
    seen: list[tuple[int, Any]] = []
    local: list[Any] = []
    await async_plan_and_execute(
        "volcanoes", tools=[rs.lookup], planner=rs.plan_for("volcanoes"), on_event=local.append
    )
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=1, actor_options=SMALL) as pool:
            outcomes = await pool.run_all(
                ["tea", "volcanoes"], on_event=lambda i, e: seen.append((i, e))
            )
    assert all(o.ok for o in outcomes)
    for index in (0, 1):
        kinds = [type(e) for i, e in seen if i == index]
        assert kinds.count(RunFinished) == 1
        assert RoundStarted in kinds
    remote = [type(e) for i, e in seen if i == 1]
    assert remote == [type(e) for e in local]  # the same events as in one process
    finished = [e for i, e in seen if i == 1 and isinstance(e, ToolCallFinished)]
    assert [e.record.result for e in finished] == [{"topic": "volcanoes", "fact": "seonaclov"}] * 2


async def test_a_failing_run_is_reported_not_retried() -> None:
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(
            rs.NodeJob(), actors=1, retries=3, tool_concurrency=5, actor_options=SMALL
        ) as pool:
            outcomes = await pool.run_all(["a", "boom", "b"])
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].error == "RuntimeError: the job refused 'boom'"
    assert outcomes[1].attempts == 1
    assert outcomes[0].result["tokens"] == 5  # the actor's shared limiter


async def test_the_job_is_shipped_once_not_per_run() -> None:
    rs.CountingJob.pickled = 0
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(rs.CountingJob(), actors=2, chunk=1, actor_options=SMALL) as pool:
            outcomes = await pool.run_all([f"item-{i}" for i in range(12)])
    assert all(o.ok for o in outcomes)
    assert {o.actor for o in outcomes} == {0, 1}
    assert rs.CountingJob.pickled == 1  # put in the object store once, read by each actor


async def _kill_mid_batch(retries: int) -> tuple[list[RunOutcome], set[int]]:
    """Runs wait at the probe's gate; actor 0 is killed while it hosts some of them."""
    probe = rs.new_probe()
    items = [f"gate-{i}" for i in range(6)]
    job = LoopJob(planner=rs.plan_for, tools=[rs.gated])
    outcomes: list[RunOutcome] = []
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=2, retries=retries, chunk=3, actor_options=SMALL) as pool:
            async with anyio.create_task_group() as group:

                async def consume() -> None:
                    outcomes.extend(await pool.run_all(items))

                group.start_soon(consume)
                await rs_until(probe, "gated", len(items))  # every run is inside its tool
                ray.kill(pool.handles[0])
                probe.open.remote("go")
    killed = {o.index for o in outcomes if o.attempts > 1 or not o.ok}
    return outcomes, killed


async def rs_until(probe: Any, key: str, count: int) -> list[Any]:
    from toolloop.ray import await_ref

    return list(await await_ref(probe.until.remote(key, count)))


async def test_an_actor_killed_mid_batch_has_its_runs_retried() -> None:
    outcomes, retried = await _kill_mid_batch(retries=1)
    assert [o.index for o in outcomes] == list(range(6))  # none missing, none twice
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert len(retried) == 3  # the killed actor's chunk, each given to a fresh actor
    assert all(outcomes[i].attempts == 2 for i in retried)
    assert [o.result.done_plans[0].result for o in outcomes] == [
        {"topic": f"gate-{i}"} for i in range(6)
    ]


async def test_an_actor_killed_mid_batch_without_retries_reports_its_runs() -> None:
    outcomes, failed = await _kill_mid_batch(retries=0)
    assert [o.index for o in outcomes] == list(range(6))
    assert len(failed) == 3
    for index in failed:
        outcome = outcomes[index]
        assert not outcome.ok and outcome.attempts == 1 and outcome.result is None
        assert "lost with its actor" in (outcome.error or "")
        assert "raise retries=" in (outcome.error or "")
    assert all(outcomes[i].ok for i in range(6) if i not in failed)


async def test_leaving_the_stream_early_cancels_the_rest() -> None:
    probe = rs.new_probe()
    job = LoopJob(planner=rs.plan_for, tools=[rs.gated, rs.lookup])
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=1, chunk=1, actor_options=SMALL) as pool:
            stream = pool.map(["tea", "gate-a", "gate-b"])
            first = await stream.__anext__()  # tea needs no gate
            await rs_until(probe, "waiting", 2)  # both gated runs wait inside their tool
            await stream.aclose()  # type: ignore[attr-defined]
            assert first.index == 0 and first.ok
            # the gated runs were cancelled in the actor: the actor serves a new map at once
            (again,) = await pool.run_all(["ink"])
            # the two gated runs were cancelled down to the call their tool was waiting on
            # (the gate never opened)
            stopped = await rs_until(probe, "stopped waiting", 2)
    assert again.ok
    assert sorted(stopped) == ["gate-a", "gate-b"]
    assert sorted(ray.get(probe.get.remote("gated"))) == ["gate-a", "gate-b"]


async def test_agent_runs_on_ray() -> None:
    job = AgentJob(agent=rs.make_agent)
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=1, actor_options=SMALL) as pool:
            outcomes = await pool.run_all(["tea", "owls"])
    assert [o.result.text for o in outcomes] == ["About tea: aet", "About owls: slwo"]
    assert [o.result.records[0].result for o in outcomes] == [  # the tool's values, as they came
        {"topic": "tea", "fact": "aet"},
        {"topic": "owls", "fact": "slwo"},
    ]


async def test_status_agent_runs_on_ray() -> None:
    job = StatusAgentJob(agent=rs.make_mail_status_agent)
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=1, actor_options=SMALL) as pool:
            outcomes = await pool.run_all(["mail ada", "mail bob"])
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert [o.result.text for o in outcomes] == ["sent", "sent"]
    assert [o.result.records[0].result for o in outcomes] == ["sent to ada", "sent to bob"]


@pytest.mark.parametrize("product", ["loop", "middleware", "status"])
async def test_a_run_paused_in_one_pool_is_resumed_in_another(product: str, tmp_path: Path) -> None:
    """The job's store is made in each actor: a run paused there is resumed by an actor of
    another pool (another process), which runs the approved call once."""
    store = functools.partial(SQLiteCheckpointStore, tmp_path / "runs.db")
    job = rs.mail_job(product, options={"needs_approval": ["send"]}, store=store)
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=1, actor_options=SMALL) as pool:
            (paused,) = await pool.run_all([{"user_input": "mail ada", "run_id": "r1"}])
        async with RayRunPool(job, actors=1, actor_options=SMALL) as pool:
            (done,) = await pool.run_all([{"resume": "r1", "decision": Approve()}])
    assert paused.ok and done.ok, (paused.error, done.error)
    assert (paused.result.status, done.result.status) == ("paused", "completed")
    assert done.result.stop_reason == "answered"
    assert [(r.tool_name, r.result) for r in done.result.records] == [("send", "sent to ada")]
    async with SQLiteCheckpointStore(tmp_path / "runs.db") as kept:
        stored = await kept.get("r1")
    assert stored is not None and stored.status == "completed"
    assert [(e.tool_name, e.state) for e in stored.journal if e.tool_name == "send"] == [
        ("send", "finished")
    ]


def test_bad_pool_settings_say_what_is_expected() -> None:
    job = LoopJob(planner=rs.plan_for)
    with pytest.raises(ValueError, match="actors must be an int >= 1, got 0"):
        RayRunPool(job, actors=0)
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        RayRunPool(job, retries=-1)
    with pytest.raises(TypeError, match="job must have setup"):
        RayRunPool(object())  # type: ignore[arg-type]
