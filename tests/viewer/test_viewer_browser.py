"""The live viewer end to end in a real headless Chromium: a run with streaming dispatch,
watched as it happens (a tool still running shows as a running bar), then the whole run
(rounds, bars, a failed record's error, the short-circuit); a screenshot is left in the
test artefacts. And a trace file replayed, then tailed, by ``toolloop view``."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Browser, leaving_localhost

from toolloop import StructuredPlanner, async_plan_and_execute
from toolloop.loop import LoopResult
from toolloop.testing import ScriptedChatModel, ScriptedPlanner
from toolloop.tracing import TraceRecorder
from toolloop.viewer import ViewerSink

pytestmark = pytest.mark.timeout(300)

PLAN = {
    "next_action": "execute",
    "execution_commands": [
        {"purpose": "a slow lookup", "tool_name": "slow_lookup", "tool_kwargs": {"city": "Faro"}},
        {"purpose": "read the sensor", "tool_name": "read_sensor", "tool_kwargs": {}},
        {"purpose": "say hello", "tool_name": "echo", "tool_kwargs": {"text": "hello"}},
    ],
}


def _tools(gate: threading.Event) -> list[Callable[..., Any]]:
    def slow_lookup(city: str) -> dict[str, str]:
        """Look a city up, slowly (until the test lets it finish).

        Args:
            city: the city.
        """
        gate.wait(60)
        return {"city": city, "sky": "sunny"}

    def read_sensor() -> float:
        """Read the sensor."""
        raise RuntimeError("the sensor is offline")

    def echo(text: str) -> str:
        """Say it back.

        Args:
            text: what to say.
        """
        return text

    return [slow_lookup, read_sensor, echo]


def _page_state(chromium: Browser) -> dict[str, object]:
    return chromium.js(  # type: ignore[no-any-return]
        """
        const q = (s) => [...document.querySelectorAll(s)];
        return {
          run: (document.querySelector('article.run') || {}).dataset?.state || null,
          rounds: q('article.run .row.round-row').map(r => r.dataset.round),
          bars: q('article.run .bar.call').map(b => b.dataset.tool + ':' + b.dataset.state),
          errors: q('article.run .record.failed .error').map(e => e.textContent),
          short: q('article.run .short-circuit').map(s => s.dataset.round),
          finished: (document.querySelector('.finished-line') || {}).textContent || null,
          status: document.getElementById('status').dataset.state,
        };
        """
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_streamed_run_live_in_the_browser(
    chromium: Browser, artefacts: Path, backend: str
) -> None:
    gate = threading.Event()
    model = ScriptedChatModel()
    model.add_reply(json.dumps(PLAN), chunk_size=16, delay=0.01)  # the plan streams
    model.add_reply(  # round 1: "r" settles "response"; the rest is never read
        chunks=['{"next_action": "', "r", 'esponse", ', '"execution_commands": []}'], delay=0.05
    )
    outcome: list[LoopResult | BaseException] = []

    def run(sink: ViewerSink) -> None:
        try:
            outcome.append(
                anyio.run(
                    functools.partial(
                        async_plan_and_execute,
                        "Where is it sunny?",
                        tools=_tools(gate),
                        planner=StructuredPlanner(model),
                        streaming_dispatch=True,
                        timeout=60,
                        on_event=sink,
                    ),
                    backend=backend,
                )
            )
        except BaseException as exc:
            outcome.append(exc)

    with ViewerSink(meta={"request": "Where is it sunny?"}) as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)
        chromium.wait_for("return document.getElementById('status').dataset.state === 'live'")
        loop = threading.Thread(target=run, args=(sink,))
        loop.start()
        try:
            # live: the slow tool is a running bar while the others are done
            chromium.wait_for(
                "return !!document.querySelector('.bar.call[data-tool=slow_lookup]"
                "[data-state=running]') && !!document.querySelector('.record.failed .error')",
                what="the slow tool running beside a failed record",
            )
            running = _page_state(chromium)
            assert running["run"] == "running"
            assert "slow_lookup:running" in running["bars"]  # type: ignore[operator]
            chromium.driver.save_screenshot(str(artefacts / f"viewer-running-{backend}.png"))
        finally:
            gate.set()
            loop.join(60)
        chromium.wait_for(
            "return (document.querySelector('article.run') || {}).dataset?.state === 'finished'",
            what="the run finished",
        )
        shown = _page_state(chromium)
        chromium.driver.save_screenshot(str(artefacts / f"viewer-{backend}.png"))
    (result,) = outcome
    assert isinstance(result, LoopResult), result
    assert result.stop_reason == "answered"
    assert shown["rounds"] == ["0", "1"]
    assert sorted(shown["bars"]) == [  # type: ignore[call-overload]
        "echo:ok",
        "read_sensor:failed",
        "slow_lookup:ok",
    ]
    errors_shown = shown["errors"]
    assert isinstance(errors_shown, list)
    assert len(errors_shown) == 1
    assert "the sensor is offline" in errors_shown[0]
    assert shown["short"] == ["1"]  # round 1's plan was cut short
    assert shown["finished"] == "answered after 1 round, 3 records"
    assert (artefacts / f"viewer-{backend}.png").stat().st_size > 10_000
    requested, errors = chromium.drain()
    assert not leaving_localhost(requested)
    assert not errors, errors
    # the server stopped with the sink: the page says so and keeps what it showed
    chromium.wait_for("return document.getElementById('status').dataset.state === 'closed'")
    assert _page_state(chromium)["bars"] == shown["bars"]


def _trace_file(path: Path) -> list[str]:
    """A finished run's trace, as lines."""

    def echo(text: str) -> str:
        """Say it back.

        Args:
            text: what to say.
        """
        return text

    planner = ScriptedPlanner(
        [
            {
                "next_action": "execute",
                "execution_commands": [
                    {"purpose": "hi", "tool_name": "echo", "tool_kwargs": {"text": "hi"}},
                    {"purpose": "oops", "tool_name": "missing_tool", "tool_kwargs": {}},
                ],
            },
            {"next_action": "response"},
        ]
    )
    recorder = TraceRecorder(meta={"request": "replayed"})
    anyio.run(
        functools.partial(
            async_plan_and_execute, "replayed", tools=[echo], planner=planner, on_event=recorder
        )
    )
    recorder.write(path)
    return path.read_text().splitlines()


