"""The live viewer and the SVG timeline of each product (the loop, the middleware agent, the
status agent), driven through its public API, in a real headless Chromium: the model calls
(with their usage), a pause shown as paused (its clock stopped) and the resume, the stop
reason, the run's usage; two runs on one page at once."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import Browser
from product_runs import MODEL_CALLS, PRODUCTS, Driven

from toolloop.agents import create_agent
from toolloop.errors import ModelCallError
from toolloop.kernel import RunResult
from toolloop.ratelimit import RateLimit, RetryPolicy
from toolloop.testing import ScriptedChatModel
from toolloop.tracing import TraceRecorder, write_timeline
from toolloop.viewer import ViewerSink

pytestmark = pytest.mark.timeout(300)

BACKENDS = ["asyncio", "trio"]


def _run_state(chromium: Browser, run_id: str) -> dict[str, Any]:
    return chromium.js(  # type: ignore[no-any-return]
        """
        const run = document.querySelector(`article.run[data-execution-id="${arguments[0]}"]`);
        if (!run) return null;
        const q = (s) => [...run.querySelectorAll(s)];
        return {
          state: run.dataset.state,
          badge: run.querySelector('.badge').textContent,
          models: q('.bar.model').map(b => b.dataset.state),
          modelText: q('.bar.model').map(b => b.textContent),
          calls: q('.bar.call').map(b => b.dataset.tool + ':' + b.dataset.state),
          usage: (run.querySelector('.usage') || {}).textContent || null,
          finished: (run.querySelector('.finished-line') || {}).textContent || null,
          pauses: q('.pause').map(p => p.dataset.state),
          asked: q('.pause .request').map(r => r.dataset.kind),
          resumed: q('.resume-mark').length,
          statuses: q('.status-chip').map(s => s.dataset.status),
          planning: q('.bar.plan[data-state=planning], .plan-line').map(p => p.textContent)
            .filter(t => t.includes('planning')),
          axis: q('.axis span').map(s => s.textContent).join(' '),
        };
        """,
        run_id,
    )


def _wait_state(chromium: Browser, run_id: str, state: str) -> None:
    chromium.wait_for(
        f"const r = document.querySelector('article.run[data-execution-id=\"{run_id}\"]');"
        f" return !!r && r.dataset.state === '{state}';",
        what=f"run {run_id} {state}",
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("product", PRODUCTS)
def test_the_viewer_shows_each_product(chromium: Browser, product: str, backend: str) -> None:
    """A run that answers and a run that pauses, on one page at once; then the paused one
    resumed."""
    done, waiting = Driven(product), Driven(product)
    with ViewerSink(meta={"request": "mail ada"}) as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)

        async def both() -> tuple[RunResult, RunResult]:
            return await done.run(sink), await waiting.run(sink, pause=True)

        answered, paused = anyio.run(both, backend=backend)
        assert answered.stop_reason == "answered" and paused.paused
        _wait_state(chromium, answered.run_id, "finished")
        _wait_state(chromium, paused.run_id, "paused")
        shown = _run_state(chromium, answered.run_id)
        on_hold = _run_state(chromium, paused.run_id)
        # the paused run's clock stands still: the page redraws, its axis does not move
        chromium.js("return new Promise((done) => setTimeout(done, 400))")
        assert _run_state(chromium, paused.run_id)["axis"] == on_hold["axis"]
        resumed = anyio.run(functools.partial(waiting.resume, paused.run_id, sink), backend=backend)
        assert resumed.stop_reason == "answered"
        _wait_state(chromium, paused.run_id, "finished")
        after = _run_state(chromium, paused.run_id)
    calls = MODEL_CALLS[product]
    # model calls, each with its usage; the tool call; the stop reason; the run's usage
    assert shown["models"] == ["ok"] * calls
    assert all("10 in / 5 out tokens" in text for text in shown["modelText"])
    assert shown["calls"] == ["send:ok"]
    assert shown["badge"] == "finished: answered"
    assert shown["finished"].startswith("answered after ")
    assert shown["usage"].startswith(f"usage: requests {calls} · input_tokens {10 * calls} · ")
    assert shown["planning"] == []  # nothing planning for ever
    # the pause: paused, not failed nor running, what it asks
    assert on_hold["state"] == "paused" and on_hold["badge"] == "paused: waiting for a human"
    assert on_hold["pauses"] == ["waiting"] and on_hold["asked"] == ["approve_tool_calls"]
    assert on_hold["calls"] == [] and "running" not in on_hold["models"]
    assert on_hold["finished"] is None and on_hold["planning"] == []
    # resumed: the run goes on to its end, the pause stays shown as resumed
    assert after["pauses"] == ["resumed"] and after["resumed"] == 1
    assert after["badge"] == "finished: answered" and after["calls"] == ["send:ok"]
    assert after["models"] == ["ok"] * calls
    assert after["usage"].startswith(f"usage: requests {calls} · ")
    if product == "status":
        assert shown["statuses"][0] == "analysis_completed"
        assert shown["statuses"][-1] == "reflection_completed"
        assert on_hold["statuses"][-1] == "waiting_for_human"
    _, errors = chromium.drain()
    assert not errors, errors


def _svg_state(chromium: Browser) -> dict[str, Any]:
    return chromium.js(  # type: ignore[no-any-return]
        """
        const q = (s) => [...document.querySelectorAll(s)];
        return {
          summary: q('text.summary').map(t => t.textContent),
          models: q('g.rows rect.model').map(r => r.getAttribute('class')),
          calls: q('g.rows rect.call').map(r => r.getAttribute('class')),
          text: document.documentElement.textContent,
          pauses: q('g.pause-marker').length,
          resumes: q('g.resume-marker').length,
          statuses: q('g.rows rect.status').map(r => r.dataset.status),
          failedPlans: q('rect.plan.failed').length,
        };
        """
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("product", PRODUCTS)
def test_the_timeline_shows_each_product(
    chromium: Browser, tmp_path: Path, artefacts: Path, product: str, backend: str
) -> None:
    done, waiting = Driven(product), Driven(product)
    answered_trace, paused_trace = TraceRecorder(), TraceRecorder()

    async def runs() -> tuple[RunResult, RunResult]:
        answered = await done.run(answered_trace)
        paused = await waiting.run(paused_trace, pause=True)
        return answered, paused

    answered, paused = anyio.run(runs, backend=backend)
    assert answered.stop_reason == "answered" and paused.paused
    pictures = {}
    for name, trace in (("answered", answered_trace), ("paused", paused_trace)):
        pictures[name] = tmp_path / f"{name}.svg"
        write_timeline(pictures[name], trace.trace)
    on_hold_events = list(paused_trace.events)
    anyio.run(functools.partial(waiting.resume, paused.run_id, paused_trace), backend=backend)
    pictures["resumed"] = tmp_path / "resumed.svg"
    write_timeline(pictures["resumed"], paused_trace.trace)
    write_timeline(artefacts / f"timeline-{product}-{backend}.svg", paused_trace.trace)
    shown = {}
    for name, picture in pictures.items():
        chromium.open(picture.as_uri())
        chromium.wait_for("return document.querySelectorAll('text.summary').length > 0")
        shown[name] = _svg_state(chromium)
    calls = MODEL_CALLS[product]
    usage = f"usage: {10 * calls} in / {5 * calls} out tokens"
    answered_svg = shown["answered"]
    (summary,) = answered_svg["summary"]
    assert f"{calls} model calls" in summary and "stop: answered" in summary and usage in summary
    assert answered_svg["models"] == ["model ok"] * calls
    assert "10 in / 5 out tokens" in answered_svg["text"]
    assert answered_svg["calls"] == ["call ok"]
    assert "did not finish" not in answered_svg["text"]
    on_hold = shown["paused"]
    (summary,) = on_hold["summary"]
    asked = sum(e.kind == "model_call_finished" for e in on_hold_events)
    assert "paused: waiting for a human (approve_tool_calls (send))" in summary
    assert f"usage: {10 * asked} in / {5 * asked} out tokens" in summary
    assert "FAILED" not in summary and "stop:" not in summary
    assert on_hold["pauses"] == 1 and on_hold["failedPlans"] == 0
    assert "did not finish" not in on_hold["text"]
    resumed = shown["resumed"]
    (summary,) = resumed["summary"]
    assert "stop: answered" in summary and usage in summary
    assert resumed["pauses"] == 1 and resumed["resumes"] == 1
    assert resumed["models"] == ["model ok"] * calls and resumed["calls"] == ["call ok"]
    if product == "status":
        assert answered_svg["statuses"][0] == "analysis_completed"
        assert on_hold["statuses"][-1] == "waiting_for_human"
    _, errors = chromium.drain()
    assert not errors, errors


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_viewer_shows_each_try_the_retries_and_the_rate_limit(
    chromium: Browser, backend: str
) -> None:
    """A model call refused for its rate and tried again: each try is a bar of its own, the
    retry and the limiter's back-off are said above the timeline."""
    model = ScriptedChatModel()
    model.add_error(ModelCallError("HTTP 429: slow down", status=429, retry_after=0.01))
    model.add_reply("done")
    agent = create_agent(model)
    with ViewerSink() as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)
        result = anyio.run(
            functools.partial(
                agent.run,
                "go",
                model_rate_limit=RateLimit(10, name="api"),
                model_retry=RetryPolicy(backoff=0, jitter=0),
                on_event=sink,
            ),
            backend=backend,
        )
        _wait_state(chromium, result.run_id, "finished")
        shown = chromium.js(
            """
            const run = document.querySelector(`article.run[data-execution-id="${arguments[0]}"]`);
            const q = (s) => [...run.querySelectorAll(s)];
            return {
              bars: q('.bar.model').map(b => b.dataset.attempt + ':' + b.dataset.state),
              labels: q('.model-row .label').map(l => l.textContent),
              retries: (run.querySelector('.retries') || {}).textContent || null,
              limit: q('.rate-limit').map(l => l.dataset.limit + ':' + l.dataset.reason),
              limitText: (run.querySelector('.rate-limit') || {}).textContent || null,
            };
            """,
            result.run_id,
        )
    assert shown["bars"] == ["1:failed", "2:ok"]
    assert shown["labels"] == ["model call #0", "model call #0 (try 2)"]
    assert shown["retries"].startswith("1 retry · last: model call #0 try 1 failed")
    assert shown["limit"] == ["api:backoff"]
    assert "9.0/s" in shown["limitText"] and "1 refused, 1 back-off" in shown["limitText"]
    _, errors = chromium.drain()
    assert not errors, errors


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("product", PRODUCTS)
def test_the_viewer_says_a_result_was_cut_for_the_model(
    chromium: Browser, product: str, backend: str
) -> None:
    """A result longer than the run's ``max_result_chars``: its record says how much the
    model was shown, and the handle to read the rest by."""
    driven = Driven(product)
    with ViewerSink() as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)
        result = anyio.run(functools.partial(driven.run, sink, max_result_chars=4), backend=backend)
        _wait_state(chromium, result.run_id, "finished")
        kept = chromium.js(
            """
            const run = document.querySelector(`article.run[data-execution-id="${arguments[0]}"]`);
            return [...run.querySelectorAll('.record .kept')]
              .map(k => [k.dataset.handle, k.textContent]);
            """,
            result.run_id,
        )
    ((handle, text),) = kept
    assert handle.startswith("r:")
    assert text == f"cut for the model: shown 4 of 11 chars, kept whole · handle {handle}"
    _, errors = chromium.drain()
    assert not errors, errors
