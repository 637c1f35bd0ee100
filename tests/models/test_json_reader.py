from __future__ import annotations

import doctest
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolloop.models
import toolloop.models._json_reader
from toolloop._errors import ModelOutputError
from toolloop.models import (
    Done,
    JSONEvent,
    JSONPath,
    JSONStreamReader,
    StringDelta,
    ValueDone,
    format_json_path,
    remaining_choices,
    settle_choice,
)

PLANNER_BODY: dict[str, Any] = {
    "next_action": "execute",
    "execution_commands": [
        {
            "purpose": "find the docs",
            "tool_name": "search",
            "tool_kwargs": {"query": "anyio \u00e9 \U0001f600", "limit": 5},
            "todo_suggestion": "read them",
        },
        {
            "purpose": "read a file",
            "tool_name": "read_file",
            "tool_kwargs": {"path": 'a\\b "c"\n', "lines": [1, 2.5, -3e2]},
            "todo_suggestion": None,
        },
    ],
}


def read(chunks: Iterable[str], **options: Any) -> tuple[list[JSONEvent], JSONStreamReader]:
    reader = JSONStreamReader(**options)
    events: list[JSONEvent] = []
    for chunk in chunks:
        events += reader.feed(chunk)
    events += reader.close()
    return events, reader


def cut(text: str, points: Iterable[int]) -> list[str]:
    bounds = [0, *sorted(points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def summary(events: Sequence[JSONEvent]) -> tuple[list[JSONEvent], dict[JSONPath, str]]:
    """The events other than deltas, and the deltas joined per path."""
    others: list[JSONEvent] = []
    deltas: dict[JSONPath, str] = {}
    for event in events:
        if isinstance(event, StringDelta):
            assert event.text, "a delta is never empty"
            deltas[event.path] = deltas.get(event.path, "") + event.text
        else:
            others.append(event)
    return others, deltas


def error_of(chunks: Iterable[str], **options: Any) -> str:
    with pytest.raises(ModelOutputError) as info:
        read(chunks, **options)
    return str(info.value)


# -- events -----------------------------------------------------------------------------


def test_string_delta_reports_the_prefix_so_far() -> None:
    reader = JSONStreamReader()
    assert reader.feed('{"next_action": "r') == [StringDelta(("next_action",), "r")]
    assert reader.feed("es") == [StringDelta(("next_action",), "es")]
    assert reader.feed('ponse", ') == [
        StringDelta(("next_action",), "ponse"),
        ValueDone(("next_action",), "response"),
    ]


def test_keys_are_not_reported() -> None:
    events, _ = read(['{"key": {"inner": 1}}'])
    assert events == [
        ValueDone(("key", "inner"), 1),
        ValueDone(("key",), {"inner": 1}),
        ValueDone((), {"key": {"inner": 1}}),
        Done({"key": {"inner": 1}}),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-12", -12),
        ("3.25", 3.25),
        ("-0.5e-3", -0.5e-3),
        ("1E+2", 100.0),
        ("true", True),
        ("false", False),
        ("null", None),
        ('""', ""),
        ('"a\\u00e9\\n"', "a\u00e9\n"),
        ("[]", []),
        ("{}", {}),
        ('[1, "x", {"y": [null]}]', [1, "x", {"y": [None]}]),
    ],
)
def test_value_done_for_each_kind_of_value(text: str, value: Any) -> None:
    events, _ = read([f'{{"v": {text}}}'])
    event = events[-3]
    assert event == ValueDone(("v",), value)
    assert isinstance(event, ValueDone)
    assert type(event.value) is type(json.loads(text))


def test_object_in_array_is_dispatched_when_its_brace_arrives() -> None:
    text = json.dumps(PLANNER_BODY)
    first_end = text.index(', {"purpose": "read a file"')  # after execution_commands[0]
    reader = JSONStreamReader()
    for offset, char in enumerate(text, start=1):
        done = [e for e in reader.feed(char) if isinstance(e, ValueDone) and len(e.path) == 2]
        if offset < first_end:
            assert not done
        elif offset == first_end:
            assert done == [
                ValueDone(("execution_commands", 0), PLANNER_BODY["execution_commands"][0])
            ]
            break


def test_done_and_value() -> None:
    reader = JSONStreamReader()
    assert not reader.done
    with pytest.raises(RuntimeError, match="not complete"):
        _ = reader.value
    text = json.dumps(PLANNER_BODY, indent=2)
    events = reader.feed(text)
    assert reader.done
    assert reader.value == PLANNER_BODY
    assert events[-1] == Done(PLANNER_BODY)
    assert events[-2] == ValueDone((), PLANNER_BODY)
    assert reader.close() == []
    assert reader.offset == len(text)


def test_event_kinds() -> None:
    assert StringDelta((), "a").kind == "string_delta"
    assert ValueDone((), 1).kind == "value_done"
    assert Done(1).kind == "done"
    events: list[JSONEvent] = [StringDelta((), "a"), ValueDone((), "a")]
    assert events[0] != events[1]


def test_string_deltas_can_be_limited() -> None:
    text = json.dumps(PLANNER_BODY)
    whole, _ = read([text])
    for deltas in [False, lambda path: path == ("next_action",)]:
        events, _ = read(list(text), string_deltas=deltas)
        others, joined = summary(events)
        assert others == summary(whole)[0]
        assert joined == ({("next_action",): "execute"} if deltas else {})


def test_empty_pieces_are_fine() -> None:
    events, reader = read(["", '{"a": "', "", "x", "", '"}', ""])
    assert reader.value == {"a": "x"}
    assert summary(events)[1] == {("a",): "x"}


# -- noise around the value -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"a": 1}\n```',
        'Here is the plan: {"a": 1} Hope it helps!',
        '  \n{"a": 1}  \n',
        '{"a": 1}{"b": 2}',
    ],
)
def test_noise_before_and_after_is_ignored(text: str) -> None:
    for chunks in ([text], list(text)):
        _, reader = read(chunks)
        assert reader.value == {"a": 1}


