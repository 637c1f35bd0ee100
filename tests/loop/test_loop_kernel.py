"""What the loop has from the run kernel: the same pause, approvals, events, budget and
final answer as every product, durable runs with streaming dispatch, a stream with a store."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from toolloop.checkpoints import Approve, HumanRequest, MemoryCheckpointStore, RequestedCall
from toolloop.errors import (
    AnswerError,
    ModelCallError,
    ModelRefusalError,
    PlannerError,
    UsageLimitError,
)
from toolloop.flow import ExecutionFailed, ExecutionPaused, FlowEvent
from toolloop.kernel import (
    ENGINE_EVENTS,
    Approval,
    CheckpointSaved,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
)
from toolloop.loop import (
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
    final_answer,
    stream_plan_and_execute,
)
from toolloop.models import UsageLimits
from toolloop.planners import StructuredPlanner
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import ScriptedChatModel, ScriptedPlanner
from toolloop.tools import RunContext

pytestmark = pytest.mark.anyio


class Desk:
    """Two tools, one that needs a human; each call noted, ``look`` waits for ``gate``."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.looking = anyio.Event()
        self.gate: anyio.Event | None = None
        self.keys: list[str] = []

    async def look(self, key: str) -> str:
        """Look something up.

        Args:
            key: what to look up.
        """
        self.looking.set()
        if self.gate is not None:
            await self.gate.wait()
        self.done.append(f"look {key}")
        return f"saw {key}"

    def send(self, to: str, ctx: RunContext[None]) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.keys.append(ctx.idempotency_key)
        self.done.append(f"send {to}")
        return f"sent to {to}"


