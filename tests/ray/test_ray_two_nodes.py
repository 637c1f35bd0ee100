"""On a two-node cluster (``ray.cluster_utils.Cluster``: a head and a worker node of one
CPU each): the pool's actors land on both nodes, and Ray tools run on the other node too,
with the same results as in one process."""

from __future__ import annotations

import anyio
import pytest
import ray
import ray_support as rs

from toolloop import async_plan_and_execute
from toolloop.ray import LoopJob, RayRunPool, ray_tool
from toolloop.runner import Executor

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.usefixtures("ray_two_nodes")]

HANG_GUARD = 120


async def test_actors_spread_over_both_nodes() -> None:
    alive = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    assert len(alive) == 2
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(
            rs.NodeJob(), actors=2, chunk=1, actor_options={"num_cpus": 1}
        ) as pool:
            outcomes = await pool.run_all([f"item-{i}" for i in range(6)])
    assert all(o.ok for o in outcomes)
    nodes = {o.actor: o.result["node"] for o in outcomes}
    assert len(set(nodes.values())) == 2  # one actor on each node (1 CPU each)


async def test_loop_runs_on_two_nodes_equal_the_single_process_runs() -> None:
    topics = ["tea", "volcanoes", "owls", "glaciers"]
    local = [
        await async_plan_and_execute(topic, tools=[rs.lookup], planner=rs.plan_for(topic))
        for topic in topics
    ]
    job = LoopJob(planner=rs.plan_for, tools=[rs.lookup])
    with anyio.fail_after(HANG_GUARD):
        async with RayRunPool(job, actors=2, chunk=1, actor_options={"num_cpus": 0}) as pool:
            outcomes = await pool.run_all(topics)
    assert [o.result.action_results for o in outcomes] == [r.action_results for r in local]


async def test_ray_tools_run_on_both_nodes_at_once() -> None:
    probe = rs.new_probe()  # kept: an actor whose last handle goes away is destroyed
    meet = ray_tool(num_cpus=1, options={"scheduling_strategy": "SPREAD"})(rs.meet)
    executor = Executor([meet], concurrency=2)
    with anyio.fail_after(HANG_GUARD):
        # each call holds its node's only CPU until both run: that needs both nodes
        records = await executor.run([rs.command("meet", count=2) for _ in range(2)])
    assert all(r.success for r in records), [r.error for r in records]
    assert len({r.result for r in records}) == 2
    assert len(ray.get(probe.get.remote("met"))) == 2
