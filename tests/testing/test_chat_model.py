"""ScriptedChatModel: the ChatModel seam offline, with a record of what the consumer read."""

from __future__ import annotations

import json
import time

import anyio
import anyio.lowlevel
import pytest

from toolloop import ModelCallError, ModelOutputError
from toolloop.models import ChatDelta, ChatModel, ChatRequest, ToolCallDelta
from toolloop.planners import PlannerContext, StructuredPlanner
from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio

REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}])


async def read_all(model: ScriptedChatModel, request: ChatRequest = REQUEST) -> list[ChatDelta]:
    async with model.stream(request) as deltas:
        return [delta async for delta in deltas]


async def read_into(model: ScriptedChatModel, got: list[ChatDelta]) -> None:
    async with model.stream(REQUEST) as deltas:
        async for delta in deltas:
            got.append(delta)


def test_is_a_chat_model() -> None:
    assert isinstance(ScriptedChatModel(), ChatModel)


async def test_content_in_chunk_size_pieces_then_the_finish_delta() -> None:
    model = ScriptedChatModel()
    model.add_reply("abcdefghij", chunk_size=4)
    deltas = await read_all(model)
    assert [d.content for d in deltas] == ["abcd", "efgh", "ij", ""]
    assert [d.finish_reason for d in deltas] == [None, None, None, "stop"]
    stream = model.streams[0]
    assert stream.chunks_planned == stream.chunks_sent == 4
    assert stream.completed and stream.closed
    assert not stream.closed_early and not stream.failed
    assert stream.content_sent == "abcdefghij"
    assert model.requests == [REQUEST]
    assert stream.request_index == 0


async def test_a_string_is_one_delta_and_explicit_chunks_are_kept() -> None:
    model = ScriptedChatModel(["whole", ScriptedChatReply(chunks=("a", "bc", "", "d"))])
    assert [d.content for d in await read_all(model)] == ["whole", ""]
    assert [d.content for d in await read_all(model)] == ["a", "bc", "d", ""]
    assert model.streams[1].reply.content == "abcd"
    assert model.pending_replies == 0


async def test_tool_call_deltas() -> None:
    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[
            FakeToolCall("get_weather", '{"city": "Lisbon"}', id="call_a"),
            {"name": "noop"},
        ],
        chunk_size=8,
    )
    deltas = await read_all(model)
    calls = [call for d in deltas for call in d.tool_calls]
    assert calls[0] == ToolCallDelta(index=0, id="call_a", name="get_weather")
    assert "".join(c.arguments for c in calls if c.index == 0) == '{"city": "Lisbon"}'
    assert [c.arguments for c in calls if c.index == 0][1:] == ['{"city":', ' "Lisbon', '"}']
    assert [c.name for c in calls if c.index == 1] == ["noop", None]
    assert deltas[-1].finish_reason == "tool_calls"
    assert all(d.content == "" for d in deltas)
    assert [c.id for c in calls if c.id] == ["call_a", "call_0_1"]  # scripted, or turn_place


async def test_calls_without_a_scripted_id_never_share_one() -> None:
    model = ScriptedChatModel()
    for _ in range(3):
        model.add_reply(tool_calls=[{"name": "noop"}, {"name": "noop"}])
    ids = [c.id for _ in range(3) for d in await read_all(model) for c in d.tool_calls if c.id]
    assert ids == ["call_0_0", "call_0_1", "call_1_0", "call_1_1", "call_2_0", "call_2_1"]


async def test_finish_reason_is_scripted() -> None:
    model = ScriptedChatModel()
    model.add_reply('{"a": ', finish_reason="length")
    assert (await read_all(model))[-1].finish_reason == "length"


async def test_delays_pace_the_deltas() -> None:
    model = ScriptedChatModel()
    model.add_reply("abcd", chunk_size=1, delay=0.02, first_delay=0.05)
    started = time.monotonic()
    async with model.stream(REQUEST) as deltas:
        first_at = None
        async for _ in deltas:
            if first_at is None:
                first_at = time.monotonic() - started
    total = time.monotonic() - started
    assert first_at is not None and first_at >= 0.07
    assert total >= 0.05 + 5 * 0.02


async def test_leaving_early_is_recorded() -> None:
    model = ScriptedChatModel()
    model.add_reply("abcdefgh", chunk_size=2)
    async with model.stream(REQUEST) as deltas:
        async for delta in deltas:
            assert delta.content == "ab"
            break
    stream = model.streams[0]
    assert stream.closed_early and stream.closed
    assert not stream.completed
    assert (stream.chunks_sent, stream.chunks_planned) == (1, 5)
    assert stream.content_sent == "ab"
    assert stream.ended_at is not None


async def test_reading_every_delta_without_the_end_is_not_early() -> None:
    model = ScriptedChatModel()
    model.add_reply("ab")
    async with model.stream(REQUEST) as deltas:
        assert (await deltas.__anext__()).content == "ab"
        assert (await deltas.__anext__()).finish_reason == "stop"
    assert model.streams[0].completed
    assert not model.streams[0].closed_early


async def test_a_cancelled_consumer_left_early() -> None:
    model = ScriptedChatModel()
    model.add_reply("x" * 100, chunk_size=1, delay=0.01)
    got: list[ChatDelta] = []
    with anyio.fail_after(30), anyio.CancelScope() as scope:  # a hang guard
        async with model.stream(REQUEST) as deltas:
            async for delta in deltas:
                got.append(delta)
                if len(got) == 3:  # cancelled by the consumer, mid-stream
                    scope.cancel()
    stream = model.streams[0]
    assert stream.closed_early
    assert 3 <= stream.chunks_sent < 100


