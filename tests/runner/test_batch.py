"""ToolBatch: calls run in the calling task while they finish at once, spread over workers
the moment one waits, and (given an outer task group) start no task group of their own."""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest

from toolloop.runner import ToolBatch

pytestmark = pytest.mark.anyio


def _task_id() -> int:
    return anyio.get_current_task().id


def _cancelled(item: int) -> str:
    return f"cancelled {item}"


async def test_calls_that_never_wait_run_in_the_calling_task_in_order() -> None:
    seen: list[tuple[int, int]] = []

    async def call(item: int, started: Callable[[], None]) -> str:
        started()
        seen.append((item, _task_id()))
        return f"done {item}"

    batch: ToolBatch[int, str] = ToolBatch(call, _cancelled, concurrency=4)
    async with batch:
        await batch.run_here(range(6))
    assert batch.results == [f"done {i}" for i in range(6)]
    assert [item for item, _ in seen] == list(range(6))
    assert {task for _, task in seen} == {_task_id()}  # no worker task was needed


async def test_a_call_that_waits_lets_the_others_run_concurrently_under_the_limit() -> None:
    """Every call waits at a gate that opens only once three run at once: with the limit of
    three that is reached only if the calls after the first spread over workers."""
    running = 0
    peak = 0
    all_in = anyio.Event()
    starts: list[int] = []
    tasks: set[int] = set()

    async def call(item: int, started: Callable[[], None]) -> int:
        nonlocal running, peak
        started()
        starts.append(item)
        tasks.add(_task_id())
        running += 1
        peak = max(peak, running)
        if running == 3:
            all_in.set()
        await all_in.wait()
        running -= 1
        return item * 10

    batch: ToolBatch[int, int] = ToolBatch(call, lambda i: -1, concurrency=3)
    with anyio.fail_after(10):  # hang guard: without the spill the gate never opens
        async with batch:
            await batch.run_here(range(7))
    assert batch.results == [i * 10 for i in range(7)]
    assert starts[:3] == [0, 1, 2]  # submission order, the first in the calling task
    assert peak == 3  # exactly the limit, never more
    assert len(tasks) == 3


async def test_waiting_calls_start_their_workers_in_steps_and_all_run_at_once() -> None:
    """A call that waits starts workers for half of the calls still waiting; the last of
    them starts more as it starts its call: when the second call starts, two workers have
    been started (not five), and still all six run at once (the gate opens only then)."""
    running_at_start: dict[int, int] = {}
    inside = 0
    all_in = anyio.Event()
    tasks: set[int] = set()

    async def call(item: int, started: Callable[[], None]) -> int:
        nonlocal inside
        started()
        running_at_start[item] = batch.running
        tasks.add(_task_id())
        inside += 1
        if inside == 6:
            all_in.set()
        await all_in.wait()
        return item

    batch: ToolBatch[int, int] = ToolBatch(call, lambda i: -1, concurrency=6)
    with anyio.fail_after(10):  # hang guard: a chain that stalled would never open the gate
        async with batch:
            await batch.run_here(range(6))
    assert batch.results == list(range(6))
    assert len(tasks) == 6  # every call waited: the calling task and five workers
    assert running_at_start[0] == 1  # the calling task alone
    # the first worker's call: the calling task and the two workers started for 5 waiting
    assert running_at_start[1] == 3


async def test_calls_that_wait_briefly_take_fewer_tasks_than_calls() -> None:
    """Four calls that each wait one scheduler pass, limit four: a call that ended frees
    its task for the next one, so fewer than four tasks run them (one each before), and
    no more than three tasks are ever started for them."""
    tasks: list[int] = []
    running: list[int] = []

    async def call(item: int, started: Callable[[], None]) -> int:
        started()
        tasks.append(_task_id())
        running.append(batch.running)
        await anyio.lowlevel.checkpoint()
        return item

    batch: ToolBatch[int, int] = ToolBatch(call, lambda i: -1, concurrency=4)
    with anyio.fail_after(10):
        async with batch:
            await batch.run_here(range(4))
    assert batch.results == list(range(4))
    assert len(tasks) == 4
    assert len(set(tasks)) < 4
    assert max(running) <= 3  # a worker that has not come yet holds back the next
    assert tasks[0] == _task_id()  # the first in the calling task


async def test_run_here_with_every_slot_taken_leaves_the_calls_to_the_workers() -> None:
    gate = anyio.Event()

    async def call(item: int, started: Callable[[], None]) -> int:
        started()
        await gate.wait()
        return item

    batch: ToolBatch[int, int] = ToolBatch(call, lambda i: -1, concurrency=1)
    with anyio.fail_after(10):
        async with batch:
            batch.submit(0)  # takes the only slot
            await batch.run_here([1, 2])  # returns at once: no slot for this task
            assert batch.running == 1
            gate.set()
    assert batch.results == [0, 1, 2]


