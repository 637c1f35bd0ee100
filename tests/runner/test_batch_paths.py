"""One mechanism, whichever way a call goes through a batch: the calling task's path
(``run_here``) or the workers' (``submit``), a call given whole (a coroutine per call,
:func:`call_split`) or in its parts (:class:`SplitCall`, the work awaited by the batch
itself). The same results, hooks, errors and cancellation, whether the calls wait or not."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.runner import Executor, SplitCall, ToolBatch, call_split
from toolloop.tools import tool

pytestmark = pytest.mark.anyio

PATHS = ("run_here", "submit")
FORMS = ("whole", "split")

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="outside")

Item = tuple[int, str, int]  # (index, kind, checkpoints its work waits)


class Fatal(Exception):
    """A call that breaks its contract (it should come to a result): aborts the batch."""


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


class Scripted(SplitCall[Item, str]):
    """A split call whose items say what their call does:

    ``ready`` (a result at once, no work), ``now`` (work that returns at once), ``waits``
    (work that waits, then returns), ``raises`` (work that waits, then raises: a result of
    the error), ``fatal`` (``begin`` raises: the batch's fatal error).
    """

    def __init__(self, observed: Observed) -> None:
        self.observed = observed

    def begin(self, item: Item) -> tuple[str, None] | tuple[None, Awaitable[Any]]:
        index, kind, waits = item
        _var.set(f"begin {index}")  # never seen by the caller: each call has its context
        if kind == "fatal":
            raise Fatal(f"call {index}")
        if kind == "ready":
            return f"ready {index}", None
        return None, self._work(index, kind, waits)

    async def _work(self, index: int, kind: str, waits: int) -> str:
        observed = self.observed
        observed.running += 1
        observed.peak = max(observed.peak, observed.running)
        try:
            assert _var.get() == f"begin {index}"  # the work runs in begin's context
            for _ in range(waits if kind != "now" else 0):
                await anyio.lowlevel.checkpoint()
            if kind == "raises":
                raise ValueError(f"no {index}")
            return f"{kind} {index}"
        finally:
            observed.running -= 1

    def succeeded(self, item: Item, value: Any) -> str:
        return f"{value}, ok"

    def raised(self, item: Item, exc: Exception) -> str:
        return f"{type(exc).__name__}: {exc}"


async def _batch(
    form: str, path: str, items: list[Item], concurrency: int, outer: bool
) -> Observed:
    observed = Observed()
    split = Scripted(observed)
    call: Any = split if form == "split" else functools.partial(call_split, split)

    async def use(task_group: anyio.abc.TaskGroup | None) -> None:
        batch: ToolBatch[Item, str] = ToolBatch(
            call,
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
            observed.raised = type(exc).__name__
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
    st.tuples(st.sampled_from(["ready", "now", "waits", "raises", "fatal"]), st.integers(0, 3)),
    max_size=9,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=_items, concurrency=st.integers(1, 4), outer=st.booleans())
async def test_every_path_and_form_comes_to_the_same(
    kinds: list[tuple[str, int]], concurrency: int, outer: bool
) -> None:
    items = [(i, kind, waits) for i, (kind, waits) in enumerate(kinds)]
    seen = {
        (form, path): await _batch(form, path, items, concurrency, outer)
        for form in FORMS
        for path in PATHS
    }
    fatal = any(kind == "fatal" for _, kind, _ in items)
    expected = {
        "ready": "ready {}",
        "now": "now {}, ok",
        "waits": "waits {}, ok",
        "raises": "ValueError: no {}",
    }
    for observed in seen.values():
        assert len(observed.results) == len(items)  # one result per item, whatever happened
        assert observed.finished == dict(enumerate(observed.results))  # each told, once
        assert not observed.finished_twice
        assert observed.peak <= concurrency
        assert observed.started == sorted(observed.started)  # calls start in order
        assert observed.caller_var == "outside"
        assert observed.raised == ("Fatal" if fatal else None)
        if not fatal:
            assert observed.results == [expected[k].format(i) for i, k, _ in items]
            assert observed.started == list(range(len(items)))
        else:  # the same up to the first fatal call, if none before it waited
            first = next(i for i, kind, _ in items if kind == "fatal")
            if all(kind in ("ready", "now") for _, kind, _ in items[:first]):
                assert observed.results[:first] == [
                    expected[k].format(i) for i, k, _ in items[:first]
                ]
                assert observed.results[first] == f"cancelled {first}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("outer", [False, True])
async def test_cancellation_is_the_same_on_every_path(form: str, path: str, outer: bool) -> None:
    """Cancelled while calls wait: the running calls see it, every item gets the cancelled
    result, no call is left running, and the cancellation propagates."""
    entered = 0
    both_in = anyio.Event()
    cleaned: list[int] = []
    results: list[str] = []

    class Forever(SplitCall[int, str]):
        def begin(self, item: int) -> tuple[None, Awaitable[Any]]:
            return None, self._work(item)

        async def _work(self, item: int) -> str:
            nonlocal entered
            entered += 1
            if entered == 2:
                both_in.set()
            try:
                await anyio.sleep_forever()
            finally:
                cleaned.append(item)
            return "never"

        def succeeded(self, item: int, value: Any) -> str:
            return str(value)

        def raised(self, item: int, exc: Exception) -> str:
            return f"raised {exc!r}"

    split = Forever()
    call: Any = split if form == "split" else functools.partial(call_split, split)
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


async def test_work_that_cannot_be_awaited_comes_to_the_same_on_every_path() -> None:
    class NotAwaitable(SplitCall[int, str]):
        def begin(self, item: int) -> tuple[None, Any]:
            return None, 42

        def succeeded(self, item: int, value: Any) -> str:
            return "never"

        def raised(self, item: int, exc: Exception) -> str:
            return type(exc).__name__

    split = NotAwaitable()
    expected = await call_split(split, 0)
    assert expected == "TypeError"
    for call in (split, functools.partial(call_split, split)):
        for path in PATHS:
            batch: ToolBatch[int, str] = ToolBatch(call, str, concurrency=2)
            async with batch:
                if path == "run_here":
                    await batch.run_here([0, 1])
                else:
                    batch.submit(0)
                    batch.submit(1)
            assert [r if r != "AttributeError" else "TypeError" for r in batch.results] == [
                expected,
                expected,
            ]


# -- the executor: its own call in parts, a subclass's call whole, on both paths -------------


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


def _command(kind: str, i: int) -> ToolCommand:
    table: dict[str, tuple[str, dict[str, Any]]] = {
        "ok now": ("_ok_now", {"n": i}),
        "ok later": ("_ok_later", {"n": i}),
        "raises": ("_raises", {"n": i}),
        "raises now": ("_raises_now", {"n": i}),
        "bad arguments": ("_ok_now", {"n": "x"}),
        "unknown": ("ghost", {}),
        "timeout": ("_stuck", {}),
    }
    name, kwargs = table[kind]
    return ToolCommand(purpose=f"p{i}", tool_name=name, tool_kwargs=kwargs)


_KINDS = ["ok now", "ok later", "raises", "raises now", "bad arguments", "unknown", "timeout"]


def _dump(record: ToolExecutionRecord) -> dict[str, Any]:
    fields = record.model_dump()
    if fields["traceback"]:  # the frames of a thread that ran a plain tool vary (its id)
        fields["traceback"] = [
            line for line in fields["traceback"].splitlines() if "threading.py" not in line
        ]
    return fields


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(_KINDS), max_size=8), concurrency=st.integers(1, 4))
async def test_an_executors_round_comes_to_the_same_records_every_way(
    kinds: list[str], concurrency: int
) -> None:
    """The base executor (its call run in parts by the batch) and a subclass that overrides
    ``call()`` (awaited whole, and seeing every call), on both paths, and ``call()`` one
    command at a time: the same records and hooks."""
    seen: list[str] = []

    class Watched(Executor):
        __slots__ = ()

        async def call(self, command: ToolCommand, on_start: Any = None) -> ToolExecutionRecord:
            seen.append(command.purpose)
            return await Executor.call(self, command, on_start)

    tools: list[Any] = [_ok_now, _ok_later, _raises, _raises_now, _stuck]
    commands = [_command(kind, i) for i, kind in enumerate(kinds)]
    one_by_one = [_dump(await Executor(tools).call(command)) for command in commands]
    for cls in (Executor, Watched):
        for path in PATHS:
            hooks: list[tuple[str, int]] = []

            def on_start(i: int, command: ToolCommand, hooks: list[Any] = hooks) -> None:
                hooks.append(("start", i))

            def on_finish(
                i: int, record: ToolExecutionRecord, took: float, hooks: list[Any] = hooks
            ) -> None:
                hooks.append(("finish", i))

            executor = cls(tools, concurrency=concurrency, on_start=on_start, on_finish=on_finish)
            seen.clear()
            with anyio.fail_after(10):
                if path == "run_here":
                    records = await executor.run(commands)
                else:
                    async with executor.batch() as batch:
                        for command in commands:
                            batch.submit(command)
                    records = batch.results
            assert [_dump(r) for r in records] == one_by_one, (cls, path)
            assert seen == ([c.purpose for c in commands] if cls is Watched else [])
            assert [i for what, i in hooks if what == "start"] == list(range(len(commands)))
            assert sorted(i for what, i in hooks if what == "finish") == list(range(len(commands)))
