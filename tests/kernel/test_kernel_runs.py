"""The kernel's journaled call and its driver, on a flow of their own (no product)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from toolloop.checkpoints import (
    CheckpointedRun,
    CorruptCheckpointError,
    JournalEntry,
    MemoryCheckpointStore,
)
from toolloop.errors import ExecutionTimeoutError, UsageLimitError
from toolloop.flow import Context, Execution, Flow, FlowEvent, FlowSnapshot
from toolloop.kernel import (
    Ended,
    Interrupted,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunOptions,
    StopReason,
    drive,
    journaled_call,
)
from toolloop.models import ChatRequest, Usage, UsageLimits, stream_chat
from toolloop.runner import ToolExecutionRecord
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


async def begun(store: MemoryCheckpointStore, run_id: str = "r") -> CheckpointedRun:
    snapshot = FlowSnapshot(flow="f", execution_id=run_id, state={})
    return await CheckpointedRun.begin(store, run_id=run_id, flow="f", snapshot=snapshot)


class Counter:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> dict[str, Any]:
        self.runs += 1
        return {"n": self.runs}


def _call(
    run: CheckpointedRun, journal: dict[str, JournalEntry], counter: Counter, **kw: Any
) -> Any:
    return journaled_call(
        run,
        journal,
        "0.0",
        tool_name="bump",
        arguments={"by": 1},
        call=counter,
        dump=dict,
        load=dict,
        failed=lambda error: {"failed": error},
        **kw,
    )


async def test_a_journaled_call_runs_once_and_its_outcome_comes_back() -> None:
    store = MemoryCheckpointStore()
    run = await begun(store)
    counter = Counter()
    first = await _call(run, {}, counter)
    assert (first.outcome, first.source, first.cut) == ({"n": 1}, "ran", None)
    journal = await run.journal()
    again = await _call(run, journal, counter)
    assert (again.outcome, again.source) == ({"n": 1}, "replayed")  # not run
    assert counter.runs == 1


async def test_an_intent_without_an_outcome_follows_the_policy() -> None:
    store = MemoryCheckpointStore()
    run = await begun(store)
    await run.record_intent(JournalEntry(call_id="0.0", tool_name="bump", arguments={"by": 1}))
    journal = await run.journal()
    counter = Counter()
    # ask: the call does not run, ends failed, and nothing is written (a human answers)
    asked = await _call(run, journal, counter, unknown_outcome="ask", settled=False)
    assert asked.source == "interrupted" and isinstance(asked.cut, Interrupted)
    assert asked.cut.cause is None and "its process stopped" in asked.cut.error
    assert asked.outcome == {"failed": asked.cut.error} and counter.runs == 0
    assert (await run.journal())["0.0"].state == "started"
    # retry: only a tool named idempotent runs again, under the same intent
    not_safe = await _call(
        run, journal, counter, unknown_outcome="retry", idempotent_tools=["x"], settled=False
    )
    assert not_safe.source == "interrupted" and counter.runs == 0
    again = await _call(run, journal, counter, unknown_outcome="retry", idempotent_tools=["bump"])
    assert (again.outcome, again.source) == ({"n": 1}, "ran") and counter.runs == 1


async def test_a_call_cut_off_ends_failed_once_and_for_all() -> None:
    store = MemoryCheckpointStore()
    run = await begun(store)
    await run.record_intent(JournalEntry(call_id="0.0", tool_name="bump", arguments={"by": 1}))
    counter = Counter()
    cut = await _call(run, await run.journal(), counter)  # "fail": its end is written
    assert cut.source == "interrupted" and cut.outcome["failed"] == cut.cut.error
    journal = await run.journal()
    assert journal["0.0"].state == "interrupted"
    later = await _call(run, journal, counter, unknown_outcome="retry", idempotent_tools=["bump"])
    assert later.outcome == cut.outcome and counter.runs == 0  # never run again on its own


async def test_an_outcome_that_cannot_be_read_back_is_a_corrupt_checkpoint() -> None:
    store = MemoryCheckpointStore()
    run = await begun(store)
    await run.record_intent(JournalEntry(call_id="0.0", tool_name="bump"))
    await run.record_outcome("0.0", {"no": "record"})
    with pytest.raises(CorruptCheckpointError, match="cannot be read back"):
        await journaled_call(
            run,
            await run.journal(),
            "0.0",
            tool_name="bump",
            arguments={},
            call=Counter(),
            dump=lambda outcome: outcome,
            load=ToolExecutionRecord.model_validate,
            failed=lambda error: ToolExecutionRecord(
                purpose="", tool_name="bump", kwargs={}, success=False, error=error
            ),
        )


# -- the driver --------------------------------------------------------------------------


def same(ended: Ended[Any]) -> Ended[Any]:
    """The session as the driver ended it (a product builds its result from it)."""
    return ended


class S(BaseModel):
    usage: Usage | None = None
    done: bool = False
    calls: int = 0


class Logic:
    tool_step = "step"

    def stop_reason(self, state: S) -> StopReason | None:
        return "answered" if state.done else None

    def records(self, state: S) -> list[ToolExecutionRecord]:
        return []

    def turns(self, state: S) -> int:
        return state.calls

    def settle(self, state: S, stop: StopReason) -> None:
        pass

    def kept(self, state: S, handle: str) -> None:
        return None


def model_flow(model: ScriptedChatModel, *, hang: anyio.Event | None = None) -> Flow[S]:
    flow = Flow("kernel_test", state=S)

    async def ask(value: Any, ctx: Context[S]) -> None:
        for _ in range(2):
            async with stream_chat(model, ChatRequest(messages=[])) as deltas:
                async for _delta in deltas:
                    pass
            ctx.state.calls += 1
        if hang is not None:
            await hang.wait()
        ctx.state.done = True

    flow.start.to(ask).end()
    return flow


async def test_the_driver_tells_each_model_call_and_how_the_run_ended() -> None:
    model = ScriptedChatModel()
    model.add_reply("a", usage={"prompt_tokens": 3, "completion_tokens": 1})
    model.add_reply("b", reasoning="hm", usage={"prompt_tokens": 4, "completion_tokens": 2})
    events: list[FlowEvent] = []
    execution = Execution(model_flow(model), S())
    options = RunOptions(on_event=events.append)
    ended = await drive(execution, lambda: execution.run(), options, Logic(), result_of=same)
    assert ended.status == "completed" and ended.stop_reason == "answered"
    assert execution.state.usage is not None and execution.state.usage.total_tokens == 10
    started = [e.call_index for e in events if isinstance(e, ModelCallStarted)]
    finished = [e for e in events if isinstance(e, ModelCallFinished)]
    assert started == [0, 1]
    assert [(e.text, e.reasoning, e.finish_reason) for e in finished] == [
        ("a", None, "stop"),
        ("b", "hm", "stop"),
    ]
    (last,) = [e for e in events if isinstance(e, RunFinished)]
    assert (last.stop_reason, last.turns) == ("answered", 2)
    assert events.index(last) < len(events) - 1  # before the engine's own last event
    assert events[-1].kind == "execution_finished"


async def test_a_spent_budget_or_a_timeout_finishes_when_asked_and_raises_otherwise() -> None:
    def scripted() -> ScriptedChatModel:
        model = ScriptedChatModel()
        model.add_reply("a", usage={"prompt_tokens": 3, "completion_tokens": 1})
        model.add_reply("b", usage={"prompt_tokens": 3, "completion_tokens": 1})
        return model

    budget = UsageLimits(max_requests=1)
    execution = Execution(model_flow(scripted()), S())
    with pytest.raises(UsageLimitError):
        await drive(
            execution,
            lambda: execution.run(),
            RunOptions(usage_limits=budget),
            Logic(),
            result_of=same,
        )
    events: list[FlowEvent] = []
    execution = Execution(model_flow(scripted()), S())
    options = RunOptions(usage_limits=budget, on_usage_limit="finish", on_event=events.append)
    ended = await drive(execution, lambda: execution.run(), options, Logic(), result_of=same)
    assert (ended.status, ended.stop_reason) == ("completed", "usage_limit")
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["usage_limit"]
    hang = anyio.Event()
    execution = Execution(model_flow(scripted(), hang=hang), S())
    with pytest.raises(ExecutionTimeoutError):
        await drive(
            execution, lambda: execution.run(timeout=0.05), RunOptions(), Logic(), result_of=same
        )
    execution = Execution(model_flow(scripted(), hang=anyio.Event()), S())
    ended = await drive(
        execution,
        lambda: execution.run(timeout=0.05),
        RunOptions(on_timeout="finish"),
        Logic(),
        result_of=same,
    )
    assert ended.stop_reason == "timeout" and execution.state.calls == 2


async def test_a_resumed_run_s_budget_counts_what_it_spent_before() -> None:
    model = ScriptedChatModel()
    model.add_reply("a")
    execution = Execution(model_flow(model), S(usage=Usage(requests=2)))
    with pytest.raises(UsageLimitError, match="max_requests=2"):
        await drive(
            execution,
            lambda: execution.run(),
            RunOptions(usage_limits=UsageLimits(max_requests=2)),
            Logic(),
            result_of=same,
        )
    assert model.requests == []  # no call was made past the budget


class Cut(BaseModel):
    usage: Usage | None = None
    waiting: list[str] = []
    answered: list[str] = []


class CutLogic:
    tool_step = "step"

    def __init__(self, settle: Callable[[Cut, StopReason], None] | None = None) -> None:
        self._settle = settle

    def stop_reason(self, state: Cut) -> StopReason | None:
        return None

    def records(self, state: Cut) -> list[ToolExecutionRecord]:
        return [
            ToolExecutionRecord(purpose=n, tool_name=n, success=False, error="cut")
            for n in state.answered
        ]

    def turns(self, state: Cut) -> int:
        return 1

    def settle(self, state: Cut, stop: StopReason) -> None:
        if self._settle is not None:
            self._settle(state, stop)

    def kept(self, state: Cut, handle: str) -> None:
        return None


def cut_flow() -> Flow[Cut]:
    flow = Flow("kernel_cut", state=Cut)

    async def work(value: Any, ctx: Context[Cut]) -> None:
        ctx.state.waiting = ["a", "b"]  # calls in flight when the timeout comes
        await anyio.sleep_forever()

    flow.start.to(work).end()
    return flow


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "unobserved"])
async def test_a_finished_run_is_settled_once_before_its_end_is_told_and_kept(
    observed: bool,
) -> None:
    settled: list[tuple[list[str], StopReason]] = []
    kept: list[list[str]] = []

    def settle(state: Cut, stop: StopReason) -> None:
        settled.append((list(state.waiting), stop))
        state.answered, state.waiting = state.waiting, []

    store = MemoryCheckpointStore()
    run = await begun(store)
    events: list[FlowEvent] = []
    options = RunOptions(on_timeout="finish", on_event=events.append if observed else None)
    execution = Execution(cut_flow(), Cut())

    def result_of(ended: Any) -> Any:
        kept.append(list(ended.state.answered))
        return ended

    ended = await drive(
        execution,
        lambda: execution.run(timeout=0.05),
        options,
        CutLogic(settle),
        result_of=result_of,
        run=run,
    )
    assert (ended.stop_reason, ended.state.answered) == ("timeout", ["a", "b"])
    assert settled == [(["a", "b"], "timeout")]  # once
    assert kept == [["a", "b"]]  # the store kept the settled state
    if observed:
        (end,) = [e for e in events if isinstance(e, RunFinished)]
        assert end.records == 2  # counted after the product settled its state
    calls: list[Any] = []
    execution = Execution(cut_flow(), Cut())
    with pytest.raises(ExecutionTimeoutError):  # a run that raises is not settled
        await drive(
            execution,
            lambda: execution.run(timeout=0.05),
            RunOptions(),
            CutLogic(lambda s, r: calls.append(r)),
            result_of=same,
        )
    assert calls == []
