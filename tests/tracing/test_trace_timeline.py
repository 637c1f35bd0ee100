"""The timeline SVG: well-formed, self-contained, one bar per tool call, the short-circuit
marked."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from toolloop import ToolCommand, ToolExecutionRecord, async_plan_and_execute
from toolloop.flow import ExecutionFailed, FlowEvent
from toolloop.kernel import RunFinished
from toolloop.loop import PlanDecided, RoundFinished, RoundStarted
from toolloop.models import OpenAIChatModel
from toolloop.planners import StructuredPlanner
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import FakeOpenAIServer
from toolloop.tracing import EventTrace, RunShape, render_timeline, write_timeline

SVG = "{http://www.w3.org/2000/svg}"
E = "run"


def command(name: str, **kwargs: Any) -> ToolCommand:
    return ToolCommand(purpose=f"use {name}", tool_name=name, tool_kwargs=kwargs)


def streamed_run() -> list[FlowEvent]:
    """Round 0 streams its plan while two tools run; one command is refused before running;
    one tool fails; round 1 is short-circuited."""
    weather = command("get_weather", city="Lisbon")
    fare = command("find_fare", to="Faro")
    broken = command("get_weather", city=3)
    ok = ToolExecutionRecord.succeeded(weather, {"sky": "sunny"})
    failed = ToolExecutionRecord.failed(fare, "tool 'find_fare' raised ValueError: no fare")
    refused = ToolExecutionRecord.failed(broken, "arguments do not fit the schema")
    return [
        RoundStarted(execution_id=E, at=0.0, round_index=0),
        ToolCallStarted(
            execution_id=E, at=0.1, round_index=0, index=0, call_id="0.0", command=weather
        ),
        ToolCallStarted(
            execution_id=E, at=0.2, round_index=0, index=1, call_id="0.1", command=fare
        ),
        PlanDecided(
            execution_id=E,
            at=0.3,
            round_index=0,
            next_action="execute",
            commands=[weather, fare, broken],
            duration=0.3,
        ),
        ToolCallFinished(
            execution_id=E,
            at=0.3,
            round_index=0,
            index=2,
            call_id="0.2",
            record=refused,
            duration=0,
        ),
        ToolCallFinished(
            execution_id=E, at=0.4, round_index=0, index=0, call_id="0.0", record=ok, duration=0.3
        ),
        ToolCallFinished(
            execution_id=E,
            at=0.45,
            round_index=0,
            index=1,
            call_id="0.1",
            record=failed,
            duration=0.25,
        ),
        RoundFinished(
            execution_id=E, at=0.45, round_index=0, records=[ok, failed, refused], duration=0.15
        ),
        RoundStarted(execution_id=E, at=0.45, round_index=1),
        PlanDecided(
            execution_id=E,
            at=0.5,
            round_index=1,
            next_action="response",
            commands=[],
            duration=0.05,
            short_circuited=True,
        ),
        RunFinished(execution_id=E, at=0.5, turns=1, stop_reason="answered", records=3),
    ]


def parse(svg: str) -> ET.Element:
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(svg)


def classes(node: ET.Element) -> set[str]:
    return set(node.get("class", "").split())


def bars(root: ET.Element, cls: str) -> list[ET.Element]:
    return [
        n
        for n in root.iter(f"{SVG}rect")
        if cls in classes(n) and "legend-swatch" not in classes(n)
    ]


def test_the_shape_of_a_run() -> None:
    shape = RunShape.from_events(streamed_run())
    assert [r.index for r in shape.rounds] == [0, 1]
    first, second = shape.rounds
    assert first.streamed and not second.streamed
    assert second.short_circuited and not first.short_circuited
    assert [(c.index, c.ran, c.success) for c in first.calls] == [
        (0, True, True),
        (1, True, False),
        (2, False, False),
    ]
    assert shape.stop_reason == "answered"
    assert shape.finished_at == 0.5


def test_svg_is_well_formed_with_one_bar_per_tool_call() -> None:
    events = streamed_run()
    root = parse(render_timeline(EventTrace(events, meta={"request": "Sunny & cheap <now>?"})))
    assert root.tag == f"{SVG}svg"
    calls = bars(root, "call")
    assert len(calls) == sum(isinstance(e, ToolCallFinished) for e in events) == 3
    assert [sorted(classes(c) - {"call"}) for c in calls] == [["ok"], ["failed"], ["refused"]]
    plans = bars(root, "plan")
    assert len(plans) == 2
    assert "streamed" in classes(plans[0])
    assert "short-circuited" in classes(plans[1])
    # every bar says what it was when hovered
    titles = [c.find(f"{SVG}title") for c in calls]
    assert all(t is not None and t.text for t in titles)
    assert "no fare" in (titles[1].text or "")  # type: ignore[union-attr]
    text = "".join(root.itertext())
    assert "Sunny & cheap <now>?" in text


def test_the_short_circuit_is_marked() -> None:
    root = parse(render_timeline(streamed_run()))
    markers = [n for n in root.iter(f"{SVG}g") if "short-circuit-marker" in classes(n)]
    assert len(markers) == 1
    bolt = markers[0].find(f"{SVG}polygon")
    assert bolt is not None and "short-circuit" in classes(bolt)
    assert "short-circuit" in "".join(root.itertext())


def test_no_short_circuit_no_marker() -> None:
    events = [
        e.model_copy(update={"short_circuited": False}) if isinstance(e, PlanDecided) else e
        for e in streamed_run()
    ]
    root = parse(render_timeline(events))
    assert not [n for n in root.iter(f"{SVG}g") if "short-circuit-marker" in classes(n)]


def test_self_contained() -> None:
    svg = render_timeline(streamed_run())
    assert "<script" not in svg
    assert "http://" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in svg
    assert "@import" not in svg and "href" not in svg


def test_a_failed_run_and_an_empty_one_still_draw(tmp_path: Path) -> None:
    events = [
        RoundStarted(execution_id=E, at=0.0, round_index=0),
        ExecutionFailed(execution_id=E, at=0.2, duration=0.2, error="the planner raised X"),
    ]
    root = parse(render_timeline(events))
    plans = bars(root, "plan")
    assert len(plans) == 1 and "failed" in classes(plans[0])
    assert "failed: the planner raised X" in "".join(root.itertext())
    parse(render_timeline([]))
    write_timeline(tmp_path / "t.svg", events, title="a title")
    assert "a title" in (tmp_path / "t.svg").read_text(encoding="utf-8")


def test_secrets_do_not_reach_the_picture() -> None:
    leaky = command("call_api", api_key="sk-0123456789abcdefghijklmnop")
    record = ToolExecutionRecord.failed(leaky, "rejected key sk-0123456789abcdefghijklmnop")
    events = [
        RoundStarted(execution_id=E, at=0.0, round_index=0),
        ToolCallStarted(
            execution_id=E, at=0.1, round_index=0, index=0, call_id="0.0", command=leaky
        ),
        ToolCallFinished(
            execution_id=E,
            at=0.2,
            round_index=0,
            index=0,
            call_id="0.0",
            record=record,
            duration=0.1,
        ),
    ]
    assert "sk-0123456789abcdefghijklmnop" not in render_timeline(events)


@pytest.mark.anyio
@pytest.mark.filterwarnings(
    r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
    ":ResourceWarning"
)
async def test_a_real_streamed_run_over_http() -> None:
    """StructuredPlanner with streaming dispatch against the fake server: the tools of round
    0 start while its plan streams, and round 1 is short-circuited."""

    async def get_weather(city: str) -> dict[str, Any]:
        """The forecast.

        Args:
            city: the city.
        """
        return {"city": city}

    plan = (
        '{"next_action": "execute", "execution_commands": ['
        '{"purpose": "a", "tool_name": "get_weather", "tool_kwargs": {"city": "Lisbon"}},'
        '{"purpose": "b", "tool_name": "get_weather", "tool_kwargs": {"city": "Porto"}}]}'
    )
    events: list[FlowEvent] = []
    async with FakeOpenAIServer() as server:
        server.add_reply(plan, chunk_size=8, delay=0.01)
        server.add_reply(chunks=['{"next_action": "r', 'esponse"}'], delay=0.05)
        async with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            await async_plan_and_execute(
                "?",
                tools=[get_weather],
                planner=StructuredPlanner(model),
                streaming_dispatch=True,
                on_event=events.append,
            )
    root = parse(render_timeline(events))
    assert len(bars(root, "call")) == 2
    plans = bars(root, "plan")
    assert "streamed" in classes(plans[0])
    assert "short-circuited" in classes(plans[1])


SPANS = [0.0, 0.0003, 0.0012, 0.003, 0.0075, 0.04, 0.3, 0.999, 1.0, 1.5, 7.0, 42.0, 900.0]
"""Runs' lengths in seconds, from nothing at all to a quarter of an hour."""
TICK = re.compile(r"^(0|\d+(\.\d+)?) (ms|s)$")


