"""``toolloop view``: the live run viewer, on 127.0.0.1, until Ctrl-C."""

from __future__ import annotations

import threading
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ._load import CLIError

__all__ = ["ViewOptions", "view"]


@dataclass
class ViewOptions:
    """The options of ``toolloop view``."""

    file: Path | None = None
    follow: bool = False
    port: int = 8765
    open_browser: bool = False


def view(options: ViewOptions, *, out: TextIO, stop: threading.Event | None = None) -> int:
    """Serve the viewer (replaying, and with ``follow`` tailing, a trace file) until ``stop``
    is set or Ctrl-C."""
    from ..viewer import ViewerError, ViewerServer, replay_trace

    stop = stop or threading.Event()
    if options.follow and options.file is None:
        raise CLIError("view: --follow needs a trace file to follow", code=2)
    try:
        server = ViewerServer(port=options.port)
    except ViewerError as exc:
        raise CLIError(f"view: {exc}") from exc
    with server:
        if options.file is not None:
            source = f"; showing {options.file}" + (" as it grows" if options.follow else "")
        else:
            source = (
                f"; send runs with on_event=toolloop.viewer.ViewerSink({server.url!r}), "
                f"or `toolloop demo --view {server.port}`"
            )
        out.write(f"viewer: {server.url} (Ctrl-C to stop){source}\n")
        out.flush()
        if options.open_browser:
            webbrowser.open(server.url)
        if options.file is not None:
            try:
                replay_trace(server, options.file, follow=options.follow, stop=stop)
            except OSError as exc:
                raise CLIError(f"view: cannot read {options.file}: {exc.strerror}") from exc
        while not stop.wait(0.5):
            pass
    return 0
