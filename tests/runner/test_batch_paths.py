"""The calling task's path (``run_here``) and the workers' path (``submit``) are one
mechanism: the same results, the same hooks, the same errors and the same cancellation,
whichever task runs a call and whether the calls wait or not."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.runner import Executor, ToolBatch
from toolloop.tools import tool

pytestmark = pytest.mark.anyio

PATHS = ("run_here", "submit")

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="outside")


class Fatal(Exception):
    """A call that breaks its contract (it should return a result): aborts the batch."""


class Observed:
    """What one batch came to: results, hooks, peak concurrency, what the caller saw."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.finished: dict[int, Any] = {}
        self.finished_twice: list[int] = []
        self.running = 0
        self.peak = 0
        self.results: list[Any] = []
        self.raised: str | None = None
        self.caller_var = ""

    def on_start(self, index: int, item: Any) -> None:
        self.started.append(index)

    def on_finish(self, index: int, result: Any, duration: float) -> None:
        if index in self.finished:
            self.finished_twice.append(index)
        self.finished[index] = result
        assert duration >= 0


def _call(observed: Observed) -> Callable[[tuple[int, str, int], Callable[[], None]], Any]:
    async def call(item: tuple[int, str, int], started: Callable[[], None]) -> str:
        index, kind, waits = item
        started()
        observed.running += 1
        observed.peak = max(observed.peak, observed.running)
        try:
            _var.set(f"call {index}")  # never seen by the caller (each path copies)
            for _ in range(waits):
                await anyio.lowlevel.checkpoint()
            if kind == "fatal":
                raise Fatal(f"call {index}")
            return f"{kind} {index}"
        finally:
            observed.running -= 1

    return call


async def _batch(
    path: str, items: list[tuple[int, str, int]], concurrency: int, outer: bool
) -> Observed:
    observed = Observed()

    async def use(task_group: anyio.abc.TaskGroup | None) -> None:
        batch: ToolBatch[tuple[int, str, int], str] = ToolBatch(
            _call(observed),
            lambda item: f"cancelled {item[0]}",
            concurrency=concurrency,
            on_start=observed.on_start,
            on_finish=observed.on_finish,
            results=observed.results,
            task_group=task_group,
        )
        try:
            async with batch:
                if path == "run_here":
                    await batch.run_here(items)
                else:
                    for item in items:
                        batch.submit(item)
        except Fatal as exc:
            observed.raised = f"{type(exc).__name__}"
        assert batch.running == 0  # no call left behind
        observed.caller_var = _var.get()

    with anyio.fail_after(10):
        if outer:
            async with anyio.create_task_group() as tg:
                await use(tg)
        else:
            await use(None)
    return observed


_items = st.lists(
    st.tuples(st.sampled_from(["instant", "awaits", "fatal"]), st.integers(0, 3)),
    max_size=9,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=_items, concurrency=st.integers(1, 4), outer=st.booleans())
