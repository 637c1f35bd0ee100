"""The streaming reader stays O(n) in the input's length and depth: a document nested past
its documented limit ends in a clear ModelOutputError, whatever the chunking, and costs
memory in proportion to its length only."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.errors import ModelOutputError
from toolloop.models import MAX_STREAM_DEPTH, JSONStreamReader


def nested(depth: int) -> str:
    return (
        "".join("[" if i % 2 else '{"k":' for i in range(depth))
        + "1"
        + "".join("]" if i % 2 else "}" for i in reversed(range(depth)))
    )


def read(text: str, cuts: list[int]) -> object:
    reader = JSONStreamReader()
    start = 0
    for cut in [*sorted(cuts), len(text)]:
        reader.feed(text[start:cut])
        start = max(start, cut)
    reader.close()
    return reader.value


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    depth=st.integers(1, MAX_STREAM_DEPTH + 40),
    cuts=st.lists(st.integers(0, 2 * (MAX_STREAM_DEPTH + 40) * 6), max_size=8),
)
def test_any_nesting_and_any_chunking_give_the_same_outcome(depth: int, cuts: list[int]) -> None:
    text = nested(depth)
    cuts = [c for c in cuts if c <= len(text)]
    if depth <= MAX_STREAM_DEPTH:
        assert read(text, cuts) == json.loads(text)
    else:
        with pytest.raises(ModelOutputError, match=f"at most {MAX_STREAM_DEPTH} levels deep"):
            read(text, cuts)


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deep_input_fails_at_the_limit_with_memory_in_proportion_to_its_length(
    depth: int,
) -> None:
    text = "[" * depth

    def stream() -> None:
        reader = JSONStreamReader()
        for i in range(0, len(text), 1000):  # as a model streams it
            reader.feed(text[i : i + 1000])
        reader.close()

    tracemalloc.start()
    try:
        with pytest.raises(ModelOutputError, match="malformed JSON from the model"):
            stream()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the paths of the open containers (up to the limit) and the text, never depth squared
    assert peak < 8 * 1024 * 1024, f"{peak / 2**20:.1f} MiB"