def test_without_noise_skipping_any_value_may_be_at_the_top() -> None:
    for text, value in [(" 12 ", 12), ("-1.5", -1.5), ('"s"', "s"), ("null", None), ("[1]", [1])]:
        for chunks in ([text], list(text)):
            events, reader = read(chunks, skip_leading_noise=False)
            assert reader.value == value
            assert events[-1] == Done(value)
    # A top-level number is only complete at close().
    reader = JSONStreamReader(skip_leading_noise=False)
    assert reader.feed("12") == []
    assert reader.close() == [ValueDone((), 12), Done(12)]


def test_without_noise_skipping_text_first_is_an_error() -> None:
    message = error_of(['Sure! {"a": 1}'], skip_leading_noise=False)
    assert message == (
        "malformed JSON from the model: expected a JSON value at offset 0 (at the top level),"
        " got 'S'"
    )


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"a": 1 x}',
            "expected ',' or '}' after an object member at offset 8"
            " (inside the top-level object), got 'x'",
        ),
        ("[1 2]", "expected ',' or ']' after an array item at offset 3"),
        ('{"a": tru}', "expected 'true' at offset 9 (inside the top-level object), got '}'"),
        ("[01]", "expected a number at offset 1 (inside the top-level array), got '01'"),
        ("[1.]", "expected a number at offset 1"),
        ("[-]", "expected a number at offset 1"),
        ("[1e5.3]", "got '1e5.3'"),
        ("[+1]", "expected a JSON value at offset 1"),
        ("[1,]", "expected a JSON value at offset 3"),
        ('{"a": 1,}', "expected '\"' (a key) after ',' at offset 8"),
        ("{,}", "expected '\"' (a key) or '}' at offset 1"),
        ('{"a" 1}', "expected ':' after a key at offset 5"),
        ('{"a": }', "expected a JSON value at offset 6"),
        ('["\\x"]', "after '\\' at offset 2 (inside the top-level array), got 'x'"),
        ('["\\u12g4"]', "expected 4 hex digits after '\\u' at offset 2"),
        ('["\\ud800\\u12x4"]', "expected 4 hex digits after '\\u' at offset 2"),
        ("[NaN]", "expected a JSON value at offset 1"),
        (
            '{"a": [{"b": 1] }',
            "expected ',' or '}' after an object member at offset 14 (inside a[0])",
        ),
    ],
)
def test_malformed_json(text: str, message: str) -> None:
    whole = error_of([text])
    assert message in whole
    assert whole.startswith("malformed JSON from the model: expected ")
    # The message does not depend on how the text was cut.
    assert error_of(list(text)) == whole


def test_a_huge_integer_is_a_model_output_error() -> None:
    with pytest.raises(ModelOutputError, match="cannot be read") as info:
        read(["[" + "9" * 5000 + "]"])
    assert isinstance(info.value.__cause__, ValueError)


