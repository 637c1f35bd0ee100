"""The ``toolloop`` command: arguments, the commands, and errors told in one line."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO, TypeVar

import anyio

from .._errors import (
    ExecutionTimeoutError,
    ModelCallError,
    ModelOutputError,
    PlannerError,
    ToolloopError,
)
from .._secrets import register_secret, scrub
from ._load import CLIError, load_object

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["build_parser", "describe_error", "main"]

_N = TypeVar("_N", int, float)
_O = TypeVar("_O", bound="DataclassInstance")

PROG = "toolloop"

DESCRIPTION = (
    "An async plan/execute tool loop: plan, run the tools of a round concurrently, plan again."
)

EPILOG = """\
examples:
  toolloop demo --timeline demo.svg
  toolloop run "Weather in Lisbon?" --tools myapp.tools:TOOLS \\
      --base-url http://127.0.0.1:8000/v1 --model qwen2.5-7b-instruct --answer
  toolloop graph > loop.mmd
  toolloop trace timeline run.jsonl -o run.svg
  toolloop view run.jsonl --follow --open

Progress is live on a terminal, one line per event otherwise (or with --plain).
Exit status: 0 done, 1 the run failed, 2 bad arguments, 130 interrupted.
"""

_FLOWS = {
    "loop": "toolloop.loop:loop_flow",
    "agent": "toolloop.agents:agent_flow",
    "status-agent": "toolloop.agents:status_agent_flow",
}
"""Flows ``toolloop graph`` knows by name."""


class _Parser(argparse.ArgumentParser):
    """argparse, with an error told in one line (and a hint) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{self.prog}: {message} (see {self.prog} --help)", code=2)


def _number(
    convert: Callable[[str], _N],
    expected: str,
    within: Callable[[_N], bool] | None = None,
    outside: str = "",
) -> Callable[[str], _N]:
    """An argparse ``type`` for a number that ``convert`` reads ("expected ``expected``"
    when it cannot) and, when given, ``within`` bounds: ``outside`` is then the message,
    a format of the ``text`` given and its ``value``."""

    def parse(text: str) -> _N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if within is not None and not within(value):
            raise argparse.ArgumentTypeError(outside.format(text=text, value=value))
        return value

    return parse


