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