def test_an_error_poisons_the_reader() -> None:
    reader = JSONStreamReader()
    with pytest.raises(ModelOutputError) as first:
        reader.feed('{"a" 1}')
    calls: list[Callable[[], object]] = [
        lambda: reader.feed('"b": 2}'),
        reader.close,
        lambda: reader.feed(""),
    ]
    for call in calls:
        with pytest.raises(ModelOutputError) as again:
            call()
        assert str(again.value) == str(first.value)
        assert again.value.__cause__ is first.value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"execution_commands": [{"a": 1}, {"b": ',
            "the JSON from the model ended early at offset 40: 3 containers still open"
            " (inside execution_commands[1])",
        ),
        ('{"a": [1, "xy', "2 containers still open (inside the string at a[1])"),
        ('{"a": tr', "1 container still open (in 'true' at a)"),
        ('{"a": "\\u00', "inside the string at a"),
        ('{"a"', "1 container still open (inside the top-level object)"),
        ("Sorry, I cannot help.", "no JSON object or array in the model output (21 characters"),
        ("", "no JSON object or array in the model output (0 characters"),
    ],
)
def test_truncated_json(text: str, message: str) -> None:
    assert message in error_of([text])
    assert error_of(list(text)) == error_of([text])


def test_truncated_top_level_scalar() -> None:
    message = error_of(['"abc'], skip_leading_noise=False)
    assert "expected a complete value (inside the string at $)" in message
    assert "expected a complete value (at the top level)" in error_of(
        ["  "], skip_leading_noise=False
    )


def test_feed_after_close_is_a_usage_error() -> None:
    reader = JSONStreamReader()
    reader.feed("[]")
    reader.close()
    with pytest.raises(RuntimeError, match="after close"):
        reader.feed(" ")


# -- escapes and numbers cut anywhere ---------------------------------------------------

TRICKY = (
    '["\\ud83d\\ude00\\u00e9\\n\\"\\\\\\/\\b\\f\\r\\t", "\\ud800\\\\", "\\ud800\\u0041",'
    ' "\\ud800\\udbff", "\\udc00", "\\ud800", -1.5e-3, 10, 0, true, false, null, {}, [],'
    ' "\u00e9\U0001f600\u2028"]'
)


def test_tricky_document_value() -> None:
    _, reader = read([TRICKY])
    assert reader.value == json.loads(TRICKY)


def test_tricky_document_cut_at_every_pair_of_points() -> None:
    whole = summary(read([TRICKY])[0])
    size = len(TRICKY)
    for a in range(size + 1):
        for b in range(a, size + 1, 3):
            assert summary(read(cut(TRICKY, [a, b]))[0]) == whole, (a, b)
    assert summary(read(list(TRICKY))[0]) == whole


@pytest.mark.timeout(5)  # a hang guard with 100x slack, well under the quadratic time
def test_many_escapes_in_a_cut_string_stay_linear() -> None:
    # Re-trying the C scanner at every escape of a string cut by the piece would be
    # quadratic: about 15 s here instead of 50 ms (speed itself: benchmarks/).
    count = 50_000
    reader = JSONStreamReader()
    reader.feed('["' + 'ab\\"' * count)
    reader.feed('"]')
    reader.close()
    assert reader.value == ['ab"' * count]


@pytest.mark.parametrize(
    "number",
    [
        "0",
        "-0",
        "7",
        "-12",
        "123456789012345678901234567890",
        "1.5",
        "-0.0",
        "1e3",
        "2E-7",
        "6.02e+23",
        "1e400",
    ],
)
def test_numbers_match_json_loads(number: str) -> None:
    text = f"[{number}, {number}]"
    for chunks in ([text], list(text)):
        _, reader = read(chunks)
        assert reader.value == json.loads(text)
        assert [type(v) for v in reader.value] == [type(v) for v in json.loads(text)]


# -- choices ----------------------------------------------------------------------------


def test_settle_choice() -> None:
    choices = ["execute", "response"]
    assert settle_choice("", choices) is None
    assert settle_choice("r", choices) == "response"
    assert settle_choice("exec", choices) == "execute"
    assert settle_choice("x", choices) is None
    assert remaining_choices("x", choices) == []
    assert remaining_choices("", choices) == choices
    assert settle_choice("a", ["ab", "ab"]) == "ab"
    # One choice is a prefix of another: only the end of the string decides.
    assert settle_choice("stop", ["stop", "stop_now"]) is None
    assert settle_choice("stop", ["stop", "stop_now"], complete=True) == "stop"
    assert settle_choice("sto", ["stop", "stop_now"], complete=True) is None


def test_format_json_path() -> None:
    assert format_json_path(()) == "$"
    assert format_json_path(("execution_commands", 1, "tool_kwargs")) == (
        "execution_commands[1].tool_kwargs"
    )
    assert format_json_path((0, "a b", "_c")) == "[0]['a b']._c"


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(toolloop.models._json_reader)
    assert tried > 0
    assert failures == 0


