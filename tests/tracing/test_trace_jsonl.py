"""Traces as JSON lines: export then import gives equal events; secrets stay out."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pytest

from toolloop import async_plan_and_execute
from toolloop.flow import FlowEvent
from toolloop.kernel import RunFinished
from toolloop.loop import PlanDecided, RoundFinished, RoundStarted
from toolloop.planners import PlannerReply
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import ScriptedPlanner
from toolloop.tracing import (
    REDACTED,
    EventTrace,
    TraceError,
    TraceRecorder,
    UnknownEvent,
    dump_event,
    load_event,
    read_trace,
    write_trace,
)

pytestmark = pytest.mark.anyio


async def get_weather(city: str, days: int = 3) -> dict[str, Any]:
    """The forecast.

    Args:
        city: the city.
        days: how many days.
    """
    return {"city": city, "days": days, "temps": [21.5, 19.0]}  # JSON values round-trip


def call_api(query: str, api_key: str) -> str:
    """Call an API that needs a key.

    Args:
        query: what to ask.
        api_key: the key.
    """
    return f"answer to {query}"


PLANNER = ScriptedPlanner(
    [
        {
            "next_action": "execute",
            "execution_commands": [
                {
                    "purpose": "weather",
                    "tool_name": "get_weather",
                    "tool_kwargs": {"city": "Lisbon"},
                },
                {"purpose": "nothing", "tool_name": "no_such_tool", "tool_kwargs": {}},
                {"purpose": "bad", "tool_name": "get_weather", "tool_kwargs": {"days": "x"}},
            ],
        },
        PlannerReply(
            output={"next_action": "response", "execution_commands": []},
            short_circuited=True,
            decided_after=0.01,
        ),
    ]
)


async def recorded_run(**meta: Any) -> TraceRecorder:
    recorder = TraceRecorder(meta=meta)
    await async_plan_and_execute(
        "Weather in Lisbon?", tools=[get_weather], planner=PLANNER, on_event=recorder
    )
    return recorder


async def test_export_then_import_gives_equal_events(tmp_path: Path) -> None:
    recorder = await recorded_run(request="Weather in Lisbon?", planner="scripted")
    path = tmp_path / "run.jsonl"
    recorder.write(path)
    trace = read_trace(path)
    assert trace.events == recorder.events
    assert [type(e) for e in trace.events] == [type(e) for e in recorder.events]
    assert trace.meta == {"request": "Weather in Lisbon?", "planner": "scripted"}
    assert trace.started == recorder.trace.started
    kinds = {type(e) for e in trace.events}
    assert {
        RoundStarted,
        PlanDecided,
        ToolCallStarted,
        ToolCallFinished,
        RoundFinished,
        RunFinished,
    } <= kinds
    decided = [e for e in trace.events if isinstance(e, PlanDecided)]
    assert [d.short_circuited for d in decided] == [False, True]


async def test_every_line_is_a_json_object_with_timings(tmp_path: Path) -> None:
    recorder = await recorded_run()
    buffer = io.StringIO()
    write_trace(buffer, recorder.events, started=datetime(2025, 1, 2, tzinfo=timezone.utc))
    lines = buffer.getvalue().splitlines()
    header = json.loads(lines[0])
    assert header == {"toolloop_trace": 1, "started": "2025-01-02T00:00:00+00:00", "meta": {}}
    events = [json.loads(line) for line in lines[1:]]
    assert len(events) == len(recorder.events)
    assert all(isinstance(e["kind"], str) and isinstance(e["at"], float) for e in events)
    ats = [e["at"] for e in events]
    assert ats == sorted(ats)
    finished = [e for e in events if e["kind"] == "tool_call_finished"]
    assert all("duration" in e for e in finished)
    weather = next(e for e in finished if e["record"]["purpose"] == "weather")
    assert weather["record"]["result"] == {"city": "Lisbon", "days": 3, "temps": [21.5, 19.0]}


async def test_secrets_are_scrubbed_unless_asked_not_to() -> None:
    planner = ScriptedPlanner(
        [
            {
                "next_action": "execute",
                "execution_commands": [
                    {
                        "purpose": "call with Bearer abcdefghijklmnop1234",
                        "tool_name": "call_api",
                        "tool_kwargs": {"query": "q", "api_key": "sk-proj-0123456789abcdefghij"},
                    }
                ],
            }
        ]
    )
    recorder = TraceRecorder(
        meta={"base_url": "http://user:hunter2secret@host/v1", "Authorization": "Bearer x"}
    )
    await async_plan_and_execute("?", tools=[call_api], planner=planner, on_event=recorder)
    buffer = io.StringIO()
    recorder.write(buffer)
    text = buffer.getvalue()
    for secret in ("sk-proj-0123456789abcdefghij", "abcdefghijklmnop1234", "hunter2secret"):
        assert secret not in text
    assert REDACTED in text
    assert "Bearer x" not in text
    # the scrubbed trace still reads back; only the secrets differ
    trace = EventTrace.from_lines(text.splitlines())
    started = next(e for e in trace.events if isinstance(e, ToolCallStarted))
    assert started.command.tool_kwargs == {"query": "q", "api_key": REDACTED}
    # redact=False keeps everything, for a trace that stays private
    raw = io.StringIO()
    recorder.write(raw, redact=False)
    assert "sk-proj-0123456789abcdefghij" in raw.getvalue()
    assert read_trace(io.StringIO(raw.getvalue())).events == recorder.events


class CustomEvent(FlowEvent):
    kind: Literal["custom_thing"] = "custom_thing"
    payload: dict[str, Any]


def test_imported_classes_are_found_and_unknown_kinds_kept() -> None:
    event = CustomEvent(execution_id="e", at=0.5, payload={"a": [1, 2]})
    assert load_event(dump_event(event)) == event
    unknown = load_event({"kind": "from_the_future", "execution_id": "e", "at": 1.0, "x": 1})
    assert isinstance(unknown, UnknownEvent)
    assert unknown.kind == "from_the_future"
    assert unknown.model_dump()["x"] == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "line 1 is not JSON"),
        ("[1, 2]\n", "line 1 is not a JSON object"),
        ('{"toolloop_trace": 99}\n', "format 99"),
        ('{"at": 1.0}\n', "needs a string 'kind'"),
        ('{"kind": "round_started", "at": "soon"}\n', "does not fit RoundStarted"),
    ],
)
def test_a_broken_trace_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        read_trace(io.StringIO(text))


def test_a_trace_without_header_or_with_blank_lines_reads() -> None:
    event = RoundStarted(execution_id="e", at=0.25, round_index=0)
    text = "\n" + json.dumps(dump_event(event)) + "\n\n"
    trace = read_trace(io.StringIO(text))
    assert trace.events == [event]
    assert trace.started is None
    assert trace.duration == 0.25


async def test_a_trace_writer_writes_each_event_as_it_happens(tmp_path: Path) -> None:
    from toolloop.tracing import TraceWriter

    path = tmp_path / "live.jsonl"
    seen_in_file: list[int] = []
    recorder = TraceRecorder()

    with TraceWriter(path, meta={"request": "Weather?", "api_key": "sk-abcdefghijklmnop"}) as w:

        def on_event(event: FlowEvent) -> None:
            recorder(event)
            w(event)
            # the line is in the file already, for a follower (toolloop view --follow)
            seen_in_file.append(len(path.read_text().splitlines()))

        await async_plan_and_execute(
            "Weather in Lisbon?", tools=[get_weather], planner=PLANNER, on_event=on_event
        )
    assert seen_in_file == list(range(2, len(recorder.events) + 2))  # the header, then each
    trace = read_trace(path)
    assert trace.events == recorder.events
    assert trace.meta["request"] == "Weather?"
    assert "sk-abcdefghijklmnop" not in path.read_text()
    assert trace.started is not None
    assert w.events == len(recorder.events)
    w(recorder.events[0])  # after close: ignored
    assert read_trace(path).events == recorder.events


def test_a_trace_writer_fails_before_the_run_and_an_empty_run_is_a_header(
    tmp_path: Path,
) -> None:
    from toolloop.tracing import TraceWriter

    with pytest.raises(FileNotFoundError):
        TraceWriter(tmp_path / "no-such-folder" / "run.jsonl")
    writer = TraceWriter(tmp_path / "empty.jsonl", meta={"request": "?"})
    writer.close()
    writer.close()
    assert read_trace(tmp_path / "empty.jsonl").meta == {"request": "?"}
