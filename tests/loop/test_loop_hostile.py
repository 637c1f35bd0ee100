"""Nothing a planner or a tool hands the loop crashes it: values nested ten thousand levels
deep, values that contain themselves, bytes that are not UTF-8, datetimes, NaN, mappings
whose access raises. The run goes on, keeps every record, and everything it makes of them
(prompts, ``extra``, the final answer's messages) stays JSON."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolloop import async_plan_and_execute
from toolloop.loop import final_answer_messages, normalize_plan
from toolloop.planners import PlannerContext, planner_messages, planner_schema
from toolloop.runner import (
    MAX_JSON_DEPTH,
    ToolCommand,
    ToolExecutionRecord,
    json_safe,
    nesting_depth,
)
from toolloop.testing import ScriptedPlanner

pytestmark = pytest.mark.anyio


def deep(levels: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"name": "loop"}
    value["self"] = value
    return value


class Exploding(Mapping[str, Any]):
    """A mapping whose every access raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("levels", [10, 1_000, 100_000])
def test_deep_nesting_anywhere_in_a_plan_never_raises(levels: int) -> None:
    command = {"tool_name": "t", "tool_kwargs": {"x": deep(levels)}}
    for raw in (
        {"next_action": "execute", "execution_commands": [command]},
        {"next_action": "execute", "execution_commands": [command], "extra": deep(levels)},
        json.dumps({"tool_name": "t"}) if levels > 5_000 else deep(levels),
        "[" * levels + "]" * levels,  # JSON text past the parser's own limit
        deep(levels),
    ):
        plan = normalize_plan(raw)
        assert plan.next_action in ("execute", "response")
    plan = normalize_plan({"next_action": "execute", "execution_commands": [command]})
    [item] = plan.items
    if levels + 1 > MAX_JSON_DEPTH:  # refused, with what was wrong, before anything runs
        assert isinstance(item, ToolExecutionRecord) and item.error is not None
        assert f"more than {MAX_JSON_DEPTH} levels" in item.error
    else:
        assert isinstance(item, ToolCommand) and item.tool_name == "t"


def test_a_cycle_in_the_arguments_is_a_failed_record() -> None:
    plan = normalize_plan({"execution_commands": [{"tool_name": "t", "tool_kwargs": cyclic()}]})
    [item] = plan.items
    assert isinstance(item, ToolExecutionRecord) and item.error is not None
    assert "a cycle" in item.error


@pytest.mark.parametrize(
    ("raw", "note"),
    [
        (None, "got NoneType"),
        ([{"tool_name": "t"}], "got list"),
        ((1, 2), "got tuple"),
        ("not JSON at all", "got str"),
        (Exploding(), "raised RuntimeError: boom"),
        ({"execution_commands": Exploding()}, "raised RuntimeError: boom"),
    ],
)
def test_an_output_that_is_no_plan_stops_with_invalid_plan(raw: Any, note: str) -> None:
    plan = normalize_plan(raw)
    assert plan.next_action == "response"
    assert plan.stop_reason == "invalid_plan"
    assert any(note in n for n in plan.notes), plan.notes


def test_json_safe_says_what_json_cannot() -> None:
    value = {
        "bytes": b"\xff\xfeok",
        "when": dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.timezone.utc),
        "nan": math.nan,
        "inf": -math.inf,
        "set": {1},
        "cycle": cyclic(),
        "deep": deep(MAX_JSON_DEPTH * 3),
        (1, 2): "tuple key",
        "obj": object(),
    }
    safe = json_safe(value)
    text = json.dumps(safe, allow_nan=False)  # never raises
    assert safe["bytes"] == "\\xff\\xfeok"
    assert safe["when"] == "2026-11-24T12:00:00+00:00"
    assert (safe["nan"], safe["inf"]) == ("nan", "-inf")
    assert safe["set"] == [1]
    assert safe["cycle"] == {"name": "loop", "self": "<cycle>"}
    assert "nested too deep: cut" in text
    assert safe["(1, 2)"] == "tuple key"
    assert safe["obj"].startswith("<object object")
    assert nesting_depth(safe) is not None


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.datetimes(),
    st.dates(),
)
_python_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), children, max_size=4),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_python_values, min_size=1, max_size=4), depth=st.integers(0, 400))
def test_any_python_values_as_tool_results_keep_the_run_going(
    values: list[Any], depth: int
) -> None:
    import anyio

    results = [*values, deep(depth), cyclic()]

    def give(i: int) -> Any:
        """Give a value back.

        Args:
            i: which.
        """
        return results[i]

    commands = [
        {"purpose": f"v{i}", "tool_name": "give", "tool_kwargs": {"i": i}}
        for i in range(len(results))
    ]
    planner = ScriptedPlanner(
        [{"next_action": "execute", "execution_commands": commands}, {"next_action": "response"}]
    )

    async def main() -> None:
        result = await async_plan_and_execute("?", tools=[give], planner=planner)
        assert result.stop_reason == "answered"
        assert [r.success for r in result.done_plans] == [True] * len(results)
        json.dumps(result.action_results, allow_nan=False)
        json.dumps(result.extra, allow_nan=False)
        assert result.render_prompt().startswith("?")
        final_answer_messages(result)
        # the planner saw them in its second round: its prompt is JSON
        context = planner.calls[1]
        for message in planner_messages(context, planner_schema(context.available_tools)):
            assert isinstance(message["content"], str)

    anyio.run(main)


