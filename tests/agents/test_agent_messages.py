"""Messages: typed, from OpenAI dicts and strings, to the OpenAI format, JSON round trips."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from toolloop.agents import (
    AgentState,
    AssistantMessage,
    Message,
    SystemMessage,
    Todo,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from toolloop.agents._messages import (
    add_messages,
    as_message,
    as_messages,
    pending_tool_calls,
    to_openai,
)
from toolloop.agents._state import apply_update, check_update


def test_messages_from_strings_dicts_and_models() -> None:
    assert as_message("hi") == UserMessage(content="hi")
    assert as_message({"role": "system", "content": "s"}) == SystemMessage(content="s")
    openai_ai = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "oops"}},
            {"id": "c3", "type": "function", "function": {"name": "h", "arguments": ""}},
        ],
    }
    message = as_message(openai_ai)
    assert isinstance(message, AssistantMessage)
    assert message.content == ""
    first, second, third = message.tool_calls
    assert (first.name, first.args, first.error) == ("f", {"x": 1}, None)
    assert second.error == "the arguments are not a JSON object"
    assert second.raw_arguments == "oops"
    assert third.args == {}
    tool = as_message({"role": "tool", "tool_call_id": "c1", "content": "1"})
    assert tool == ToolMessage(tool_call_id="c1", content="1")
    assert as_messages(["a", {"role": "user", "content": "b"}]) == [
        UserMessage(content="a"),
        UserMessage(content="b"),
    ]
    with pytest.raises(ValidationError):
        as_message({"role": "robot", "content": "x"})
    with pytest.raises(TypeError, match="a message is a str"):
        as_message(42)  # type: ignore[arg-type]


def test_to_openai_round_trips() -> None:
    messages: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="u", name="ada"),
        AssistantMessage(
            content="",
            tool_calls=[
                ToolCall(id="1", name="f", args={"x": 1}),
                ToolCall(id="2", name="f", error="bad", raw_arguments="{x"),
            ],
        ),
        ToolMessage(tool_call_id="1", content="r"),
        AssistantMessage(content="done"),
    ]
    out = [to_openai(m) for m in messages]
    assert out[1] == {"role": "user", "content": "u", "name": "ada"}
    assert out[2]["content"] is None
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert out[2]["tool_calls"][1]["function"]["arguments"] == "{x"  # as the model wrote it
    assert out[3] == {"role": "tool", "tool_call_id": "1", "content": "r"}
    assert out[4] == {"role": "assistant", "content": "done"}


def test_the_state_round_trips_through_json() -> None:
    state = AgentState(
        messages=[
            UserMessage(content="u"),
            AssistantMessage(tool_calls=[ToolCall(id="1", name="f")]),
        ],
        todos=[Todo(content="a", status="in_progress")],
        values={"n": 1},
    )
    data = state.model_dump(mode="json")
    back = AgentState.model_validate(data)
    assert back == state
    assert isinstance(back.messages[1], AssistantMessage)
    assert TypeAdapter(list[Message]).validate_python(data["messages"]) == state.messages


def test_add_messages_replaces_by_id_and_pending_calls() -> None:
    messages: list[Message] = []
    ai = AssistantMessage(
        id="m1", tool_calls=[ToolCall(id="a", name="f"), ToolCall(id="b", name="f")]
    )
    add_messages(messages, [UserMessage(content="u"), ai])
    assert [c.id for c in pending_tool_calls(messages)] == ["a", "b"]
    add_messages(messages, [ToolMessage(tool_call_id="a", content="1")])
    assert [c.id for c in pending_tool_calls(messages)] == ["b"]
    edited = ai.model_copy(update={"tool_calls": [ai.tool_calls[0]]})
    add_messages(messages, [edited])
    assert messages[1] is edited
    assert pending_tool_calls(messages) == []
    assert pending_tool_calls([UserMessage(content="u")]) == []


def test_updates_are_checked_before_anything_changes() -> None:
    state = AgentState()
    with pytest.raises(ValueError, match="status"):
        apply_update(state, {"flag": 1, "todos": [{"content": "x", "status": "later"}]})
    assert state == AgentState()
    with pytest.raises(ValueError, match="'values' is a dict"):
        check_update({"values": 3})
    apply_update(state, {"values": {"a": 1}, "b": 2, "jump_to": "end", "structured_response": 5})
    assert state.values == {"a": 1, "b": 2}
    assert state.structured_response == 5
