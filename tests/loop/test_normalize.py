from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.loop import normalize_plan

CMD = {"purpose": "look", "tool_name": "search", "tool_kwargs": {"q": "x"}, "todo_suggestion": "t"}


def test_execution_commands_become_tool_commands() -> None:
    plan = normalize_plan({"next_action": "execute", "execution_commands": [CMD]})
    assert plan.next_action == "execute"
    assert plan.stop_reason is None
    assert plan.items == [
        ToolCommand(purpose="look", tool_name="search", tool_kwargs={"q": "x"}, todo_suggestion="t")
    ]
    assert plan.items[0].model_dump() == {
        "purpose": "look",
        "tool_name": "search",
        "tool_kwargs": {"q": "x"},
        "todo_suggestion": "t",
        "next": "t",
    }


def test_tool_commands_is_read_as_execution_commands() -> None:
    plan = normalize_plan({"next_action": "execute", "tool_commands": [CMD, CMD]})
    assert len(plan.commands) == 2


def test_single_tool_command_becomes_a_list_of_one() -> None:
    plan = normalize_plan({"tool_command": CMD})
    assert plan.next_action == "execute"
    assert [c.tool_name for c in plan.commands] == ["search"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"execution_commands": [CMD]}, "execute"),
        ({"execution_commands": []}, "response"),
        ({}, "response"),
    ],
)
def test_missing_next_action_is_inferred(data: dict[str, Any], expected: str) -> None:
    assert normalize_plan(data).next_action == expected


@pytest.mark.parametrize("flag", [False, "false", "no", 0, None])
def test_use_tool_false_stops(flag: object) -> None:
    plan = normalize_plan({"use_tool": flag, "next_action": "execute", "execution_commands": [CMD]})
    assert plan.next_action == "response"
    assert plan.stop_reason == "use_tool_false"
    assert plan.items == []


def test_use_tool_true_keeps_going() -> None:
    plan = normalize_plan({"use_tool": "yes", "execution_commands": [CMD]})
    assert plan.next_action == "execute"


def test_execute_without_valid_command_is_response() -> None:
    plan = normalize_plan({"next_action": "execute", "execution_commands": [{"purpose": "x"}]})
    assert plan.next_action == "response"
    assert plan.stop_reason == "no_commands"
    assert any("no tool_name" in n for n in plan.notes)


def test_command_without_tool_name_is_dropped_others_kept() -> None:
    plan = normalize_plan(
        {"execution_commands": [{"purpose": "a"}, CMD, "junk", {"tool_name": ""}, 7]}
    )
    assert [c.purpose for c in plan.commands] == ["look"]
    assert len(plan.notes) == 4


def test_missing_purpose_gets_a_default_and_next_mirrors_todo() -> None:
    plan = normalize_plan({"execution_commands": [{"tool_name": "t", "todo_suggestion": "later"}]})
    (cmd,) = plan.commands
    assert cmd.purpose == "Use the tool"
    assert cmd.next == cmd.todo_suggestion == "later"


def test_kwargs_as_json_text_are_parsed() -> None:
    plan = normalize_plan({"execution_commands": [{"tool_name": "t", "tool_kwargs": '{"a": 1}'}]})
    assert plan.commands[0].tool_kwargs == {"a": 1}


@pytest.mark.parametrize("kwargs", [[1, 2], "not json", 42])
def test_kwargs_that_are_not_an_object_fail_without_running(kwargs: object) -> None:
    plan = normalize_plan({"execution_commands": [CMD, {"tool_name": "t", "tool_kwargs": kwargs}]})
    assert plan.next_action == "execute"
    first, second = plan.items
    assert isinstance(first, ToolCommand)
    assert isinstance(second, ToolExecutionRecord)
    assert not second.success
    assert second.error is not None and "tool_kwargs must be an object" in second.error


def test_huge_kwargs_fail_without_running() -> None:
    plan = normalize_plan(
        {"execution_commands": [{"tool_name": "t", "tool_kwargs": {"a": "x" * 5000}}]},
        max_kwargs_bytes=1000,
    )
    (record,) = plan.items
    assert isinstance(record, ToolExecutionRecord)
    assert record.error is not None and "more than the limit of 1000" in record.error


def test_commands_past_the_limit_get_failed_records() -> None:
    plan = normalize_plan({"execution_commands": [CMD] * 10}, max_commands=3)
    assert len(plan.items) == 10
    assert len(plan.commands) == 3
    rest = plan.items[3:]
    assert all(isinstance(r, ToolExecutionRecord) and not r.success for r in rest)


@pytest.mark.parametrize("raw", [None, 3, "plain text", ["list"], b"\xff", object()])
def test_not_an_object_ends_gracefully(raw: object) -> None:
    plan = normalize_plan(raw)
    assert plan.next_action == "response"
    assert plan.items == []
    assert plan.notes


def test_json_text_is_accepted() -> None:
    plan = normalize_plan('{"next_action": "execute", "execution_commands": [{"tool_name": "t"}]}')
    assert plan.next_action == "execute"


def test_unknown_next_action_stops_with_a_note() -> None:
    plan = normalize_plan({"next_action": "dance", "execution_commands": [CMD]})
    assert plan.next_action == "response"
    assert any("dance" in n for n in plan.notes)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(
            ["next_action", "execution_commands", "tool_commands", "tool_command", "use_tool",
             "tool_name", "purpose", "tool_kwargs", "todo_suggestion", "x"]
        ),
        children,
        max_size=5,
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_output_normalizes_without_raising(raw: Any) -> None:
    plan = normalize_plan(raw)
    assert plan.next_action in ("execute", "response")
    if plan.next_action == "execute":
        assert plan.items
        for item in plan.items:
            assert item.tool_name.strip() == item.tool_name != ""
    else:
        assert plan.items == []
        assert plan.stop_reason is not None
