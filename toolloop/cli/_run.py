"""``toolloop run``: the loop against any OpenAI-compatible server, watched live."""

from __future__ import annotations

import os
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, TextIO

from .._errors import ToolloopError
from ..loop import LoopResult, async_plan_and_execute
from ..models import ModelSettings
from ..planners import StructuredPlanner, ToolCallingPlanner
from ..tools import ToolRegistry
from ..tracing import otel_available, redact_text
from ._load import CLIError, load_tools
from ._mcp import open_mcp_tools
from ._session import Display, make_display, observe, print_result, stream_answer

if TYPE_CHECKING:
    from ..models import OpenAIChatModel

__all__ = ["RunOptions", "async_run"]

PlannerKind = Literal["structured", "tool-calling"]


@dataclass
class RunOptions:
    """The options of ``toolloop run`` (see ``toolloop run --help``)."""

    request: str
    model: str
    tools: list[str] = field(default_factory=list)
    mcp: list[str] = field(default_factory=list)
    """Command lines of MCP servers to start over stdio (``--mcp``)."""
    mcp_urls: list[str] = field(default_factory=list)
    """URLs of MCP servers over Streamable HTTP (``--mcp-url``)."""
    base_url: str | None = None
    """``None``: ``$OPENAI_BASE_URL``, else OpenAI's API."""
    api_key: str | None = None
    """``None``: ``$OPENAI_API_KEY``, else a placeholder (local servers want none)."""
    planner: PlannerKind = "structured"
    structured_output: str = "auto"
    max_tokens: int | None = None
    """For each plan and the answer; ``None``: the planner's default, the server's."""
    tool_choice: str | None = None
    """For the tool-calling planner: auto, required, none or a tool's name."""
    temperature: float | None = None
    seed: int | None = None
    max_turns: int = 5
    concurrency: int = 4
    timeout: float | None = None
    tool_timeout: float | None = None
    model_timeout: float | None = None
    max_retries: int | None = None
    streaming_dispatch: bool = False
    requirement: str | None = None
    answer: bool = False
    trace: Path | None = None
    timeline: Path | None = None
    otel: bool = False
    plain: bool = False
    view: int | None = None


def _meta(options: RunOptions, tools: list[str], base_url: str) -> dict[str, Any]:
    return {
        "request": options.request,
        "planner": options.planner,
        "model": options.model,
        "base_url": redact_text(base_url),
        "tools": tools,
        "max_turns": options.max_turns,
        "concurrency": options.concurrency,
        "streaming_dispatch": options.streaming_dispatch,
        **{
            key: value
            for key, value in (
                ("max_tokens", options.max_tokens),
                ("tool_choice", options.tool_choice),
                ("temperature", options.temperature),
                ("seed", options.seed),
            )
            if value is not None
        },
    }


def _planner(
    options: RunOptions, model: OpenAIChatModel, names: list[str]
) -> StructuredPlanner | ToolCallingPlanner:
    settings: ModelSettings = {}
    if options.seed is not None:
        settings["seed"] = options.seed
    common: dict[str, Any] = {"settings": settings}
    if options.max_tokens is not None:
        common["max_tokens"] = options.max_tokens
    if options.temperature is not None:
        common["temperature"] = options.temperature
    if options.planner == "structured":
        if options.tool_choice is not None:
            raise CLIError(
                f"--tool-choice {options.tool_choice} works with --planner tool-calling; the "
                "structured planner asks for a plan, not for tool calls",
                code=2,
            )
        return StructuredPlanner(model, **common)
    choice = options.tool_choice or "auto"
    if choice not in ("auto", "required", "none") and choice not in names:
        raise CLIError(
            f"--tool-choice {choice!r} is neither auto, required, none nor a tool's name "
            f"({', '.join(names) or 'no tools loaded'})",
            code=2,
        )
    return ToolCallingPlanner(model, tool_choice=choice, **common)


async def async_run(
    options: RunOptions, *, out: TextIO | None = None, display: Display | None = None
) -> LoopResult:
    """Run the loop as ``toolloop run`` does, writing its progress and result to ``out``.

    The MCP servers of ``options.mcp`` and ``options.mcp_urls`` are open for the whole run
    (their tools join the others) and closed after it.

    Raises:
        CLIError: the tools cannot be loaded (and what the run raises: ``PlannerError``,
            ``ModelCallError``, ``MCPConnectionError``, ...; :func:`toolloop.cli.main`
            tells them in one line).
    """
    async with AsyncExitStack() as servers:
        mcp_tools = await open_mcp_tools(servers, options.mcp, options.mcp_urls)
        return await _async_run(options, out=out, display=display, mcp_tools=mcp_tools)


async def _async_run(
    options: RunOptions,
    *,
    out: TextIO | None,
    display: Display | None,
    mcp_tools: list[Any],
) -> LoopResult:
    from ..models import OpenAIChatModel  # imports openai: only when running

    out = out if out is not None else sys.stdout
    if options.otel and not otel_available():
        raise CLIError(
            "--otel needs the opentelemetry-api package: pip install 'toolloop[otel]'", code=2
        )
    registry = load_tools(options.tools)
    if mcp_tools:
        try:
            registry = ToolRegistry([*registry, *mcp_tools])
        except ToolloopError as exc:
            raise CLIError(f"--mcp/--mcp-url: {exc}", code=2) from exc
    model = OpenAIChatModel(
        options.model,
        base_url=options.base_url or os.environ.get("OPENAI_BASE_URL") or None,
        api_key=options.api_key or os.environ.get("OPENAI_API_KEY") or None,
        structured_output=options.structured_output,
        max_retries=options.max_retries,
    )
    names = registry.names
    planner = _planner(options, model, names)
    display = display if display is not None else make_display(out, plain=options.plain)
    base_url = redact_text(model.base_url)
    display.message(f"request: {options.request}")
    display.message(
        f"model {options.model} at {base_url} · {options.planner} planner · "
        f"{len(names)} tool{'s' * (len(names) != 1)}: {', '.join(names) or '-'}"
    )
    display.message()
    started = perf_counter()
    async with model:

        async def start(on_event: Any) -> LoopResult:
            return await async_plan_and_execute(
                options.request,
                tools=registry,
                planner=planner,
                max_turns=options.max_turns,
                concurrency=options.concurrency,
                timeout=options.timeout,
                tool_timeout=options.tool_timeout,
                model_timeout=options.model_timeout,
                user_extra_requirement=options.requirement,
                streaming_dispatch=options.streaming_dispatch,
                on_timeout="finish",
                on_event=on_event,
            )

        result, written = await observe(
            start,
            display=display,
            meta=_meta(options, names, base_url),
            trace=options.trace,
            timeline=options.timeline,
            otel=options.otel,
            view=options.view,
        )
        print_result(out, result, elapsed=perf_counter() - started, written=written)
        if options.answer:
            settings: ModelSettings = {}
            if options.seed is not None:
                settings["seed"] = options.seed
            await stream_answer(
                out,
                model,
                result,
                max_tokens=options.max_tokens,
                temperature=options.temperature,
                settings=settings,
                timeout=options.model_timeout,
            )
    return result