def run_of(span: float) -> list[FlowEvent]:
    return [
        RoundStarted(execution_id=E, at=0.0, round_index=0),
        PlanDecided(
            execution_id=E,
            at=span,
            round_index=0,
            next_action="response",
            commands=[],
            duration=span,
        ),
        RunFinished(execution_id=E, at=span, turns=0, stop_reason="answered", records=0),
    ]


def ticks(span: float) -> list[tuple[str, float]]:
    root = parse(render_timeline(EventTrace(run_of(span))))
    return [
        (node.text or "", float(node.get("x", "0")))
        for node in root.iter(f"{SVG}text")
        if "tick" in classes(node)
    ]


@pytest.mark.parametrize("span", SPANS)
def test_the_time_axis_is_distinct_and_readable_at_every_scale(span: float) -> None:
    drawn = ticks(span)
    labels = [label for label, _ in drawn]
    assert len(labels) >= 4, labels
    assert len(set(labels)) == len(labels), labels  # no label twice
    assert all(TICK.match(label) for label in labels), labels
    units = {label.split()[1] for label in labels[1:]}
    assert len(units) == 1, labels  # one unit along the axis
    values = [float(label.split()[0]) for label in labels]
    assert values == sorted(values) and values[0] == 0, labels
    unit = 1.0 if units == {"s"} else 0.001
    assert values[-1] * unit >= span - 1e-12, labels  # the axis reaches the end of the run
    # centred labels, side by side (10 px monospace: about 6 px a character)
    for (left, x), (right, next_x) in itertools.pairwise(drawn):
        assert next_x - x >= (len(left) + len(right)) / 2 * 6.5 + 4, labels


def test_tick_labels_name_the_step() -> None:
    assert [label for label, _ in ticks(0.003)] == [
        "0 ms",
        "0.5 ms",
        "1.0 ms",
        "1.5 ms",
        "2.0 ms",
        "2.5 ms",
        "3.0 ms",
    ]
    assert [label for label, _ in ticks(0.0003)][:3] == ["0 ms", "0.2 ms", "0.4 ms"]
    assert [label for label, _ in ticks(7.0)][:3] == ["0 s", "1 s", "2 s"]
    assert [label for label, _ in ticks(1.5)][:3] == ["0 s", "0.2 s", "0.4 s"]
