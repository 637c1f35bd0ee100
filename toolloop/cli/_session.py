"""What ``run`` and ``demo`` share: watch a run (display, trace, spans), show its result (or
what a paused run waits for), stream the loop's final answer."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar

import anyio

from .._errors import AnswerError
from ..flow import FlowEvent
from ..kernel import RunResult
from ..loop import LoopResult, stream_final_answer
from ..models import ChatModel, ModelSettings, Usage
from ..tracing import OpenTelemetrySpans, TraceRecorder, TraceWriter, redact, write_timeline
from ._load import CLIError
from ._plain import PlainDisplay, ms, preview, usage_summary
from ._progress import LiveDisplay

__all__ = [
    "Display",
    "OnEvent",
    "Outputs",
    "make_display",
    "observe",
    "print_paused",
    "print_result",
    "stream_answer",
    "terminal_width",
]

if TYPE_CHECKING:
    from ..viewer import ViewerSink

Display = PlainDisplay | LiveDisplay
_VIEWER_PROBE = 5.0  # seconds to wait for the viewer's page
OnEvent = Callable[[FlowEvent], None]
R = TypeVar("R", bound=RunResult)


class Outputs(Protocol):
    """Where a watched run's events go besides the display (``--trace``, ``--timeline``,
    ``--view``): the options of ``run`` and of ``demo``."""

    @property
    def trace(self) -> Path | None: ...

    @property
    def timeline(self) -> Path | None: ...

    @property
    def view(self) -> int | None: ...


def make_display(out: TextIO, *, plain: bool = False, turn: str = "round") -> Display:
    """Live progress on a terminal; one line per event otherwise (or with ``plain``);
    ``turn`` names the run's turns (the loop's rounds)."""
    isatty = getattr(out, "isatty", None)
    terminal = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
    return LiveDisplay(out, turn=turn) if terminal and not plain else PlainDisplay(out, turn=turn)


def _fan_out(callbacks: list[OnEvent]) -> OnEvent:
    if len(callbacks) == 1:
        return callbacks[0]

    def on_event(event: FlowEvent) -> None:
        for callback in callbacks:
            callback(event)

    return on_event


async def observe(
    start: Callable[[OnEvent], Awaitable[R]],
    *,
    display: Display,
    meta: Mapping[str, Any],
    outputs: Outputs,
    otel: bool = False,
) -> tuple[R, list[str]]:
    """Run ``start(on_event)`` with the display refreshing beside it (and the live viewer on
    port ``outputs.view`` of 127.0.0.1, when given); write the trace and the timeline
    afterwards (also when the run failed: they show how far it got); ``otel``: spans too.

    Returns the result and a line for each file written (shown at once if the run failed).
    """
    trace, timeline, view = outputs.trace, outputs.timeline, outputs.view
    callbacks: list[OnEvent] = [display]
    recorder = TraceRecorder(meta=meta)
    if timeline is not None:
        callbacks.append(recorder)
    spans: OpenTelemetrySpans | None = None
    if otel:
        try:
            spans = OpenTelemetrySpans(
                attributes={f"toolloop.{k}": v for k, v in meta.items() if k != "tools"}
            )
        except ImportError as exc:
            raise CLIError(f"--otel: {exc}", code=2) from exc
        callbacks.append(spans)
    writer: TraceWriter | None = None
    sink: ViewerSink | None = None
    try:
        if trace is not None:  # written as the run goes: `toolloop view FILE --follow`
            try:
                writer = TraceWriter(trace, meta=meta)
            except OSError as exc:
                raise CLIError(f"cannot write {trace}: {exc.strerror}", code=2) from exc
            callbacks.append(writer)
        if view is not None:
            sink = await _viewer_sink(view, meta)
            callbacks.append(sink)
            display.message(f"viewer: {sink.url}")
    except BaseException:
        if writer is not None:
            writer.close()
        if spans is not None:
            spans.close()
        raise
    on_event = _fan_out(callbacks)
    failure: BaseException | None = None
    result: R | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(display.refresh_forever)
            try:
                result = await start(on_event)
            except Exception as exc:
                failure = exc
            finally:
                tg.cancel_scope.cancel()
    finally:
        display.close()
        if spans is not None:
            spans.close()
        if sink is not None:
            with anyio.CancelScope(shield=True):  # send what is pending (10 s at most)
                await anyio.to_thread.run_sync(sink.close)
        if writer is not None:
            writer.close()
        try:
            written = _write_outputs(recorder, writer, timeline)
        except CLIError:
            if failure is None:
                raise  # else the run's own failure is the one to tell
            written = []
    if failure is not None:
        for text in written:
            display.message(text)
        raise failure
    assert result is not None
    return result, written


async def _viewer_sink(port: int, meta: Mapping[str, Any]) -> ViewerSink:
    """A sink to the ``toolloop view`` on ``port``, once it is known to answer."""
    from ..viewer import ViewerError, ViewerSink

    url = f"http://127.0.0.1:{port}/"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=_VIEWER_PROBE) as page:
                return str(page.headers.get("Server", "")).startswith("toolloop-viewer")
        except OSError:
            return False

    if not await anyio.to_thread.run_sync(answers):
        raise CLIError(
            f"--view {port}: no toolloop viewer answers at {url}; start one first with "
            f"`toolloop view --port {port}`",
            code=2,
        )
    try:
        return ViewerSink(url, meta=meta)
    except ViewerError as exc:  # pragma: no cover - the URL is always local
        raise CLIError(f"--view: {exc}", code=2) from exc


def _write_outputs(
    recorder: TraceRecorder, writer: TraceWriter | None, timeline: Path | None
) -> list[str]:
    written: list[str] = []
    try:
        if writer is not None:
            written.append(f"trace: {writer.path} ({writer.events} events)")
        if timeline is not None:
            write_timeline(timeline, recorder.trace)
            written.append(f"timeline: {timeline}")
    except OSError as exc:
        raise CLIError(f"cannot write {exc.filename}: {exc.strerror}") from exc
    return written


def terminal_width(out: TextIO) -> int:
    """The terminal's width when ``out`` is one, else room for long lines (logs, pipes)."""
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        return shutil.get_terminal_size((100, 24)).columns
    return 160


