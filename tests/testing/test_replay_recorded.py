"""Runs of a real model, recorded by the real-model suite (``tests/real_model``,
``test_a_real_run_replays_offline`` with ``TOOLLOOP_RECORD_FIXTURES=1``), replay here
offline, one per product: what a tiny real model writes (cut off, malformed, forced tool
calls) goes through today's code as it did when recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolloop.cli import rerun
from toolloop.pytest_plugin import ReplayFixture
from toolloop.testing import Recording, ReplayMismatch, replay
from toolloop.tools import Tool

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_model"
PRODUCTS = ("loop", "middleware", "status")


def add(a: int, b: int) -> int:
    """Add two whole numbers.

    Args:
        a: the first.
        b: the second.
    """
    raise AssertionError("a replayed call never runs")


def _trace(product: str) -> Path:
    path = FIXTURES / f"{product}.jsonl"
    assert path.is_file(), f"{path} is missing: record it with the real-model suite"
    return path


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_recorded_real_run_replays_offline(product: str) -> None:
    recording = Recording.from_trace(_trace(product))
    assert recording.meta["agent"] == product
    assert recording.model_calls
    assert all(call.request is not None for call in recording.model_calls)

    result = await replay(recording, tools=[add])  # the product made again from the trace

    if recording.end.status == "completed":
        assert result.stop_reason == recording.end.stop_reason
        assert len(result.records) == recording.end.records


@pytest.mark.parametrize("product", PRODUCTS)
async def test_the_fixture_replays_it(toolloop_replay: ReplayFixture, product: str) -> None:
    await toolloop_replay(f"../fixtures/real_model/{product}.jsonl", tools=[add])


async def test_a_tool_whose_schema_changed_is_a_divergence() -> None:
    recording = Recording.from_trace(_trace("loop"))
    ran = [call for call in recording.tool_calls if call.ran]
    assert ran, "the recorded loop run called the tool"
    small = {"type": "integer", "maximum": -1000}  # refuses whatever the model wrote
    schema = {"type": "object", "properties": {"a": small, "b": small}, "required": ["a", "b"]}
    strict = Tool(name="add", description="Add two numbers.", parameters=schema, function=add)

    with pytest.raises(ReplayMismatch) as caught:
        await replay(recording, tools=[strict])

    assert caught.value.turn == ran[0].turn
    assert "add [0.0] is refused now (arguments for tool 'add' do not fit its schema" in (
        caught.value.reason
    )
    lines = caught.value.diff.splitlines()
    assert lines[:2] == ["--- recorded", "+++ now"]
    assert f"-     {ran[0].said()}" in lines
    assert any(
        line.startswith("+ ") and "(not run: arguments for tool 'add'" in line for line in lines
    )


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_model_asked_otherwise_is_a_divergence(product: str) -> None:
    recording = Recording.from_trace(_trace(product))
    changed = rerun({**recording.meta, "max_tokens": 7})  # the code asks for 7 tokens now

    with pytest.raises(ReplayMismatch) as caught:
        await replay(recording, changed, tools=[add])

    assert caught.value.turn == 0
    assert caught.value.reason.startswith("model call #0 asks something else: the settings")
    assert "'max_tokens': 7" in caught.value.reason
