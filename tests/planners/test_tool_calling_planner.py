"""ToolCallingPlanner over real HTTP: FakeOpenAIServer and the real openai client."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop import (
    ModelOutputError,
    PlannerError,
    ToolExecutionRecord,
    async_plan_and_execute,
    final_answer,
)
from toolloop.models import ChatDelta, ChatRequest, OpenAIChatModel, ToolCallDelta
from toolloop.planners import (
    TOOL_CALLING_SYSTEM_PROMPT,
    PlannerContext,
    PlannerReply,
    StreamingPlanner,
    ToolCallingPlanner,
    tool_calling_messages,
)
from toolloop.testing import FakeOpenAIServer
from toolloop.tools import ToolRegistry

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]


class Tools:
    """Tools that note what ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def get_weather(self, city: str) -> dict[str, str]:
        """The forecast for a city.

        Args:
            city: the city's name.
        """
        self.calls.append(("get_weather", {"city": city}))
        return {"city": city, "sky": "sunny"}

    def add(self, a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first.
            b: the second.
        """
        self.calls.append(("add", {"a": a, "b": b}))
        return a + b

    def now(self) -> str:
        """The time now."""
        self.calls.append(("now", {}))
        return "12:00"

    def registry(self) -> ToolRegistry:
        return ToolRegistry([self.get_weather, self.add, self.now])


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[FakeOpenAIServer, OpenAIChatModel]]:
    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "fake-model", base_url=server.base_url, api_key="test", max_retries=0
        ) as model:
            yield server, model


def context(**kwargs: Any) -> PlannerContext:
    kwargs.setdefault("user_input", "Weather in Lisbon?")
    kwargs.setdefault("available_tools", Tools().registry().specs())
    return PlannerContext(**kwargs)


def command(purpose: str, tool: str, kwargs: Any) -> dict[str, Any]:
    return {"purpose": purpose, "tool_name": tool, "tool_kwargs": kwargs, "todo_suggestion": ""}


def record(purpose: str, tool: str, kwargs: dict[str, Any], result: Any) -> ToolExecutionRecord:
    return ToolExecutionRecord(
        purpose=purpose, tool_name=tool, kwargs=kwargs, success=True, result=result
    )


def test_is_a_streaming_planner() -> None:
    assert isinstance(ToolCallingPlanner(model=None), StreamingPlanner)  # type: ignore[arg-type]


async def test_tool_call_pieces_become_a_command() -> None:
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[{"name": "get_weather", "arguments": '{"city": "Lisbon"}'}], chunk_size=2
        )
        reply = await ToolCallingPlanner(model).plan(context())
    assert isinstance(reply, PlannerReply)
    assert reply.output == {
        "next_action": "execute",
        "execution_commands": [command("get_weather #1", "get_weather", {"city": "Lisbon"})],
        "content": "",
    }
    assert reply.chars_read == len('{"city": "Lisbon"}')
    assert reply.decided_after is not None
    assert server.streams[0].chunks_planned > 10  # the arguments came in many pieces
    assert server.streams[0].completed


async def test_several_tool_calls_in_one_reply_get_distinct_purposes() -> None:
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
                {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                {"name": "get_weather", "arguments": '{"city": "Porto"}'},
                {"name": "now", "arguments": ""},  # no arguments at all: {}
            ],
            chunk_size=5,
        )
        # one earlier get_weather call in the run: the numbering goes on from it
        done = [record("get_weather #1", "get_weather", {"city": "Faro"}, {"sky": "rain"})]
        reply = await ToolCallingPlanner(model).plan(
            context(done_plans=done, last_round_result=done, round_index=1)
        )
    assert reply.output["execution_commands"] == [
        command("get_weather #2", "get_weather", {"city": "Lisbon"}),
        command("add #1", "add", {"a": 1, "b": 2}),
        command("get_weather #3", "get_weather", {"city": "Porto"}),
        command("now #1", "now", {}),
    ]


async def test_a_text_reply_is_a_response_with_its_content() -> None:
    async with serving() as (server, model):
        server.add_reply(content="No tool needed: it is always sunny there.", chunk_size=3)
        reply = await ToolCallingPlanner(model).plan(context())
    assert reply.output == {
        "next_action": "response",
        "execution_commands": [],
        "content": "No tool needed: it is always sunny there.",
    }
    assert not reply.short_circuited


async def test_the_request_carries_tools_choice_and_options() -> None:
    tools = Tools()
    async with serving() as (server, model):
        server.add_reply(content="ok")
        planner = ToolCallingPlanner(
            model, parallel_tool_calls=False, max_tokens=77, temperature=0.5
        )
        await planner.plan(context(available_tools=tools.registry().specs()))
    body = server.requests[0].body
    assert body["tools"] == tools.registry().openai_tools()
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city.",
            "parameters": tools.registry().get("get_weather").parameters,
        },
    }
    assert body["tool_choice"] == "auto"
    assert body["parallel_tool_calls"] is False
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.5
    assert body["stream"] is True
    assert "response_format" not in body
    assert body["messages"] == [
        {"role": "system", "content": TOOL_CALLING_SYSTEM_PROMPT},
        {"role": "user", "content": "Weather in Lisbon?"},
    ]


async def test_without_tools_no_tools_are_sent() -> None:
    async with serving() as (server, model):
        server.add_reply(content="hello")
        reply = await ToolCallingPlanner(model, tool_choice="required").plan(
            context(available_tools=[], user_extra_requirement="Be brief.")
        )
    body = server.requests[0].body
    assert "tools" not in body
    assert "tool_choice" not in body
    assert body["messages"][0]["content"].endswith("Be brief.")
    assert reply.output["next_action"] == "response"


async def test_a_forced_named_function() -> None:
    async with serving() as (server, model):
        server.add_reply(tool_calls=[{"name": "get_weather", "arguments": '{"city": "Oslo"}'}])
        server.add_reply(content="done")
        planner = ToolCallingPlanner(model, tool_choice="get_weather")
        reply = await planner.plan(context())
        # a function of the context decides round by round
        planner.tool_choice = lambda ctx: "required" if ctx.round_index == 0 else "none"
        await planner.plan(context(round_index=1))
    assert server.requests[0].body["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    assert server.requests[1].body["tool_choice"] == "none"
    assert reply.output["execution_commands"] == [
        command("get_weather #1", "get_weather", {"city": "Oslo"})
    ]


async def test_the_openai_tool_choice_object_passes_through() -> None:
    choice = {"type": "function", "function": {"name": "add"}}
    request = ToolCallingPlanner(None, tool_choice=choice).request(context())  # type: ignore[arg-type]
    assert request.tool_choice == choice


def test_a_forced_tool_that_does_not_exist_is_a_clear_error() -> None:
    planner = ToolCallingPlanner(None, tool_choice="get_wether")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'get_wether', which is not available"):
        planner.request(context())


async def test_invalid_json_arguments_fail_their_record_and_the_tool_does_not_run() -> None:
    tools = Tools()
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lis'},
                {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                {"name": "add", "arguments": "[2, 3]"},
            ]
        )
        server.add_reply(content="The weather call failed.")
        result = await async_plan_and_execute(
            "weather and a sum", tools=tools.registry(), planner=ToolCallingPlanner(model)
        )
    assert tools.calls == [("add", {"a": 2, "b": 3})]
    broken, good, not_an_object = result.done_plans
    assert not broken.success
    assert broken.error is not None
    assert "not run" in broken.error
    assert '{"city": "Lis' in broken.error  # quotes what the model wrote
    assert good.success
    assert good.result == 5
    assert not not_an_object.success
    assert "must be an object" in (not_an_object.error or "")
    # the model sees the failure next round, with ids that match
    messages = server.requests[1].body["messages"]
    assert json.loads(messages[3]["content"]) == {"error": broken.error}


async def test_the_second_round_carries_the_history_with_matching_ids() -> None:
    tools = Tools()
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}', "id": "call_A"},
                {"name": "add", "arguments": '{"a": 1, "b": "x"}', "id": "call_B"},
            ]
        )
        server.add_reply(tool_calls=[{"name": "add", "arguments": '{"a": 1, "b": 2}'}])
        server.add_reply(content="Sunny, and 3.")
        result = await async_plan_and_execute(
            "weather, then a sum",
            tools=tools.registry(),
            planner=ToolCallingPlanner(model),
            user_extra_requirement="Use metric units.",
        )
    assert result.rounds == 2
    assert result.stop_reason == "answered"
    assert [r.purpose for r in result.done_plans] == ["get_weather #1", "add #1", "add #2"]
    assert len(server.requests) == 3

    second = server.requests[1].body["messages"]
    assert second[0]["role"] == "system"
    assert second[0]["content"].endswith("Use metric units.")
    assert second[1] == {"role": "user", "content": "weather, then a sum"}
    assistant, weather, add = second[2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""  # not null: llama-cpp-python's server refuses null
    ids = [call["id"] for call in assistant["tool_calls"]]
    assert len(set(ids)) == 2
    assert [call["function"]["name"] for call in assistant["tool_calls"]] == ["get_weather", "add"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Lisbon"}
    assert [weather["role"], add["role"]] == ["tool", "tool"]
    assert [weather["tool_call_id"], add["tool_call_id"]] == ids
    assert json.loads(weather["content"]) == {"city": "Lisbon", "sky": "sunny"}
    assert "error" in json.loads(add["content"])  # "x" is not an integer

    # third round: the rounds before the last one, then the last one, ids still unique
    third = server.requests[2].body["messages"]
    assert [m["role"] for m in third] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert third[2:5] == second[2:5]
    last_id = third[5]["tool_calls"][0]["id"]
    assert third[6] == {"role": "tool", "tool_call_id": last_id, "content": "3"}
    assert last_id not in ids


def test_messages_cut_long_results() -> None:
    long = record("get_weather #1", "get_weather", {"city": "X"}, "y" * 50)
    messages = tool_calling_messages(
        context(done_plans=[long], last_round_result=[long]), max_result_chars=10
    )
    assert messages[-1]["content"] == (
        "yyyyyyyyyy\n[cut for the model: shown 10 of 50 characters; read the rest with "
        'read_result(handle="r:0", offset=10)]'
    )


async def test_streaming_dispatch_starts_a_tool_before_the_stream_ends() -> None:
    started_while_streaming: list[bool] = []

    async with serving() as (server, model):

        async def get_weather(city: str) -> str:
            """The forecast.

            Args:
                city: the city.
            """
            started_while_streaming.append(not server.streams[0].ended.is_set())
            return "sunny"

        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
                {"name": "get_weather", "arguments": '{"city": "Porto", "note": "' + "x" * 30},
            ],
            chunk_size=4,
            delay=0.01,
        )
        server.add_reply(content="done")
        result = await async_plan_and_execute(
            "weather",
            tools=[get_weather],
            planner=ToolCallingPlanner(model),
            streaming_dispatch=True,
        )
    assert started_while_streaming == [True]  # the broken second call never runs
    assert [r.success for r in result.done_plans] == [True, False]
    assert result.action_results is not None
    assert result.action_results["get_weather #1"] == "sunny"


async def test_plan_streaming_dispatches_each_call_once_it_is_complete() -> None:
    seen: list[tuple[int, str, bool]] = []
    async with serving() as (server, model):

        def dispatch(index: int, raw: Any) -> None:
            seen.append((index, raw["purpose"], server.streams[0].ended.is_set()))

        server.add_reply(
            tool_calls=[
                {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                {"name": "add", "arguments": '{"a": 3, "b": 4}'},
            ],
            chunk_size=3,
            delay=0.005,
        )
        reply = await ToolCallingPlanner(model).plan_streaming(context(), dispatch)
    assert [(i, p) for i, p, _ in seen] == [(0, "add #1"), (1, "add #2")]
    assert seen[0][2] is False  # handed over while the second call still streamed
    assert [c["purpose"] for c in reply.output["execution_commands"]] == ["add #1", "add #2"]


async def test_end_to_end_two_rounds_and_the_final_answer() -> None:
    tools = Tools()
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
                {"name": "get_weather", "arguments": '{"city": "Porto"}'},
            ]
        )
        server.add_reply(tool_calls=[{"name": "add", "arguments": '{"a": 20, "b": 1}'}])
        server.add_reply(content="I have what I need.")
        server.add_reply(content="Both sunny; 21.", chunk_size=2)
        result = await async_plan_and_execute(
            "weather in two cities and a sum",
            tools=tools.registry(),
            planner=ToolCallingPlanner(model),
            max_turns=5,
        )
        answer = await final_answer(model, result)
    assert result.rounds == 2
    assert result.action_results == {
        "get_weather #1": {"city": "Lisbon", "sky": "sunny"},
        "get_weather #2": {"city": "Porto", "sky": "sunny"},
        "add #1": 21,
    }
    assert answer == "Both sunny; 21."
    assert result.planner_text == "I have what I need."  # the last reply's own text
    assert len(server.requests) == 4  # three planner rounds, then the one final answer
    final_messages = server.requests[3].body["messages"]
    assert "tools" not in server.requests[3].body
    assert '"add #1": 21' in final_messages[-1]["content"]


class Script:
    """A ChatModel that plays deltas, for shapes the fake server does not send."""

    def __init__(self, deltas: Sequence[ChatDelta]) -> None:
        self.deltas = list(deltas)

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[ChatDelta]]:
        async def play() -> AsyncGenerator[ChatDelta, None]:
            for delta in self.deltas:
                await anyio.lowlevel.checkpoint()
                yield delta

        gen = play()
        try:
            yield gen
        finally:
            await gen.aclose()


def calls(*pieces: ToolCallDelta) -> ChatDelta:
    return ChatDelta(tool_calls=pieces)


async def test_pieces_without_index_or_reusing_an_index_are_told_apart() -> None:
    no_index: Any = None
    model = Script(
        [
            ChatDelta(content="Let me look. "),
            calls(ToolCallDelta(index=0, id="a", name="add", arguments='{"a": 1,')),
            calls(ToolCallDelta(index=0, arguments=' "b": 2}')),
            # a server that numbers every call 0, with a new id
            calls(ToolCallDelta(index=0, id="b", name="add", arguments='{"a": 3, "b": 4}')),
            # a server that leaves the index out
            calls(ToolCallDelta(index=no_index, id="c", name="now", arguments="")),
            calls(ToolCallDelta(index=no_index, name="get_weather", arguments='{"city":')),
            calls(ToolCallDelta(index=no_index, arguments=' "Oslo"}')),
            ChatDelta(finish_reason="tool_calls"),
        ]
    )
    dispatched: list[int] = []
    reply = await ToolCallingPlanner(model).plan_streaming(
        context(), lambda i, raw: dispatched.append(i)
    )
    assert reply.output["execution_commands"] == [
        command("add #1", "add", {"a": 1, "b": 2}),
        command("add #2", "add", {"a": 3, "b": 4}),
        command("now #1", "now", {}),
        command("get_weather #1", "get_weather", {"city": "Oslo"}),
    ]
    assert reply.output["content"] == "Let me look. "
    assert dispatched == [0, 1, 2, 3]


async def test_a_stream_without_finish_reason_is_read_to_its_end() -> None:
    # Snowflake Cortex ends its streams with usage and [DONE] but no finish_reason: the end
    # of the stream is the end of the reply, its whole calls are commands, a cut one is
    # passed on as text (the loop makes it a failed record that quotes it)
    model = Script(
        [
            calls(ToolCallDelta(index=0, id="a", name="add", arguments='{"a": 1, "b": 2}')),
            calls(ToolCallDelta(index=1, id="b", name="add", arguments='{"a": 1')),
        ]
    )
    reply = await ToolCallingPlanner(model).plan(context())
    assert reply.finish_reason is None
    assert reply.output["execution_commands"] == [
        command("add #1", "add", {"a": 1, "b": 2}),
        command("add #2", "add", '{"a": 1'),
    ]


async def test_a_stream_with_no_output_at_all_is_a_model_output_error() -> None:
    with pytest.raises(ModelOutputError, match="carried no output at all"):
        await ToolCallingPlanner(Script([])).plan(context())


async def test_a_model_error_fails_the_round_as_a_planner_error() -> None:
    async with serving() as (server, model):
        server.add_error(503, "overloaded", headers={"x-should-retry": "false"})
        with pytest.raises(PlannerError, match="HTTP 503") as info:
            await async_plan_and_execute(
                "weather", tools=Tools().registry(), planner=ToolCallingPlanner(model)
            )
    assert info.value.done_plans == []


def _ignores_required(request: Any) -> Any:
    """A server like llama-cpp-python's: text for ``tool_choice="required"``, a call for a
    named tool."""
    from toolloop.testing import FakeReply, FakeToolCall

    choice = request.body.get("tool_choice")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return FakeReply(tool_calls=(FakeToolCall(name, '{"a": 2, "b": 3}'),))
    return FakeReply(content="The answer is 5.")


async def test_a_server_that_ignores_required_gets_the_only_tool_named() -> None:
    tools = ToolRegistry([Tools().add])
    async with FakeOpenAIServer(responder=_ignores_required) as server:
        async with OpenAIChatModel(
            "m", base_url=server.base_url, api_key="k", max_retries=0
        ) as model:
            planner = ToolCallingPlanner(model, tool_choice="required")
            result = await async_plan_and_execute(
                "2 + 3?", tools=tools, planner=planner, max_turns=2
            )
            choices = [r.body.get("tool_choice") for r in server.requests]
    named = {"type": "function", "function": {"name": "add"}}
    # round 0 asked for "required", got text, asked again naming the tool; round 1 names it
    assert choices == ["required", named, named]
    assert [(r.tool_name, r.result) for r in result.done_plans] == [("add", 5), ("add", 5)]
    assert result.stop_reason == "max_turns"
    assert any("ignored tool_choice='required'" in note for note in result.notes)


async def test_a_server_that_ignores_required_with_several_tools_is_a_clear_error() -> None:
    async with FakeOpenAIServer(responder=_ignores_required) as server:
        async with OpenAIChatModel(
            "m", base_url=server.base_url, api_key="k", max_retries=0
        ) as model:
            planner = ToolCallingPlanner(model, tool_choice="required")
            with pytest.raises(PlannerError) as info:
                await async_plan_and_execute("2 + 3?", tools=Tools().registry(), planner=planner)
    cause = info.value.__cause__
    assert isinstance(cause, ModelOutputError)
    assert "ignored tool_choice='required'" in str(cause)
    assert "The answer is 5." in str(cause) and "StructuredPlanner" in str(cause)


async def test_calls_of_one_reply_with_the_same_id_are_told_apart_in_the_history() -> None:
    """A server that numbers the calls of a reply "0", "0": each gets an id of its own in
    the next request, so each result answers its own call."""
    tools = Tools()
    async with serving() as (server, model):
        server.add_reply(
            tool_calls=[
                {"name": "add", "arguments": '{"a": 1, "b": 2}', "id": "0"},
                {"name": "add", "arguments": '{"a": 3, "b": 7}', "id": "0"},
            ]
        )
        server.add_reply("3 and 10.")
        await async_plan_and_execute(
            "sums", tools=tools.registry(), planner=ToolCallingPlanner(model), max_turns=2
        )
        sent = server.requests[1].body["messages"]
    ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m["tool_calls"]]
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert len(set(ids)) == 2 and ids[0] == "0"
    assert [answers[i] for i in ids] == ["3", "10"]
