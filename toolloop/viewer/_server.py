"""The viewer's web server: the page, the events as Server-Sent Events, and a way in for them.

A :class:`ViewerServer` runs in a thread of its own (so it serves the same on asyncio, trio
or no event loop at all) and answers on 127.0.0.1 only:

- ``GET /``, ``/viewer.js``, ``/viewer.css``: the page, shipped in the package (no build
  step, nothing from a CDN);
- ``GET /events``: every event published so far, then each new one as it comes, as
  Server-Sent Events (a page that reconnects gets what it missed, by ``Last-Event-ID``);
- ``POST /events``: events to publish, one JSON object a line (what a
  :class:`~toolloop.viewer.ViewerSink` in another process sends).

Events are JSON-ready dicts, as :func:`toolloop.tracing.dump_event` makes them.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from .._errors import ToolloopError

__all__ = ["MAX_EVENTS", "ViewerError", "ViewerServer"]

MAX_EVENTS = 100_000
"""Events a server keeps for pages that open later (past half as many again, the oldest
are let go)."""

_MAX_POST = 16 * 1024 * 1024
_KEEPALIVE = 10.0  # seconds between comments on an idle stream (a dead page is noticed)
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/viewer.js": ("viewer.js", "text/javascript; charset=utf-8"),
    "/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ViewerError(ToolloopError):
    """The viewer cannot do what was asked: its port is taken, or an address is not local."""


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


class ViewerServer:
    """The live viewer's server (see the module docs): start it, publish events, close it.

    ::

        with ViewerServer(port=8765) as server:
            print(server.url)  # open it in a browser
            server.publish({"kind": "round_started", "execution_id": "r1", "at": 0.0, ...})

    Args:
        port: the port on 127.0.0.1 (0: any free one; see :attr:`url`).
        host: the address to listen on; only loopback addresses are accepted, since the
            page shows tool arguments and results.
        max_events: events kept for pages that open later.

    Raises:
        ViewerError: ``host`` is not a loopback address, or the port cannot be had.
    """

    def __init__(
        self, *, port: int = 0, host: str = "127.0.0.1", max_events: int = MAX_EVENTS
    ) -> None:
        if host not in _LOOPBACK:
            raise ViewerError(
                f"the viewer listens on 127.0.0.1 (or localhost, ::1) only, got host {host!r}: "
                "it shows tool arguments and results"
            )
        if max_events < 1:
            raise ValueError(f"max_events must be 1 or more, got {max_events}")
        self._max = max_events
        self._events: list[str] = []
        self._first = 0  # the id of self._events[0]
        self._changed = threading.Condition()
        self._closed = False
        self._clients = 0
        handler = _handler_for(self)
        server_class = _V6Server if ":" in host else http.server.ThreadingHTTPServer
        try:
            self._http = server_class((host, port), handler)
        except OSError as exc:
            raise ViewerError(
                f"the viewer cannot listen on {host} port {port}: {exc.strerror}; "
                "choose another port (0 picks a free one)"
            ) from exc
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="toolloop-viewer", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:8765/``."""
        host = str(self._http.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    def publish(self, event: Mapping[str, Any]) -> None:
        """Send one JSON-ready event (a dict with a ``kind``) to every page."""
        self.publish_lines([json.dumps(event, ensure_ascii=False, default=str)])

    def publish_lines(self, lines: Iterable[str]) -> None:
        """Send events already written as JSON (one object each, no line break)."""
        with self._changed:
            if self._closed:
                return
            self._events.extend(lines)
            extra = len(self._events) - self._max
            if extra > self._max // 2:  # let the oldest go, in chunks (cheap per event)
                del self._events[:extra]
                self._first += extra
            self._changed.notify_all()

    def statistics(self) -> dict[str, int]:
        """``events`` published so far, and ``pages`` connected now."""
        with self._changed:
            return {"events": self._first + len(self._events), "pages": self._clients}

    def wait_for_pages(self, count: int = 1, *, timeout: float = 30.0) -> bool:
        """Wait until ``count`` pages are connected (False if ``timeout`` passed first)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._clients >= count, timeout=timeout)

    def _after(self, last_id: int, timeout: float) -> tuple[int, list[str]] | None:
        """The events after ``last_id`` (waiting up to ``timeout``); None once closed."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._closed or self._first + len(self._events) > last_id + 1,
                timeout=timeout,
            )
            if self._closed:
                return None
            start = max(last_id + 1, self._first)
            return start, self._events[start - self._first :]

    def _connected(self, delta: int) -> None:
        with self._changed:
            self._clients += delta
            self._changed.notify_all()

    def close(self) -> None:
        """Stop serving: open pages are told the stream ended (safe to call twice)."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ViewerServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler_for(viewer: ViewerServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "toolloop-viewer"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a quiet server: the command line shows what matters

        def _local_host(self) -> bool:
            # the Host header must name this machine: a page of another site that resolves
            # its own name to 127.0.0.1 (DNS rebinding) is refused
            host = urlsplit(f"//{self.headers.get('Host', '')}").hostname or ""
            return host in _LOOPBACK

        def _send(self, status: int, body: bytes = b"", content_type: str = "") -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            if not self._local_host():
                self._send(403, b"the viewer answers to 127.0.0.1 only", "text/plain")
                return
            path = urlsplit(self.path).path
            if path == "/events":
                self._stream()
            elif path in _STATIC:
                name, content_type = _STATIC[path]
                self._send(200, _asset(name), content_type)
            elif path == "/favicon.ico":
                self._send(204)
            else:
                self._send(404, f"no {path} here".encode(), "text/plain; charset=utf-8")

        def do_POST(self) -> None:
            origin = self.headers.get("Origin")
            foreign = origin is not None and urlsplit(origin).hostname not in _LOOPBACK
            if not self._local_host() or foreign:  # a page of another site may not post
                self._send(403, b"the viewer takes events from this machine only", "text/plain")
                return
            if urlsplit(self.path).path != "/events":
                self._send(404)
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._send(411, b"a Content-Length is needed", "text/plain")
                return
            if not 0 <= length <= _MAX_POST:
                self._send(413, b"at most 16 MiB of events at once", "text/plain")
                return
            lines = []
            for number, line in enumerate(self.rfile.read(length).decode().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    data = None
                if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
                    message = f"line {number} is not a JSON object with a 'kind'"
                    self._send(400, message.encode(), "text/plain")
                    return
                lines.append(line)
            viewer.publish_lines(lines)
            self._send(204)

        def _stream(self) -> None:
            try:
                last = int(self.headers.get("Last-Event-ID", "-1"))
            except ValueError:
                last = -1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            viewer._connected(+1)
            try:
                self.wfile.write(b"retry: 1000\n\n")
                self.wfile.flush()
                while True:
                    batch = viewer._after(last, _KEEPALIVE)
                    if batch is None:  # closed: say so, so the page does not reconnect
                        self.wfile.write(b"event: closed\ndata: {}\n\n")
                        self.wfile.flush()
                        return
                    start, events = batch
                    if not events:
                        self.wfile.write(b": still here\n\n")
                    for offset, line in enumerate(events):
                        self.wfile.write(f"id: {start + offset}\ndata: {line}\n\n".encode())
                    self.wfile.flush()
                    last = start + len(events) - 1 if events else last
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                return  # the page went away
            finally:
                viewer._connected(-1)

    return Handler