# -- properties -------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.sampled_from(["\\", '"', "\x00\x1f\x7f", "\u2028", "\U0001f600", "/", "\ud800"])
)
_values = st.recursive(
    _scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=20,
)
_documents = st.lists(_values, max_size=4) | st.dictionaries(
    st.text(max_size=6), _values, max_size=4
)
_dump_options = st.fixed_dictionaries(
    {"ensure_ascii": st.booleans(), "indent": st.sampled_from([None, 0, 2, "\t"])}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents, options=_dump_options, data=st.data())
def test_any_cutting_gives_the_same_events(
    document: Any, options: dict[str, Any], data: st.DataObject
) -> None:
    text = json.dumps(document, **options)
    whole, reader = read([text])
    assert reader.value == json.loads(text)
    points = data.draw(st.lists(st.integers(0, len(text)), max_size=12), label="cuts")
    events, reader = read(cut(text, points))
    assert reader.value == json.loads(text)
    others, deltas = summary(events)
    assert (others, deltas) == summary(whole)
    for event in others:
        if isinstance(event, ValueDone) and isinstance(event.value, str):
            assert deltas.get(event.path, "") == event.value


@settings(max_examples=100, deadline=None)
@given(value=_scalars | _values, data=st.data())
def test_any_value_at_the_top_without_noise_skipping(value: Any, data: st.DataObject) -> None:
    text = json.dumps(value)
    whole, _ = read([text], skip_leading_noise=False)
    points = data.draw(st.lists(st.integers(0, len(text)), max_size=6), label="cuts")
    events, reader = read(cut(text, points), skip_leading_noise=False)
    assert reader.value == json.loads(text)
    assert summary(events) == summary(whole)


@settings(max_examples=200, deadline=None)
@given(
    document=_documents,
    options=_dump_options,
    trailing=st.sampled_from(["", " \n", "\n```"]),
    data=st.data(),
)
def test_a_truncated_document_is_an_error(
    document: Any, options: dict[str, Any], trailing: str, data: st.DataObject
) -> None:
    core = json.dumps(document, **options)
    text = "```json\n" + core + trailing
    end = len(text) - len(trailing)
    at = data.draw(st.integers(0, len(text)), label="truncated at")
    reader = JSONStreamReader()
    reader.feed(text[:at])
    if at >= end:
        reader.close()
        assert reader.value == document
    else:
        with pytest.raises(ModelOutputError, match=r"ended early|no JSON object"):
            reader.close()


def _decision_offset(chunks: Iterable[str], choices: Sequence[str]) -> tuple[int, str | None]:
    """How many characters had been fed when the choice of next_action was settled."""
    reader = JSONStreamReader()
    fed = 0
    prefix = ""
    for chunk in chunks:
        fed += len(chunk)
        for event in reader.feed(chunk):
            if isinstance(event, StringDelta) and event.path == ("next_action",):
                prefix += event.text
                settled = settle_choice(prefix, choices)
                if settled is not None:
                    return fed, settled
    return fed, None


def test_short_circuit_char_by_char() -> None:
    text = '{"next_action": "response", "response": "Hello"}'
    fed, settled = _decision_offset(text, ["execute", "response"])
    assert settled == "response"
    assert fed == len('{"next_action": "r')


@settings(max_examples=100, deadline=None)
@given(
    answer=st.sampled_from(["execute", "response"]),
    space=st.sampled_from(["", " ", "\n  "]),
    data=st.data(),
)
def test_short_circuit_at_the_first_piece_with_the_deciding_letter(
    answer: str, space: str, data: st.DataObject
) -> None:
    text = f'{{{space}"next_action":{space}"{answer}",{space}"execution_commands": []}}'
    deciding = text.index(f'"{answer}"') + 2  # characters up to the first letter
    points = data.draw(st.lists(st.integers(0, len(text)), max_size=8), label="cuts")
    fed, settled = _decision_offset(cut(text, points), ["execute", "response"])
    assert settled == answer
    assert fed == min(p for p in [*points, len(text)] if p >= deciding)


@pytest.mark.parametrize("text", ['["a\nb"]', '["\\n\x01"]', '{"k": "tab\there"}'])
def test_raw_control_characters_in_strings_are_accepted(text: str) -> None:
    # grammar-constrained servers (llama.cpp) let a model write them; json.loads(strict=False)
    expected = json.loads(text, strict=False)
    whole = JSONStreamReader()
    whole.feed(text)
    assert whole.value == expected
    pieces = JSONStreamReader()
    for char in text:
        pieces.feed(char)
    assert pieces.value == expected
