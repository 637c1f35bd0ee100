"""The ``toolloop`` command: arguments, the commands, and errors told in one line."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

import anyio

from .._errors import (
    ExecutionTimeoutError,
    ModelCallError,
    ModelOutputError,
    PlannerError,
    ToolloopError,
)
from .._secrets import register_secret, scrub
from ..models import UsageLimits
from ._load import CLIError, load_object
from ._products import AGENTS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from ..checkpoints import HumanAnswer
    from ..kernel import RunResult
    from ._run import RunOptions

__all__ = ["EXIT_STATUSES", "build_parser", "describe_error", "main"]

_N = TypeVar("_N", int, float)
_O = TypeVar("_O", bound="DataclassInstance")

PROG = "toolloop"

DESCRIPTION = (
    "An async plan/execute tool loop: plan, run the tools of a round concurrently, plan again."
)

EXIT_STATUSES = """\
Exit status: 0 the run completed; 1 it failed, or --timeout or --usage-limit ended it (what
it had is shown); 2 bad arguments; 3 it is paused for a human (the output shows what it asks
and the `toolloop resume` command to answer); 130 interrupted.
"""

EPILOG = (
    """\
examples:
  toolloop demo --timeline demo.svg
  toolloop run "Weather in Lisbon?" --tools myapp.tools:TOOLS \\
      --base-url http://127.0.0.1:8000/v1 --model qwen2.5-7b-instruct --answer
  toolloop run "Book a table" --agent middleware --tools myapp.tools:TOOLS --model m \\
      --store runs.db --needs-approval book_table --usage-limit requests=20
  toolloop resume RUN_ID --agent middleware --tools myapp.tools:TOOLS --model m \\
      --store runs.db --approve
  toolloop recover RUN_ID --tools myapp.tools:TOOLS --model m --store runs.db
  toolloop graph > loop.mmd
  toolloop trace timeline run.jsonl -o run.svg
  toolloop replay run.jsonl --live-tool get_weather
  toolloop replay --store runs.db RUN_ID
  toolloop view run.jsonl --follow --open

Progress is live on a terminal, one line per event otherwise (or with --plain).
"""
    + EXIT_STATUSES
)

RUN_EPILOG = (
    """\
Every product takes the same run options. A run with --store is kept there: when it
pauses (--needs-approval) it prints the `toolloop resume` command that answers it; when
it fails or its process dies, `toolloop recover RUN_ID` continues it without running a
finished tool call again. Resume and recover rebuild the product: give the same --agent,
--tools and model flags.

"""
    + EXIT_STATUSES
)

_FLOWS = {
    "loop": "toolloop.loop:loop_flow",
    "agent": "toolloop.agents:agent_flow",
    "status-agent": "toolloop.agents:status_agent_flow",
}
"""Flows ``toolloop graph`` knows by name."""


class _Parser(argparse.ArgumentParser):
    """argparse, with an error told in one line (and a hint) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            message += _renamed_flags(message.split(":", 1)[1].split())
        raise CLIError(f"{self.prog}: {message} (see {self.prog} --help)", code=2)


def _renamed_flags(given: list[str]) -> str:
    """What the flags of earlier releases among ``given`` are called now ("" when none)."""
    from ..kernel import RENAMED_OPTIONS

    said = []
    for arg in given:
        old = arg.split("=", 1)[0]
        new = RENAMED_OPTIONS.get(old.removeprefix("--").replace("-", "_"))
        if old.startswith("--") and new is not None:
            said.append(f"{old} is now --{new.replace('_', '-')}")
    return f"; {', '.join(said)}" if said else ""


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


_RATE_UNITS = {"": 1.0, "s": 1.0, "min": 60.0}
"""What a rate is counted in: ``N/s`` (or a bare ``N``) calls a second, ``N/min`` calls a
minute."""

_RATE_FORMS = "a rate above 0: N/s, N/min, or N (calls a second)"


def _rate(text: str) -> float:
    """``--model-rate 5/s``, ``30/min`` or ``5``: calls a second."""
    number, sep, unit = text.strip().partition("/")
    unit = unit.strip().lower()
    if sep and unit not in ("s", "min"):
        raise argparse.ArgumentTypeError(
            f"expected {_RATE_FORMS}; got {text!r} (the unit is s or min)"
        )
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {_RATE_FORMS}; got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected {_RATE_FORMS}; got {text!r}")
    return value / _RATE_UNITS[unit]


