"""Pause and resume: wait for an external event, snapshot to JSON, resume elsewhere."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from toolloop import ExecutionTimeoutError
from toolloop.errors import FlowDefinitionError, ResumeError, StepFailedError
from toolloop.flow import Context, Flow, FlowSnapshot, Wait

pytestmark = pytest.mark.anyio


class Review(BaseModel):
    topic: str = ""
    drafts: list[str] = []
    verdicts: list[str] = []


def build_review_flow(name: str = "review") -> Flow[Review]:
    """Built by a function, so that a snapshot can resume in a new flow object."""

    def draft(topic: str, ctx: Context[Review]) -> str:
        ctx.state.topic = topic
        text = f"draft {len(ctx.state.drafts) + 1} on {topic}"
        ctx.state.drafts.append(text)
        ctx.pause("verdict", {"question": f"approve {text!r}?"})
        return text

    def judge(verdict: str, ctx: Context[Review]) -> str:
        ctx.state.verdicts.append(verdict)
        return verdict

    def publish(verdict: str, ctx: Context[Review]) -> str:
        return ctx.state.drafts[-1].upper()

    flow: Flow[Review] = Flow(name, state=Review)
    flow.start.to(draft)
    flow.when("verdict", external=True).to(judge).if_(lambda v: v == "yes", publish).else_(
        lambda v, ctx: ctx.state.topic
    )
    flow.step("<lambda>").to("draft")
    flow.step(publish).end()
    return flow


def to_json(snapshot: FlowSnapshot | None) -> str:
    assert snapshot is not None
    return json.dumps(snapshot.model_dump(mode="json"))


async def test_pause_returns_a_paused_result_with_a_json_ready_snapshot() -> None:
    flow = build_review_flow()
    execution = flow.execution()
    result = await execution.run("flows")

    assert result.status == "paused"
    assert result.paused
    assert result.value is None
    assert execution.status == "paused"
    assert result.waiting == [
        Wait(event="verdict", request={"question": "approve 'draft 1 on flows'?"}, step="draft")
    ]
    assert execution.waiting == result.waiting
    assert result.state.drafts == ["draft 1 on flows"]
    snapshot = result.snapshot
    assert snapshot is not None
    assert snapshot.flow == "review"
    assert snapshot.execution_id == execution.id == result.execution_id
    assert snapshot.state == {"topic": "flows", "drafts": ["draft 1 on flows"], "verdicts": []}
    assert [e.step for e in snapshot.trace] == ["draft"]
    assert snapshot.elapsed > 0

    data = json.loads(to_json(snapshot))
    assert FlowSnapshot.model_validate(data) == snapshot
    assert execution.snapshot() == snapshot


async def test_restore_in_a_new_flow_object_and_resume_until_done() -> None:
    first = await build_review_flow().run("flows")
    text = to_json(first.snapshot)

    # "another process": a new flow object built by the same function, the snapshot as data
    restored = build_review_flow().restore(json.loads(text))
    assert restored.status == "paused"
    assert restored.id == first.execution_id
    assert restored.state == Review(topic="flows", drafts=["draft 1 on flows"])
    second = await restored.resume("verdict", "no")
    assert second.paused
    assert second.state.drafts == ["draft 1 on flows", "draft 2 on flows"]
    assert second.state.verdicts == ["no"]
    assert second.waiting[0].request == {"question": "approve 'draft 2 on flows'?"}

    # and once more, from JSON text this time
    third = await build_review_flow().restore(to_json(second.snapshot)).resume("verdict", "yes")
    assert third.status == "completed"
    assert third.value == "DRAFT 2 ON FLOWS"
    assert third.state.verdicts == ["no", "yes"]
    assert [e.step for e in third.trace] == [
        "draft",
        "judge",
        "judge?",
        "<lambda>",
        "draft",
        "judge",
        "judge?",
        "publish",
        "end",
    ]
    assert [e.event for e in third.trace][1] == "verdict"
    # trace times continue across the pauses
    starts = [e.started for e in third.trace]
    assert starts == sorted(starts)


async def test_the_same_execution_object_resumes_too() -> None:
    flow = build_review_flow()
    execution = flow.execution()
    await execution.run("x")
    result = await execution.resume("verdict", "yes")
    assert result.value == "DRAFT 1 ON X"
    assert execution.status == "completed"


@dataclass
class Counter:
    count: int = 0
    seen: list[str] = field(default_factory=list)


async def test_dict_and_dataclass_states_round_trip() -> None:
    def ask(value: str, ctx: Context[Any]) -> None:
        if isinstance(ctx.state, dict):
            ctx.state["asked"] = value
        else:
            ctx.state.count += 1
            ctx.state.seen.append(value)
        ctx.pause("answered", value)

    def answer(value: str) -> str:
        return f"answered {value}"

    def build(state: Any) -> Flow[Any]:
        flow: Flow[Any] = Flow("ask", state=state)
        flow.start.to(ask)
        flow.when("answered", external=True).to(answer).end()
        return flow

    paused = await build(dict).run("q")
    data = json.loads(to_json(paused.snapshot))
    assert data["state"] == {"asked": "q"}
    done = await build(dict).restore(data).resume("answered", "a")
    assert done.value == "answered a"
    assert done.state == {"asked": "q"}

    paused = await build(Counter).run("q")
    data = json.loads(to_json(paused.snapshot))
    assert data["state"] == {"count": 1, "seen": ["q"]}
    done = await build(Counter).restore(data).resume("answered", "a")
    assert done.state == Counter(count=1, seen=["q"])


async def test_resume_with_the_wrong_event_is_refused_and_the_wait_kept() -> None:
    flow = build_review_flow()
    flow.when("cancel", external=True).to(lambda v: "cancelled", name="cancelled").end()
    execution = flow.restore(to_json((await flow.run("t")).snapshot))
    with pytest.raises(ResumeError, match=r"waits for \['verdict'\], not for 'cancel'"):
        await execution.resume("cancel")
    assert execution.status == "paused"
    assert (await execution.resume("verdict", "yes")).value == "DRAFT 1 ON T"


async def test_resuming_what_is_not_paused_is_refused() -> None:
    flow = build_review_flow()
    done = flow.execution()
    await done.run("t")
    await done.resume("verdict", "yes")
    with pytest.raises(ResumeError, match="is completed, not paused"):
        await done.resume("verdict", "yes")
    # a snapshot of a completed execution restores as completed, and does not resume either
    restored = flow.restore(done.snapshot())
    assert restored.status == "completed"
    with pytest.raises(ResumeError, match="not paused"):
        await restored.resume("verdict", "yes")
    with pytest.raises(ResumeError, match="is new, not paused"):
        await flow.execution().resume("verdict", "yes")
    with pytest.raises(ResumeError, match="runs once"):
        await flow.restore((await flow.run("u")).snapshot or {}).run("again")


@pytest.mark.parametrize(
    "corrupt",
    [
        "not json at all",
        b"[1, 2]",
        {},
        {"flow": "review"},
        {"flow": "review", "execution_id": "x", "state": {}, "waiting": "verdict"},
        {"flow": "review", "execution_id": "x", "state": {}, "trace": [{"step": 3}]},
        {"flow": "review", "execution_id": "x", "state": {"drafts": "oops"}},
        {"flow": "review", "execution_id": "x", "state": [], "waiting": [{"event": "verdict"}]},
    ],
)
def test_corrupt_snapshot_data_is_a_resume_error(corrupt: Any) -> None:
    with pytest.raises(ResumeError):
        build_review_flow().restore(corrupt)


async def test_a_snapshot_of_another_flow_or_version_or_event_is_refused() -> None:
    paused = await build_review_flow("review").run("t")
    data = json.loads(to_json(paused.snapshot))
    with pytest.raises(ResumeError, match="snapshot is of flow 'review', not of 'other'"):
        build_review_flow("other").restore(data)
    with pytest.raises(ResumeError, match="snapshot version 99 is not 1"):
        build_review_flow().restore({**data, "version": 99})
    with pytest.raises(ResumeError, match="waits for 'ghost', which is no external event"):
        build_review_flow().restore({**data, "waiting": [{"event": "ghost"}]})


async def test_pausing_for_an_event_that_is_not_external_fails_the_step() -> None:
    def ask(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.pause("internal")

    flow: Flow[dict[str, Any]] = Flow("bad pause")
    flow.start.to(ask, emits=["internal"])
    flow.when("internal").to(lambda v: v, name="handle").end()
    with pytest.raises(StepFailedError) as info:
        await flow.run(1)
    assert info.value.step == "ask"
    assert "paused for 'internal', which is not an external event" in str(info.value.__cause__)


async def test_pause_does_not_stop_other_branches_and_an_end_clears_the_wait() -> None:
    def ask(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.pause("approval", "may I?")

    async def work(value: int) -> int:
        await anyio.sleep(0.01)
        return value * 2

    flow: Flow[dict[str, Any]] = Flow("both")
    flow.start.to(ask)
    flow.start.to(work).end()
    flow.when("approval", external=True).to(lambda v: v, name="approved").end()
    execution = flow.execution()
    result = await execution.run(4)
    assert result.status == "completed"
    assert result.value == 8
    assert result.waiting == []
    assert execution.waiting == []


async def test_several_waits_are_all_in_the_snapshot() -> None:
    def ask(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.pause("a", 1)
        ctx.pause("b", 2)

    flow: Flow[dict[str, Any]] = Flow("two waits")
    flow.start.to(ask)
    flow.when("a", external=True).to(lambda v: f"a{v}", name="on_a").end()
    flow.when("b", external=True).to(lambda v: f"b{v}", name="on_b").end()
    paused = await flow.run(None)
    assert [(w.event, w.request) for w in paused.waiting] == [("a", 1), ("b", 2)]
    resumed = await flow.restore(to_json(paused.snapshot)).resume("b", "!")
    assert resumed.value == "b!"


async def test_resume_takes_a_timeout() -> None:
    async def slow(value: Any) -> Any:
        await anyio.sleep(5)

    flow: Flow[dict[str, Any]] = Flow("slow resume")
    flow.start.to(lambda v, ctx: ctx.pause("go"), name="ask")
    flow.when("go", external=True).to(slow).end()
    execution = flow.restore(to_json((await flow.run()).snapshot))
    with pytest.raises(ExecutionTimeoutError):
        await execution.resume("go", timeout=0.02)


async def test_an_external_event_reaches_a_running_execution() -> None:
    async def wait_for_signal(value: int, ctx: Context[dict[str, Any]]) -> None:
        ctx.deps.set()  # an anyio.Event: the test may now send the signal
        ctx.pause("signal", "send me a signal")

    async def keep_busy(value: int) -> None:
        await anyio.sleep(5)  # the execution keeps running: nothing pauses it yet

    def on_signal(value: str, ctx: Context[dict[str, Any]]) -> str:
        return f"got {value}"

    flow: Flow[dict[str, Any]] = Flow("live")
    flow.start.to(wait_for_signal)
    flow.start.to(keep_busy)
    flow.when("signal", external=True).to(on_signal).end()

    ready = anyio.Event()
    execution = flow.execution(deps=ready)
    outcome: list[Any] = []

    async def run() -> None:
        outcome.append(await execution.run(1))

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await ready.wait()
            assert execution.status == "running"
            assert [w.event for w in execution.waiting] == ["signal"]
            execution.emit("signal", "hello")
            assert execution.waiting == []
    assert outcome[0].value == "got hello"
    assert ("on_signal", "signal") in [(e.step, e.event) for e in outcome[0].trace]


async def test_execution_emit_checks_the_event_and_the_status() -> None:
    flow: Flow[dict[str, Any]] = Flow("emit checks")
    flow.start.to(lambda v: v, name="first").end()
    flow.when("poke", external=True).to(lambda v: v, name="poked").end()
    execution = flow.execution()
    with pytest.raises(FlowDefinitionError, match="'first' is not an external event"):
        execution.emit("first")
    with pytest.raises(FlowDefinitionError, match="'nope' is not an external event"):
        execution.emit("nope")
    with pytest.raises(ResumeError, match="is new; emit\\(\\) reaches a running execution"):
        execution.emit("poke")
    await execution.run(1)
    with pytest.raises(ResumeError, match="is completed"):
        execution.emit("poke")


async def test_snapshot_of_a_running_execution_is_refused() -> None:
    flow: Flow[dict[str, Any]] = Flow("running")
    seen: list[str] = []

    def look(value: Any, ctx: Context[dict[str, Any]]) -> Any:
        try:
            execution.snapshot()
        except ResumeError as err:
            seen.append(str(err))
        return value

    flow.start.to(look).end()
    execution = flow.execution()
    await execution.run(1)
    assert len(seen) == 1
    assert "is running; snapshot it when it pauses" in seen[0]
