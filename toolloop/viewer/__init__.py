"""The live run viewer: a small local web page that shows runs as they happen.

Each run's rounds, the plan streaming, the tool calls as bars on a shared time axis with
their state, the records with their results and errors, the short-circuit, and the usage
when the events carry it. It reads the same typed events as everything else:

- in an application: ``on_event=ViewerSink()`` serves the page from the process itself
  (``ViewerSink("http://127.0.0.1:8765/")`` sends the events to a running ``toolloop view``
  instead, so one page follows run after run);
- from a trace file: ``toolloop view run.jsonl`` replays it, ``--follow`` tails it.

The page is plain HTML, CSS and JavaScript shipped in the package: no build step, nothing
from a CDN, and it listens on 127.0.0.1 only.
"""

from __future__ import annotations

from ._replay import replay_trace as replay_trace
from ._server import MAX_EVENTS as MAX_EVENTS
from ._server import ViewerError as ViewerError
from ._server import ViewerServer as ViewerServer
from ._sink import VIEWER_VALUE_CHARS as VIEWER_VALUE_CHARS
from ._sink import ViewerSink as ViewerSink

__all__ = [
    "MAX_EVENTS",
    "VIEWER_VALUE_CHARS",
    "ViewerError",
    "ViewerServer",
    "ViewerSink",
    "replay_trace",
]
