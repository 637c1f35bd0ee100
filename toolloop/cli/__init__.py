"""The ``toolloop`` command line: ``demo``, ``run``, ``resume``, ``recover``, ``graph``,
``trace``, ``view``, ``replay``.

``toolloop run "request" --tools myapp.tools:TOOLS --base-url URL --model NAME`` runs the
loop (``--agent middleware|status``: either agent) against any OpenAI-compatible server with
live progress on a terminal (one line per event otherwise); ``--store`` keeps the run, to
answer its pause with ``toolloop resume`` or continue it with ``toolloop recover``;
``--trace``/``--timeline`` keep the run as JSON lines and as an SVG picture; ``toolloop
view`` serves the live run viewer (:mod:`toolloop.viewer`). :func:`main` is the entry
point; :func:`async_run`, :func:`async_resume` and :func:`async_recover` are the core of
``run``, ``resume`` and ``recover``, for calling from async code (tests, notebooks).
"""

from __future__ import annotations

from ._app import build_parser as build_parser
from ._app import describe_error as describe_error
from ._app import main as main
from ._demo import DemoOptions as DemoOptions
from ._demo import async_demo as async_demo
from ._load import CLIError as CLIError
from ._load import load_object as load_object
from ._load import load_tools as load_tools
from ._plain import PlainDisplay as PlainDisplay
from ._progress import LiveDisplay as LiveDisplay
from ._replay import ReplayOptions as ReplayOptions
from ._replay import async_replay as async_replay
from ._replay import rerun as rerun
from ._run import RunOptions as RunOptions
from ._run import async_recover as async_recover
from ._run import async_resume as async_resume
from ._run import async_run as async_run
from ._run import continue_command as continue_command

__all__ = [
    "CLIError",
    "DemoOptions",
    "LiveDisplay",
    "PlainDisplay",
    "ReplayOptions",
    "RunOptions",
    "async_demo",
    "async_recover",
    "async_replay",
    "async_resume",
    "async_run",
    "build_parser",
    "continue_command",
    "describe_error",
    "load_object",
    "load_tools",
    "main",
    "rerun",
]
