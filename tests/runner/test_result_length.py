"""``longer_than`` settles most results by their ``repr``: held equal to measuring the text
the model would be shown (``result_text``), for any JSON-like value and the odd ones."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.runner import longer_than, result_text

_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_JSON_LIKE, st.integers(min_value=0, max_value=400))
def test_longer_than_is_the_length_of_the_shown_text(value: Any, limit: int) -> None:
    assert longer_than(value, limit) == (len(result_text(value)) > limit)


def test_the_characters_json_escapes_most_are_measured_exactly() -> None:
    # '"' is one character of repr and two of JSON: the bound's factor of two
    quotes = {"q": '"' * 100}
    for limit in range(190, 215):
        assert longer_than(quotes, limit) == (len(result_text(quotes)) > limit)
    cycle: list[Any] = []
    cycle.append(cycle)
    for odd in (cycle, math.nan, 10**5000, b"\xff" * 3000, object()):
        for limit in (0, 10, 2000, 10**6):
            assert longer_than(odd, limit) == (len(result_text(odd)) > limit)


def test_a_flat_object_is_within_a_limit_only_when_its_json_surely_is() -> None:
    from toolloop.runner import flat_json_within

    small = {"city": "Lisbon", "nights": 3, "eur": 95.0, "ok": True, "note": None}
    assert flat_json_within(small, 2000)
    assert not flat_json_within(small, 10)  # (False says nothing: here it is too long)
    huge = {"n": 10**1000}  # a thousand digits: never counted as a short number
    assert not flat_json_within(huge, 500)
    assert not flat_json_within({"nested": {"a": 1}}, 2000)  # not flat: not judged
    assert not flat_json_within({1: "a"}, 2000)  # a key JSON would turn into a string


_FLAT = st.dictionaries(
    st.text(max_size=12) | st.integers(),
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**19), max_value=10**19)
    | st.floats()
    | st.text(max_size=40)
    | st.lists(st.integers(), max_size=2),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(_FLAT, st.integers(min_value=0, max_value=600))
def test_a_flat_object_said_within_a_limit_is_within_it_as_text_and_as_bytes(
    value: dict[Any, Any], limit: int
) -> None:
    from toolloop.runner import flat_json_within

    if flat_json_within(value, limit):
        text = result_text(value)
        assert len(text) <= limit
        assert len(text.encode("utf-8", "surrogatepass")) <= limit
        written = json.dumps(value, ensure_ascii=False)  # as arguments are measured
        assert len(written.encode("utf-8", "surrogatepass")) <= limit