def test_toolloop_view_replays_and_tails_a_trace(chromium: Browser, tmp_path: Path) -> None:
    lines = _trace_file(tmp_path / "full.jsonl")
    live = tmp_path / "run.jsonl"
    cut = next(i for i, line in enumerate(lines) if '"tool_call_finished"' in line)
    live.write_text("\n".join(lines[:cut]) + "\n")  # a run half written
    running = sum('"tool_call_started"' in line for line in lines[:cut])
    assert running >= 1
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "toolloop", "view", str(live), "--follow", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as viewer:
        try:
            assert viewer.stdout is not None
            first = viewer.stdout.readline()  # "viewer: http://127.0.0.1:PORT/ ..."
            assert first.startswith("viewer: http://127.0.0.1:"), first
            url = first.split()[1]
            chromium.open(url)
            chromium.wait_for(
                "return document.querySelectorAll('.bar.call[data-state=running]').length === "
                f"{running}",
                what=f"the half-written run, {running} call(s) still running",
            )
            assert "request: replayed" in chromium.js(
                "return document.querySelector('article.run .meta').textContent"
            )
            with live.open("a") as file:  # the run goes on: the page follows the file
                file.write("\n".join(lines[cut:]) + "\n")
            chromium.wait_for(
                "return (document.querySelector('.finished-line') || {}).textContent === "
                "'answered after 1 round, 2 records'",
                what="the rest of the run, tailed",
            )
            error = chromium.js(
                "return document.querySelector('.record.failed .error').textContent"
            )
            assert "no tool named 'missing_tool'" in error
            _, errors = chromium.drain()
            assert not errors, errors
        finally:
            viewer.terminate()
            viewer.wait(30)


