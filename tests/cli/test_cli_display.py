"""What a person sees: plain lines (pipes, CI), the live terminal display, the demo."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.cli import LiveDisplay, PlainDisplay, main
from toolloop.cli._session import make_display
from toolloop.flow import ExecutionFailed, FlowEvent, StepStarted
from toolloop.kernel import RunFinished
from toolloop.loop import PlanDecided, RoundFinished, RoundStarted
from toolloop.runner import ToolCallFinished, ToolCallStarted, ToolProgress
from toolloop.tracing import read_trace

E = "run"
WEATHER = ToolCommand(purpose="weather", tool_name="get_weather", tool_kwargs={"city": "Lisbon"})
FARE = ToolCommand(
    purpose="fare", tool_name="find_fare", tool_kwargs={"to": "Faro", "api_key": "sk-secret"}
)
OK = ToolExecutionRecord.succeeded(WEATHER, {"sky": "sunny"})
FAILED = ToolExecutionRecord.failed(FARE, "tool 'find_fare' raised KeyError: 'Faro'")


def events() -> list[FlowEvent]:
    return [
        StepStarted(execution_id=E, at=0.0, step="plan", event="start"),  # not shown
        RoundStarted(execution_id=E, at=0.0, round_index=0),
        PlanDecided(
            execution_id=E,
            at=0.2,
            round_index=0,
            next_action="execute",
            commands=[WEATHER, FARE],
            duration=0.2,
            notes=["command 2 has no tool_name: dropped"],
        ),
        ToolCallStarted(
            execution_id=E, at=0.2, round_index=0, index=0, call_id="0.0", command=WEATHER
        ),
        ToolCallStarted(
            execution_id=E, at=0.2, round_index=0, index=1, call_id="0.1", command=FARE
        ),
        ToolCallFinished(
            execution_id=E,
            at=0.21,
            round_index=0,
            index=1,
            call_id="0.1",
            record=FAILED,
            duration=0.01,
        ),
        ToolCallFinished(
            execution_id=E, at=0.5, round_index=0, index=0, call_id="0.0", record=OK, duration=0.3
        ),
        RoundFinished(execution_id=E, at=0.5, round_index=0, records=[OK, FAILED], duration=0.3),
        RoundStarted(execution_id=E, at=0.5, round_index=1),
        PlanDecided(
            execution_id=E,
            at=0.512,
            round_index=1,
            next_action="response",
            commands=[],
            duration=0.012,
            short_circuited=True,
        ),
        RunFinished(execution_id=E, at=0.512, turns=1, stop_reason="answered", records=2),
    ]


def test_plain_mode_one_line_per_event() -> None:
    out = io.StringIO()
    display = PlainDisplay(out)
    for event in events():
        display(event)
    assert out.getvalue().splitlines() == [
        "   0.000s  round 0  planning",
        "   0.200s  round 0  plan: execute 2 commands (200 ms)",
        "          round 0  note: command 2 has no tool_name: dropped",
        '   0.200s  round 0  start #0 get_weather city="Lisbon"',
        '   0.200s  round 0  start #1 find_fare to="Faro" api_key="[redacted]"',
        "   0.210s  round 0  FAIL  #1 find_fare 10 ms: tool 'find_fare' raised KeyError: 'Faro'",
        '   0.500s  round 0  ok    #0 get_weather 300 ms -> {"sky": "sunny"}',
        "   0.500s  round 0  done: 2 records, 1 ok, 1 failed (round 500 ms, tools 300 ms)",
        "   0.500s  round 1  planning",
        "   0.512s  round 1  plan: response, short-circuit: the stream was closed as soon as "
        "'response' was settled (12 ms)",
        "   0.512s  finished: answered after 1 round, 2 records",
    ]


def test_plain_mode_tells_a_failed_run() -> None:
    out = io.StringIO()
    PlainDisplay(out)(ExecutionFailed(execution_id=E, at=1.5, duration=1.5, error="boom\nagain"))
    assert out.getvalue() == "   1.500s  failed: boom again\n"


class Terminal(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_display_and_a_pipe_plain_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TERM", raising=False)
    assert isinstance(make_display(Terminal()), LiveDisplay)
    assert isinstance(make_display(Terminal(), plain=True), PlainDisplay)
    assert isinstance(make_display(io.StringIO()), PlainDisplay)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(make_display(Terminal()), PlainDisplay)


@pytest.mark.anyio
async def test_the_live_display() -> None:
    out = Terminal()
    display = LiveDisplay(out, color=False, width=200)
    shown = events()
    for event in shown[:5]:  # round 0 planned, both commands running
        display(event)
    # the running lines are at the bottom, redrawn in place
    screen = out.getvalue()
    assert "\x1b[?25l" in screen  # the cursor is hidden while the run goes on
    assert re.search(
        r'⠋ #0 get_weather city="Lisbon" \d+ ms\n    ⠋ #1 find_fare to="Faro" '
        r'api_key="\[redacted\]" \d+ ms\n$',
        screen,
    )
    before = len(screen)
    display._frame += 1
    display._render([])
    redraw = out.getvalue()[before:]
    assert redraw.startswith("\x1b[2A\x1b[J")  # up two lines, clear, draw again
    for event in shown[5:]:
        display(event)
    display.close()
    display.close()
    screen = out.getvalue()
    assert screen.endswith("\x1b[?25h")
    assert '✓ #0 get_weather 300 ms  -> {"sky": "sunny"}' in screen
    assert "✗ #1 find_fare 10 ms  tool 'find_fare' raised KeyError: 'Faro'" in screen
    assert "plan: ⚡ response, short-circuit" in screen
    assert "done: 1 ok, 1 failed (round 500 ms, tools 300 ms)" in screen
    assert "finished: answered after 1 round, 2 records" in screen
    assert "sk-secret" not in screen
    # once closed, output is plain
    display.message("after")
    assert out.getvalue().endswith("\x1b[?25hafter\n")


def test_the_live_display_shows_a_tool_s_progress_on_its_running_line() -> None:
    out = Terminal()
    display = LiveDisplay(out, color=False, width=200)
    for event in events()[:5]:  # both commands running
        display(event)
    display(
        ToolProgress(
            execution_id=E,
            at=0.3,
            round_index=0,
            tool_name="get_weather",
            purpose="weather",
            call_id="0.0",
            message="asking\nthe station with sk-proj-0123456789abcdefghijkl",
        )
    )
    display._frame += 1
    display._render([])
    running = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert re.search(
        r'#0 get_weather city="Lisbon" asking the station with \[redacted\] \d+ ms\n', running
    )
    assert "#1 find_fare" in running and "asking" not in running.split("#1 find_fare")[1]
    display.close()


def test_live_lines_are_cut_to_the_terminal_width() -> None:
    out = Terminal()
    display = LiveDisplay(out, color=True, width=40)
    display(RoundStarted(execution_id=E, at=0.0, round_index=0))
    display(
        ToolCallStarted(execution_id=E, at=0.0, round_index=0, index=0, call_id="0.0", command=FARE)
    )
    display(
        ToolCallFinished(
            execution_id=E,
            at=0.5,
            round_index=0,
            index=0,
            call_id="0.0",
            record=FAILED,
            duration=0.5,
        )
    )
    display.close()
    visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert max(len(line) for line in visible.splitlines()) <= 39


def test_demo_plain(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    trace, timeline = tmp_path / "demo.jsonl", tmp_path / "demo.svg"
    argv = ["demo", "--plain", "--trace", str(trace), "--timeline", str(timeline)]
    assert main(argv, stdout=out, stderr=err) == 0
    assert err.getvalue() == ""
    text = out.getvalue()
    assert "round 0  plan: execute 5 commands" in text
    assert "FAIL  #3 book_hotel" in text
    assert "finished: answered after 2 rounds, 9 records" in text
    assert "planner: scripted (toolloop.testing.ScriptedPlanner): two rounds of tools" in text
    assert "action_results (injected into the final prompt), one line each:" in text
    assert (
        '\n  weather in Lisbon: {"city": "Lisbon", "days": 3, "max_c": 24, "sky": "sunny"}\n'
        in text
    )
    assert read_trace(trace).meta["planner"] == "scripted"
    assert timeline.read_text(encoding="utf-8").startswith("<?xml")


@pytest.mark.filterwarnings(
    r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
    ":ResourceWarning"
)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_over_http(backend: str, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    timeline = tmp_path / "demo.svg"
    argv = ["demo", "--http", "--plain", "--backend", backend, "--timeline", str(timeline)]
    assert main(argv, stdout=out, stderr=err) == 0, err.getvalue()
    text = out.getvalue()
    assert "round 2  plan: response, short-circuit" in text
    assert "the server saw the client go: True" in text
    assert "answer:\nGo to Lisbon" in text
    svg = timeline.read_text(encoding="utf-8")
    assert 'class="short-circuit-marker"' in svg
    assert "plan streamed" in svg


def test_trace_show_and_timeline(tmp_path: Path) -> None:
    from toolloop.tracing import write_trace

    path = tmp_path / "run.jsonl"
    write_trace(path, events(), meta={"request": "Sunny?", "tools": ["get_weather"]})
    out, err = io.StringIO(), io.StringIO()
    assert main(["trace", "show", str(path)], stdout=out, stderr=err) == 0
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["request: Sunny?", 'tools: ["get_weather"]', ""]
    plain = io.StringIO()
    display = PlainDisplay(plain)
    for event in events():
        display(event)
    assert lines[3:] == plain.getvalue().splitlines()  # the same lines as during the run
    out = io.StringIO()
    assert main(["trace", "timeline", str(path)], stdout=out, stderr=err) == 0
    assert out.getvalue() == f"timeline: {tmp_path / 'run.svg'}\n"
    assert "short-circuit-marker" in (tmp_path / "run.svg").read_text(encoding="utf-8")
    out = io.StringIO()
    argv = ["trace", "timeline", str(path), "-o", str(tmp_path / "other.svg")]
    assert main(argv, stdout=out, stderr=err) == 0
    assert (tmp_path / "other.svg").exists()
    assert err.getvalue() == ""


def _final_screen(written: str) -> list[str]:
    """What a terminal shows at the end: each "cursor up N, clear below" removes the N lines
    above it; other escapes draw nothing."""
    shown: list[str] = [""]
    for piece in re.split(r"(\x1b\[\d+A\x1b\[J|\x1b\[[0-9;?]*[A-Za-z])", written):
        cleared = re.fullmatch(r"\x1b\[(\d+)A\x1b\[J", piece)
        if cleared:
            keep = len(shown) - 1 - int(cleared.group(1))
            shown = [*shown[:keep], shown[-1]]
        elif not piece.startswith("\x1b"):
            lines = piece.split("\n")
            shown[-1] += lines[0]
            shown.extend(lines[1:])
    return shown[:-1] if shown[-1] == "" else shown


class _Terminal(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def test_the_demo_with_its_results_fits_a_45_line_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setattr(
        "shutil.get_terminal_size", lambda fallback=None: os.terminal_size((100, 45))
    )
    monkeypatch.delenv("TERM", raising=False)
    out = _Terminal()
    assert main(["demo"], stdout=out, stderr=io.StringIO()) == 0
    screen = _final_screen(out.getvalue())
    assert len(screen) <= 45, "\n".join(screen)
    assert max(len(line) for line in screen) <= 100
    assert screen[0].startswith("request: ")  # the first line is still on the screen
    assert any("done: 3 ok, 2 failed (round " in line for line in screen)
    assert any(line.startswith('  fare in JPY: {"error"') for line in screen)


def test_a_round_says_how_long_it_took_in_all_and_its_tools() -> None:
    out = io.StringIO()
    display = PlainDisplay(out)
    display(RoundStarted(execution_id=E, at=1.0, round_index=2))
    display(RoundFinished(execution_id=E, at=1.4, round_index=2, records=[OK], duration=0.3))
    assert out.getvalue().splitlines()[-1].endswith("done: 1 record, 1 ok, 0 failed "
                                                    "(round 400 ms, tools 300 ms)")  # fmt: skip