async def test_errors_at_open() -> None:
    boom = RuntimeError("boom")
    model = ScriptedChatModel([ValueError("first")])
    model.add_error(ModelCallError("second", status=503))
    model.add_reply(error=boom)
    with pytest.raises(ValueError, match="first"):
        await read_all(model)
    with pytest.raises(ModelCallError, match="second") as info:
        await read_all(model)
    assert info.value.status == 503
    with pytest.raises(RuntimeError, match="boom"):
        await read_all(model)
    assert len(model.requests) == 3
    assert model.streams == []  # none was opened


async def test_an_error_mid_stream() -> None:
    model = ScriptedChatModel()
    model.add_reply("abcdef", chunk_size=2, error_after=2)
    got: list[ChatDelta] = []
    with pytest.raises(ModelCallError, match="cut after 2 deltas"):
        await read_into(model, got)
    assert [d.content for d in got] == ["ab", "cd"]
    stream = model.streams[0]
    assert stream.failed and not stream.completed and not stream.closed_early
    assert stream.chunks_sent == 2


async def test_an_error_after_the_last_delta_replaces_the_end() -> None:
    model = ScriptedChatModel()
    model.add_reply("ab", error=OSError("reset"), error_after=99)
    got: list[ChatDelta] = []
    with pytest.raises(OSError, match="reset"):
        await read_into(model, got)
    assert len(got) == 2
    assert not model.streams[0].completed


async def test_no_reply_left() -> None:
    model = ScriptedChatModel()
    with pytest.raises(ModelCallError, match=r"no scripted reply left for request #0.*add_reply"):
        await read_all(model)
    assert model.requests == [REQUEST]


async def test_responder_sync_and_async() -> None:
    def sync(request: ChatRequest) -> str:
        return f"sync {request.max_tokens}"

    async def async_(request: ChatRequest) -> ScriptedChatReply:
        await anyio.lowlevel.checkpoint()
        return ScriptedChatReply(content=f"async {request.max_tokens}")

    model = ScriptedChatModel(["queued"], responder=sync)
    request = ChatRequest(messages=[], max_tokens=7)
    assert (await read_all(model, request))[0].content == "queued"
    assert (await read_all(model, request))[0].content == "sync 7"
    model = ScriptedChatModel(responder=async_)
    assert (await read_all(model, request))[0].content == "async 7"


async def test_a_stream_is_read_inside_its_block_and_opened_once() -> None:
    model = ScriptedChatModel(["a", "b"])
    cm = model.stream(REQUEST)
    async with cm as deltas:
        pass
    with pytest.raises(RuntimeError, match="inside its `async with` block"):
        await deltas.__anext__()
    with pytest.raises(RuntimeError, match="opened once"):
        async with cm:
            pass


def test_bad_scripts_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        ScriptedChatReply(content="x", chunk_size=0)
    with pytest.raises(ValueError, match="do not join"):
        ScriptedChatReply(content="abc", chunks=("a", "b"))
    with pytest.raises(ValueError, match="delays"):
        ScriptedChatReply(delay=-1)
    with pytest.raises(ValueError, match="error_after"):
        ScriptedChatReply(error_after=-1)


# -- with the structured planner -----------------------------------------------------------


async def test_the_planner_short_circuits_and_leaves_the_stream() -> None:
    body = json.dumps({"next_action": "response", "execution_commands": []})
    model = ScriptedChatModel()
    model.add_reply(body, chunk_size=1)
    reply = await StructuredPlanner(model).plan(PlannerContext(user_input="hi"))
    assert reply.short_circuited
    stream = model.streams[0]
    assert stream.closed_early
    # '{"next_action": "r' is 18 characters: the 18th delta decided
    assert stream.chunks_sent == 18 == reply.chars_read
    assert model.requests[0].structured_output is not None


async def test_the_planner_reads_a_plan_to_its_end() -> None:
    body = json.dumps(
        {
            "next_action": "execute",
            "execution_commands": [
                {"purpose": "p", "tool_name": "t", "tool_kwargs": {}, "todo_suggestion": ""}
            ],
        }
    )
    model = ScriptedChatModel()
    model.add_reply(body, chunk_size=5)
    reply = await StructuredPlanner(model).plan(PlannerContext(user_input="hi"))
    assert reply.output == json.loads(body)
    assert not reply.short_circuited
    assert model.streams[0].completed and not model.streams[0].closed_early


async def test_the_planner_reports_a_broken_stream() -> None:
    model = ScriptedChatModel()
    model.add_reply('{"next_action": "execute", "execution_commands": [', error_after=1)
    with pytest.raises(ModelCallError, match="cut after 1 deltas"):
        await StructuredPlanner(model).plan(PlannerContext(user_input="hi"))
    model.add_reply('{"next_action": "execute", "execution_commands": [', finish_reason="length")
    with pytest.raises(ModelOutputError, match="token limit"):
        await StructuredPlanner(model).plan(PlannerContext(user_input="hi"))


async def test_a_thinking_model_s_reasoning_and_a_refusal_are_scripted() -> None:
    from toolloop.agents import AssistantMessage, create_agent

    model = ScriptedChatModel()
    model.add_reply("Fine.", reasoning="The user greets me.", chunk_size=8)
    model.add_reply(refusal="I can't help with that.")
    deltas = await read_all(model)
    assert "".join(d.reasoning for d in deltas) == "The user greets me."
    assert {d.reasoning_field for d in deltas if d.reasoning} == {"reasoning_content"}
    assert "".join(d.content for d in deltas) == "Fine."
    result = await create_agent(model).run("Help me.")
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert result.stop_reason == "refusal" and result.refusal == "I can't help with that."