_positive_int = _number(int, "a whole number", lambda n: n >= 1, "expected 1 or more, got {value}")
_count = _number(int, "a whole number", lambda n: n >= 0, "expected 0 or more, got {value}")
_seconds = _number(float, "seconds", lambda s: s > 0, "expected more than 0 seconds, got {text}")
_temperature = _number(
    float, "a number", lambda t: 0 <= t <= 2, "expected a number from 0 to 2, got {text}"
)
_seed = _number(int, "a whole number")


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace", type=Path, metavar="FILE.jsonl", help="write the run's events as JSON lines"
    )
    parser.add_argument(
        "--timeline", type=Path, metavar="FILE.svg", help="draw the run's timeline as an SVG"
    )
    parser.add_argument(
        "--plain", action="store_true", help="one line per event, even on a terminal"
    )
    parser.add_argument(
        "--view",
        type=_positive_int,
        metavar="PORT",
        help="also show the run in the live viewer that `toolloop view --port PORT` serves",
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the event loop to run on (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``toolloop`` command line."""
    from .. import __version__

    parser = _Parser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"toolloop {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, required=True
    )

    demo = commands.add_parser(
        "demo",
        help="the loop on sample tools, live (--http: planned by a model over HTTP)",
        description="Run the plan/execute loop on sample tools and show what happens.",
    )
    demo.add_argument(
        "--http",
        action="store_true",
        help="plan with StructuredPlanner over HTTP, from a local scripted OpenAI-compatible "
        "server: streaming dispatch, the short-circuit, a streamed answer",
    )
    _add_outputs(demo)

    run = commands.add_parser(
        "run",
        help="run a request against any OpenAI-compatible server, with your tools",
        description="Plan and execute tools for REQUEST with a model behind any "
        "OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, ...).",
    )
    run.add_argument("request", metavar="REQUEST", help="the user's request")
    run.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a list of tools (functions or Tool objects), a ToolRegistry, or one tool; "
        "MODULE may be a dotted module or a path/to/file.py (repeatable)",
    )
    run.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar='"COMMAND ARGS"',
        help="an MCP server to start over stdio (one quoted command line); its tools join "
        "the run (repeatable; needs the mcp extra)",
    )
    run.add_argument(
        "--mcp-url",
        action="append",
        default=[],
        metavar="URL",
        help="an MCP server over Streamable HTTP, e.g. http://127.0.0.1:8000/mcp; its "
        "tools join the run (repeatable; needs the mcp extra)",
    )
    run.add_argument(
        "--model", required=True, metavar="NAME", help="the model's name on the server"
    )
    run.add_argument(
        "--base-url",
        metavar="URL",
        help="the server, e.g. http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL, else "
        "OpenAI's API)",
    )
    run.add_argument(
        "--api-key",
        metavar="KEY",
        help="the API key (default: $OPENAI_API_KEY; local servers need none); never "
        "printed nor written to a trace",
    )
    run.add_argument(
        "--planner",
        choices=("structured", "tool-calling"),
        default="structured",
        help="structured output read as it streams (short-circuits), or the model's "
        "native tool calls (default: %(default)s)",
    )
    run.add_argument(
        "--structured-output",
        choices=("auto", "json_schema", "json_object_schema", "json_object"),
        default="auto",
        help="how the server is asked for JSON; auto tries each in turn (default: %(default)s)",
    )
    run.add_argument(
        "--max-tokens",
        type=_positive_int,
        metavar="N",
        help="the model's token limit for each plan and for the answer (default: 1024 a "
        "plan, the server's for the answer); a reply it cuts off is said so",
    )
    run.add_argument(
        "--tool-choice",
        metavar="CHOICE",
        help="with --planner tool-calling: auto, required (a tool call every round, until "
        "--max-turns), none, or a tool's name (default: auto; some servers, e.g. "
        "llama.cpp's, call tools only when required)",
    )
    run.add_argument(
        "--temperature", type=_temperature, metavar="T", help="0 to 2 (default: 0 to plan)"
    )
    run.add_argument("--seed", type=_seed, metavar="N", help="for servers that sample with one")
    run.add_argument(
        "--max-turns",
        type=_count,
        default=5,
        metavar="N",
        help="rounds that may run tools (default: %(default)s)",
    )
    run.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="tool calls at once (default: %(default)s)",
    )
    for flag, what in (
        ("--timeout", "for the whole run (default: none)"),
        ("--tool-timeout", "for each tool call"),
        ("--model-timeout", "for each model call (each planner call, the answer)"),
    ):
        run.add_argument(flag, type=_seconds, metavar="SECONDS", help=what)
    run.add_argument(
        "--max-retries",
        type=_count,
        metavar="N",
        help="the client's retries of failed requests (default: the openai client's, 2)",
    )
    run.add_argument(
        "--streaming-dispatch",
        action="store_true",
        help="start each tool as soon as its command is complete in the streamed plan",
    )
    run.add_argument("--requirement", metavar="TEXT", help="more instructions for the planner")
    run.add_argument("--answer", action="store_true", help="stream the final answer after the loop")
    run.add_argument(
        "--otel",
        action="store_true",
        help="send OpenTelemetry spans (run, rounds, plans, tool calls) to the tracer "
        "provider set up by the environment (needs the otel extra)",
    )
    _add_outputs(run)

    graph = commands.add_parser(
        "graph",
        help="print the Mermaid flowchart of a flow (default: the loop's)",
        description="Print the Mermaid flowchart of a flow, generated from its definition.",
    )
    graph.add_argument(
        "flow",
        nargs="?",
        default="loop",
        metavar="FLOW",
        help=f"one of {', '.join(_FLOWS)} or MODULE:ATTR of any Flow (default: loop)",
    )

    view = commands.add_parser(
        "view",
        help="the live run viewer: a local web page showing runs as they happen",
        description="Serve the live run viewer on 127.0.0.1: each round, the plan streaming, "
        "tool calls as bars on a time axis, records with results and errors, the "
        "short-circuit. Runs come from a trace file (replayed; --follow: tailed) or from "
        "applications that pass on_event=toolloop.viewer.ViewerSink(URL).",
    )
    view.add_argument(
        "file", nargs="?", type=Path, metavar="FILE.jsonl", help="a trace to show (--trace)"
    )
    view.add_argument("--follow", action="store_true", help="keep showing what is appended to FILE")
    view.add_argument(
        "--port",
        type=_count,
        default=8765,
        metavar="N",
        help="the port on 127.0.0.1 (default: %(default)s; 0: any free one)",
    )
    view.add_argument("--open", action="store_true", help="open the page in a browser")

    trace = commands.add_parser(
        "trace",
        help="show a recorded trace, or draw its timeline (SVG)",
        description="Read a trace written with --trace.",
    )
    actions = trace.add_subparsers(
        dest="action", metavar="ACTION", parser_class=_Parser, required=True
    )
    show = actions.add_parser("show", help="print the trace's events, one line each")
    show.add_argument("file", type=Path, metavar="FILE.jsonl")
    timeline = actions.add_parser("timeline", help="draw the trace's timeline as an SVG")
    timeline.add_argument("file", type=Path, metavar="FILE.jsonl")
    timeline.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE.svg",
        help="where to write it (default: FILE with .svg)",
    )
    return parser


# -- errors in one line ----------------------------------------------------------------------


def _oneline(text: str) -> str:
    return " ".join(str(text).split())


def describe_error(exc: BaseException) -> str:
    """What went wrong, in one line, for a person at a terminal."""
    from ..tracing import redact_text

    if isinstance(exc, CLIError):
        return _oneline(str(exc))
    if isinstance(exc, PlannerError):
        cause = exc.__cause__
        where = ""
        state = exc.state
        if exc.round_index is not None:  # the state moves on once a streamed round is kept
            where = f" (round {exc.round_index})"
        elif state is not None and hasattr(state, "round_index"):
            where = f" (round {state.round_index})"
        if isinstance(cause, (ModelCallError, ModelOutputError)):
            text = f"{cause}{where}"
        elif isinstance(cause, TimeoutError):
            text = f"the planner did not answer in time{where}"
        else:
            text = str(exc)
        return redact_text(_oneline(text))
    if isinstance(exc, ExecutionTimeoutError):
        return _oneline(f"the run did not finish within {exc.timeout} s")
    if isinstance(exc, (ToolloopError, OSError)):
        return redact_text(_oneline(str(exc)))
    return redact_text(_oneline(f"{type(exc).__name__}: {exc}"))


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups of one exception."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if not isinstance(inner, tuple) or len(inner) != 1:
            return exc
        exc = inner[0]


def _silence_stdout(out: TextIO) -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does
    not fail again (the Python docs' recipe)."""
    if out is not sys.stdout:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - no real file behind stdout
        pass


# -- the commands ----------------------------------------------------------------------------


def _graph(args: argparse.Namespace, out: TextIO) -> int:
    from ..flow import Flow

    spec = _FLOWS.get(args.flow, args.flow)
    if ":" not in spec:
        raise CLIError(
            f"graph: unknown flow {args.flow!r}; give one of {', '.join(_FLOWS)} or "
            "MODULE:ATTR of a Flow",
            code=2,
        )
    flow = load_object(spec, "graph")
    if not isinstance(flow, Flow):
        raise CLIError(f"graph: {spec} is a {type(flow).__name__}, not a toolloop Flow", code=2)
    out.write(flow.to_mermaid())
    return 0


def _trace(args: argparse.Namespace, out: TextIO) -> int:
    from ..loop import RoundStarted
    from ..tracing import TraceError, read_trace, write_timeline
    from ._plain import line

    try:
        trace = read_trace(args.file)
    except TraceError as exc:
        raise CLIError(f"trace: {args.file} is not a toolloop trace: {exc}") from exc
    except OSError as exc:
        raise CLIError(f"trace: cannot read {args.file}: {exc.strerror}") from exc
    if args.action == "show":
        for key, value in trace.meta.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out.write(f"{key}: {shown}\n")
        if trace.started is not None:
            out.write(f"started: {trace.started.isoformat()}\n")
        out.write("\n")
        started: dict[int, float] = {}
        for event in trace.events:
            if isinstance(event, RoundStarted):
                started[event.round_index] = event.at
            text = line(event, started)
            if text is not None:
                out.write(text + "\n")
        return 0
    output = args.output or args.file.with_suffix(".svg")
    try:
        write_timeline(output, trace)
    except OSError as exc:
        raise CLIError(f"trace: cannot write {output}: {exc.strerror}") from exc
    out.write(f"timeline: {output}\n")
    return 0


def _options(cls: type[_O], args: argparse.Namespace, **renamed: str) -> _O:
    """A command's options (the dataclass ``cls``): each field is the argument of its name,
    or of the name ``renamed`` gives it."""
    fields = dataclasses.fields(cls)
    return cls(**{f.name: getattr(args, renamed.get(f.name, f.name)) for f in fields})


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from ._run import RunOptions, async_run

    options = _options(RunOptions, args, mcp_urls="mcp_url")
    result = anyio.run(functools.partial(async_run, options, out=out), backend=args.backend)
    if result.stop_reason == "timeout":
        raise CLIError(
            f"the run did not finish within {options.timeout} s; the results so far are above"
        )
    return 0


def _view(args: argparse.Namespace, out: TextIO) -> int:
    from ._view import ViewOptions, view

    return view(_options(ViewOptions, args, open_browser="open"), out=out)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from ._demo import DemoOptions, async_demo

    options = _options(DemoOptions, args)
    anyio.run(functools.partial(async_demo, options, out=out), backend=args.backend)
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "demo": _demo,
    "run": _run,
    "graph": _graph,
    "trace": _trace,
    "view": _view,
}


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``toolloop`` command line; return its exit status.

    Errors are told in one line on ``stderr`` (no traceback): 1 when the run failed, 2 when
    the command line was wrong, 130 when interrupted.
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args_list:
            raise CLIError(
                f"{PROG}: a command is needed: {', '.join(_COMMANDS)} (see {PROG} --help)",
                code=2,
            )
        try:
            with contextlib.redirect_stdout(out):
                args = build_parser().parse_args(args_list)
        except SystemExit as exc:  # --help, --version
            return exc.code if isinstance(exc.code, int) else 0
        register_secret(getattr(args, "api_key", None))  # never printed, whatever its shape
        register_secret(os.environ.get("OPENAI_API_KEY"))
        return _COMMANDS[args.command](args, out)
    except BaseException as raised:
        leaf = _leaf(raised)
        if isinstance(leaf, BrokenPipeError):  # e.g. `toolloop trace show x | head`
            _silence_stdout(out)
            return 141
        if isinstance(leaf, KeyboardInterrupt):
            err.write(f"{PROG}: interrupted\n")
            return 130
        if not isinstance(leaf, Exception):
            raise
        err.write(f"{PROG}: {scrub(describe_error(leaf))}\n")
        err.flush()
        return leaf.code if isinstance(leaf, CLIError) else 1
