"""A trace file (JSON lines, see :mod:`toolloop.tracing`) replayed into a viewer, and tailed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ..tracing import TRACE_FORMAT
from ._server import ViewerServer

__all__ = ["replay_trace"]

_POLL = 0.2


def _line_event(line: str, number: int, source: str) -> dict[str, Any] | None:
    """The event a trace line stands for (a header becomes ``trace_header``), or a note."""
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"kind": "viewer_note", "text": f"{source} line {number} is not JSON ({exc.msg})"}
    if not isinstance(data, dict):
        return {"kind": "viewer_note", "text": f"{source} line {number} is not a JSON object"}
    if "toolloop_trace" in data:
        if data["toolloop_trace"] != TRACE_FORMAT:
            return {
                "kind": "viewer_note",
                "text": f"{source} has trace format {data['toolloop_trace']!r}; this viewer "
                f"reads format {TRACE_FORMAT}",
            }
        return {"kind": "trace_header", "meta": data.get("meta") or {}, "source": source,
                "started": data.get("started")}  # fmt: skip
    if not isinstance(data.get("kind"), str):
        return {"kind": "viewer_note", "text": f"{source} line {number} has no 'kind'"}
    return data


def replay_trace(
    server: ViewerServer,
    path: str | Path,
    *,
    follow: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """Publish the events of a trace file to ``server``; with ``follow``, keep publishing the
    lines appended to it (as ``tail -f`` does) until ``stop`` is set.

    The header's ``meta`` is shown on the page; a line that is not an event is shown as a
    note, never fatal. A file that shrinks (written anew) is read again from its start.

    Returns:
        The number of lines read.

    Raises:
        OSError: the file cannot be opened.
    """
    source = Path(path)
    stop = stop or threading.Event()
    number = 0
    position = 0
    pending = b""
    with source.open("rb") as file:
        while True:
            size = source.stat().st_size if follow else -1
            if follow and size < position:  # written anew: start over
                file.seek(0)
                position, pending = 0, b""
                server.publish({"kind": "viewer_note", "text": f"{source.name} was rewritten"})
            chunk = file.read()
            position += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            if not follow and pending:  # the last line, without its line end
                complete.append(pending)
                pending = b""
            events = []
            for raw in complete:
                number += 1
                event = _line_event(raw.decode("utf-8", "replace"), number, source.name)
                if event is not None:
                    events.append(json.dumps(event, ensure_ascii=False))
            server.publish_lines(events)
            if not follow or stop.wait(_POLL):
                return number
