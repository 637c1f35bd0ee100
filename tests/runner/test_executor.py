from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.runner import CallTries, Executor
from toolloop.tools import Tool, ToolRegistry, tool

pytestmark = pytest.mark.anyio


def cmd(tool_name: str, **kwargs: Any) -> ToolCommand:
    return ToolCommand(purpose=f"call {tool_name}", tool_name=tool_name, tool_kwargs=kwargs)


class Gauge:
    """Counts the calls running at once.

    With ``hold=k``, calls wait until ``k`` of them run at once, then all go on (a gate, not
    a clock): the peak is then exactly what the limit allows, and a limit below ``k`` would
    hang (the hang guard fails the test).
    """

    def __init__(self, hold: int | None = None) -> None:
        self.now = 0
        self.max = 0
        self.started: list[int] = []
        self.finished: list[int] = []
        self.cancelled: list[int] = []
        self.hold = hold
        self.released = anyio.Event()
        self._waits: list[tuple[int, anyio.Event]] = []

    async def until_started(self, count: int) -> None:
        """Wait until ``count`` calls have started (a hang guard bounds it)."""
        if len(self.started) < count:
            event = anyio.Event()
            self._waits.append((count, event))
            with anyio.fail_after(30):
                await event.wait()

    def tool(self, name: str = "work") -> Tool:
        gauge = self

        async def work(n: int, delay: float = 0.01) -> int:
            gauge.now += 1
            gauge.max = max(gauge.max, gauge.now)
            gauge.started.append(n)
            for count, event in gauge._waits:
                if len(gauge.started) >= count:
                    event.set()
            try:
                if gauge.hold is None:
                    await anyio.sleep(delay)
                else:
                    if gauge.now >= gauge.hold:
                        gauge.released.set()
                    with anyio.fail_after(30):  # a hang guard
                        await gauge.released.wait()
            except anyio.get_cancelled_exc_class():
                gauge.cancelled.append(n)
                raise
            finally:
                gauge.now -= 1
            gauge.finished.append(n)
            return n

        return Tool.from_function(work, name=name)


async def add(a: int, b: int = 1) -> int:
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


async def test_success_and_record_fields() -> None:
    executor = Executor([add])
    command = ToolCommand(
        purpose="sum", tool_name="add", tool_kwargs={"a": 2}, todo_suggestion="then stop"
    )
    [record] = await executor.run([command])
    assert record == ToolExecutionRecord.succeeded(command, 3)
    assert record.success
    assert record.result == 3
    assert record.next == "then stop"


async def test_every_failure_becomes_a_record_in_order() -> None:
    called: list[str] = []

    async def guarded(x: int) -> int:
        called.append("guarded")
        return x

    @tool(timeout=0.05)
    async def sleepy() -> None:
        await anyio.sleep(10)

    executor = Executor([add, fail, guarded, sleepy])
    records = await executor.run(
        [
            cmd("add", a=1),
            cmd("nope"),
            cmd("guarded", x="ten"),
            cmd("fail", message="bad input"),
            cmd("sleepy"),
            cmd("add", a=2, b=2),
        ]
    )
    assert [r.tool_name for r in records] == ["add", "nope", "guarded", "fail", "sleepy", "add"]
    assert [r.success for r in records] == [True, False, False, False, False, True]
    assert [r.result for r in records] == [2, None, None, None, None, 4]
    assert records[1].error == (
        "no tool named 'nope'; available tools: 'add', 'fail', 'guarded', 'sleepy'"
    )
    assert records[2].error == (
        "arguments for tool 'guarded' do not fit its schema: "
        "at 'x': expected integer, got 'ten' (str)"
    )
    assert called == []
    assert records[3].error == "tool 'fail' raised ValueError: bad input"
    assert records[4].error == "tool 'sleepy' did not finish within 0.05 s; it was cancelled"


async def test_exception_without_message_and_long_message() -> None:
    def quiet() -> None:
        raise KeyError

    def loud() -> None:
        raise RuntimeError("x" * 5000)

    records = await Executor([quiet, loud]).run([cmd("quiet"), cmd("loud")])
    assert records[0].error == "tool 'quiet' raised KeyError"
    assert records[1].error is not None
    assert records[1].error.endswith("… (5000 chars)")
    assert len(records[1].error) < 2100


