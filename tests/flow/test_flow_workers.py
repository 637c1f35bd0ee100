"""WorkerPool: a worker whose job is done takes the next one instead of ending; cancelling
an owner drops its jobs not taken yet and ends the worker doing one; closing lets idle
workers go; an execution closes its pool when its chain of steps ends."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from pydantic import BaseModel
from tasks_support import current_task

from toolloop.flow import Context, Flow, PoolWorker, WorkerPool

pytestmark = pytest.mark.anyio

HANG_GUARD = 10  # seconds; every wait here ends within milliseconds when the code is right


class Jobs:
    """Jobs named by their owner: each records the task that ran it and may wait at a gate."""

    def __init__(self) -> None:
        self.ran: list[tuple[object, object]] = []
        self.started: dict[object, anyio.Event] = {}
        self.gates: dict[object, anyio.Event] = {}
        self.cancelled: list[object] = []
        self.left = 0

    def started_event(self, owner: object) -> anyio.Event:
        return self.started.setdefault(owner, anyio.Event())

    async def run(self, worker: PoolWorker) -> None:
        owner = worker.owner
        try:
            while owner is not None:
                self.ran.append((owner, current_task()))
                self.started_event(owner).set()
                gate = self.gates.get(owner)
                if gate is not None:
                    try:
                        await gate.wait()
                    except anyio.get_cancelled_exc_class():
                        self.cancelled.append(owner)
                        raise
                owner = await worker.pool.take(worker)
        finally:
            self.left += 1
            worker.pool.leave(worker)


async def test_a_worker_whose_job_is_done_takes_the_next_one() -> None:
    jobs = Jobs()
    jobs.gates["b"] = anyio.Event()  # "b" holds its worker until the test lets it go
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            pool = WorkerPool(tg)
            pool.start("a", jobs.run)
            await jobs.started_event("a").wait()
            # the worker went on, without a switch, to wait for its next job
            assert (pool.workers, pool.idle) == (1, 1)
            pool.start("b", jobs.run)
            await jobs.started_event("b").wait()
            assert (pool.workers, pool.idle) == (1, 0)
            pool.start("c", jobs.run)  # no idle worker: a new task
            await jobs.started_event("c").wait()
            assert pool.workers == 2
            jobs.gates["b"].set()
            pool.close()
    tasks = dict(jobs.ran)
    assert tasks["a"] is tasks["b"]  # "b" ran in the task that ran "a"
    assert tasks["c"] is not tasks["a"]
    assert jobs.left == 2


async def test_close_lets_idle_workers_go_and_later_jobs_get_a_task_that_ends_with_them() -> None:
    jobs = Jobs()
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            pool = WorkerPool(tg)
            pool.start("a", jobs.run)
            await jobs.started_event("a").wait()
            pool.close()  # the idle worker leaves; the group can end
            pool.start("late", jobs.run)
            await jobs.started_event("late").wait()
    tasks = dict(jobs.ran)
    assert tasks["a"] is not tasks["late"]
    assert jobs.left == 2
    assert pool.workers == 0


async def test_cancel_drops_jobs_not_taken_and_ends_the_worker_doing_one() -> None:
    jobs = Jobs()
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            pool = WorkerPool(tg)
            pool.start("warm", jobs.run)
            await jobs.started_event("warm").wait()
            pool.start("queued", jobs.run)  # handed to the idle worker...
            assert pool.cancel("queued") == 1  # ...and dropped before it took it
            jobs.gates["busy"] = anyio.Event()  # never set: only cancellation ends it
            pool.start("busy", jobs.run)
            await jobs.started_event("busy").wait()
            assert pool.cancel("busy") == 0  # it had started: its worker is cancelled
            pool.start("after", jobs.run)
            await jobs.started_event("after").wait()
            pool.close()
    owners = [owner for owner, _ in jobs.ran]
    assert "queued" not in owners
    assert jobs.cancelled == ["busy"]
    tasks = dict(jobs.ran)
    assert tasks["busy"] is tasks["warm"]  # the idle worker took it...
    assert tasks["after"] is not tasks["busy"]  # ...and, cancelled, was not used again
    assert pool.workers == 0


async def test_cancelling_the_group_ends_idle_and_busy_workers() -> None:
    jobs = Jobs()
    jobs.gates["busy"] = anyio.Event()
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            pool = WorkerPool(tg)
            pool.start("idle", jobs.run)
            pool.start("busy", jobs.run)
            await jobs.started_event("idle").wait()
            await jobs.started_event("busy").wait()
            tg.cancel_scope.cancel()  # the pool is never closed: cancellation alone ends it
    assert jobs.cancelled == ["busy"]
    assert jobs.left == 2
    assert pool.workers == 0


class Counts(BaseModel):
    steps: int = 0


def _flow_with_an_idle_worker(pause: bool) -> tuple[Flow[Counts], Jobs]:
    """A step gives the execution's pool a job and leaves its worker idle; the next step
    ends or pauses the execution."""
    jobs = Jobs()

    async def work(_: object, ctx: Context[Counts]) -> None:
        ctx.workers.start("job", jobs.run)
        await jobs.started_event("job").wait()
        assert ctx.workers.idle == 1
        ctx.state.steps += 1

    def last(_: object, ctx: Context[Counts]) -> str:
        ctx.state.steps += 1
        if pause:
            ctx.pause("go")
        return "done"

    flow: Flow[Counts] = Flow("pool", state=Counts)
    flow.start.to(work)
    flow.step(work).to(last)
    if pause:
        flow.when("go", external=True).to(lambda value: value).end()
    else:
        flow.step(last).end()
    return flow, jobs


@pytest.mark.parametrize("pause", [False, True], ids=["completes", "pauses"])
async def test_an_execution_closes_its_pool_when_its_chain_ends(pause: bool) -> None:
    flow, jobs = _flow_with_an_idle_worker(pause)
    with anyio.fail_after(HANG_GUARD):  # an idle worker left open would hang the run here
        result = await flow.execution().run()
    assert result.status == ("paused" if pause else "completed")
    assert result.state.steps == 2
    assert jobs.left == 1


async def test_workers_of_a_context_need_a_running_execution() -> None:
    flow, _ = _flow_with_an_idle_worker(pause=False)
    execution = flow.execution()
    with pytest.raises(RuntimeError, match="not running"):
        _ = execution.context_for("work").workers