def cmd(tool: str, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": f"{tool} {kwargs}", "tool_name": tool, "tool_kwargs": kwargs}


PLAN = [
    {"next_action": "execute", "execution_commands": [cmd("look", key="a"), cmd("send", to="ada")]},
    {"next_action": "response"},
]


async def test_a_paused_run_ends_paused_and_asks_by_the_events_call_ids() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    events: list[FlowEvent] = []
    paused = await async_plan_and_execute(
        "mail ada",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(PLAN),
        store=store,
        run_id="p",
        needs_approval={"send": Approval(allowed=("approve", "reject"))},
        on_event=events.append,
    )
    assert paused.paused and paused.stop_reason is None and desk.done == []
    assert isinstance(paused.request, HumanRequest)
    assert [c.call_id for c in paused.request.tool_calls] == ["0.1"]
    assert paused.request.tool_calls[0].allowed == ["approve", "reject"]
    kinds = [type(e) for e in events]
    assert ExecutionPaused in kinds and ExecutionFailed not in kinds
    assert RunFinished not in kinds
    resumed: list[FlowEvent] = []
    done = await async_resume_plan_and_execute(
        "p",
        Approve(),
        store=store,
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(PLAN),
        on_event=resumed.append,
    )
    assert done.stop_reason == "answered" and desk.done == ["look a", "send ada"]
    started = [e.call_id for e in resumed if isinstance(e, ToolCallStarted)]
    assert started == ["0.0", "0.1"]  # the ids the request asked by
    assert [e.stop_reason for e in resumed if isinstance(e, RunFinished)] == ["answered"]


async def test_approval_by_a_rule_on_the_arguments() -> None:
    def rule(call: RequestedCall) -> str | None:
        return "not to ada" if call.arguments.get("to") == "ada" else None

    desk = Desk()
    paused = await async_plan_and_execute(
        "mail",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(PLAN),
        store=MemoryCheckpointStore(),
        needs_approval=rule,
    )
    assert paused.request is not None
    assert [(c.tool_name, c.why) for c in paused.request.tool_calls] == [("send", "not to ada")]


async def test_a_durable_run_streams_and_holds_only_the_calls_that_wait_for_a_human() -> None:
    """Streaming dispatch with a store: ``look`` starts while the plan streams; ``send``,
    which needs approval, is held; the decision runs ``send`` once and ``look`` is not run
    again (its outcome comes from the journal)."""
    plan_text = json.dumps(PLAN[0])
    model = ScriptedChatModel()
    model.add_reply(plan_text, chunk_size=8)
    model.add_reply('{"next_action": "response"}')
    desk, store = Desk(), MemoryCheckpointStore()
    paused = await async_plan_and_execute(
        "mail ada",
        tools=[desk.look, desk.send],
        planner=StructuredPlanner(model),
        streaming_dispatch=True,
        store=store,
        run_id="s",
        needs_approval=["send"],
    )
    assert paused.paused and desk.done == ["look a"]  # it ran while the plan streamed
    model.add_reply('{"next_action": "response"}')
    done = await async_resume_plan_and_execute(
        "s",
        "approve",
        store=store,
        tools=[desk.look, desk.send],
        planner=StructuredPlanner(model),
        streaming_dispatch=True,
    )
    assert desk.done == ["look a", "send ada"]  # nothing ran twice
    assert [r.result for r in done.done_plans] == ["saw a", "sent to ada"]
    assert len(model.requests) == 2  # round 0 was planned once: the journal replayed it


async def test_a_durable_streamed_run_gives_the_records_a_plain_one_does() -> None:
    plan_text = json.dumps(PLAN[0])

    async def run(store: MemoryCheckpointStore | None, streaming: bool) -> Any:
        model = ScriptedChatModel()
        model.add_reply(plan_text, chunk_size=5)
        model.add_reply('{"next_action": "response"}')
        desk = Desk()
        return await async_plan_and_execute(
            "mail ada",
            tools=[desk.look, desk.send],
            planner=StructuredPlanner(model),
            streaming_dispatch=streaming,
            store=store,
        )

    plain = await run(None, False)
    durable = await run(MemoryCheckpointStore(), True)
    assert durable.done_plans == plain.done_plans
    assert durable.stop_reason == plain.stop_reason == "answered"


async def test_every_model_call_of_the_run_is_told_and_the_final_answer_counts() -> None:
    model = ScriptedChatModel()
    model.add_reply(json.dumps(PLAN[0]), usage={"prompt_tokens": 10, "completion_tokens": 5})
    model.add_reply(
        '{"next_action": "response"}', usage={"prompt_tokens": 12, "completion_tokens": 2}
    )
    model.add_reply(
        "Ada is told.", reasoning="tell her", usage={"prompt_tokens": 20, "completion_tokens": 4}
    )
    events: list[FlowEvent] = []
    desk = Desk()
    result = await async_plan_and_execute(
        "mail ada",
        tools=[desk.look, desk.send],
        planner=StructuredPlanner(model),
        answer_with=model,
        on_event=events.append,
    )
    assert result.text == "Ada is told." and result.stop_reason == "answered"
    # the second plan is short-circuited: closed before its usage came, so it is unknown
    usage = result.usage
    assert (usage.requests, usage.unreported_requests, usage.total_tokens) == (3, 1, 15 + 24)
    assert [e.call_index for e in events if isinstance(e, ModelCallStarted)] == [0, 1, 2]
    finished = [e for e in events if isinstance(e, ModelCallFinished)]
    assert [e.text for e in finished][-1] == "Ada is told."
    assert finished[-1].reasoning == "tell her"
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert end.usage is not None and end.usage.requests == 3
    assert events.index(end) > events.index(finished[-1])


async def test_the_budget_holds_for_the_final_answer_too() -> None:
    def scripted() -> ScriptedChatModel:
        model = ScriptedChatModel()
        model.add_reply('{"next_action": "response"}', usage={"total_tokens": 5})
        model.add_reply("an answer")
        return model

    budget = UsageLimits(max_requests=1)
    model = scripted()
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await async_plan_and_execute(
            "hi", planner=StructuredPlanner(model), answer_with=model, usage_limits=budget
        )
    assert len(model.requests) == 1  # the answer's call was refused before it was made
    model = scripted()
    finished = await async_plan_and_execute(
        "hi",
        planner=StructuredPlanner(model),
        answer_with=model,
        usage_limits=budget,
        on_usage_limit="finish",
    )
    assert finished.stop_reason == "usage_limit" and finished.text is None
    # the standalone final answer counts the run's calls against the budget too
    with pytest.raises(UsageLimitError, match="max_requests=1"):
        await final_answer(scripted(), finished, usage_limits=budget)
    answer = await final_answer(scripted(), finished, usage_limits=UsageLimits(max_requests=2))
    assert answer.run_usage is not None and answer.run_usage.requests == 2


async def test_a_stream_of_a_durable_run() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    async with stream_plan_and_execute(
        "mail ada",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(PLAN),
        store=store,
        run_id="streamed",
        engine_events=False,
    ) as run:
        kinds = [event.kind async for event in run]
    assert run.result.stop_reason == "answered" and desk.done == ["look a", "send ada"]
    assert "run_finished" in kinds and "round_started" in kinds
    stored = await store.get("streamed")
    assert stored is not None and stored.status == "completed"


async def test_a_timeout_that_finishes_is_told_as_the_run_s_end() -> None:
    desk = Desk()
    desk.gate = anyio.Event()  # never set: the run's timeout ends it
    events: list[FlowEvent] = []
    result = await async_plan_and_execute(
        "look",
        tools=[desk.look],
        planner=ScriptedPlanner([{"execution_commands": [cmd("look", key="a")]}]),
        timeout=0.2,
        on_timeout="finish",
        on_event=events.append,
    )
    assert result.stop_reason == "timeout"
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["timeout"]


class Streams:
    """A planner that streams each command of ``plan`` before it returns it; with
    ``fail_after_finished``, it raises once the first call's record is made (the round's
    plan is then never journaled)."""

    def __init__(self, plan: dict[str, Any], finished: anyio.Event | None = None) -> None:
        self.plan_ = plan
        self.finished = finished
        self.calls = 0

    async def plan(self, context: Any) -> Any:
        raise AssertionError("a streaming planner is called through plan_streaming")

    async def plan_streaming(self, context: Any, dispatch: Any) -> Any:
        self.calls += 1
        if context.round_index > 0:
            return {"next_action": "response"}
        for position, command in enumerate(self.plan_["execution_commands"]):
            dispatch(position, command)
        if self.finished is not None:
            await self.finished.wait()
            raise RuntimeError("the model's stream broke")
        return self.plan_


def finished_one(events: list[FlowEvent], done: anyio.Event) -> Any:
    def on_event(event: FlowEvent) -> None:
        events.append(event)
        if isinstance(event, ToolCallFinished):
            done.set()

    return on_event


async def _dies_after_a_streamed_call(store: MemoryCheckpointStore, desk: Desk) -> None:
    done = anyio.Event()
    with pytest.raises(PlannerError, match="the model's stream broke"):
        await async_plan_and_execute(
            "mail ada",
            tools=[desk.look, desk.send],
            planner=Streams({"execution_commands": [cmd("send", to="ada")]}, done),
            streaming_dispatch=True,
            store=store,
            run_id="broken",
            on_event=finished_one([], done),
        )
    assert desk.done == ["send ada"]  # it ran while the plan streamed; no plan was kept


async def test_a_streamed_call_of_a_plan_never_kept_is_not_handed_to_another_call() -> None:
    """The round is planned again, differently: the call at the same place is another one,
    so it runs, and the earlier call's outcome is not passed off as its own."""
    desk, store = Desk(), MemoryCheckpointStore()
    await _dies_after_a_streamed_call(store, desk)
    recovered = await async_recover_plan_and_execute(
        "broken",
        tools=[desk.look, desk.send],
        planner=Streams({"execution_commands": [cmd("send", to="bob")]}),
        streaming_dispatch=True,
        store=store,
    )
    assert desk.done == ["send ada", "send bob"]
    ada, bob = desk.keys  # another call at the same place: another idempotency key
    assert ada != bob
    assert [r.result for r in recovered.done_plans] == ["sent to bob"]
    (note,) = [n for n in recovered.notes if "before the round's plan was kept" in n]
    assert "call 0.0 ran" in note and '"to":"ada"' in note


async def test_a_streamed_call_planned_again_the_same_is_replayed_and_told_so() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    await _dies_after_a_streamed_call(store, desk)
    events: list[FlowEvent] = []
    recovered = await async_recover_plan_and_execute(
        "broken",
        tools=[desk.look, desk.send],
        planner=Streams({"execution_commands": [cmd("send", to="ada")]}),
        streaming_dispatch=True,
        store=store,
        on_event=events.append,
    )
    assert desk.done == ["send ada"]  # not run again
    assert [r.result for r in recovered.done_plans] == ["sent to ada"]
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert (finished.call_id, finished.source) == ("0.0", "replayed")


async def test_a_durable_loop_tells_each_checkpoint() -> None:
    desk = Desk()
    events: list[FlowEvent] = []
    two_rounds = [PLAN[0], {"execution_commands": [cmd("look", key="b")]}, PLAN[1]]
    await async_plan_and_execute(
        "look twice",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(two_rounds),
        store=MemoryCheckpointStore(),
        on_event=events.append,
    )
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert [e.step for e in saved] == ["round 0", "round 1"]
    kinds = [e.kind for e in events]
    # each after its round's end, before the next round is planned
    assert kinds.index("checkpoint_saved") > kinds.index("round_finished")


async def test_a_durable_loop_tells_the_checkpoint_of_its_pause_in_a_later_round() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    events: list[FlowEvent] = []
    look_then_send = [{"execution_commands": [cmd("look", key="b")]}, *PLAN]
    paused = await async_plan_and_execute(
        "look, then mail ada",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(look_then_send),
        store=store,
        needs_approval=["send"],
        on_event=events.append,
    )
    assert paused.paused and desk.done == ["look b"]
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert [e.step for e in saved] == ["round 0", "round 1 plan"]
    own = [e for e in events if type(e) not in ENGINE_EVENTS]
    assert own[-2:] == [saved[-1], events[-1]]  # the pause's checkpoint, then the pause
    stored = await store.get(paused.run_id)
    assert stored is not None and stored.status == "paused"


async def test_a_resume_takes_the_run_options_again_and_keeps_the_stored_ones() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    three_rounds = [
        {"execution_commands": [cmd("send", to="ada")]},
        {"execution_commands": [cmd("look", key="b")]},
        {"execution_commands": [cmd("look", key="c")]},
        {"next_action": "response"},
    ]
    planner = ScriptedPlanner(three_rounds)
    paused = await async_plan_and_execute(
        "mail, then look",
        tools=[desk.look, desk.send],
        planner=planner,
        store=store,
        run_id="r",
        needs_approval=["send"],
        max_turns=3,
    )
    assert paused.paused
    done = await async_resume_plan_and_execute(
        "r", Approve(), tools=[desk.look, desk.send], planner=planner, store=store, max_turns=2
    )
    assert done.stop_reason == "max_turns" and done.rounds == 2
    assert desk.done == ["send ada", "look b"]
    with pytest.raises(TypeError, match="needs store="):
        await async_recover_plan_and_execute("r", planner=planner)
    with pytest.raises(ValueError, match="names another run"):
        await async_recover_plan_and_execute("r", planner=planner, store=store, run_id="s")


async def test_an_old_option_name_says_its_new_one() -> None:
    with pytest.raises(TypeError, match="'max_rounds'; it is now 'max_turns'"):
        await async_plan_and_execute("?", planner=ScriptedPlanner([]), max_rounds=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="did you mean 'concurrency'"):
        await async_plan_and_execute("?", planner=ScriptedPlanner([]), concurency=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("failure", ["raises", "refuses", "hangs"])
async def test_a_final_answer_that_fails_ends_the_run_with_an_answer_error(failure: str) -> None:
    model = ScriptedChatModel()
    model.add_reply(json.dumps({"execution_commands": [cmd("look", key="a")]}))
    model.add_reply('{"next_action": "response"}')
    if failure == "raises":
        model.add_error(ModelCallError("the server said 503", status=503))
    elif failure == "refuses":
        model.add_reply("", refusal="I can't help with that.")
    else:
        model.add_reply("never", first_delay=60)  # past model_timeout (a hang guard: 120x)
    desk = Desk()
    with pytest.raises(AnswerError) as caught:
        await async_plan_and_execute(
            "look",
            tools=[desk.look],
            planner=StructuredPlanner(model),
            answer_with=model,
            model_timeout=0.5 if failure == "hangs" else None,
        )
    error = caught.value
    assert [r.result for r in error.done_plans] == ["saw a"]
    assert "the final answer's model call" in str(error)
    expected = {"raises": ModelCallError, "refuses": ModelRefusalError, "hangs": ModelCallError}
    assert isinstance(error.__cause__, expected[failure])
    if failure == "hangs":
        assert "did not finish within 0.5 s" in str(error)
        assert "(model_timeout)" in str(error.__cause__)


async def test_a_paused_stream_of_loop_events_ends_with_the_pause() -> None:
    desk, store = Desk(), MemoryCheckpointStore()
    async with stream_plan_and_execute(
        "mail ada",
        tools=[desk.look, desk.send],
        planner=ScriptedPlanner(PLAN),
        store=store,
        needs_approval=["send"],
        engine_events=False,
    ) as run:
        kinds = [event.kind async for event in run]
    assert run.result.paused and kinds[-1] == "execution_paused"
    assert "step_started" not in kinds