async def test_timeout_really_cancels() -> None:
    gauge = Gauge()
    executor = Executor([gauge.tool()], tool_timeout=0.05)
    with anyio.fail_after(5):  # a hang guard: the tool alone would take 10 s
        [record] = await executor.run([cmd("work", n=1, delay=10)])
    assert record.error == "tool 'work' did not finish within 0.05 s; it was cancelled"
    assert gauge.cancelled == [1]


async def test_tool_own_timeout_wins_when_smaller() -> None:
    @tool(timeout=0.05)
    async def sleepy() -> None:
        await anyio.sleep(10)

    @tool(timeout=5)
    async def patient() -> None:
        await anyio.sleep(10)

    records = await Executor([sleepy, patient], tool_timeout=0.1).run(
        [cmd("sleepy"), cmd("patient")]
    )
    assert records[0].error is not None
    assert "within 0.05 s" in records[0].error
    assert records[1].error is not None
    assert "within 0.1 s" in records[1].error


async def test_concurrency_is_exact() -> None:
    gauge = Gauge(hold=3)
    executor = Executor([gauge.tool()], concurrency=3)
    commands = [cmd("work", n=i) for i in range(10)]
    records = await executor.run(commands)
    assert gauge.max == 3
    assert [r.result for r in records] == list(range(10))
    assert sorted(gauge.started[:3]) == [0, 1, 2]  # the waiting ones start later, in order
    assert sorted(gauge.started) == list(range(10))


async def test_concurrency_one_runs_one_at_a_time() -> None:
    gauge = Gauge()
    records = await Executor([gauge.tool()], concurrency=1).run(
        [cmd("work", n=i) for i in range(5)]
    )
    assert gauge.max == 1
    assert gauge.started == list(range(5))
    assert all(r.success for r in records)


