"""``on_event=ViewerSink()``: a run's events, live in a browser."""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..flow import FlowEvent
from ..tracing import dump_event, redact
from ._server import ViewerError, ViewerServer

__all__ = ["VIEWER_VALUE_CHARS", "ViewerSink"]

VIEWER_VALUE_CHARS = 4_000
"""A string in an event sent to the viewer keeps at most this many characters."""

_LOG = logging.getLogger("toolloop")
_SEND_TIMEOUT = 5.0
_BATCH = 500


class ViewerSink:
    """Shows a run's events live in a browser: pass it as ``on_event``.

    ::

        with ViewerSink(port=8765) as viewer:  # serves http://127.0.0.1:8765/
            print("open", viewer.url)
            result = await async_plan_and_execute(..., on_event=viewer)

    With no ``url`` it serves the page itself, from this process, on 127.0.0.1 (``port=0``:
    any free port). With the ``url`` of a running ``toolloop view`` it sends the events
    there instead (in a thread, in batches), so one open page follows run after run of an
    application. Either way any number of runs can share one sink: the page shows each.

    Each event is made JSON data as :func:`toolloop.tracing.dump_event` does (secrets
    scrubbed, strings cut at :data:`VIEWER_VALUE_CHARS`) in the caller's thread; nothing
    else runs there, and a viewer that went away never fails the run (it is logged once to
    the ``toolloop`` logger).

    Args:
        url: a ``toolloop view`` to send to, e.g. ``"http://127.0.0.1:8765/"``.
        port: with no ``url``, the port to serve on.
        meta: what the runs are (e.g. ``{"request": ...}``), shown on the page; scrubbed.

    Raises:
        ViewerError: ``url`` is not on this machine, or the port cannot be had.
    """

    def __init__(
        self, url: str | None = None, *, port: int = 0, meta: Mapping[str, Any] | None = None
    ) -> None:
        self._meta = redact(dict(meta)) if meta else None
        self._seen: set[str] = set()
        self._server: ViewerServer | None = None
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._warned = False
        self._closed = False
        if url is None:
            self._server = ViewerServer(port=port)
            self._url = self._server.url
        else:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
                raise ViewerError(
                    f"a ViewerSink sends to a `toolloop view` on this machine "
                    f"(http://127.0.0.1:PORT/), got {url!r}"
                )
            self._url = url if url.endswith("/") else url + "/"
            self._sender = threading.Thread(
                target=self._send_forever, name="toolloop-viewer-sink", daemon=True
            )
            self._sender.start()

    @property
    def url(self) -> str:
        """The page to open."""
        return self._url

    @property
    def server(self) -> ViewerServer | None:
        """The server this sink runs (None when it sends to a ``toolloop view``)."""
        return self._server

    def __call__(self, event: FlowEvent) -> None:
        if self._closed:
            return
        lines = []
        if self._meta is not None and event.execution_id not in self._seen:
            self._seen.add(event.execution_id)
            meta = {"kind": "run_meta", "execution_id": event.execution_id, "at": 0.0}
            lines.append(json.dumps({**meta, "meta": self._meta}, ensure_ascii=False))
        data = dump_event(event, max_value_chars=VIEWER_VALUE_CHARS)
        lines.append(json.dumps(data, ensure_ascii=False, default=str))
        if self._server is not None:
            self._server.publish_lines(lines)
        else:
            for line in lines:
                self._queue.put(line)

    def _send_forever(self) -> None:
        done = False
        while not done:
            first = self._queue.get()
            batch: list[str] = []
            item: str | None = first
            while item is not None:
                batch.append(item)
                if len(batch) >= _BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if item is None:
                done = True
            if batch:
                self._post(batch)

    def _post(self, batch: list[str]) -> None:
        request = urllib.request.Request(
            self._url + "events",
            data=("\n".join(batch) + "\n").encode(),
            headers={"Content-Type": "application/x-ndjson"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=_SEND_TIMEOUT) as answer:
                answer.read()
        except (OSError, urllib.error.URLError) as exc:
            if not self._warned:
                self._warned = True
                _LOG.warning(
                    "the viewer at %s did not take the run's events (%s); is `toolloop view` "
                    "running? The run goes on; events are dropped until it answers",
                    self._url,
                    exc,
                )

    def close(self) -> None:
        """Send what is pending (waiting up to 10 s) and stop; the page keeps what it shows."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        if self._sender is not None:
            self._queue.put(None)
            self._sender.join(timeout=10)

    def __enter__(self) -> ViewerSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