async def test_cancelling_a_waiting_inline_call_reaches_it() -> None:
    """Cancelling the block while the calling task is inside a call that waits: the call
    sees the cancellation (it is thrown into it), and every call gets a result."""
    cleaned: list[int] = []
    entered = 0
    both_in = anyio.Event()

    async def call(item: int, started: Callable[[], None]) -> str:
        nonlocal entered
        started()
        entered += 1
        if entered == 2:
            both_in.set()
        try:
            await anyio.sleep_forever()
        finally:
            cleaned.append(item)
        return "never"

    batch: ToolBatch[int, str] = ToolBatch(call, _cancelled, concurrency=2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                async with batch:
                    await batch.run_here([0, 1, 2])

            tg.start_soon(run)
            await both_in.wait()  # 0 in the calling task, 1 in the worker it spilled to
            tg.cancel_scope.cancel()
    assert batch.results == ["cancelled 0", "cancelled 1", "cancelled 2"]
    assert sorted(cleaned) == [0, 1]  # both running calls were cancelled, not abandoned


async def test_a_call_that_returns_after_waiting_keeps_its_value_and_exceptions() -> None:
    class Boom(Exception):
        pass

    async def call(item: int, started: Callable[[], None]) -> str:
        started()
        await anyio.lowlevel.checkpoint()
        try:
            if item == 1:
                raise Boom("inner")
        except Boom:
            await anyio.lowlevel.checkpoint()  # waits again inside the handler
            return "recovered"
        return f"ok {item}"

    batch: ToolBatch[int, str] = ToolBatch(call, _cancelled, concurrency=2)
    async with batch:
        await batch.run_here([0, 1, 2])
    assert batch.results == ["ok 0", "recovered", "ok 2"]


# -- an outer task group -------------------------------------------------------------------


async def test_workers_start_in_the_outer_group_and_are_awaited() -> None:
    release = anyio.Event()
    all_in = anyio.Event()
    in_worker: list[int] = []

    async def call(item: int, started: Callable[[], None]) -> int:
        started()
        in_worker.append(_task_id())
        if len(in_worker) == 3:
            all_in.set()
        await release.wait()
        return item

    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            batch: ToolBatch[int, int] = ToolBatch(
                call, lambda i: -1, concurrency=3, task_group=outer
            )
            async with batch:
                for i in range(3):
                    batch.submit(i)
                await all_in.wait()
                release.set()
            # the block waited for its workers: every result is in
            assert batch.results == [0, 1, 2]
            assert batch.running == 0


async def test_cancelling_the_block_cancels_its_workers_not_the_outer_group() -> None:
    started_calls = 0
    two_in = anyio.Event()
    other_alive = anyio.Event()
    other_done = anyio.Event()

    async def call(item: int, started: Callable[[], None]) -> str:
        nonlocal started_calls
        started()
        started_calls += 1
        if started_calls == 2:
            two_in.set()
        await anyio.sleep_forever()
        return "never"

    async def bystander() -> None:
        other_alive.set()
        await anyio.lowlevel.checkpoint()
        other_done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            outer.start_soon(bystander)
            batch: ToolBatch[int, str] = ToolBatch(
                call, _cancelled, concurrency=2, task_group=outer
            )
            with anyio.CancelScope() as scope:
                async with batch:
                    batch.submit(0)
                    batch.submit(1)
                    batch.submit(2)  # waits: the limit is 2
                    await two_in.wait()
                    scope.cancel()
                    await anyio.sleep_forever()
            assert batch.results == ["cancelled 0", "cancelled 1", "cancelled 2"]
            assert batch.running == 0
            await other_done.wait()  # the outer group was not cancelled
    assert other_alive.is_set()


async def test_a_workers_fatal_error_is_raised_by_the_block_not_the_outer_group() -> None:
    class Broken(Exception):
        pass

    finished: list[int] = []
    survivor_done = anyio.Event()

    async def call(item: int, started: Callable[[], None]) -> int:
        started()
        await anyio.lowlevel.checkpoint()
        if item == 1:
            raise Broken("a call that should have returned a result")
        if item == 0:
            await anyio.sleep_forever()  # cancelled by the failure
        return item

    def on_finish(index: int, result: int, duration: float) -> None:
        finished.append(index)

    async def survivor() -> None:
        await anyio.lowlevel.checkpoint()
        survivor_done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            outer.start_soon(survivor)
            batch: ToolBatch[int, int] = ToolBatch(
                call, lambda i: -1, concurrency=2, on_finish=on_finish, task_group=outer
            )

            async def use() -> None:
                async with batch:
                    batch.submit(0)
                    batch.submit(1)
                    batch.submit(2)

            with pytest.raises(Broken):
                await use()
            assert batch.results[0] == -1  # cut short by the failure
            assert sorted(finished) == [0, 1, 2]  # every item had its result told
            await survivor_done.wait()


async def test_the_outer_groups_cancellation_reaches_the_workers() -> None:
    entered = 0
    all_in = anyio.Event()

    async def call(item: int, started: Callable[[], None]) -> str:
        nonlocal entered
        started()
        entered += 1
        if entered == 3:
            all_in.set()
        await anyio.sleep_forever()
        return "never"

    results: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            batch: ToolBatch[int, str] = ToolBatch(
                call, _cancelled, concurrency=3, task_group=outer, results=results
            )

            async def owner() -> None:
                async with batch:
                    await batch.run_here([0, 1, 2])

            outer.start_soon(owner)
            await all_in.wait()
            outer.cancel_scope.cancel()
    assert results == ["cancelled 0", "cancelled 1", "cancelled 2"]


async def test_a_batch_is_used_once() -> None:
    async def call(item: int, started: Callable[[], None]) -> int:
        return item

    batch: ToolBatch[int, int] = ToolBatch(call, lambda i: -1, concurrency=1)
    async with batch:
        await batch.run_here([1])
    with pytest.raises(RuntimeError, match="used once"):
        async with batch:
            pass
    with pytest.raises(RuntimeError, match="inside"):
        batch.run_here([2])


# -- what a call sees ------------------------------------------------------------------------

_WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="caller")