def print_result(
    out: TextIO,
    result: RunResult,
    *,
    elapsed: float | None = None,
    written: Sequence[str] = (),
) -> None:
    """The stop reason, then the loop's action results injected into the final prompt, or
    an agent's tool calls one line each and its answer."""
    parts = _summary(result, elapsed)
    # one line a result, cut to the terminal's width, so the run's progress stays on the
    # screen above (the whole of each is in the trace, and in the result)
    width = max(terminal_width(out) - 1, 40)
    head: str | None = None
    lines: list[str] = []
    if isinstance(result, LoopResult):
        parts.insert(1, f"{result.rounds} round{'s' * (result.rounds != 1)}")
        if result.action_results is None:
            head = "no tool was run: nothing is injected into the final prompt"
        else:
            head = "action_results (injected into the final prompt), one line each:"
            for purpose, value in result.action_results.items():
                lines.append(f"  {' '.join(str(purpose).split())}: {preview(value, width * 2)}")
    else:
        for record in result.records:
            if record.success:
                lines.append(f"  ok   {record.tool_name}: {preview(record.result, width * 2)}")
            else:
                error = " ".join((record.error or "").split())
                lines.append(f"  FAIL {record.tool_name}: {error}")
    out.write("\n" + " · ".join(parts) + "\n")
    if head is not None:
        out.write(head + "\n")
    for text in lines:
        out.write((text if len(text) <= width else text[: width - 3] + "...") + "\n")
    if isinstance(result, LoopResult):
        for note in result.notes:
            out.write(f"note: {note}\n")
    elif result.text is not None:
        out.write(f"\nanswer:\n{result.text}\n")
    if written:
        out.write("\n" + "\n".join(written) + "\n")
    out.flush()


