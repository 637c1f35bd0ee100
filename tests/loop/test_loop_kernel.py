"""What the loop has from the run kernel: the same pause, approvals, events, budget and
final answer as every product, durable runs with streaming dispatch, a stream with a store."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from toolloop.checkpoints import Approve, HumanRequest, MemoryCheckpointStore, RequestedCall
from toolloop.errors import UsageLimitError
from toolloop.flow import ExecutionFailed, ExecutionPaused, FlowEvent
from toolloop.kernel import Approval, ModelCallFinished, ModelCallStarted, RunFinished
from toolloop.loop import (
    async_plan_and_execute,
    async_resume_plan_and_execute,
    final_answer,
    stream_plan_and_execute,
)
from toolloop.models import UsageLimits
from toolloop.planners import StructuredPlanner
from toolloop.runner import ToolCallStarted
from toolloop.testing import ScriptedChatModel, ScriptedPlanner

pytestmark = pytest.mark.anyio


class Desk:
    """Two tools, one that needs a human; each call noted, ``look`` waits for ``gate``."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.looking = anyio.Event()
        self.gate: anyio.Event | None = None

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

    def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
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
        loop_events_only=True,
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