async def test_each_call_in_the_calling_task_has_a_context_of_its_own() -> None:
    """A call that sets a context variable does not change what the next call sees, nor
    what the calling task sees: as if each had a task of its own."""

    async def call(item: str, started: Callable[[], None]) -> str:
        started()
        if item == "login":
            _WHO.set("mallory")
            return "logged in"
        await anyio.lowlevel.checkpoint()  # waits: the rest spills to workers
        return _WHO.get()

    batch: ToolBatch[str, str] = ToolBatch(call, lambda item: "cancelled", concurrency=2)
    async with batch:
        await batch.run_here(["login", "whoami", "whoami", "whoami"])
    assert batch.results == ["logged in", "caller", "caller", "caller"]
    assert _WHO.get() == "caller"


async def test_a_call_that_swallows_a_cancellation_then_raises_has_no_false_context() -> None:
    """An exception thrown into a call running in the calling task is not 'being handled'
    when the call goes on: a later error of the call has no false __context__."""
    errors: list[BaseException] = []

    async def call(item: int, started: Callable[[], None]) -> str:
        started()
        with anyio.move_on_after(0.01):
            await anyio.sleep(30)
        try:
            raise ValueError("after the timeout")
        except ValueError as exc:
            errors.append(exc)
        return "done"

    batch: ToolBatch[int, str] = ToolBatch(call, _cancelled, concurrency=2)
    with anyio.fail_after(30):
        async with batch:
            await batch.run_here([0, 1])
    assert batch.results == ["done", "done"]
    assert [e.__context__ for e in errors] == [None, None]


async def test_a_batch_awaited_never_holds_no_slot_and_ends() -> None:
    """run_here() whose awaitable is dropped: its calls are handed to nobody and get the
    cancelled result when the block ends; nothing hangs."""

    async def call(item: int, started: Callable[[], None]) -> int:
        return item

    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            batch: ToolBatch[int, int] = ToolBatch(
                call, lambda i: -1, concurrency=1, task_group=outer
            )
            async with batch:
                pending = batch.run_here([1])
                assert batch.running == 0  # no slot taken before it is awaited
                batch.submit(2)  # the slot is free: a worker takes both
                pending.close()  # type: ignore[attr-defined]  # dropped without awaiting
    assert batch.results == [1, 2]


async def test_after_a_workers_fatal_error_no_worker_starts() -> None:
    class Broken(Exception):
        pass

    started: list[int] = []
    failed = anyio.Event()

    async def call(item: int, started_: Callable[[], None]) -> int:
        started.append(item)
        if item == 0:
            failed.set()
            raise Broken("a call that should have returned a result")
        return item

    with anyio.fail_after(10):
        async with anyio.create_task_group() as outer:
            batch: ToolBatch[int, int] = ToolBatch(
                call, lambda i: -1, concurrency=1, task_group=outer
            )

            async def use() -> None:
                async with batch:
                    batch.submit(0)
                    await failed.wait()
                    await anyio.lowlevel.checkpoint()  # the worker has ended
                    batch.submit(1)  # refused: the batch has failed

            with pytest.raises(Broken):
                await use()
    assert started == [0]
    assert batch.results == [-1, -1]