def test_the_page_draws_a_plan_still_streaming_usage_and_a_failed_run(
    chromium: Browser,
) -> None:
    from toolloop.viewer import ViewerServer

    def event(kind: str, at: float, **fields: object) -> dict[str, object]:
        return {"kind": kind, "execution_id": "run-a", "at": at, **fields}

    command = {"purpose": "look", "tool_name": "lookup", "tool_kwargs": {"q": "<b>x</b>"},
               "todo_suggestion": "", "next": ""}  # fmt: skip
    with ViewerServer() as server:
        chromium.open(server.url)
        server.publish(event("execution_started", 0.0, flow="plan_execute"))
        server.publish(event("round_started", 0.0, round_index=0))
        server.publish(  # streaming dispatch: a call starts while the plan still streams
            event("tool_call_started", 0.2, round_index=0, index=0, call_id="0.0", command=command)
        )
        chromium.wait_for(
            "return !!document.querySelector('.bar.plan[data-state=planning]') && "
            "!!document.querySelector('.bar.call[data-state=running]')",
            what="a plan still streaming beside a call already running",
        )
        # text from events is shown as text, never as markup
        assert chromium.js("return document.querySelectorAll('article.run b').length") == 0
        for index, at, usage in (  # each model call tells its usage; the plans repeat it
            (0, 0.3, {"prompt_tokens": 120, "completion_tokens": 30}),
            (1, 0.5, {"prompt_tokens": 80}),
        ):
            server.publish(
                event("model_call_finished", at, call_index=index, duration=0.1, usage=usage)
            )
        server.publish(
            event(
                "plan_decided",
                0.3,
                round_index=0,
                next_action="execute",
                commands=[command],
                duration=0.3,
                notes=[],
                usage={"prompt_tokens": 120, "completion_tokens": 30},
            )
        )
        server.publish(
            event(
                "plan_decided",
                0.5,
                round_index=1,
                next_action="execute",
                commands=[],
                duration=0.1,
                usage={"prompt_tokens": 80},
            )
        )
        server.publish(event("execution_failed", 0.6, error="PlannerError: the model went away"))
        chromium.wait_for(
            "return (document.querySelector('article.run') || {}).dataset?.state === 'failed'",
            what="the failed run",
        )
        shown = chromium.js(
            "return [document.querySelector('.usage').textContent, "
            "document.querySelector('.finished-line.failed').textContent, "
            "document.querySelector('.bar.plan').dataset.state]"
        )
    assert shown == [
        "usage: prompt_tokens 200 · completion_tokens 30",
        "failed: PlannerError: the model went away",
        "decided",
    ]
    _, errors = chromium.drain()
    assert not errors, errors


def test_a_plan_s_reasoning_and_a_refusal_are_shown(chromium: Browser) -> None:
    from toolloop.viewer import ViewerServer

    def event(kind: str, at: float, **fields: object) -> dict[str, object]:
        return {"kind": kind, "execution_id": "run-r", "at": at, **fields}

    with ViewerServer() as server:
        chromium.open(server.url)
        server.publish(event("execution_started", 0.0, flow="plan_execute"))
        server.publish(event("round_started", 0.0, round_index=0))
        server.publish(
            event(
                "plan_decided",
                0.2,
                round_index=0,
                next_action="response",
                commands=[],
                duration=0.2,
                reasoning="The user asks <b>nothing</b> a tool answers.",
                refusal="I can't help with that.",
            )
        )
        chromium.wait_for(
            "return !!document.querySelector('.round details.reasoning')",
            what="the plan's reasoning",
        )
        shown = chromium.js(
            "return [document.querySelector('.round details.reasoning pre').textContent, "
            "document.querySelector('.round .plan-line').textContent, "
            "document.querySelectorAll('article.run b').length]"
        )
    assert shown[0] == "The user asks <b>nothing</b> a tool answers."  # as text, not markup
    assert "the model refused" in shown[1]
    assert shown[2] == 0
    _, errors = chromium.drain()
    assert not errors, errors