def _summary(result: RunResult, elapsed: float | None) -> list[str]:
    records = result.records
    failed = sum(1 for r in records if not r.success)
    n = len(records)
    parts = [
        f"stop: {result.stop_reason}",
        f"{n} record{'s' * (n != 1)}" + (f" ({failed} failed)" if failed else ""),
    ]
    used = usage_summary(result.usage)
    if used:
        parts.append(used)
    if elapsed is not None:
        parts.append(ms(elapsed))
    return parts


_DECISION_FLAGS = {
    "approve": "--approve",
    "edit": "--edit CALL_ID=JSON",
    "reject": "--reject [MESSAGE]",
    "replan": "--replan [MESSAGE]",
    "continue": "--continue",
    "stop": "--stop [MESSAGE]",
}


def print_paused(
    out: TextIO,
    result: RunResult,
    command: Sequence[str],
    *,
    elapsed: float | None = None,
    written: Sequence[str] = (),
) -> None:
    """What a paused run waits for: its request (each call with its id and arguments), and
    the ``toolloop resume`` command (``command``, without the decision) that answers it."""
    request = result.request
    records = len(result.records)
    parts = [f"paused: run {result.run_id} waits for a human"]
    parts.append(f"{records} record{'s' * (records != 1)} so far")
    used = usage_summary(result.usage)
    if used:
        parts.append(used)
    if elapsed is not None:
        parts.append(ms(elapsed))
    out.write("\n" + " · ".join(parts) + "\n")
    allowed: list[str] = ["approve", "reject"]
    if request is not None:
        allowed = list(request.allowed)
        out.write(f"{request.kind}: {' '.join(request.reason.split())}\n")
        for call in request.tool_calls:
            arguments = json.dumps(redact(call.arguments), ensure_ascii=False, default=str)
            why = f" ({' '.join(call.why.split())})" if call.why else ""
            out.write(f"  call {call.call_id}: {call.tool_name} {arguments}{why}\n")
        out.write("allowed: " + ", ".join(allowed) + "\n")
    first = allowed[0] if allowed else "approve"
    decision = _DECISION_FLAGS.get(first, f"--{first}")
    if first == "edit" and request is not None and request.tool_calls:
        call = request.tool_calls[0]
        arguments = json.dumps(redact(call.arguments), ensure_ascii=False, default=str)
        decision = shlex.join(["--edit", f"{call.call_id}={arguments}"])
    out.write(f"to continue: {shlex.join(command)} {decision}\n")
    others = [_DECISION_FLAGS.get(kind, f"--{kind}") for kind in allowed[1:]]
    if others:
        out.write(f"  (or, instead of {decision.split()[0]}: {', '.join(others)})\n")
    if written:
        out.write("\n" + "\n".join(written) + "\n")
    out.flush()


async def stream_answer(
    out: TextIO,
    model: ChatModel,
    result: LoopResult,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    settings: ModelSettings | None = None,
    timeout: float | None = None,
) -> str:
    """Stream the final answer to ``out`` as it comes; return it whole. An answer cut off
    by the token limit is followed by a one-line notice.

    Raises:
        AnswerError: the answer did not end within ``timeout`` seconds.
    """
    out.write("\nanswer:\n")
    out.flush()
    pieces: list[str] = []
    with anyio.move_on_after(timeout) as scope:
        async with stream_final_answer(
            model, result, max_tokens=max_tokens, temperature=temperature, settings=settings
        ) as text:
            async for piece in text:
                pieces.append(piece)
                out.write(piece)
                out.flush()
    out.write("\n")
    if scope.cancelled_caught:
        out.flush()
        raise AnswerError(
            f"the final answer's model call did not finish within {timeout} s "
            "(--model-timeout); what came of it is above",
            done_plans=result.done_plans,
        )
    if text.cut_off:
        limit = f" ({max_tokens} tokens)" if max_tokens is not None else ""
        out.write(f"note: the answer was cut off by the token limit{limit}; raise --max-tokens\n")
    # the answer is one more model call of the run: the run's usage in all
    in_all = usage_summary(
        result.usage + (text.usage if text.usage is not None else Usage.unknown())
    )
    if in_all:
        out.write(f"with the answer: {in_all}\n")
    out.flush()
    return "".join(pieces)