async def test_shared_limiter_holds_across_concurrent_rounds() -> None:
    gauge = Gauge(hold=3)
    limiter = anyio.CapacityLimiter(3)
    first = Executor([gauge.tool()], concurrency=5, limiter=limiter)
    second = Executor([gauge.tool()], concurrency=5, limiter=limiter)
    results: dict[str, list[ToolExecutionRecord]] = {}

    async def run(name: str, executor: Executor, base: int) -> None:
        results[name] = await executor.run([cmd("work", n=base + i) for i in range(8)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "first", first, 0)
        tg.start_soon(run, "second", second, 100)
    assert gauge.max == 3
    assert [r.result for r in results["first"]] == list(range(8))
    assert [r.result for r in results["second"]] == [100 + i for i in range(8)]
    assert limiter.borrowed_tokens == 0


async def test_records_in_command_order_when_later_ones_finish_first() -> None:
    finished: list[int] = []
    turn = [anyio.Event() for _ in range(5)]
    turn[4].set()

    async def relay(n: int) -> int:
        """Finish after the call after this one (the last finishes first)."""
        with anyio.fail_after(30):  # a hang guard: the five run at once
            await turn[n].wait()
        finished.append(n)
        if n:
            turn[n - 1].set()
        return n

    records = await Executor([relay]).run([cmd("relay", n=i) for i in range(5)])
    assert finished == [4, 3, 2, 1, 0]
    assert [r.result for r in records] == [0, 1, 2, 3, 4]


async def test_hooks_see_every_command() -> None:
    started: list[tuple[int, str]] = []
    finished: list[tuple[int, bool, float]] = []
    executor = Executor(
        [add, fail],
        on_start=lambda i, c: started.append((i, c.tool_name)),
        on_finish=lambda i, r, d: finished.append((i, r.success, d)),
    )
    await executor.run([cmd("add", a=1), cmd("fail", message="m"), cmd("missing")])
    assert sorted(started) == [(0, "add"), (1, "fail"), (2, "missing")]
    assert sorted((i, ok) for i, ok, _ in finished) == [(0, True), (1, False), (2, False)]
    assert all(d >= 0 for _, _, d in finished)

    # per-round hooks replace the executor's
    own: list[int] = []
    await executor.run([cmd("add", a=1)], on_start=lambda i, c: own.append(i))
    assert own == [0]
    assert len(started) == 3


async def test_sync_tools_inline_and_in_thread() -> None:
    loop_thread = threading.get_ident()

    def where() -> int:
        return threading.get_ident()

    inline = Tool.from_function(where, name="inline", thread=False)  # the opt-out
    threaded = Tool.from_function(where, name="threaded")  # sync: a worker thread by default
    explicit = Tool.from_function(where, name="explicit", thread=True)
    records = await Executor([inline, threaded, explicit]).run(
        [cmd("inline"), cmd("threaded"), cmd("explicit")]
    )
    assert records[0].result == loop_thread
    assert records[1].result != loop_thread
    assert records[2].result != loop_thread
    assert (inline.thread, threaded.thread, explicit.thread) == (False, True, True)


async def test_blocking_sync_tools_run_at_once_and_fail_on_time() -> None:
    import threading

    release = threading.Event()
    inside = 0
    all_in = threading.Event()
    lock = threading.Lock()

    def block(n: int) -> int:
        nonlocal inside
        with lock:
            inside += 1
            if inside == 4:
                all_in.set()
        release.wait(60)  # a sync tool that blocks: it must not block the event loop
        return n

    blocker = Tool.from_function(block, name="block", timeout=0.2)
    try:
        with anyio.fail_after(30):  # a hang guard: in series they would take 4 x 60 s
            records = await Executor([blocker], concurrency=4).run(
                [cmd("block", n=i) for i in range(4)]
            )
        assert all_in.is_set()  # the four ran at once, each in its own thread
        assert [r.error for r in records] == [
            "tool 'block' did not finish within 0.2 s; it was cancelled"
        ] * 4  # and each failed on time
    finally:
        release.set()


async def test_streaming_submit_starts_commands_while_the_round_is_open() -> None:
    first_started = anyio.Event()
    gauge = Gauge()

    async def first() -> str:
        first_started.set()
        await anyio.sleep(0.01)
        return "first"

    executor = Executor(ToolRegistry([first, gauge.tool()]))
    records: list[ToolExecutionRecord] = []
    with anyio.fail_after(5):
        async with executor.batch(results=records) as rnd:
            assert rnd.submit(cmd("first")) == 0
            await first_started.wait()  # it runs before the round's block ends
            assert rnd.submit(cmd("work", n=7)) == 1
            assert [c.tool_name for c in rnd.items] == ["first", "work"]
    assert [r.result for r in rnd.results] == ["first", 7]
    assert records == rnd.results


async def test_records_list_is_appended_to() -> None:
    done: list[ToolExecutionRecord] = []
    executor = Executor([add])
    await executor.run([cmd("add", a=1)], results=done)
    await executor.run([cmd("add", a=2), cmd("add", a=3)], results=done)
    assert [r.result for r in done] == [2, 3, 4]
    assert await executor.run([]) == []


async def test_round_misuse() -> None:
    executor = Executor([add])
    rnd = executor.batch()
    with pytest.raises(RuntimeError, match="only inside"):
        rnd.submit(cmd("add", a=1))
    async with rnd:
        with pytest.raises(RuntimeError, match="complete only after"):
            _ = rnd.results
    with pytest.raises(RuntimeError, match="only inside"):
        rnd.submit(cmd("add", a=1))
    with pytest.raises(RuntimeError, match="used once"):
        async with rnd:
            pass


def test_bad_configuration() -> None:
    with pytest.raises(ValueError, match="concurrency must be an int >= 1"):
        Executor([add], concurrency=0)
    with pytest.raises(ValueError, match="tool_timeout must be > 0"):
        Executor([add], tool_timeout=0)


# --- cancellation -------------------------------------------------------------------


async def test_cancelled_run_leaves_a_record_for_every_command() -> None:
    gauge = Gauge()
    executor = Executor([gauge.tool(), add], concurrency=2)
    records: list[ToolExecutionRecord] = []
    after_run = False
    scope = anyio.CancelScope()

    async def run() -> None:
        nonlocal after_run
        with scope:
            await executor.run(
                [cmd("add", a=1), cmd("work", n=1, delay=10), cmd("work", n=2, delay=10)],
                results=records,
            )
            after_run = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gauge.until_started(2)  # add ran, then both tools started in its slot
        scope.cancel()
    assert scope.cancelled_caught
    assert not after_run  # the cancellation was not swallowed
    assert [r.success for r in records] == [True, False, False]
    assert records[1].error == "tool 'work' was cancelled before it finished"
    assert records[2].error == "tool 'work' was cancelled before it finished"
    assert sorted(gauge.cancelled) == [1, 2]  # the tools saw it: nothing left running
    assert gauge.now == 0


async def test_cancelled_round_covers_waiting_commands_too() -> None:
    gauge = Gauge()
    finished: list[int] = []
    executor = Executor([gauge.tool()], concurrency=2, on_finish=lambda i, r, d: finished.append(i))
    with anyio.CancelScope() as scope:
        async with executor.batch() as rnd:
            for i in range(5):
                rnd.submit(cmd("work", n=i, delay=10))
            await gauge.until_started(2)
            scope.cancel()
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert len(rnd.results) == 5
    assert all(not r.success for r in rnd.results)
    assert {r.error for r in rnd.results} == {"tool 'work' was cancelled before it finished"}
    assert sorted(gauge.started) == [0, 1]  # the waiting three never started
    assert sorted(gauge.cancelled) == [0, 1]
    assert sorted(finished) == [0, 1, 2, 3, 4]


async def test_error_in_round_body_cancels_calls_and_propagates() -> None:
    gauge = Gauge()
    executor = Executor([gauge.tool()])
    rnd = executor.batch()

    async def plan() -> None:
        async with rnd:
            rnd.submit(cmd("work", n=1, delay=10))
            await gauge.until_started(1)
            raise ValueError("planner broke")

    with pytest.raises(ValueError, match="planner broke"):
        await plan()
    assert [r.error for r in rnd.results] == ["tool 'work' was cancelled before it finished"]
    assert gauge.cancelled == [1]


# --- property: one record per command, in order, whatever happens --------------------

_kinds = st.sampled_from(["ok", "raise", "bad_args", "unknown", "timeout"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(_kinds, max_size=12), concurrency=st.integers(1, 5))
async def test_one_record_per_command_in_order(kinds: list[str], concurrency: int) -> None:
    gauge = Gauge()

    @tool(timeout=0.001)
    async def stuck() -> None:
        await anyio.sleep(10)

    executor = Executor([gauge.tool(), fail, stuck], concurrency=concurrency)
    commands = {
        "ok": lambda i: cmd("work", n=i, delay=0),
        "raise": lambda i: cmd("fail", message=str(i)),
        "bad_args": lambda i: cmd("work", n="x"),
        "unknown": lambda i: cmd("ghost"),
        "timeout": lambda i: cmd("stuck"),
    }
    records = await executor.run([commands[kind](i) for i, kind in enumerate(kinds)])
    assert len(records) == len(kinds)
    for i, (kind, record) in enumerate(zip(kinds, records, strict=True)):
        assert record.success == (kind == "ok")
        if kind == "ok":
            assert record.result == i
        else:
            assert record.error
    assert gauge.max <= concurrency


async def test_nested_runs_share_a_limiter() -> None:
    limiter = anyio.CapacityLimiter(2)
    inner = Executor([add], limiter=limiter)

    async def outer(a: int) -> int:
        [record] = await inner.run([cmd("add", a=a)])  # runs in this (worker) task
        return int(record.result)

    records = await Executor([outer], limiter=limiter).run([cmd("outer", a=1)])
    assert records[0].result == 2
    assert limiter.borrowed_tokens == 0


async def test_a_tool_that_raises_keeps_its_type_and_traceback_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def flaky(city: str) -> str:
        raise ConnectionError(f"no route to {city}")

    with caplog.at_level("WARNING", logger="toolloop"):
        [record] = await Executor([flaky]).run([cmd("flaky", city="Lisbon")])
    assert record.error == "tool 'flaky' raised ConnectionError: no route to Lisbon"
    assert record.error_type == "ConnectionError"
    assert record.traceback is not None
    assert "in flaky" in record.traceback and "ConnectionError" in record.traceback
    [logged] = [r for r in caplog.records if r.name == "toolloop"]
    assert "no route to Lisbon" in logged.getMessage()
    assert logged.exc_info is not None
    # the traceback is the developer's: a planner's prompt carries the error only
    from toolloop.planners import PlannerContext, planner_messages, planner_schema

    context = PlannerContext(
        user_input="?",
        available_tools=[],
        done_plans=[record],
        last_round_result=[record],
        round_index=1,
        max_rounds=3,
    )
    prompt = planner_messages(context, planner_schema([]))[-1]["content"]
    assert "no route to Lisbon" in prompt and "Traceback" not in prompt


async def test_a_subclass_that_overrides_call_sees_every_call_of_its_batches() -> None:
    seen: list[str] = []

    class Watched(Executor):
        __slots__ = ()

        async def call(
            self, command: ToolCommand, on_start: Callable[[], object] | None = None
        ) -> ToolExecutionRecord:
            seen.append(command.tool_name)
            return await Executor.call(self, command, on_start)

    def ping() -> str:
        """Answer."""
        return "pong"

    executor = Watched([ping])
    records = await executor.run([ToolCommand(purpose="p", tool_name="ping")] * 3)
    async with executor.batch() as batch:
        batch.submit(ToolCommand(purpose="p", tool_name="ping"))
    assert [r.result for r in records] == ["pong"] * 3
    assert batch.results[0].result == "pong"
    assert seen == ["ping"] * 4


async def test_a_call_whose_awaitable_cannot_be_awaited_is_a_failed_record() -> None:
    """An ``execute`` override that hands back no awaitable: a failed record, wherever the
    call runs (the run's own task for the first, a worker for the others once one waits),
    never an error out of the batch."""

    class Broken(Executor):
        __slots__ = ()

        def execute(
            self, tool: Tool, arguments: dict[str, Any], *, tries: CallTries | None = None
        ) -> Any:
            if tool.name == "bad":
                return 42  # not awaitable
            return super().execute(tool, arguments, tries=tries)

    gate = anyio.Event()

    async def slow() -> str:
        """Wait until the gate opens."""
        await gate.wait()
        return "slow"

    def bad() -> str:
        """Never really runs."""
        return "unreachable"

    async def opener() -> str:
        """Open the gate."""
        gate.set()
        return "opened"

    executor = Broken([slow, bad, opener], concurrency=4)
    commands = [
        ToolCommand(purpose="a", tool_name="bad"),  # the run's own task, first
        ToolCommand(purpose="b", tool_name="slow"),  # waits: the rest spread over workers
        ToolCommand(purpose="c", tool_name="bad"),  # a worker
        ToolCommand(purpose="d", tool_name="opener"),
    ]
    with anyio.fail_after(10):
        records = await executor.run(commands)
    assert [r.success for r in records] == [False, True, False, True]
    assert all("int" in (records[i].error or "") for i in (0, 2))


async def test_a_subclass_may_override_the_record_of_a_failed_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``raised`` is looked up on the executor when a call fails: an override is used, and
    so is a patch made after the executor was built, on both of a batch's paths."""

    class Gentle(Executor):
        __slots__ = ()

        def raised(self, command: ToolCommand, exc: Exception) -> ToolExecutionRecord:
            return ToolExecutionRecord.failed(command, f"gently: {exc}")

    def boom() -> str:
        """Fail."""
        raise ValueError("no")

    records = await Gentle([boom]).run([ToolCommand(purpose="p", tool_name="boom")])
    assert records[0].error == "gently: no"
    assert (await Gentle([boom]).call(ToolCommand(purpose="p", tool_name="boom"))).error == (
        "gently: no"
    )

    plain = Executor([boom])
    monkeypatch.setattr(
        Executor,
        "raised",
        lambda self, command, exc: ToolExecutionRecord.failed(command, f"patched: {exc}"),
    )
    records = await plain.run([ToolCommand(purpose="p", tool_name="boom")])
    assert records[0].error == "patched: no"