def test_the_run_s_usage_is_counted_once(chromium: Browser) -> None:
    """Each model call tells its usage, each plan and the end of the run sum it again: the
    page sums the model calls, and adds neither sum on top."""
    model = ScriptedChatModel()
    for _ in range(2):
        model.add_reply(
            '{"next_action": "execute", "execution_commands": [{"purpose": "e", '
            '"tool_name": "echo", "tool_kwargs": {"text": "x"}, "todo_suggestion": ""}]}',
            usage={"prompt_tokens": 100, "completion_tokens": 20},
        )
    gate = threading.Event()
    gate.set()
    with ViewerSink() as sink:
        chromium.open(sink.url)
        assert sink.server is not None and sink.server.wait_for_pages(1, timeout=30)
        result = anyio.run(
            functools.partial(
                async_plan_and_execute,
                "Say it",
                tools=_tools(gate),
                planner=StructuredPlanner(model),
                max_turns=2,
                on_event=sink,
            )
        )
        chromium.wait_for(
            "return (document.querySelector('article.run') || {}).dataset?.state === 'finished'",
            what="the run finished",
        )
        shown = chromium.js("return document.querySelector('.usage').textContent")
    assert result.usage.total_tokens == 240
    assert shown == (
        "usage: requests 2 · input_tokens 200 · output_tokens 40 · total_tokens 240 · "
        "unreported_requests 0"
    )


SPANS = [0.0003, 0.0012, 0.003, 0.0075, 0.04, 0.3, 0.999, 1.5, 7.0, 42.0, 900.0]
"""Runs' lengths in seconds, from a fraction of a millisecond to a quarter of an hour."""
TICK = re.compile(r"^(0|\d+(\.\d+)?) (ms|s)$")


def test_the_time_axis_is_distinct_and_readable_at_every_scale(chromium: Browser) -> None:
    from toolloop.viewer import ViewerServer

    with ViewerServer() as server:
        chromium.open(server.url)
        for n, span in enumerate(SPANS):
            run = {"execution_id": f"run-{n}"}
            plan = {"round_index": 0, "next_action": "response", "commands": [], "duration": span}
            end = {"stop_reason": "answered", "turns": 1, "records": 0}
            for event in (
                {"kind": "execution_started", "at": 0.0, "flow": "plan_execute"},
                {"kind": "round_started", "at": 0.0, "round_index": 0},
                {"kind": "plan_decided", "at": span, **plan},
                {"kind": "run_finished", "at": span, **end},
                {"kind": "execution_finished", "at": span},
            ):
                server.publish({**run, **event})
        chromium.wait_for(
            f"return document.querySelectorAll('article.run[data-state=finished]').length "
            f"=== {len(SPANS)}",
            what="every run drawn, finished",
        )
        axes = chromium.js(
            """
            return [...document.querySelectorAll('article.run')].map((run) => ({
              id: run.dataset.executionId,
              ticks: [...run.querySelectorAll('.axis span')].map((tick) => {
                const box = tick.getBoundingClientRect();
                return [tick.textContent, box.left, box.right];
              }),
            }));
            """
        )
    assert len(axes) == len(SPANS)
    for axis in axes:
        span = SPANS[int(axis["id"].split("-")[1])]
        labels = [label for label, _, _ in axis["ticks"]]
        assert len(labels) >= 4, (span, labels)
        assert len(set(labels)) == len(labels), (span, labels)  # no label twice
        assert all(TICK.match(label) for label in labels), (span, labels)
        units = {label.split()[1] for label in labels[1:]}
        assert len(units) == 1, (span, labels)  # one unit along an axis
        values = [float(label.split()[0]) for label in labels]
        assert values == sorted(values) and values[0] == 0, (span, labels)
        unit = 1.0 if units == {"s"} else 0.001
        assert values[-1] * unit <= max(span, 0.001) * 1.04 + 1e-12, (span, labels)
        boxes = [(left, right) for _, left, right in axis["ticks"]]
        for (_, right), (left, _) in itertools.pairwise(boxes):
            assert right <= left, (span, labels)  # side by side, never over each other
    _, errors = chromium.drain()
    assert not errors, errors