def test_the_planner_prompt_survives_hostile_records() -> None:
    command = ToolCommand(tool_name="t")
    records = [
        ToolExecutionRecord.succeeded(command, value)
        for value in (b"\xff", cyclic(), deep(2_000), math.nan, dt.date(2026, 1, 1))
    ]
    context = PlannerContext(
        user_input="?",
        available_tools=[],
        done_plans=records,
        last_round_result=records,
        round_index=1,
        max_rounds=5,
    )
    messages = planner_messages(context, planner_schema(context.available_tools))
    assert "<cycle>" in messages[-1]["content"]


async def test_a_trace_of_hostile_results_is_written_and_read_back(tmp_path: Any) -> None:
    from toolloop.tracing import TraceRecorder, read_trace

    def give(kind: str) -> Any:
        """Give something awkward back.

        Args:
            kind: which.
        """
        return {"bytes": b"\xff\x00", "cycle": cyclic(), "when": dt.date(2026, 1, 1)}[kind]

    commands = [
        {"purpose": kind, "tool_name": "give", "tool_kwargs": {"kind": kind}}
        for kind in ("bytes", "cycle", "when")
    ]
    recorder = TraceRecorder()
    await async_plan_and_execute(
        "?",
        tools=[give],
        planner=ScriptedPlanner([{"next_action": "execute", "execution_commands": commands}]),
        on_event=recorder,
    )
    path = tmp_path / "run.jsonl"
    recorder.write(path)
    trace = read_trace(path)
    assert len(trace.events) == len(recorder.events)
    text = path.read_text()
    assert "<cycle>" in text and "2026-01-01" in text


async def test_an_async_on_event_is_refused_before_anything_runs() -> None:
    async def on_event(event: Any) -> None:
        pass

    planner = ScriptedPlanner([{"next_action": "response"}])
    with pytest.raises(TypeError, match="is async"):
        await async_plan_and_execute("?", planner=planner, on_event=on_event)  # type: ignore[arg-type]
    assert planner.calls == []


async def test_a_20_mb_result_is_cut_where_it_leaves_the_run(tmp_path: Any) -> None:
    from toolloop.cli._plain import preview
    from toolloop.tracing import TRACE_VALUE_CHARS, TraceRecorder, write_timeline

    huge = "x" * (20 * 1024 * 1024)

    def dump() -> str:
        """Return a lot."""
        return huge

    recorder = TraceRecorder()
    command = {"purpose": "dump", "tool_name": "dump", "tool_kwargs": {}}
    result = await async_plan_and_execute(
        "?",
        tools=[dump],
        planner=ScriptedPlanner([{"next_action": "execute", "execution_commands": [command]}]),
        on_event=recorder,
    )
    assert result.done_plans[0].result is huge  # the record keeps what the tool returned
    recorder.write(tmp_path / "run.jsonl")
    size = (tmp_path / "run.jsonl").stat().st_size
    assert size < 4 * TRACE_VALUE_CHARS + 100_000  # cut in each event, not stored whole
    assert "characters in all" in (tmp_path / "run.jsonl").read_text()
    write_timeline(tmp_path / "run.svg", recorder.trace)
    assert (tmp_path / "run.svg").stat().st_size < 1_000_000
    [_, user] = final_answer_messages(result)
    assert 20_000 < len(user["content"]) < 30_000  # the final answer's prompt has a cap
    assert "(cut: 20,971,520 characters in all)" in user["content"]
    assert len(final_answer_messages(result, max_result_chars=100)[1]["content"]) < 1_000
    assert len(preview(huge)) <= 100


async def test_the_stream_can_give_the_loops_own_events_only() -> None:
    from toolloop import stream_plan_and_execute

    def echo(text: str) -> str:
        """Say it back.

        Args:
            text: what to say.
        """
        return text

    command = {"tool_name": "echo", "tool_kwargs": {"text": "hi"}}
    for only in (True, False):
        planner = ScriptedPlanner([{"next_action": "execute", "execution_commands": [command]}])
        async with stream_plan_and_execute(
            "?", tools=[echo], planner=planner, engine_events=not only
        ) as run:
            kinds = [event.kind async for event in run]
        loop_kinds = {"round_started", "plan_decided", "tool_call_started",
                      "tool_call_finished", "round_finished", "run_finished"}  # fmt: skip
        assert loop_kinds <= set(kinds)
        assert (set(kinds) == loop_kinds) is only  # the engine's step events only when asked
        assert run.result.records[0].result == "hi"


def test_the_sync_twin_is_typed_and_a_typo_names_it() -> None:
    from toolloop import plan_and_execute

    with pytest.raises(TypeError, match="plan_and_execute\\(\\) got an unexpected keyword"):
        plan_and_execute("?", planner=ScriptedPlanner([]), tool=[])  # type: ignore[call-arg]
