"""CheckpointedRun and its journal, on a flow that is no agent: the store is generic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.checkpoints import (
    Approve,
    CheckpointedRun,
    CheckpointStatus,
    CheckpointStore,
    CorruptCheckpointError,
    HumanRequest,
    JournalEntry,
    MemoryCheckpointStore,
    Owner,
    RunNotFoundError,
    RunNotResumableError,
    SQLiteCheckpointStore,
    check_decision,
    expect_status,
    parse_decision,
    restore,
)
from toolloop.flow import Context, Flow, FlowSnapshot
from toolloop.kernel import Interrupted, journaled_call, record_interrupted
from toolloop.runner import Executor, json_safe

pytestmark = pytest.mark.anyio


class Approval(BaseModel):
    action: str = ""
    approved: bool = False


def build_approval_flow() -> Flow[Approval]:
    """A human approval as a middleware agent would do it: pause, resume with a decision."""

    def ask(action: str, ctx: Context[Approval]) -> None:
        ctx.state.action = action
        request = HumanRequest(
            kind="approve_tool_calls", reason=f"may I {action}?", allowed=["approve", "reject"]
        )
        ctx.pause("approval", request.model_dump(mode="json"))

    def decide(decision: Any, ctx: Context[Approval]) -> str:
        ctx.state.approved = parse_decision(decision).kind == "approve"
        return f"{ctx.state.action}: {'done' if ctx.state.approved else 'skipped'}"

    flow: Flow[Approval] = Flow("approval", state=Approval)
    flow.start.to(ask)
    flow.when("approval", external=True).to(decide).end()
    return flow


def first_snapshot(run_id: str) -> FlowSnapshot:
    return FlowSnapshot(flow="approval", execution_id=run_id, state={})


async def test_pause_persist_claim_resume_complete(tmp_path: Path) -> None:
    async with SQLiteCheckpointStore(tmp_path / "runs.db") as store:
        flow = build_approval_flow()
        run = await CheckpointedRun.begin(
            store, run_id="r1", flow=flow.name, snapshot=first_snapshot("r1"), metadata={"a": 1}
        )
        assert run.checkpoint.status == "running"
        assert run.checkpoint.owner is not None
        result = await flow.execution().run("deploy")
        paused = await run.pause(result)
        assert (paused.status, paused.owner, paused.revision) == ("paused", None, 2)
        assert paused.request["reason"] == "may I deploy?"

        # "another process": a new flow object, the store
        stored = await CheckpointedRun.load(store, "r1")
        question = HumanRequest.model_validate(stored.request)
        decision = check_decision(question, "approve")
        assert isinstance(decision, Approve)
        execution = restore(build_approval_flow(), stored)
        claimed = await CheckpointedRun.claim(
            store, stored, event="approval", value=decision.model_dump(mode="json")
        )
        assert claimed.checkpoint.status == "running"
        assert claimed.checkpoint.resume_event == "approval"
        assert claimed.checkpoint.resume_value == {"kind": "approve", "message": None}
        done = await execution.resume("approval", decision)
        final = await claimed.complete(done.value)
        assert (final.status, final.result, final.resume_event) == (
            "completed",
            "deploy: done",
            None,
        )
        assert final.metadata == {"a": 1}

        # resuming twice: refused, nothing written
        with pytest.raises(RunNotResumableError, match="is completed, not paused"):
            await CheckpointedRun.claim(store, final)
        assert (await CheckpointedRun.load(store, "r1")).revision == final.revision


async def test_a_claim_against_a_stale_read_is_refused() -> None:
    store = MemoryCheckpointStore()
    flow = build_approval_flow()
    run = await CheckpointedRun.begin(
        store, run_id="r", flow="approval", snapshot=first_snapshot("r")
    )
    await run.pause(await flow.execution().run("x"))
    read_by_a = await CheckpointedRun.load(store, "r")
    read_by_b = await CheckpointedRun.load(store, "r")
    await CheckpointedRun.claim(store, read_by_a)
    with pytest.raises(RunNotResumableError, match="was resumed by someone else since it was read"):
        await CheckpointedRun.claim(store, read_by_b)
    assert (await CheckpointedRun.load(store, "r")).revision == 3


async def test_unknown_runs_corrupt_snapshots_and_wrong_statuses() -> None:
    store = MemoryCheckpointStore()
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        await CheckpointedRun.load(store, "nope")
    run = await CheckpointedRun.begin(
        store, run_id="r", flow="approval", snapshot=first_snapshot("r")
    )
    unfit = run.checkpoint.model_copy(
        update={"snapshot": FlowSnapshot(flow="approval", execution_id="r", state={"approved": []})}
    )
    with pytest.raises(CorruptCheckpointError, match="does not restore into flow 'approval'"):
        restore(build_approval_flow(), unfit)
    bad = run.checkpoint.model_copy(
        update={"snapshot": FlowSnapshot(flow="other", execution_id="r", state={})}
    )
    with pytest.raises(CorruptCheckpointError, match="snapshot is of flow 'other'"):
        restore(build_approval_flow(), bad)
    with pytest.raises(RunNotResumableError, match="is running, not paused"):
        expect_status(run.checkpoint, ("paused",))
    failed = await run.fail("boom")
    assert failed.error == "boom"
    with pytest.raises(RunNotResumableError, match=r"it failed \(boom\): recover it"):
        expect_status(failed, ("paused",))


async def test_a_running_run_is_taken_over_only_when_its_owner_is_gone() -> None:
    store = MemoryCheckpointStore()
    run = await CheckpointedRun.begin(
        store, run_id="r", flow="approval", snapshot=first_snapshot("r")
    )
    running: tuple[CheckpointStatus] = ("running",)
    # this process runs it right now
    with pytest.raises(RunNotResumableError, match="still runs it"):
        await CheckpointedRun.claim(store, run.checkpoint, expect=running)
    # another live process on this host
    alive = run.checkpoint.model_copy(
        update={"owner": Owner.here().model_copy(update={"pid": os.getppid()})}
    )
    with pytest.raises(RunNotResumableError, match=f"process {os.getppid()}"):
        await CheckpointedRun.claim(store, alive, expect=running)
    # another host: cannot tell, so only with force
    remote = run.checkpoint.model_copy(update={"owner": Owner(host="elsewhere", pid=1, token="t")})
    with pytest.raises(RunNotResumableError, match="may still run it"):
        await CheckpointedRun.claim(store, remote, expect=running)
    # a process that is gone
    gone = subprocess.run(  # noqa: ASYNC221 - a short process, on purpose
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    dead = run.checkpoint.model_copy(
        update={"owner": Owner.here().model_copy(update={"pid": int(gone.stdout)})}
    )
    taken = await CheckpointedRun.claim(store, dead, expect=running)
    assert taken.checkpoint.revision == 2
    # this process, once the run call is over (cancelled, say)
    taken.release()
    again = await CheckpointedRun.claim(store, taken.checkpoint, expect=running)
    # force, whoever runs it
    await CheckpointedRun.claim(store, again.checkpoint, expect=running, force=True)


# -- the journal (through the kernel's journaled call) ------------------------------------


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def bump(self, by: int) -> int:
        """Count.

        Args:
            by: how much.
        """
        self.calls += by
        return self.calls


async def _run(store: CheckpointStore) -> CheckpointedRun:
    return await CheckpointedRun.begin(
        store, run_id="r", flow="approval", snapshot=first_snapshot("r")
    )


async def _once(
    run: CheckpointedRun, command: ToolCommand, executor: Executor, journal: Any
) -> ToolExecutionRecord | Interrupted:
    done = await journaled_call(
        run,
        journal,
        "c1",
        tool_name=command.tool_name,
        arguments=command.tool_kwargs,
        call=lambda: executor.call(command),
        dump=json_safe,
        load=ToolExecutionRecord.model_validate,
        failed=lambda error: ToolExecutionRecord.failed(command, error),
        settled=False,  # the test writes how a call cut off ended
    )
    if done.source == "interrupted":
        assert done.cut is not None
        return done.cut
    record: ToolExecutionRecord = done.outcome
    return record


async def test_a_journaled_call_runs_then_replays_even_with_a_stale_journal() -> None:
    store = MemoryCheckpointStore()
    run = await _run(store)
    counter = Counter()
    executor = Executor([counter.bump])
    command = ToolCommand(purpose="count", tool_name="bump", tool_kwargs={"by": 2})
    record = await _once(run, command, executor, {})
    assert isinstance(record, ToolExecutionRecord) and record.result == 2
    again = await _once(run, command, executor, await run.journal())
    assert isinstance(again, ToolExecutionRecord) and again.result == 2
    # even with a stale journal in hand, the stored intent stops a second run
    stale = await _once(run, command, executor, {})
    assert isinstance(stale, ToolExecutionRecord) and stale.result == 2
    assert counter.calls == 2


async def test_an_intent_without_an_outcome_is_interrupted_never_rerun() -> None:
    store = MemoryCheckpointStore()
    run = await _run(store)
    counter = Counter()
    executor = Executor([counter.bump])
    command = ToolCommand(purpose="count", tool_name="bump", tool_kwargs={"by": 1})
    await run.record_intent(JournalEntry(call_id="c1", tool_name="bump", arguments={"by": 1}))
    cut = await _once(run, command, executor, await run.journal())
    assert isinstance(cut, Interrupted) and "may or may not have taken effect" in cut.error
    assert counter.calls == 0
    ended = json_safe(ToolExecutionRecord.failed(command, cut.error))
    await record_interrupted(run, "c1", ended)
    entry = (await run.journal())["c1"]
    assert entry.state == "interrupted"
    # and it stays interrupted
    again = await _once(run, command, executor, await run.journal())
    assert isinstance(again, Interrupted) and again.answered == ended
    assert counter.calls == 0


async def test_a_run_that_ends_itself_notes_the_calls_it_cut_off() -> None:
    from toolloop.checkpoints import cut_off_causes, note_cut_off
    from toolloop.errors import ExecutionTimeoutError

    store = MemoryCheckpointStore()
    run = await _run(store)
    await run.record_intent(JournalEntry(call_id="c1", tool_name="bump", arguments={"by": 1}))
    await run.record_intent(JournalEntry(call_id="c2", tool_name="bump"))
    await run.record_outcome("c2", {"done": True})
    assert run.open_calls == {"c1"}
    await note_cut_off(run, KeyboardInterrupt())  # the process stops: a crash, no note
    assert cut_off_causes(await run.journal()) == {}
    await note_cut_off(run, ExecutionTimeoutError("late", timeout=5.0, step="tools"))
    assert cut_off_causes(await run.journal()) == {"c1": "the timeout of 5 s of step 'tools'"}
    command = ToolCommand(purpose="count", tool_name="bump", tool_kwargs={"by": 1})
    counter = Counter()
    cut = await _once(run, command, Executor([counter.bump]), await run.journal())
    assert isinstance(cut, Interrupted) and counter.calls == 0
    assert cut.error == (
        "call 'c1' of tool 'bump' was interrupted: the timeout of 5 s of step 'tools' ended it "
        "while it ran, before its outcome was recorded, so it may or may not have taken "
        "effect; it was not run again"
    )


async def test_a_journaled_outcome_that_is_no_record_is_corrupt() -> None:
    store = MemoryCheckpointStore()
    run = await _run(store)
    await run.record_intent(JournalEntry(call_id="c1", tool_name="bump"))
    await run.record_outcome("c1", {"nonsense": True})
    command = ToolCommand(tool_name="bump", tool_kwargs={"by": 1})
    with pytest.raises(CorruptCheckpointError, match="journaled outcome of call 'c1'"):
        await _once(run, command, Executor([]), await run.journal())


async def test_approval_decision_data_round_trips_through_a_claim() -> None:
    assert parse_decision(Approve(message="ok").model_dump(mode="json")) == Approve(message="ok")
