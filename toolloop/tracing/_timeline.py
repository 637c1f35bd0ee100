"""A timeline picture of a run: one self-contained SVG file (no script, nothing fetched).

Time runs left to right, for any product (it reads the events every run publishes). Each
model call is a bar (purple; with what it asked for and its usage beside it), each tool
call a bar under the turn that asked for it, in order, so calls that overlap in time
overlap on the page: green a call that succeeded, red one that failed; a command refused
before its tool ran (unknown tool, bad arguments) is a thin red tick. The loop's rounds
start with their planner call (a blue bar, its model calls under it; hatched when tools
started while the plan was still streaming; orange with a bolt where the short-circuit hung
up). The status agent's statuses are a band of their own, in the order they were set. A
pause for a human is an amber line (and what the run asks), a resume a green one; the end
says the stop reason, the summary the usage. A run called as a tool (a child run) is drawn
under the call that started it, indented: its model calls and tool calls. Hovering a bar
shows its details (SVG ``<title>``). A trace of several runs draws each run after the other.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..flow import FlowEvent
from ..models import Usage
from ..runner import json_safe
from ._jsonl import EventTrace
from ._redact import redact
from ._shape import CallSpan, ModelSpan, RoundSpan, RunShape

__all__ = ["render_timeline", "write_timeline"]

_WIDTH = 1120
_LABEL_W = 360  # the label column
_LEFT = _LABEL_W + 16  # where time 0 is
_RIGHT = _WIDTH - 150  # where the last tick is; room for the text after a bar
_ROW = 20
_INDENT = 16  # a child run's rows, under its parent's call
_ROUND_HEAD = 26
_ROUND_GAP = 10
_TOP = 104  # first row
_CHAR_W = 6.6  # monospace at 11px, for truncation
_MAX_TITLE = 2000

_STYLE = """
svg { background: #ffffff; }
text { font-family: ui-sans-serif, system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans',
       Helvetica, Arial, sans-serif; fill: #1f2328; }
.title { font-size: 16px; font-weight: 600; }
.summary { font-size: 12px; fill: #57606a; }
.label, .after, .tick { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas,
       'DejaVu Sans Mono', monospace; font-size: 11px; }
.round-label { font-size: 12px; font-weight: 600; }
.after { fill: #57606a; }
.after.failed { fill: #b42318; }
.tick { fill: #6e7781; font-size: 10px; }
.grid { stroke: #d0d7de; stroke-width: 1; }
.band { fill: #f6f8fa; }
.band.odd { fill: #eef2f6; }
.plan { fill: #4e79a7; }
.plan.short-circuited { fill: #f28e2b; }
.plan.failed { fill: #b42318; }
.call.ok { fill: #59a14f; }
.call.failed { fill: #e15759; }
.call.refused { fill: #e15759; }
.call.running { fill: #bab0ac; }
.model.ok { fill: #8e6bbf; }
.model.cut { fill: #b9a3d9; }
.model.failed { fill: #b42318; }
.model.running { fill: #bab0ac; }
.plan.paused, .legend-swatch.paused { fill: #e0a800; }
.status { fill: #e6def3; stroke: #ffffff; stroke-width: 1; }
.status.odd { fill: #d3c4ec; }
.status-text { font-size: 10px; }
.pause { stroke: #e0a800; stroke-width: 2; stroke-dasharray: 4 2; }
.resume { stroke: #2da44e; stroke-width: 2; stroke-dasharray: 4 2; }
.pause-text { font-size: 11px; fill: #8a6100; font-weight: 600; }
.resume-text { font-size: 11px; fill: #1a7f37; font-weight: 600; }
.run-title { font-size: 13px; font-weight: 600; }
.finish { stroke: #1f2328; stroke-width: 1.5; stroke-dasharray: 5 3; }
.failure { stroke: #b42318; stroke-width: 2; }
.short-circuit, .legend-bolt { fill: #f28e2b; stroke: #1f2328; stroke-width: 1; }
.marker-text { font-size: 11px; font-weight: 600; }
.legend { font-size: 11px; fill: #57606a; }
"""


def _fmt(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    return f"{seconds:.1f} s"


def _tick_step(total: float) -> float:
    raw = total / 8
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power  # pragma: no cover


def _tick_label(t: float, step: float, span: float) -> str:
    """A tick at ``t`` on an axis of ``span`` seconds marked every ``step``: in one unit
    along the axis (ms up to a second, s past it), with the decimals the step needs
    (``0.25 ms``, ``1.5 s``), so that no two ticks read the same at any scale."""
    unit, factor = ("ms", 1000.0) if span <= 1 else ("s", 1.0)
    if t == 0:
        return f"0 {unit}"
    scaled = step * factor
    decimals = max(0, -math.floor(math.log10(scaled) + 1e-9))
    if abs(scaled * 10**decimals - round(scaled * 10**decimals)) > 1e-9:
        decimals += 1  # a step of 2.5 x 10^n
    return f"{t * factor:.{decimals}f} {unit}"


def _short(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: max(chars - 1, 0)] + "…"


def _json(value: Any) -> str:
    """A value as short JSON text, cut before it is scrubbed of secrets: a label or a tooltip
    never reads the whole of a huge value."""
    safe = redact(json_safe(value, max_string=400))
    return json.dumps(safe, ensure_ascii=False, separators=(", ", ": "))


def _call_label(call: CallSpan) -> str:
    args = ", ".join(
        f"{k}={_json(v)}" for k, v in redact(json_safe(call.kwargs, max_string=400)).items()
    )
    return f"#{call.index} {call.tool_name}({args})"


def _call_title(call: CallSpan) -> str:
    lines = [
        f"round {call.round_index}, command #{call.index}: {call.tool_name}",
        f"purpose: {redact(call.purpose)}",
        f"kwargs: {_json(call.kwargs)}",
    ]
    if call.ended is not None:
        lines.append(
            f"{_fmt(call.started)} → {_fmt(call.ended)} ({_fmt(call.ended - call.started)})"
        )
    if not call.ran:
        lines.append("refused before the tool ran")
    if call.kept is not None:
        lines.append(call.kept)
    if call.success:
        lines.append(f"result: {_json(call.result)}")
    elif call.error is not None:
        lines.append(f"error: {redact(call.error)}")
    elif call.ended is None:
        lines.append("did not finish")
    return _short_block("\n".join(lines))


def _short_block(text: str) -> str:
    return text if len(text) <= _MAX_TITLE else text[: _MAX_TITLE - 1] + "…"


class _Canvas:
    def __init__(self) -> None:
        self.root = ET.Element(
            "svg",
            {
                "xmlns": "http://www.w3.org/2000/svg",
                "version": "1.1",
                "width": str(_WIDTH),
                "font-size": "11",
            },
        )
        ET.SubElement(self.root, "style").text = _STYLE
        defs = ET.SubElement(self.root, "defs")
        pattern = ET.SubElement(
            defs,
            "pattern",
            {
                "id": "streamed",
                "patternUnits": "userSpaceOnUse",
                "width": "6",
                "height": "6",
                "patternTransform": "rotate(45)",
            },
        )
        ET.SubElement(pattern, "rect", {"width": "6", "height": "6", "fill": "#4e79a7"})
        ET.SubElement(pattern, "rect", {"width": "2.5", "height": "6", "fill": "#a0bcd8"})
        self.background = ET.SubElement(self.root, "g", {"class": "bands"})
        self.grid = ET.SubElement(self.root, "g", {"class": "grid-lines"})
        self.body = ET.SubElement(self.root, "g", {"class": "rows"})
        self.marks = ET.SubElement(self.root, "g", {"class": "markers"})

    def text(
        self,
        parent: ET.Element,
        x: float,
        y: float,
        text: str,
        cls: str,
        *,
        anchor: str = "start",
        title: str | None = None,
    ) -> ET.Element:
        node = ET.SubElement(
            parent,
            "text",
            {"x": f"{x:.1f}", "y": f"{y:.1f}", "class": cls, "text-anchor": anchor},
        )
        node.text = text
        if title:
            ET.SubElement(node, "title").text = title
        return node

    def rect(
        self,
        parent: ET.Element,
        x: float,
        y: float,
        w: float,
        h: float,
        cls: str,
        *,
        title: str | None = None,
        **attrs: str,
    ) -> ET.Element:
        node = ET.SubElement(
            parent,
            "rect",
            {
                "x": f"{x:.1f}",
                "y": f"{y:.1f}",
                "width": f"{max(w, 0):.1f}",
                "height": f"{h:.1f}",
                "class": cls,
                **attrs,
            },
        )
        if title:
            ET.SubElement(node, "title").text = title
        return node

    def line(
        self, parent: ET.Element, x1: float, y1: float, x2: float, y2: float, cls: str
    ) -> ET.Element:
        return ET.SubElement(
            parent,
            "line",
            {
                "x1": f"{x1:.1f}",
                "y1": f"{y1:.1f}",
                "x2": f"{x2:.1f}",
                "y2": f"{y2:.1f}",
                "class": cls,
            },
        )


@dataclass(frozen=True, slots=True)
class _Rows:
    """Where one run's rows are drawn: the canvas, the run's time scale, and its end (a
    span still open ends there)."""

    canvas: _Canvas
    x_of: Callable[[float], float]
    run_end: float


def _beside(
    canvas: _Canvas, parent: ET.Element, x1: float, x2: float, y: float, text: str, cls: str
) -> None:
    """Write ``text`` after the bar from ``x1`` to ``x2``, or before it if there is more room
    there; cut to fit."""
    right = int((_WIDTH - 12 - (x2 + 6)) / _CHAR_W)
    left = int((x1 - 6 - (_LABEL_W - 20)) / _CHAR_W)
    if len(text) <= right or (len(text) > left and right >= min(left, 30)):
        canvas.text(parent, x2 + 6, y, _short(text, max(right, 8)), cls)
    else:
        canvas.text(parent, x1 - 6, y, _short(text, left), cls, anchor="end")


def _marker_label(canvas: _Canvas, x: float, y: float, text: str, *, title: str = "") -> None:
    if x + 4 + len(text) * 7 > _WIDTH - 8:
        canvas.text(canvas.marks, x - 4, y, text, "marker-text", anchor="end", title=title)
    else:
        canvas.text(canvas.marks, x + 4, y, text, "marker-text", title=title)


def _bolt(x: float, y: float, size: float = 16) -> str:
    """A lightning bolt centred on (x, y), as polygon points."""
    s = size / 16
    points = [(1, -8), (-5, 1), (-1, 1), (-3, 8), (5, -2), (1, -2), (3, -8)]
    return " ".join(f"{x + px * s:.1f},{y + py * s:.1f}" for px, py in points)


def render_timeline(
    source: EventTrace | Iterable[FlowEvent],
    *,
    title: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> str:
    """The timeline of a run as an SVG document (a string).

    Args:
        source: an :class:`EventTrace` (e.g. from :func:`read_trace`) or the run's events.
        title: the picture's title; by default the request from the trace's ``meta``.
        meta: used instead of the trace's ``meta`` (``request``, ``planner``, ``model``).
    """
    if isinstance(source, EventTrace):
        events = source.events
        info: Mapping[str, Any] = meta if meta is not None else source.meta
    else:
        events = list(source)
        info = meta or {}
    shapes = RunShape.per_run(events) or [RunShape()]
    canvas = _Canvas()
    root = canvas.root
    request = info.get("request")
    heading = title or (f"toolloop · {request}" if isinstance(request, str) else "toolloop run")
    canvas.text(root, 16, 28, _short(redact(heading), 150), "title")
    extras = []
    for key in ("planner", "model"):
        value = info.get(key)
        if isinstance(value, str) and value:
            extras.append(f"{key}: {redact(value)}")
    y0 = 0.0
    bottom = 0.0
    for shape in shapes:
        bottom = _draw_run(canvas, shape, y0, extras, several=len(shapes) > 1)
        y0 = bottom - 20

    # -- legend ----------------------------------------------------------------------------
    y = bottom + 18
    x = 16.0
    planned = any(r.planned for shape in shapes for r in shape.rounds)
    items: list[tuple[str, str, str | None]] = [("model ok", "model call", None)]
    if planned:
        items += [
            ("plan", "planner call", None),
            ("plan", "plan streamed while tools ran", "url(#streamed)"),
            ("plan short-circuited", "short-circuit (stream closed)", None),
        ]
    items += [
        ("call ok", "tool call ok", None),
        ("call failed", "tool call failed", None),
        ("call refused", "refused before running", None),
    ]
    if any(shape.statuses for shape in shapes):
        items.append(("status", "status", None))
    if any(shape.pauses for shape in shapes):
        items.append(("paused", "paused for a human", None))
    for cls, label, fill in items:
        extra = {"style": f"fill: {fill}"} if fill else {}
        width = 3.0 if cls == "call refused" else 14.0
        if x + width + 20 + len(label) * 6.2 > _WIDTH - 8:  # on the next line
            x, y = 16.0, y + 18
        canvas.rect(root, x, y - 9, width, 10, f"legend-swatch {cls}", **extra)
        if cls == "plan short-circuited":
            ET.SubElement(
                root, "polygon", {"points": _bolt(x + width, y - 4, 14), "class": "legend-bolt"}
            )
            width += 6
        canvas.text(root, x + width + 6, y, label, "legend")
        x += width + 14 + len(label) * 6.2
    height = y + 16
    root.set("height", str(int(height)))
    root.set("viewBox", f"0 0 {_WIDTH} {int(height)}")
    canvas.background.insert(
        0,
        ET.Element(
            "rect",
            {"x": "0", "y": "0", "width": str(_WIDTH), "height": str(int(height)), "fill": "#fff"},
        ),
    )
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _usage_text(usage: Usage | None) -> str:
    if usage is None:
        return ""
    parts = []
    if usage.input_tokens is not None:
        parts.append(f"{usage.input_tokens} in")
    if usage.output_tokens is not None:
        parts.append(f"{usage.output_tokens} out")
    text = " / ".join(parts) + " tokens" if parts else "tokens unknown"
    if usage.unreported_requests:
        unknown = usage.unreported_requests
        text += f" ({unknown} call{'s' * (unknown != 1)} unreported)"
    return text


def _draw_run(
    canvas: _Canvas, shape: RunShape, y0: float, extras: list[str], *, several: bool
) -> float:
    """Draw one run from ``y0`` (its summary, axis, rows and markers); return its bottom."""
    top = y0 + _TOP
    end = max(shape.end, 1e-3)
    step = _tick_step(end)
    span = math.ceil(end / step - 1e-9) * step
    scale = (_RIGHT - _LEFT) / span

    def x_of(t: float) -> float:
        return _LEFT + max(t, 0.0) * scale

    # -- summary ---------------------------------------------------------------------------
    calls = shape.calls
    models = shape.model_calls
    failed = sum(1 for c in calls if c.success is False)
    word = "round" if any(r.planned for r in shape.rounds) else "turn"
    parts = [f"run {shape.execution_id}"] if several and shape.execution_id else []
    parts += [
        f"{len(models)} model call{'s' * (len(models) != 1)}",
        f"{len(shape.rounds)} {word}{'s' * (len(shape.rounds) != 1)}",
        f"{len(calls)} tool call{'s' * (len(calls) != 1)}"
        + (f", {failed} failed" if failed else ""),
    ]
    usage = _usage_text(shape.usage)
    if usage:
        parts.append(f"usage: {usage}")
    if shape.stop_reason is not None:
        parts.append(f"stop: {shape.stop_reason}")
    elif shape.paused:
        parts.append(f"paused: waiting for a human ({redact(shape.pauses[-1].what)})")
    if shape.error is not None:
        parts.append("FAILED")
    parts.append(_fmt(shape.end))
    parts += extras
    canvas.text(canvas.root, 16, y0 + 50, _short(" · ".join(parts), 170), "summary")

    # -- rows ------------------------------------------------------------------------------
    y: float = top
    if shape.statuses:
        y = _status_row(canvas, shape, y, x_of)
    short_circuits: list[tuple[float, float]] = []
    rows = _Rows(canvas, x_of, shape.end)
    blocks: list[tuple[float, int, RoundSpan | ModelSpan]] = [
        (r.start, 1, r) for r in shape.rounds
    ] + [(m.started, 0, m) for m in shape.models]
    blocks.sort(key=lambda block: (block[0], block[1]))
    for n, (_, _, block) in enumerate(blocks):
        first = y
        if isinstance(block, RoundSpan):
            y = _round_rows(rows, block, y, shape, short_circuits)
        else:
            y = _model_row(rows, canvas.body, block, y, label_x=16)
        canvas.rect(
            canvas.background, 0, first - 4, _WIDTH, y - first + 4, "band odd" if n % 2 else "band"
        )
        y += _ROUND_GAP if isinstance(block, RoundSpan) else 4
    if not blocks:
        canvas.text(canvas.body, _LEFT, y + 14, "nothing started", "label")
        y += _ROW
    bottom = y

    # -- axis and grid ---------------------------------------------------------------------
    ticks = round(span / step)
    for i in range(ticks + 1):
        t = i * step
        x = x_of(t)
        canvas.line(canvas.grid, x, top - 10, x, bottom, "grid")
        canvas.text(canvas.grid, x, top - 16, _tick_label(t, step, span), "tick", anchor="middle")

    # -- markers ---------------------------------------------------------------------------
    if shape.finished_at is not None:
        x = x_of(shape.finished_at)
        canvas.line(canvas.grid, x, top - 8, x, bottom, "finish")
        _marker_label(
            canvas, x, top - 30, f"finished: {shape.stop_reason} at {_fmt(shape.finished_at)}"
        )
    if shape.failed_at is not None:
        x = x_of(shape.failed_at)
        canvas.line(canvas.marks, x, top - 8, x, bottom, "failure")
        error = redact(shape.error or "")
        _marker_label(canvas, x, top - 46, _short(f"failed: {error}", 90), title=error)
    below = bottom + 4
    for pause in shape.pauses:
        x = x_of(pause.at)
        group = ET.SubElement(canvas.marks, "g", {"class": "pause-marker"})
        canvas.line(group, x, top - 8, x, bottom, "pause")
        what = redact(pause.what)
        below += 14
        canvas.text(
            group,
            x + 4 if x < _WIDTH / 2 else x - 4,
            below,
            _short(f"paused at {_fmt(pause.at)}: waiting for a human · {what}", 110),
            "pause-text",
            anchor="start" if x < _WIDTH / 2 else "end",
            title="\n".join(_json(r) for r in pause.requests) or what,
        )
    for at in shape.resumes:
        x = x_of(at)
        group = ET.SubElement(canvas.marks, "g", {"class": "resume-marker"})
        canvas.line(group, x, top - 8, x, bottom, "resume")
        below += 14
        canvas.text(
            group,
            x + 4 if x < _WIDTH / 2 else x - 4,
            below,
            f"resumed at {_fmt(at)}",
            "resume-text",
            anchor="start" if x < _WIDTH / 2 else "end",
        )
    for x, yy in short_circuits:
        group = ET.SubElement(canvas.marks, "g", {"class": "short-circuit-marker"})
        bolt = ET.SubElement(
            group, "polygon", {"points": _bolt(x, yy, 22), "class": "short-circuit"}
        )
        ET.SubElement(bolt, "title").text = (
            "short-circuit: next_action was settled as 'response', the planner closed the "
            "stream here without reading the rest"
        )
    return below


def _status_row(
    canvas: _Canvas, shape: RunShape, y: float, x_of: Callable[[float], float]
) -> float:
    """The statuses the run's steps set, one after the other, as a band of segments."""
    body = ET.SubElement(canvas.body, "g", {"class": "statuses"})
    mid = y + _ROW / 2
    canvas.text(body, 16, mid + 4, "status", "round-label")
    marks = shape.statuses
    for n, mark in enumerate(marks):
        until = marks[n + 1].at if n + 1 < len(marks) else shape.end
        x1, x2 = x_of(mark.at), max(x_of(until), x_of(mark.at) + 2)
        title = f"{mark.node} → {mark.status} at {_fmt(mark.at)}"
        canvas.rect(
            body,
            x1,
            y + 2,
            x2 - x1,
            _ROW - 4,
            "status odd" if n % 2 else "status",
            title=title,
            **{"data-status": mark.status, "data-node": mark.node},
        )
        room = int((x2 - x1 - 4) / 5.6)
        if room >= 4:
            canvas.text(body, x1 + 2, mid + 3, _short(mark.status, room), "status-text")
    shown = " → ".join(m.status for m in marks)
    canvas.text(
        body, 100, mid + 4, _short(f"{len(marks)} set", 30), "label", title=_short_block(shown)
    )
    return y + _ROW + 6


def _model_row(
    rows: _Rows, body: ET.Element, model: ModelSpan, y: float, *, label_x: float = 40
) -> float:
    """One model call: its bar, what it asked for, its usage."""
    canvas, x_of, run_end = rows.canvas, rows.x_of, rows.run_end
    mid = y + _ROW / 2
    ended = model.ended if model.ended is not None else run_end
    x1, x2 = x_of(model.started), x_of(ended)
    if model.ended is None:
        state, said = "running", "did not finish"
    elif model.error is not None:
        state, said = "failed", f"failed: {redact(model.error)}"
    elif model.closed_early:
        state, said = "cut", "closed early"
    else:
        state = "ok"
        if model.tool_calls:
            n = len(model.tool_calls)
            said = f"→ {n} tool call{'s' * (n != 1)}: {', '.join(model.tool_calls)}"
        elif model.text:
            said = f"→ {_short(redact(model.text), 40)!r}"
        else:
            said = f"→ {model.finish_reason or 'nothing'}"
    usage = _usage_text(model.usage)
    after = " · ".join(p for p in (said, usage, _fmt(ended - model.started)) if p)
    title_lines = [f"model call #{model.index}, {_fmt(model.started)} → {_fmt(ended)}", after]
    if model.text:
        title_lines.append(f"said: {redact(model.text[:400])}")
    title = _short_block("\n".join(title_lines))
    canvas.text(body, label_x, mid + 4, f"model call #{model.index}", "label", title=title)
    canvas.rect(
        body,
        x1,
        y + 4,
        max(x2 - x1, 2.0),
        _ROW - 8,
        f"model {state}",
        title=title,
        **{"data-call-index": str(model.index)},
    )
    _beside(
        canvas,
        body,
        x1,
        max(x2, x1 + 2),
        mid + 4,
        after,
        "after failed" if state == "failed" else "after",
    )
    return y + _ROW


def _round_rows(
    rows: _Rows,
    rnd: RoundSpan,
    y: float,
    shape: RunShape,
    short_circuits: list[tuple[float, float]],
) -> float:
    """Draw one turn (the loop's round: its plan row and its model calls; then its tool
    calls); return the y below it."""
    canvas, x_of, run_end = rows.canvas, rows.x_of, rows.run_end
    body = ET.SubElement(canvas.body, "g", {"class": "round", "data-round": str(rnd.index)})
    mid = y + _ROUND_HEAD / 2
    if not rnd.planned:  # a turn of a product that tells no plan: its calls only
        canvas.text(body, 16, mid + 4, f"turn {rnd.index}", "round-label")
        n = len(rnd.calls)
        canvas.text(body, 100, mid + 4, f"{n} tool call{'s' * (n != 1)}", "label")
        y += _ROUND_HEAD
        for call in rnd.calls:
            y = _call_row(rows, body, call, y)
        return y
    canvas.text(body, 16, mid + 4, f"round {rnd.index}", "round-label")
    # the plan
    plan_end = rnd.plan_ended if rnd.plan_ended is not None else run_end
    x1, x2 = x_of(rnd.plan_started), x_of(plan_end)
    cls = "plan"
    extra: dict[str, str] = {}
    paused = [p for p in shape.pauses if p.at >= rnd.plan_started]
    if rnd.plan_ended is None and paused:
        cls += " paused"
        plan_end = paused[0].at
        x2 = x_of(plan_end)
        after = f"paused: waiting for a human · {redact(paused[0].what)}"
    elif rnd.plan_ended is None:
        cls += " failed"
        after = "planner call did not finish"
    elif rnd.short_circuited:
        cls += " short-circuited"
        after = f"→ response, short-circuit after {_fmt(plan_end - rnd.plan_started)}"
    else:
        decided = rnd.next_action or "?"
        if decided == "execute":
            decided += f" {rnd.commands} command{'s' * (rnd.commands != 1)}"
        elif rnd.stop_reason and rnd.stop_reason != "answered":
            decided += f" ({rnd.stop_reason})"
        after = f"→ {decided} · {_fmt(plan_end - rnd.plan_started)}"
        if rnd.streamed:
            cls += " streamed"
            extra["style"] = "fill: url(#streamed)"
            after += " · streamed"
    canvas.text(body, 100, mid + 4, "plan", "label")
    title = "\n".join(
        [
            f"round {rnd.index}: planner call, {_fmt(rnd.plan_started)} → {_fmt(plan_end)}",
            after,
            *(f"note: {note}" for note in rnd.notes),
        ]
    )
    canvas.rect(body, x1, y + 5, max(x2 - x1, 2), _ROUND_HEAD - 10, cls, title=title, **extra)
    _beside(canvas, body, x1, max(x2, x1 + 2), mid + 4, after, "after")
    if rnd.short_circuited and rnd.plan_ended is not None:
        short_circuits.append((x2, mid))
    y += _ROUND_HEAD
    # the plan's model calls, then the tool calls
    for model in rnd.models:
        y = _model_row(rows, body, model, y)
    for call in rnd.calls:
        y = _call_row(rows, body, call, y)
    return y


def _call_row(rows: _Rows, body: ET.Element, call: CallSpan, y: float, *, depth: int = 0) -> float:
    canvas, x_of, run_end = rows.canvas, rows.x_of, rows.run_end
    mid = y + _ROW / 2
    label_x = 40 + _INDENT * depth
    label = _short(_call_label(call), int((_LABEL_W - label_x) / _CHAR_W))
    title = _call_title(call)
    canvas.text(body, label_x, mid + 4, label, "label", title=title)
    ended = call.ended if call.ended is not None else run_end
    x1, x2 = x_of(call.started), x_of(ended)
    if not call.ran:
        cls, width = "call refused", 3.0
        after = f"refused: {redact(call.error or '')}"
    else:
        state = "running" if call.success is None else "ok" if call.success else "failed"
        cls, width = f"call {state}", max(x2 - x1, 2.0)
        after = _fmt(ended - call.started)
        if call.success is False:
            after += f" · {redact(call.error or 'failed')}"
        elif call.success is None:
            after += " · did not finish"
    canvas.rect(body, x1 - (1.5 if not call.ran else 0), y + 4, width, _ROW - 8, cls, title=title)
    cls = "after failed" if call.success is False else "after"
    _beside(canvas, body, x1, x1 + width, mid + 4, after, cls)
    if call.child is not None:  # a run as a tool: the child's rows, under its call
        return _child_rows(rows, body, call, call.child, y + _ROW, depth + 1)
    return y + _ROW


def _child_rows(
    rows: _Rows, body: ET.Element, call: CallSpan, child: RunShape, y: float, depth: int
) -> float:
    """The run a call started (a run as a tool), indented under the call: its model calls
    and its tool calls in the order they started (its own children under theirs)."""
    group = ET.SubElement(
        body,
        "g",
        {
            "class": "child-run",
            "data-run-id": child.execution_id or "",
            "data-call-id": call.call_id,
            "data-depth": str(depth),
        },
    )
    label_x = 40 + _INDENT * depth
    said = f"run {child.execution_id or '?'}"
    if child.paused:
        said += f" · paused: {redact(child.pauses[-1].what)}"
    elif child.stop_reason is not None:
        said += f" · {child.stop_reason}"
    rows.canvas.text(group, label_x - 12, y + _ROW / 2 + 4, _short(f"↳ {said}", 60), "label child")
    y += _ROW
    spans: list[tuple[float, int, ModelSpan | CallSpan]] = [
        (m.started, 0, m) for m in child.model_calls
    ] + [(c.started, 1, c) for c in child.calls]
    spans.sort(key=lambda span: (span[0], span[1]))
    for _, _, span in spans:
        if isinstance(span, ModelSpan):
            y = _model_row(rows, group, span, y, label_x=label_x)
        else:
            y = _call_row(rows, group, span, y, depth=depth)
    return y


def write_timeline(
    destination: str | Path,
    source: EventTrace | Iterable[FlowEvent],
    *,
    title: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> None:
    """Write :func:`render_timeline`'s SVG to a file."""
    Path(destination).write_text(render_timeline(source, title=title, meta=meta), encoding="utf-8")