def _tool_rate(text: str) -> tuple[str, float]:
    """``--tool-rate search=2/s``: a tool's name and its calls a second."""
    name, sep, rate = text.partition("=")
    name = name.strip()
    if not sep or not name or not rate.strip():
        raise argparse.ArgumentTypeError(
            f"expected TOOL=RATE (e.g. search=2/s; RATE: N/s, N/min or N), got {text!r}"
        )
    try:
        return name, _rate(rate)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from None


def _usage_limits(text: str) -> UsageLimits:
    """``--usage-limit requests=10,total_tokens=20000``."""
    from ._run import LIMIT_NAMES

    given: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        name = name.strip().replace("-", "_")
        if name.startswith("max_"):
            name = name[4:]
        if not sep or name not in LIMIT_NAMES:
            raise argparse.ArgumentTypeError(
                f"expected NAME=N[,NAME=N] with NAME one of {', '.join(LIMIT_NAMES)}; got "
                f"{part.strip()!r}"
            )
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number for {name}, got {value.strip()!r}"
            ) from None
        if number < 0:
            raise argparse.ArgumentTypeError(f"expected 0 or more for {name}, got {number}")
        given[f"max_{name}"] = number
    return UsageLimits(**given)


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


def _run_command(
    commands: Any, name: str, summary: str, description: str
) -> argparse.ArgumentParser:
    """A command that runs a product (``run``, ``resume``, ``recover``): its own arguments
    are added to it, then the product's and the outputs'."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _add_product(parser: argparse.ArgumentParser) -> None:
    """The flags of ``run``, ``resume`` and ``recover``: the product, its tools and model,
    the run options, the store (a run is resumed with the product rebuilt the same way)."""
    parser.add_argument(
        "--agent",
        choices=AGENTS,
        default="loop",
        help="the product: the plan/execute loop, the middleware agent, the status-routed "
        "agent (default: %(default)s)",
    )
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a list of tools (functions or Tool objects), a ToolRegistry, or one tool; "
        "MODULE may be a dotted module or a path/to/file.py (repeatable)",
    )
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar='"COMMAND ARGS"',
        help="an MCP server to start over stdio (one quoted command line); its tools join "
        "the run (repeatable; needs the mcp extra)",
    )
    parser.add_argument(
        "--mcp-url",
        action="append",
        default=[],
        metavar="URL",
        help="an MCP server over Streamable HTTP, e.g. http://127.0.0.1:8000/mcp; its "
        "tools join the run (repeatable; needs the mcp extra)",
    )
    parser.add_argument(
        "--model", required=True, metavar="NAME", help="the model's name on the server"
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="the server, e.g. http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL, else "
        "OpenAI's API)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="the API key (default: $OPENAI_API_KEY; local servers need none); never "
        "printed nor written to a trace",
    )
    parser.add_argument(
        "--planner",
        choices=("structured", "tool-calling"),
        default="structured",
        help="the loop's planner: structured output read as it streams (short-circuits), "
        "or the model's native tool calls (default: %(default)s)",
    )
    parser.add_argument(
        "--structured-output",
        choices=("auto", "json_schema", "json_object_schema", "json_object"),
        default="auto",
        help="how the server is asked for JSON; auto tries each in turn (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens",
        type=_positive_int,
        metavar="N",
        help="the model's token limit for each plan and for the answer (default: 1024 a "
        "plan, the server's for the answer); a reply it cuts off is said so",
    )
    parser.add_argument(
        "--tool-choice",
        metavar="CHOICE",
        help="the loop with --planner tool-calling, or the middleware agent: auto, required "
        "(a tool call every turn, until --max-turns), none, or a tool's name (default: auto; "
        "some servers, e.g. llama.cpp's, call tools only when required)",
    )
    parser.add_argument(
        "--temperature", type=_temperature, metavar="T", help="0 to 2 (default: 0 to plan)"
    )
    parser.add_argument("--seed", type=_seed, metavar="N", help="for servers that sample with one")
    parser.add_argument(
        "--max-turns",
        type=_count,
        metavar="N",
        help="turns a run may take: the loop's rounds that run tools (default 5; a resumed "
        "run: its own), the middleware agent's model calls (100), the status agent's steps "
        "(50)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="tool calls at once (default: %(default)s)",
    )
    for flag, what in (
        ("--timeout", "for the whole run (default: none)"),
        ("--tool-timeout", "for each tool call"),
        (
            "--model-timeout",
            "for each model call (each planner call, the answer; each "
            "agent's model call, each status step)",
        ),
    ):
        parser.add_argument(flag, type=_seconds, metavar="SECONDS", help=what)
    parser.add_argument(
        "--max-retries",
        type=_count,
        metavar="N",
        help="the client's retries of failed requests (default: the openai client's, 2)",
    )
    parser.add_argument(
        "--streaming-dispatch",
        action="store_true",
        help="start each tool call as soon as the model has written it, while its reply "
        "still streams (the status agent: the calls of its decisions)",
    )
    parser.add_argument(
        "--requirement",
        metavar="TEXT",
        help="more instructions: the loop's planner's (a resumed run keeps its own), the "
        "middleware agent's system prompt, added to the status agent's",
    )
    parser.add_argument(
        "--answer",
        action="store_true",
        help="the loop: stream the final answer after the run (the agents answer by themselves)",
    )
    durable = parser.add_argument_group("durable runs, approvals and budgets (every product alike)")
    durable.add_argument(
        "--store",
        metavar="PATH|URL",
        help="keep the run in this store, to resume or recover it from any process: a SQLite "
        "file (made if missing) or a postgresql:// URL (the postgres extra)",
    )
    durable.add_argument(
        "--needs-approval",
        action="append",
        default=[],
        metavar="TOOL",
        help="calls of TOOL wait for a human: the run pauses (exit status 3) and says how "
        "to answer with `toolloop resume` (repeatable; * for every tool; needs --store)",
    )
    durable.add_argument(
        "--usage-limit",
        dest="usage_limits",
        type=_usage_limits,
        metavar="NAME=N[,NAME=N]",
        help="the run's budget, across its pauses and resumes: requests, input_tokens, "
        "output_tokens, total_tokens (e.g. requests=10,total_tokens=20000); at it the run "
        "ends with what it has (stop: usage_limit, exit status 1)",
    )
    durable.add_argument(
        "--unknown-outcome",
        choices=("fail", "retry", "ask"),
        default="fail",
        help="a resumed or recovered run's call that started without a recorded outcome: a "
        "failed record, run again (--idempotent-tool only), or ask a human (default: "
        "%(default)s)",
    )
    durable.add_argument(
        "--idempotent-tool",
        dest="idempotent_tools",
        action="append",
        default=[],
        metavar="TOOL",
        help="a tool safe to run twice: for --unknown-outcome retry, and retried by "
        "--tool-retries (repeatable)",
    )
    _add_rates(parser)
    parser.add_argument(
        "--otel",
        action="store_true",
        help="send OpenTelemetry spans (run, rounds, plans, tool calls) to the tracer "
        "provider set up by the environment (needs the otel extra)",
    )


def _add_rates(parser: argparse.ArgumentParser) -> None:
    """The rate limits and retries of ``run``, ``resume`` and ``recover``."""
    rates = parser.add_argument_group(
        "rate limits and retries (every product alike; see toolloop.ratelimit)"
    )
    rates.add_argument(
        "--model-rate",
        type=_rate,
        metavar="RATE",
        help="the most model calls a second: N/s, N/min or N (a second); the limiter backs "
        "off when the server refuses calls for their rate (HTTP 429, 503), waits for its "
        "Retry-After, and probes back up",
    )
    rates.add_argument(
        "--model-concurrency",
        type=_positive_int,
        metavar="N",
        help="the most model calls at once",
    )
    rates.add_argument(
        "--model-retries",
        type=_count,
        metavar="N",
        help="toolloop retries a failed model call (429, 5xx, a connection lost) N times, "
        "with backoff and never before the server's Retry-After; the client's own retries "
        "are then off (not given, with --model-rate or --model-concurrency: --max-retries "
        "times, else 3)",
    )
    rates.add_argument(
        "--tool-rate",
        dest="tool_rate_specs",
        type=_tool_rate,
        action="append",
        default=[],
        metavar="TOOL=RATE",
        help="the most calls a second of TOOL, e.g. search=2/s (repeatable; one limiter "
        "each); it backs off when the tool raises toolloop.errors.RateLimitedError or an "
        "HTTP 429",
    )
    rates.add_argument(
        "--tool-retries",
        type=_count,
        metavar="N",
        help="retry a failed call of an --idempotent-tool tool N times (no other tool is "
        "ever retried)",
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

    run = _run_command(
        commands,
        "run",
        "run a request with any product against any OpenAI-compatible server, with your tools",
        "Run REQUEST with the plan/execute loop (or --agent middleware|status), a model behind "
        "any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, ...) and your tools.",
    )
    run.add_argument("request", metavar="REQUEST", help="the user's request")
    run.add_argument(
        "--run-id", metavar="ID", help="the run's id (in --store: a new one); default: a new one"
    )

    resume = _run_command(
        commands,
        "resume",
        "answer a run paused for a human, and continue it",
        "Continue RUN_ID, paused for a human in --store, with a decision. Give the product, "
        "tools and model flags of the run again (the paused run prints the whole command).",
    )
    resume.add_argument("paused_run", metavar="RUN_ID", help="the paused run's id")
    decision = resume.add_argument_group(
        "the decision (one; it answers every call the run asks about)"
    ).add_mutually_exclusive_group(required=True)
    decision.add_argument("--approve", action="store_true", help="run the calls as they are")
    decision.add_argument(
        "--reject",
        nargs="?",
        const="",
        metavar="MESSAGE",
        help="do not run them; MESSAGE tells the model why",
    )
    decision.add_argument(
        "--edit",
        action="append",
        metavar="CALL_ID=JSON",
        help="run them, call CALL_ID with these arguments (a JSON object; repeatable; the "
        "others as they are)",
    )
    decision.add_argument(
        "--replan", nargs="?", const="", metavar="MESSAGE", help="drop the calls, plan again"
    )
    decision.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="go on (after a review, when no call waits)",
    )
    decision.add_argument(
        "--stop", nargs="?", const="", metavar="MESSAGE", help="end the run (MESSAGE: its answer)"
    )

    recover = _run_command(
        commands,
        "recover",
        "continue a run that failed, or whose process died, from its last checkpoint",
        "Continue RUN_ID of --store, which failed or whose process died, from its last "
        "checkpoint: a tool call with a recorded outcome is not run again; one that started "
        "without one follows --unknown-outcome. A completed run shows its result.",
    )
    recover.add_argument("stored_run", metavar="RUN_ID", help="the run's id")
    recover.add_argument(
        "--force",
        action="store_true",
        help="take the run over even if its owner may still be running it",
    )
    for product_command in (run, resume, recover):
        _add_product(product_command)
        _add_outputs(product_command)

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
    _add_replay(commands)
    return parser


def _add_replay(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="run a recorded trace again through today's code; show where it now differs",
        description="Run the run FILE.jsonl tells (written by `toolloop run --trace`) again, "
        "offline: the same product and options, the model's replies and the tools' results "
        "taken from the trace. Exit status 0: the code does what the recorded run did; 1: it "
        "does something else (a diff, turn by turn, shows where). With --store, RUN_ID is a "
        "run of that store (made by `toolloop run --store`): it keeps its model replies "
        "beside its tool calls' outcomes.",
    )
    replay.add_argument(
        "file",
        type=Path,
        metavar="FILE.jsonl|RUN_ID",
        help="a trace (--trace); with --store: the run's id",
    )
    replay.add_argument(
        "--store",
        metavar="PATH|URL",
        help="replay run RUN_ID of this store (a SQLite file, or a postgresql:// URL)",
    )
    replay.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="the tools (default: the trace's own --tools; tools it cannot load get "
        "stand-ins that accept any arguments)",
    )
    replay.add_argument(
        "--live-tool",
        dest="live_tools",
        action="append",
        default=[],
        metavar="NAME",
        help="run this tool for real instead of taking its results from the trace (repeatable)",
    )
    replay.add_argument(
        "--reask-from",
        type=_count,
        metavar="N",
        help="from model call N on (0: the first), ask --model instead of the trace; the "
        "run is checked only before it",
    )
    replay.add_argument("--model", metavar="NAME", help="the model asked again (--reask-from)")
    replay.add_argument("--base-url", metavar="URL", help="its server (default: $OPENAI_BASE_URL)")
    replay.add_argument(
        "--api-key", metavar="KEY", help="its API key (default: $OPENAI_API_KEY); never printed"
    )
    replay.add_argument(
        "--compare-requests",
        choices=("shape", "exact", "off"),
        default="shape",
        help="how much of each model request is checked: its shape (messages counted, "
        "tools, settings), exact (the messages too), or off (default: %(default)s)",
    )
    replay.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the event loop to run on (default: %(default)s)",
    )


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
    given = {}
    for f in dataclasses.fields(cls):
        name = renamed.get(f.name, f.name)
        if hasattr(args, name):  # else the field's default (resume has no REQUEST)
            given[f.name] = getattr(args, name)
    if "request" not in given and "request" in {f.name for f in dataclasses.fields(cls)}:
        given["request"] = ""
    return cls(**given)


def _status(result: RunResult, options: RunOptions) -> int:
    """The exit status of a run that returned (see ``EXIT_STATUSES``)."""
    if result.paused:
        return 3
    if result.stop_reason == "timeout":
        raise CLIError(
            f"the run did not finish within {options.timeout} s; the results so far are above"
        )
    if result.stop_reason == "usage_limit":
        from ._run import limits_text

        limits = limits_text(options.usage_limits) if options.usage_limits else ""
        raise CLIError(f"the run reached its usage limit ({limits}); the results so far are above")
    return 0


def _run_options(args: argparse.Namespace) -> RunOptions:
    from ._run import RunOptions

    options = _options(RunOptions, args, mcp_urls="mcp_url")
    register_secret(options.api_key)
    for name, rate in getattr(args, "tool_rate_specs", []):
        if name in options.tool_rates:
            raise CLIError(
                f"--tool-rate {name}: given twice; give each tool one rate (see "
                f"{PROG} {args.command} --help)",
                code=2,
            )
        options.tool_rates[name] = rate
    return options


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from ._run import async_run

    options = _run_options(args)
    result = anyio.run(functools.partial(async_run, options, out=out), backend=args.backend)
    return _status(result, options)


def _decision(args: argparse.Namespace) -> HumanAnswer:
    """The decision the flags of ``resume`` give."""
    from ..checkpoints import Approve, Continue, Edit, Reject, Replan, Stop

    if args.approve:
        return Approve()
    if args.continue_:
        return Continue()
    if args.edit:
        arguments: dict[str, dict[str, Any]] = {}
        for spec in args.edit:
            call_id, sep, text = spec.partition("=")
            if not sep or not call_id:
                raise CLIError(
                    f'--edit takes CALL_ID=JSON (e.g. 0.0=\'{{"city": "Porto"}}\'), got {spec!r} '
                    "(see toolloop resume --help)",
                    code=2,
                )
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise CLIError(
                    f"--edit {call_id}: not JSON: {exc} (see toolloop resume --help)", code=2
                ) from exc
            if not isinstance(value, dict):
                raise CLIError(
                    f"--edit {call_id}: the arguments are a JSON object, got {text!r} (see "
                    "toolloop resume --help)",
                    code=2,
                )
            arguments[call_id] = value
        return Edit(arguments=arguments)
    for flag, kind in (("reject", Reject), ("replan", Replan), ("stop", Stop)):
        message = getattr(args, flag)
        if message is not None:
            return kind(message=message or None)
    raise CLIError("resume needs a decision (see toolloop resume --help)", code=2)


def _resume(args: argparse.Namespace, out: TextIO) -> int:
    from ._run import async_resume

    options = _run_options(args)
    decision = _decision(args)
    call = functools.partial(async_resume, options, args.paused_run, decision, out=out)
    return _status(anyio.run(call, backend=args.backend), options)


def _recover(args: argparse.Namespace, out: TextIO) -> int:
    from ._run import async_recover

    options = _run_options(args)
    call = functools.partial(async_recover, options, args.stored_run, force=args.force, out=out)
    return _status(anyio.run(call, backend=args.backend), options)


def _view(args: argparse.Namespace, out: TextIO) -> int:
    from ._view import ViewOptions, view

    return view(_options(ViewOptions, args, open_browser="open"), out=out)


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    from ._replay import ReplayOptions, async_replay

    options = _options(ReplayOptions, args)
    return anyio.run(functools.partial(async_replay, options, out=out), backend=args.backend)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from ._demo import DemoOptions, async_demo

    options = _options(DemoOptions, args)
    anyio.run(functools.partial(async_demo, options, out=out), backend=args.backend)
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "demo": _demo,
    "run": _run,
    "resume": _resume,
    "recover": _recover,
    "graph": _graph,
    "trace": _trace,
    "view": _view,
    "replay": _replay,
}


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``toolloop`` command line; return its exit status.

    Errors are told in one line on ``stderr`` (no traceback): 1 when the run failed (or its
    ``--timeout`` or ``--usage-limit`` ended it), 2 when the command line was wrong, 130 when
    interrupted; 3 when the run paused for a human (what it asks is on ``stdout``).
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
