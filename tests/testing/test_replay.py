"""A recorded run replays through today's code, for each product, offline: the model's
replies and the tools' results come from the trace; where the code now does something
else, the replay stops with a diff of what was recorded and what happened."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from replay_support import (
    PRODUCTS,
    RAN,
    REQUEST,
    TOOLS,
    builder,
    changed_builder,
    fahrenheit,
    get_weather,
    record,
    scripted,
)

from toolloop import ModelCallError
from toolloop.agents import AgentModelError, create_agent
from toolloop.kernel import RunResult
from toolloop.loop import AnswerWith, async_plan_and_execute
from toolloop.models import ChatModel
from toolloop.planners import PlannerContext, PlannerReply, StructuredPlanner
from toolloop.pytest_plugin import ReplayFixture
from toolloop.testing import (
    Recording,
    Replay,
    ReplayError,
    ReplayMismatch,
    ScriptedChatModel,
    replay,
)
from toolloop.tools import Tool, ToolRegistry
from toolloop.tracing import TRACE_VALUE_CHARS

pytestmark = pytest.mark.anyio

TOOL_TURN = {"loop": 0, "agent": 0, "status": 2}
"""The turn whose reply asks for the weather: the status agent decides in its third step."""


@pytest.fixture(autouse=True)
def _no_tool_ran_yet() -> None:
    RAN.clear()


def _records(result: RunResult) -> list[tuple[str, dict[str, Any], bool, Any, str | None]]:
    return [(r.tool_name, r.kwargs, r.success, r.result, r.error) for r in result.records]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_recorded_run_replays_offline_as_it_ran(product: str, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    recorded = await record(product, trace)
    assert len(RAN) == 2
    RAN.clear()

    replayed = await replay(trace, builder(product), tools=TOOLS)

    assert RAN == []  # the results came from the trace: no tool ran
    assert replayed.stop_reason == recorded.stop_reason == "answered"
    assert _records(replayed) == _records(recorded)
    recording = Recording.from_trace(trace)
    assert len(recording.model_calls) == {"loop": 2, "agent": 2, "status": 4}[product]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_other_arguments_stop_the_replay_with_a_diff(product: str, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record(product, trace)
    RAN.clear()

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, changed_builder(product), tools=TOOLS)

    error = caught.value
    turn = TOOL_TURN[product]
    assert error.turn == turn
    assert (
        f'turn {turn}: get_weather {{"city": "lisbon"}} was called, which the recording does '
        "not have at this point"
    ) in error.reason
    lines = error.diff.splitlines()
    assert lines[:2] == ["--- recorded", "+++ now"]
    assert '-     [0.0] get_weather {"city": "Lisbon"}' in lines
    assert '+     [0.0] get_weather {"city": "lisbon"}' in lines
    assert f"  turn {turn}" in lines
    assert str(trace) in str(error)
    assert RAN == []  # a call the record does not have never runs


def _strict_weather() -> Tool:
    """get_weather whose schema now refuses a city of more than 5 letters."""
    city = {"type": "string", "maxLength": 5}
    schema = {"type": "object", "properties": {"city": city}, "required": ["city"]}
    return Tool(
        name="get_weather", description="The weather.", parameters=schema, function=get_weather
    )


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_call_the_code_now_refuses_is_a_divergence(product: str, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record(product, trace)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, builder(product), tools=[_strict_weather(), fahrenheit])

    lines = caught.value.diff.splitlines()
    assert '-     [0.0] get_weather {"city": "Lisbon"}' in lines
    now = '+     [0.0] get_weather {"city": "Lisbon"}'
    refused = [line for line in lines if line.startswith(now)]
    assert len(refused) == 1
    assert "(not run: arguments for tool 'get_weather' do not fit its schema" in refused[0]
    assert caught.value.turn == TOOL_TURN[product]


class _Reversed:
    """The structured planner, with its commands now made in the other order."""

    def __init__(self, inner: StructuredPlanner) -> None:
        self.inner = inner

    async def plan(self, context: PlannerContext) -> Any:
        reply = await self.inner.plan(context)
        output = reply.output if isinstance(reply, PlannerReply) else reply
        if isinstance(output, dict) and output.get("execution_commands"):
            output = {**output, "execution_commands": output["execution_commands"][::-1]}
        return output


async def test_the_same_calls_in_another_order_are_a_divergence(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("loop", trace)

    async def reversed_loop(model: ChatModel, tools: ToolRegistry) -> RunResult:
        planner = _Reversed(StructuredPlanner(model))
        return await async_plan_and_execute(REQUEST, planner=planner, tools=tools)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, reversed_loop, tools=TOOLS)

    assert caught.value.reason == "turn 0: the same calls are made in another order"
    lines = caught.value.diff.splitlines()
    assert '-     [0.0] get_weather {"city": "Lisbon"}' in lines
    assert '+     [0.0] get_weather {"city": "Porto"}' in lines


@pytest.mark.parametrize("product", ["loop", "agent"])
async def test_a_model_call_the_code_no_longer_makes_is_a_divergence(
    product: str, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    await record(product, trace)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, builder(product, max_turns=1), tools=TOOLS)

    assert caught.value.reason.startswith("model call #1 was not made")
    lines = caught.value.diff.splitlines()
    assert "- turn 1" in lines
    assert "+ end: completed (max_turns, 2 records)" in lines


async def test_a_model_call_the_recording_does_not_have_is_a_divergence(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("loop", trace)

    async def answered(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await async_plan_and_execute(
            REQUEST, planner=StructuredPlanner(model), tools=tools, answer_with=AnswerWith(model)
        )

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, answered, tools=TOOLS)

    assert caught.value.turn == 2
    assert caught.value.reason == (
        "model call #2 was not recorded: the recorded run made 2 model calls"
    )
    assert "+     model call #2: failed: not answered: the replay stopped the run here" in (
        caught.value.diff.splitlines()
    )


async def test_a_reply_read_past_its_recorded_short_circuit_is_a_divergence(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    await record("loop", trace)
    recording = Recording.from_trace(trace)
    assert [call.closed_early for call in recording.model_calls] == [False, True]

    async def reads_everything(model: ChatModel, tools: ToolRegistry) -> RunResult:
        planner = StructuredPlanner(model, short_circuit=False)
        return await async_plan_and_execute(REQUEST, planner=planner, tools=tools)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, reads_everything, tools=TOOLS)

    assert caught.value.turn == 1
    assert "the recorded run stopped reading the reply after" in caught.value.reason


async def test_streaming_dispatch_replays(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    recorded = await record("loop", trace, streaming_dispatch=True)
    RAN.clear()

    replayed = await replay(trace, builder("loop", streaming_dispatch=True), tools=TOOLS)

    assert RAN == []
    assert _records(replayed) == _records(recorded)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_live_tools_run_for_real(product: str, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record(product, trace)
    RAN.clear()

    replayed = await replay(trace, builder(product), tools=TOOLS, live_tools=["get_weather"])

    assert sorted(call[1]["city"] for call in RAN) == ["Lisbon", "Porto"]
    assert [r.result for r in replayed.records] == [
        {"city": "Lisbon", "temp_c": 21},
        {"city": "Porto", "temp_c": 17},
    ]


async def test_a_live_tool_must_be_given() -> None:
    with pytest.raises(ValueError, match=r"live_tools \['get_weather'\]: no such tool"):
        Replay(Recording(), live_tools=["get_weather"])
    with pytest.raises(ValueError, match="reask_from needs model="):
        Replay(Recording(), reask_from=1)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_recorded_tool_failure_is_given_back_as_it_was(
    product: str, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    recorded = await record(product, trace, model=scripted(product, ["Atlantis", "Porto"]))
    assert recorded.records[0].error_type == "LookupError"
    RAN.clear()

    replayed = await replay(trace, builder(product), tools=TOOLS)

    assert RAN == []
    failed = replayed.records[0]
    assert (failed.error, failed.error_type) == (
        "tool 'get_weather' raised LookupError: no city named Atlantis",
        "LookupError",
    )
    assert _records(replayed) == _records(recorded)


async def test_reask_from_asks_the_real_model_after_the_recorded_turns(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)
    live = ScriptedChatModel()
    live.add_reply(tool_calls=[{"name": "fahrenheit", "arguments": '{"celsius": 21}'}])
    live.add_reply("70 °F in Lisbon.")
    RAN.clear()

    replayed = await replay(trace, builder("agent"), tools=TOOLS, reask_from=1, model=live)

    assert replayed.text == "70 °F in Lisbon."
    assert RAN == [("fahrenheit", {"celsius": 21})]  # not in the recording: it ran
    assert len(live.requests) == 2
    tool_results = [m for m in live.requests[0].messages if m["role"] == "tool"]
    assert [json.loads(m["content"])["city"] for m in tool_results] == ["Lisbon", "Porto"]


async def test_reask_from_the_first_call_serves_recorded_calls_from_the_record(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)
    live = scripted("agent")  # the same answers again, from a "real" model
    RAN.clear()

    replayed = await replay(trace, builder("agent"), tools=TOOLS, reask_from=0, model=live)

    assert replayed.stop_reason == "answered"
    assert RAN == []  # the calls are in the record (same name, same arguments)
    assert len(live.requests) == 2


async def test_a_request_that_asks_otherwise_is_a_divergence(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)

    async def hotter(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await create_agent(model, tools, temperature=0.9).run(REQUEST)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, hotter, tools=TOOLS)

    assert caught.value.turn == 0
    assert caught.value.reason.startswith("model call #0 asks something else: the settings")
    assert "temperature': 0.9" in caught.value.reason
    lines = caught.value.diff.splitlines()
    assert any(line.startswith("+       request: messages=") for line in lines)


async def test_a_changed_prompt_diverges_only_when_requests_are_compared_exactly(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)

    async def reworded(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await create_agent(model, tools, system_prompt="Be brief.").run(REQUEST)

    with pytest.raises(ReplayMismatch, match="the number of messages: recorded 1, now 2"):
        await replay(trace, reworded, tools=TOOLS)

    async def reworded_request(model: ChatModel, tools: ToolRegistry) -> RunResult:
        return await create_agent(model, tools).run(REQUEST + " Thanks.")

    await replay(trace, reworded_request, tools=TOOLS)  # the shape is the same
    with pytest.raises(ReplayMismatch, match=r"the messages differ \(compare_requests='exact'\)"):
        await replay(trace, reworded_request, tools=TOOLS, compare_requests="exact")
    await replay(trace, builder("agent"), tools=TOOLS, compare_requests="exact")


async def test_a_run_that_failed_when_recorded_fails_again(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    model = ScriptedChatModel([ModelCallError("the server is down")])
    with pytest.raises(AgentModelError) as recorded:
        await record("agent", trace, model=model)
    assert Recording.from_trace(trace).end.status == "failed"

    with pytest.raises(AgentModelError) as replayed:
        await replay(trace, builder("agent"), tools=TOOLS)
    assert str(replayed.value) == str(recorded.value)
    assert isinstance(replayed.value.__cause__, ModelCallError)


async def test_a_run_that_raises_where_the_recording_completed_is_a_divergence(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)

    async def broken(model: ChatModel, tools: ToolRegistry) -> RunResult:
        raise RuntimeError("a bug")

    with pytest.raises(ReplayMismatch) as caught:
        await replay(trace, broken, tools=TOOLS)

    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "model call #0 was not made" in caught.value.reason


async def test_tools_not_given_get_stand_ins(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    recorded = await record("agent", trace)

    replayed = await replay(trace, builder("agent"))  # no tools: stand-ins by name

    assert _records(replayed) == _records(recorded)


def _long(size: int) -> Callable[..., str]:
    def page(url: str) -> str:
        """Read a page.

        Args:
            url: where.
        """
        return "x" * size

    return page


@pytest.mark.parametrize("whole", [False, True])
async def test_a_result_the_trace_cut_cannot_be_replayed_unless_kept_whole(
    whole: bool, tmp_path: Path
) -> None:
    trace = tmp_path / "run.jsonl"
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[{"name": "page", "arguments": '{"url": "u"}'}])
    model.add_reply("done")
    page = _long(70_000)
    limit = None if whole else TRACE_VALUE_CHARS
    recorded = await record("agent", trace, model=model, tools=[page], max_value_chars=limit)

    if whole:
        replayed = await replay(trace, builder("agent"), tools=[page])
        assert replayed.records[0].result == recorded.records[0].result
        return
    with pytest.raises(ReplayError, match="max_value_chars=None") as caught:
        await replay(trace, builder("agent"), tools=[page])
    assert not isinstance(caught.value, ReplayMismatch)


async def test_replay_parts_alone_check_a_run_built_by_hand(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)

    referee = Replay(trace, tools=TOOLS)
    result = await create_agent(referee.model, referee.tools).run(REQUEST, on_event=referee.observe)
    referee.check(result)
    assert referee.mismatch is None

    referee = Replay(trace, tools=TOOLS)
    await create_agent(referee.model, referee.tools, max_turns=1).run(
        REQUEST, on_event=referee.observe
    )
    with pytest.raises(ReplayMismatch, match="model call #1 was not made"):
        referee.check()

    # without the events, the result says how the run ended
    referee = Replay(trace, tools=TOOLS)
    answered = await create_agent(referee.model, referee.tools).run(REQUEST)
    referee.check(answered)
    other = answered.model_copy(update={"stop_reason": "max_turns"})
    with pytest.raises(ReplayMismatch, match="the run ends otherwise: end: completed \\(max_turns"):
        referee.check(other)


async def test_a_run_that_fails_otherwise_than_recorded_is_a_divergence(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    with pytest.raises(AgentModelError):
        await record("agent", trace, model=ScriptedChatModel([ModelCallError("down")]))

    async def broken(model: ChatModel, tools: ToolRegistry) -> RunResult:
        with pytest.raises(AgentModelError):  # the same call fails the same way
            await create_agent(model, tools).run(REQUEST)
        raise RuntimeError("a bug")  # and then the code does something else

    with pytest.raises(ReplayMismatch, match="the run raised RuntimeError: a bug; the recorded"):
        await replay(trace, broken, tools=TOOLS)


async def test_the_fixture_replays_a_trace_beside_the_test(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    await record("agent", trace)
    fixture = ReplayFixture(tmp_path)

    result = await fixture("run.jsonl", builder("agent"), tools=TOOLS)
    assert result.stop_reason == "answered"

    with pytest.raises(pytest.fail.Exception) as caught:
        await fixture("run.jsonl", changed_builder("agent"), tools=TOOLS)
    assert '+     [0.0] get_weather {"city": "lisbon"}' in str(caught.value)


async def test_the_fixture_is_registered(
    toolloop_replay: ReplayFixture, request: pytest.FixtureRequest
) -> None:
    assert toolloop_replay.folder == Path(str(request.path)).parent


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_model_call_retried_when_recorded_replays_as_its_last_try(
    product: str, tmp_path: Path
) -> None:
    from toolloop.errors import RateLimitedError
    from toolloop.ratelimit import RetryPolicy

    trace = tmp_path / "run.jsonl"
    model = scripted(product)
    model._queue.appendleft(RateLimitedError(retry_after=0))  # the first try is refused
    retry = RetryPolicy(tries=2, backoff=0.001, max_backoff=0.001)
    recorded = await record(product, trace, model=model, model_retry=retry)
    recording = Recording.from_trace(trace)
    assert recording.model_calls[0].error is None  # the call is its last try's reply
    assert len(recording.model_calls) == {"loop": 2, "agent": 2, "status": 4}[product]
    RAN.clear()

    replayed = await replay(trace, builder(product, model_retry=retry), tools=TOOLS)

    assert RAN == []
    assert _records(replayed) == _records(recorded)
