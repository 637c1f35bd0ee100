"""Tools on Ray, on the suite's real local cluster: task and actor tools through the runner,
the schema check before anything is sent, timeouts and cancellation that ``ray.cancel`` the
task, a worker killed mid-call, on asyncio and trio."""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
import pytest
import ray
import ray_support as rs
from ray.exceptions import TaskCancelledError

from toolloop import async_plan_and_execute
from toolloop.errors import ToolDefinitionError
from toolloop.ray import actor_tool, await_ref, ray_tool
from toolloop.runner import Executor
from toolloop.testing import ScriptedPlanner

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.usefixtures("ray_local")]

HANG_GUARD = 90  # seconds; a worker starts in ~1-5 s on a busy 2-core machine


def plan(tool_name: str, **kwargs: Any) -> ScriptedPlanner:
    return ScriptedPlanner(
        [
            {
                "next_action": "execute",
                "execution_commands": [
                    {"purpose": "p", "tool_name": tool_name, "tool_kwargs": kwargs}
                ],
            }
        ]
    )


@pytest.fixture
def probe() -> Any:
    return rs.new_probe()


async def test_a_ray_tool_runs_in_a_worker_through_the_loop(probe: Any) -> None:
    square = ray_tool(rs.square)
    assert square.name == "square"
    assert square.parameters["required"] == ["x"]
    assert square.description == "The square of x, with the process it was computed in."
    with anyio.fail_after(HANG_GUARD):
        result = await async_plan_and_execute(
            "square 7", tools=[square], planner=plan("square", x=7)
        )
    (record,) = result.done_plans
    assert record.success, record.error
    assert record.result["square"] == 49
    assert record.result["pid"] != os.getpid()  # it ran in a Ray worker
    assert ray.get(probe.get.remote("square")) == [7]


async def test_arguments_failing_the_schema_never_reach_the_cluster(probe: Any) -> None:
    executor = Executor([ray_tool(rs.square)])
    with anyio.fail_after(HANG_GUARD):
        bad = await executor.call(rs.command("square", x="seven"))
        missing = await executor.call(rs.command("square"))
        good = await executor.call(rs.command("square", x=3))
    assert not bad.success and "square" in (bad.error or "")
    assert not missing.success and "x" in (missing.error or "")
    assert good.success
    assert ray.get(probe.get.remote("square")) == [3]  # only the good call was sent


async def test_an_exception_in_the_task_is_a_failed_record_with_its_type(probe: Any) -> None:
    executor = Executor([ray_tool(rs.fails)])
    with anyio.fail_after(HANG_GUARD):
        record = await executor.call(rs.command("fails", reason="no such file"))
    assert not record.success
    assert record.error_type == "ValueError"
    assert "no such file" in (record.error or "")


async def test_a_timed_out_ray_tool_is_cancelled_on_the_cluster(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancelled: list[Any] = []
    real_cancel = ray.cancel

    def spy(ref: Any, **kwargs: Any) -> None:
        cancelled.append(ref)
        real_cancel(ref, **kwargs)

    monkeypatch.setattr(ray, "cancel", spy)
    executor = Executor([ray_tool(timeout=0.5)(rs.stubborn)])
    with anyio.fail_after(HANG_GUARD):
        record = await executor.call(rs.command("stubborn", seconds=600))
    assert not record.success
    assert "did not finish within 0.5 s" in (record.error or "")
    (ref,) = cancelled  # cancelled once, pending or running: it never finishes its 600 s
    with pytest.raises(TaskCancelledError):
        await anyio.to_thread.run_sync(lambda: ray.get(ref, timeout=HANG_GUARD))


async def test_a_cancelled_run_interrupts_its_running_ray_task(probe: Any) -> None:
    stubborn = ray_tool(rs.stubborn)
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await async_plan_and_execute(
                    "wait", tools=[stubborn], planner=plan("stubborn", seconds=600)
                )
                pytest.fail("the run should have been cancelled")

            group.start_soon(run)
            (pid,) = await await_ref(probe.until.remote("started"))  # it is running now
            group.cancel_scope.cancel()
        # the task was interrupted where it ran (KeyboardInterrupt), not left to run 600 s
        assert await await_ref(probe.until.remote("interrupted")) == [pid]


async def test_a_worker_killed_mid_call_gives_one_failed_record(probe: Any) -> None:
    stubborn = ray_tool(rs.stubborn)  # max_retries=0: never run twice
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            results: list[Any] = []

            async def run() -> None:
                results.append(
                    await async_plan_and_execute(
                        "wait", tools=[stubborn], planner=plan("stubborn", seconds=600)
                    )
                )

            group.start_soon(run)
            (pid,) = await await_ref(probe.until.remote("started"))
            os.kill(pid, signal.SIGKILL)
    (result,) = results
    (record,) = result.done_plans
    assert not record.success
    assert record.error_type is not None and "Crashed" in record.error_type
    assert "died" in (record.error or "") or "crash" in (record.error or "").lower()
    assert ray.get(probe.get.remote("started")) == [pid]  # it was not run again


async def test_an_actor_tool_keeps_its_state_across_calls(probe: Any) -> None:
    name = f"counter-{os.getpid()}-{id(probe)}"
    handle: Any = ray.remote(rs.Counter).options(name=name, num_cpus=0).remote()
    try:
        add = actor_tool(rs.Counter.add, actor=name)
        assert add.name == "add"
        assert list(add.parameters["properties"]) == ["amount"]  # no self
        executor = Executor([add], concurrency=1)
        with anyio.fail_after(HANG_GUARD):
            records = await executor.run([rs.command("add", amount=2), rs.command("add", amount=3)])
            refused = await executor.call(rs.command("add", amount="x"))
        assert [r.result for r in records] == [2, 5]
        assert not refused.success
        assert ray.get(handle.add.remote(0)) == 5  # the bad call never reached the actor
    finally:
        ray.kill(handle)


async def test_a_cancelled_actor_tool_cancels_its_actor_task() -> None:
    handle: Any = ray.remote(rs.Sleeper).options(num_cpus=0).remote()
    try:
        nap = actor_tool(rs.Sleeper.nap, actor=handle)
        executor = Executor([nap])
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as group:
                group.start_soon(executor.call, rs.command("nap", seconds=600))
                assert await await_ref(handle.until.remote(1, 0)) == [1, 0]  # it runs
                group.cancel_scope.cancel()
            # the actor's task was cancelled where it ran, not left to sleep 600 s
            assert await await_ref(handle.until.remote(1, 1)) == [1, 1]
    finally:
        ray.kill(handle)


def test_definitions_say_what_is_wrong() -> None:
    async def fetch(url: str) -> str:
        return url

    with pytest.raises(ToolDefinitionError, match="is async; a Ray task runs a sync"):
        ray_tool(fetch)
    with pytest.raises(ToolDefinitionError, match="num_cpus must be a number >= 0"):
        ray_tool(num_cpus=-1)(rs.square)
    with pytest.raises(ToolDefinitionError, match="max_retries must be an int >= 0"):
        ray_tool(max_retries=-1)(rs.square)
    with pytest.raises(ToolDefinitionError, match="unknown num_cpu; the options are num_cpus, "):
        ray_tool(num_cpu=2)(rs.square)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match="actor must be an actor handle or the name"):
        actor_tool(rs.Counter.add, actor=3)  # type: ignore[arg-type]