async def test_run_here_and_submit_come_to_the_same(
    kinds: list[tuple[str, int]], concurrency: int, outer: bool
) -> None:
    items = [(i, kind, 0 if kind == "instant" else waits) for i, (kind, waits) in enumerate(kinds)]
    here, submitted = [await _batch(path, items, concurrency, outer) for path in PATHS]
    fatal = any(kind == "fatal" for _, kind, _ in items)
    for observed in (here, submitted):
        assert len(observed.results) == len(items)  # one result per item, whatever happened
        assert observed.finished == dict(enumerate(observed.results))  # each told, once
        assert not observed.finished_twice
        assert observed.peak <= concurrency
        assert observed.started == sorted(observed.started)  # calls start in order
        assert observed.caller_var == "outside"
        assert observed.raised == ("Fatal" if fatal else None)
    if not fatal:
        assert here.results == submitted.results == [f"{k} {i}" for i, k, _ in items]
        assert here.started == submitted.started == list(range(len(items)))
    else:  # the same up to the first fatal call; the rest may be cut short either way
        first = next(i for i, kind, _ in items if kind == "fatal")
        if all(kind == "instant" for _, kind, _ in items[:first]):
            for observed in (here, submitted):
                assert observed.results[:first] == [f"instant {i}" for i in range(first)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("outer", [False, True])
async def test_cancellation_is_the_same_on_both_paths(path: str, outer: bool) -> None:
    """Cancelled while calls wait: the running calls see it, every item gets the cancelled
    result, no call is left running, and the cancellation propagates."""
    entered = 0
    both_in = anyio.Event()
    cleaned: list[int] = []
    results: list[str] = []

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

    after_block = False

    async def use(scope: anyio.CancelScope, task_group: anyio.abc.TaskGroup | None) -> None:
        nonlocal after_block
        with scope:
            batch: ToolBatch[int, str] = ToolBatch(
                call, lambda i: f"cancelled {i}", concurrency=2, results=results,
                task_group=task_group,
            )  # fmt: skip
            async with batch:
                if path == "run_here":
                    await batch.run_here([0, 1, 2])
                else:
                    for item in (0, 1, 2):
                        batch.submit(item)
            after_block = True
        assert batch.running == 0

    scope = anyio.CancelScope()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(use, scope, tg if outer else None)
            await both_in.wait()
            scope.cancel()
    assert not after_block  # the cancellation was not swallowed
    assert results == ["cancelled 0", "cancelled 1", "cancelled 2"]
    assert sorted(cleaned) == [0, 1]  # both running calls were cancelled, not abandoned


# -- the executor: a round run by Executor.run (the calling task first) and one submitted ----


async def _ok_now(n: int) -> int:
    return n


async def _ok_later(n: int) -> int:
    await anyio.lowlevel.checkpoint()
    return n


async def _raises(n: int) -> int:
    await anyio.lowlevel.checkpoint()
    raise ValueError(f"no {n}")


def _raises_now(n: int) -> int:
    raise KeyError(n)


@tool(timeout=0.001)
async def _stuck() -> None:
    await anyio.sleep(10)


_COMMANDS = {
    "ok now": lambda i: ToolCommand(purpose=f"p{i}", tool_name="_ok_now", tool_kwargs={"n": i}),
    "ok later": lambda i: ToolCommand(purpose=f"p{i}", tool_name="_ok_later", tool_kwargs={"n": i}),
    "raises": lambda i: ToolCommand(purpose=f"p{i}", tool_name="_raises", tool_kwargs={"n": i}),
    "raises now": lambda i: ToolCommand(
        purpose=f"p{i}", tool_name="_raises_now", tool_kwargs={"n": i}
    ),
    "bad arguments": lambda i: ToolCommand(
        purpose=f"p{i}", tool_name="_ok_now", tool_kwargs={"n": "x"}
    ),
    "unknown": lambda i: ToolCommand(purpose=f"p{i}", tool_name="ghost"),
    "timeout": lambda i: ToolCommand(purpose=f"p{i}", tool_name="_stuck"),
}


def _dump(record: ToolExecutionRecord) -> dict[str, Any]:
    fields = record.model_dump()
    if fields["traceback"]:  # raised in the same place (a thread's frames above it vary)
        frames = [line for line in fields["traceback"].splitlines() if line.startswith("  File")]
        fields["traceback"] = (frames[0].strip(), frames[-1].strip())
    return fields


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(list(_COMMANDS)), max_size=8), concurrency=st.integers(1, 4))
async def test_an_executors_round_comes_to_the_same_records_on_both_paths(
    kinds: list[str], concurrency: int
) -> None:
    seen: list[list[Any]] = [[], []]

    class Watched(Executor):
        """A subclass whose own call() must see every call, on both paths."""

        __slots__ = ()

        async def call(self, command: ToolCommand, on_start: Any = None) -> ToolExecutionRecord:
            seen[path].append(command.purpose)
            return await Executor.call(self, command, on_start)

    commands = [_COMMANDS[kind](i) for i, kind in enumerate(kinds)]
    hooks: list[list[tuple[str, int]]] = [[], []]
    records: list[list[ToolExecutionRecord]] = []
    for path in (0, 1):
        executor = Watched(
            [_ok_now, _ok_later, _raises, _raises_now, _stuck],
            concurrency=concurrency,
            on_start=lambda i, c, path=path: hooks[path].append(("start", i)),  # type: ignore[misc]
            on_finish=lambda i, r, d, path=path: hooks[path].append(("finish", i)),  # type: ignore[misc]
        )
        with anyio.fail_after(10):
            if path == 0:
                records.append(await executor.run(commands))
            else:
                async with executor.batch() as batch:
                    for command in commands:
                        batch.submit(command)
                records.append(batch.results)
    assert [_dump(r) for r in records[0]] == [_dump(r) for r in records[1]]
    assert seen[0] == seen[1] == [c.purpose for c in commands]
    for path in (0, 1):
        assert [i for what, i in hooks[path] if what == "start"] == list(range(len(commands)))
        assert sorted(i for what, i in hooks[path] if what == "finish") == list(
            range(len(commands))
        )
