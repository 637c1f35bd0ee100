"""What a stream tells before it ends: a tool call complete (``ToolCallReader.complete``), a
decision settled (``DecisionReader``); and arguments read the same way whether the call was
taken while it streamed or after (``parse_tool_arguments``)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolloop.errors import ModelOutputError
from toolloop.models import DecisionReader, ToolCallDelta, ToolCallReader, parse_tool_arguments


def fed(reader: ToolCallReader, *pieces: ToolCallDelta) -> int:
    reader.feed(pieces)
    return reader.complete()


def test_a_call_is_complete_once_its_arguments_close() -> None:
    reader = ToolCallReader()
    assert fed(reader, ToolCallDelta(0, "c1", "add", '{"a": 1, ')) == 0
    assert fed(reader, ToolCallDelta(0, arguments='"b": {"c": "}"}')) == 0  # "}" in a string
    assert fed(reader, ToolCallDelta(0, arguments="}")) == 1
    assert fed(reader, ToolCallDelta(0, arguments="  ")) == 1  # never counted again
    assert fed(reader, ToolCallDelta(1, "c2", "add", "[1, 2]")) == 2  # a value, not an object
    assert fed(reader, ToolCallDelta(2, "c3", "add", "")) == 2
    assert reader.complete(ended=True) == 3


def test_a_call_is_complete_when_the_next_starts_or_the_reply_ends() -> None:
    reader = ToolCallReader()
    assert fed(reader, ToolCallDelta(0, "c1", "add", '{"a": oops')) == 0  # not JSON
    assert fed(reader, ToolCallDelta(0, arguments="}")) == 0  # still not: it stays open
    assert fed(reader, ToolCallDelta(1, "c2", "add", '{"a": ')) == 1  # the next one started
    assert reader.complete() == 1
    assert reader.complete(ended=True) == 2


def test_a_call_without_a_name_is_not_complete_before_it_has_one() -> None:
    reader = ToolCallReader()
    assert fed(reader, ToolCallDelta(0, "c1", None, "{}")) == 0
    assert fed(reader, ToolCallDelta(0, name="add")) == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  {"a": 1}  ', {"a": 1}),
        ('{"a": 1} )', {"a": 1}),  # what follows the value is ignored, as when streamed
        ("", {}),
        ("null", {}),
        ("[1, 2]", [1, 2]),
        ('{"a": ', '{"a": '),  # not JSON: the text, for the failed record
        ('x{"a": 1}', 'x{"a": 1}'),
    ],
)
def test_arguments_are_the_json_value_the_text_starts_with(text: str, value: Any) -> None:
    assert parse_tool_arguments(text) == value


def test_arguments_complete_in_the_stream_are_the_ones_parsed_after() -> None:
    reader = ToolCallReader()
    text = '{"city": "Paris"} , {"x"'
    for at in range(len(text)):
        reader.feed((ToolCallDelta(0, "c1" if at == 0 else None, "w" if at == 0 else None),))
        reader.feed((ToolCallDelta(0, arguments=text[at]),))
        if reader.complete():
            taken = parse_tool_arguments("".join(reader.calls[0].arguments))
            break
    assert taken == {"city": "Paris"} == parse_tool_arguments(text)


PLAN = {
    "next_action": "execute",
    "execution_commands": [{"tool_name": "a", "tool_kwargs": {"x": "}"}}, {"tool_name": "b"}],
    "note": "after",
}


@given(st.lists(st.integers(min_value=1, max_value=len(json.dumps(PLAN)) - 1), max_size=12))
def test_a_decision_reads_the_same_however_it_is_cut(cuts: list[int]) -> None:
    text = json.dumps(PLAN)
    bounds = [0, *sorted(set(cuts)), len(text)]
    reader = DecisionReader(
        "next_action", ["execute", "response"], items="execution_commands", items_on="execute"
    )
    items: list[tuple[int, Any]] = []
    for start, end in itertools.pairwise(bounds):
        items.extend(reader.feed(text[start:end]))
    assert items == list(enumerate(PLAN["execution_commands"]))
    assert reader.choice == "execute" and reader.done and reader.value == PLAN
    assert not reader.settled  # no choice was said to settle it early


def test_a_decision_is_settled_once_its_choice_and_the_fields_it_needs_are_whole() -> None:
    reader = DecisionReader(
        "verdict", ["continue", "finish"], needs={"continue": ("note",), "finish": ("answer",)}
    )
    reader.feed('{"verdict": "c')
    assert reader.choice == "continue" and not reader.settled
    reader.feed('ontinue", "note": "Rome ')
    assert not reader.settled
    reader.feed('next", "answer": "long')
    assert reader.settled
    assert reader.fields == {"verdict": "continue", "note": "Rome next"}


def test_a_choice_that_fits_none_is_never_settled() -> None:
    reader = DecisionReader("verdict", ["continue", "finish"], needs={"continue": ()})
    reader.feed('{"verdict": "maybe", "note": "x"}')
    assert reader.choice is None and not reader.settled and reader.done


def test_items_before_the_choice_are_not_handed_over() -> None:
    reader = DecisionReader("action", ["call", "stop"], items="calls", items_on="call")
    assert reader.feed('{"calls": [1, 2], "action": "call", "more": [3]}') == []
    assert reader.value["calls"] == [1, 2]


def test_a_decision_that_is_not_json_fails() -> None:
    reader = DecisionReader("action", ["call", "stop"])
    with pytest.raises(ModelOutputError):
        reader.feed('{"action": oops')
