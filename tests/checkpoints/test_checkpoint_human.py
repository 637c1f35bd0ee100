"""What a paused run asks, and which decisions fit the question."""

from __future__ import annotations

from typing import Any

import pytest

from toolloop.checkpoints import (
    Approve,
    Continue,
    DecisionError,
    Edit,
    HumanRequest,
    Reject,
    Replan,
    RequestedCall,
    Stop,
    check_decision,
    parse_answer,
    parse_decision,
)
from toolloop.tools import ToolRegistry


def send_mail(to: str, body: str) -> str:
    """Send a mail.

    Args:
        to: the address.
        body: the text.
    """
    return "sent"


APPROVAL = HumanRequest(
    kind="approve_tool_calls",
    reason="1 tool call(s) need your approval before they run (send_mail)",
    tool_calls=[
        RequestedCall(
            call_id="call-1",
            tool_name="send_mail",
            arguments={"to": "ada@example.org", "body": "hi"},
            purpose="tell Ada",
            why="tool 'send_mail' needs approval",
        )
    ],
    allowed=["approve", "edit", "reject", "replan", "stop"],
)
REVIEW = HumanRequest(
    kind="review", reason="2 calls failed", allowed=["continue", "replan", "stop"]
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Approve(), Approve()),
        ("approve", Approve()),
        ({"kind": "reject", "message": "no"}, Reject(message="no")),
        (
            {"kind": "edit", "arguments": {"call-1": {"to": "x"}}},
            Edit(arguments={"call-1": {"to": "x"}}),
        ),
        ("replan", Replan()),
        ({"kind": "continue", "message": "go"}, Continue(message="go")),
        ("stop", Stop()),
    ],
)
def test_parse_decision_takes_objects_data_and_bare_kinds(value: Any, expected: Any) -> None:
    assert parse_decision(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "a decision is Approve"),
        ("yes please", "a decision's kind is one of"),
        ({"kind": "edit"}, "the 'edit' decision is malformed: arguments: Field required"),
        ({"kind": "approve", "colour": "red"}, "the 'approve' decision is malformed: colour"),
        ({"kind": "edit", "arguments": {"call-1": 3}}, "malformed"),
    ],
)
def test_parse_decision_refuses_what_is_no_decision(value: Any, message: str) -> None:
    with pytest.raises(DecisionError, match=message):
        parse_decision(value)


def test_a_decision_must_be_one_the_question_allows() -> None:
    assert check_decision(APPROVAL, "approve") == Approve()
    assert check_decision(REVIEW, Continue(message="on")) == Continue(message="on")
    with pytest.raises(DecisionError, match=r"a 'continue' decision does not fit it: answer with"):
        check_decision(APPROVAL, Continue())
    with pytest.raises(DecisionError, match=r"'approve' decision does not fit it.*continue"):
        check_decision(REVIEW, Approve())
    with pytest.raises(DecisionError, match="'edit' decision does not fit"):
        check_decision(REVIEW, Edit(arguments={"call-1": {}}))


def test_edits_name_calls_asked_about_and_fit_the_tool() -> None:
    registry = ToolRegistry([send_mail])

    def validate(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        registry.get(name).validate(arguments)
        return arguments

    good = Edit(arguments={"call-1": {"to": "bob@example.org", "body": "hi"}})
    assert check_decision(APPROVAL, good, validate_arguments=validate) == good
    with pytest.raises(DecisionError, match=r"among \['call-1'\]; got \['call-9'\]"):
        check_decision(APPROVAL, Edit(arguments={"call-9": {}}), validate_arguments=validate)
    with pytest.raises(DecisionError, match="got none"):
        check_decision(APPROVAL, Edit(arguments={}))
    with pytest.raises(DecisionError, match="edited arguments of call 'call-1' do not fit tool"):
        check_decision(APPROVAL, Edit(arguments={"call-1": {"to": 3}}), validate_arguments=validate)


def test_a_request_reads_as_text_and_round_trips_as_json() -> None:
    text = APPROVAL.describe()
    assert "[call-1] send_mail(" in text
    assert "needs approval" in text
    assert text.endswith("answer with: approve, edit, reject, replan, stop")
    assert HumanRequest.model_validate(APPROVAL.model_dump(mode="json")) == APPROVAL


TWO = HumanRequest(
    kind="approve_tool_calls",
    reason="2 tool call(s) need your approval",
    tool_calls=[
        RequestedCall(call_id="a", tool_name="send_mail", arguments={"to": "x", "body": "y"}),
        RequestedCall(
            call_id="b", tool_name="send_mail", arguments={"to": "z"}, allowed=["approve", "reject"]
        ),
    ],
    allowed=["approve", "edit", "reject", "replan", "stop"],
)


def test_one_decision_per_call() -> None:
    registry = ToolRegistry([send_mail])

    def validate(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return registry.get(name).validate(arguments)

    answer = {"a": Edit(arguments={"a": {"to": "q", "body": "r"}}), "b": "reject"}
    checked = check_decision(TWO, answer, validate_arguments=validate)
    assert checked == {"a": Edit(arguments={"a": {"to": "q", "body": "r"}}), "b": Reject()}
    assert parse_answer({"a": "approve", "b": {"kind": "reject"}}) == {
        "a": Approve(),
        "b": Reject(),
    }
    with pytest.raises(DecisionError, match=r"missing: \['b'\]"):
        check_decision(TWO, {"a": "approve"})
    with pytest.raises(DecisionError, match="'edit' decision does not fit call 'b'"):
        check_decision(TWO, {"a": "approve", "b": Edit(arguments={"b": {"to": "w"}})})
    with pytest.raises(DecisionError, match="'stop' decision does not fit call 'a'"):
        check_decision(TWO, {"a": "stop", "b": "approve"})
    with pytest.raises(DecisionError, match="do not fit tool 'send_mail'"):
        check_decision(
            TWO,
            {"a": Edit(arguments={"a": {"to": 3}}), "b": "approve"},
            validate_arguments=validate,
        )
    with pytest.raises(DecisionError, match="the decision for call 'a'"):
        check_decision(TWO, {"a": {"kind": "maybe"}, "b": "approve"})


def test_a_call_that_allows_fewer_decisions_is_checked_under_one_decision_too() -> None:
    assert check_decision(TWO, "approve") == Approve()
    assert check_decision(TWO, Reject(message="no")) == Reject(message="no")
    with pytest.raises(DecisionError, match="'edit' decision does not fit call 'b'"):
        check_decision(TWO, Edit(arguments={"b": {"to": "w"}}))
    # an edit of the other call leaves 'b' as it is: approved, which it allows
    edited = check_decision(TWO, Edit(arguments={"a": {"to": "q"}}))
    assert isinstance(edited, Edit)
