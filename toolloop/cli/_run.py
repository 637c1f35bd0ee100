"""``toolloop run``, ``resume`` and ``recover``: any product against any OpenAI-compatible
server, watched live."""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Literal, TextIO

import anyio

from .._errors import ToolloopError
from ..checkpoints import CheckpointStore, HumanAnswer
from ..kernel import RunResult
from ..loop import LoopResult
from ..models import ChatModel, ModelSettings, UsageLimits
from ..planners import StructuredPlanner, ToolCallingPlanner
from ..tools import ToolRegistry
from ..tracing import otel_available, redact_text
from ._load import CLIError, load_tools
from ._mcp import open_mcp_tools
from ._products import AgentKind, Product, make_product
from ._session import (
    Display,
    make_display,
    observe,
    print_paused,
    print_result,
    stream_answer,
)

__all__ = [
    "LIMIT_NAMES",
    "RunOptions",
    "async_recover",
    "async_resume",
    "async_run",
    "continue_command",
    "limits_text",
    "open_store",
]

LIMIT_NAMES = ("requests", "input_tokens", "output_tokens", "total_tokens")
"""What ``--usage-limit`` bounds: ``NAME=N`` is ``UsageLimits(max_NAME=N)``."""

PlannerKind = Literal["structured", "tool-calling"]


@dataclass
class RunOptions:
    """The options of ``toolloop run`` (see ``toolloop run --help``)."""

    request: str
    """The user's request (``run``; a resumed or recovered run has its own)."""
    model: str
    agent: AgentKind = "loop"
    """The product: the plan/execute loop, the middleware agent or the status agent."""
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
    max_turns: int | None = None
    """``None``: the product's (the loop: 5 rounds; the middleware agent: 100 model calls;
    the status agent: 50 steps; a resumed loop: the run's own)."""
    concurrency: int = 4
    timeout: float | None = None
    tool_timeout: float | None = None
    model_timeout: float | None = None
    max_retries: int | None = None
    streaming_dispatch: bool = False
    requirement: str | None = None
    """The loop's ``user_extra_requirement``; the agents' system prompt (the status agent:
    added to its own)."""
    answer: bool = False
    store: str | None = None
    """A SQLite file, or a ``postgresql://`` URL: the run is durable, to resume or
    recover."""
    run_id: str | None = None
    """The run's id (``run``); a new one by default."""
    usage_limits: UsageLimits | None = None
    """The run's budget; at it, the run finishes with what it has (stop reason
    ``usage_limit``)."""
    needs_approval: list[str] = field(default_factory=list)
    """Tools whose calls wait for a human (``*``: every tool); needs ``store``."""
    unknown_outcome: Literal["fail", "retry", "ask"] = "fail"
    idempotent_tools: list[str] = field(default_factory=list)
    """Tools safe to run twice: for ``unknown_outcome="retry"``, and retried by
    ``tool_retries``."""
    model_rate: float | None = None
    """The most model calls a second (``--model-rate``): the run's ``model_rate_limit``, an
    adaptive :class:`~toolloop.ratelimit.RateLimit`."""
    model_concurrency: int | None = None
    """The most model calls at once (``--model-concurrency``), in the same limiter."""
    model_retries: int | None = None
    """Retries of a failed model call, made by toolloop (``model_retry``:
    ``RetryPolicy(tries=model_retries + 1)``). ``None``: with a model limiter,
    ``max_retries`` if given, else the policy's default; without, the client's own."""
    tool_rates: dict[str, float] = field(default_factory=dict)
    """Tool names to their most calls a second (``--tool-rate``): the run's
    ``rate_limits``, a limiter each."""
    tool_retries: int | None = None
    """Retries of a failed call of an ``idempotent_tools`` tool (``tool_retry``)."""
    trace: Path | None = None
    timeline: Path | None = None
    otel: bool = False
    plain: bool = False
    view: int | None = None


def _meta(options: RunOptions, tools: list[str], base_url: str) -> dict[str, Any]:
    return {
        **({"request": options.request} if options.request else {}),
        "agent": options.agent,
        **({"planner": options.planner} if options.agent == "loop" else {}),
        "model": options.model,
        "base_url": redact_text(base_url),
        "tools": tools,
        "concurrency": options.concurrency,
        **{
            key: value
            for key, value in (
                ("max_turns", options.max_turns),
                ("max_tokens", options.max_tokens),
                ("tool_choice", options.tool_choice),
                ("temperature", options.temperature),
                ("seed", options.seed),
            )
            if value is not None
        },
        **({"streaming_dispatch": True} if options.streaming_dispatch else {}),
        **_rerun_meta(options),
    }


def _rerun_meta(options: RunOptions) -> dict[str, Any]:
    """What else ``toolloop replay`` needs to make the product again: where the tools come
    from (``--tools``), the requirement, the limits and the durable options given."""
    given: dict[str, Any] = {
        "tool_specs": list(options.tools),
        "requirement": options.requirement,
        "timeout": options.timeout,
        "tool_timeout": options.tool_timeout,
        "model_timeout": options.model_timeout,
        "usage_limits": limits_text(options.usage_limits) if options.usage_limits else None,
        "needs_approval": list(options.needs_approval),
        "idempotent_tools": list(options.idempotent_tools),
        **rate_meta(options),
    }
    if options.unknown_outcome != "fail":
        given["unknown_outcome"] = options.unknown_outcome
    return {key: value for key, value in given.items() if value not in (None, [])}


def rate_meta(options: RunOptions) -> dict[str, Any]:
    """The rate limits and retries of ``options``, as a trace's header tells them (the
    words of their flags; none that was not given)."""
    given: dict[str, Any] = {
        "model_rate": None if options.model_rate is None else rate_text(options.model_rate),
        "model_concurrency": options.model_concurrency,
        "model_retries": options.model_retries,
        "tool_rates": {name: rate_text(rate) for name, rate in options.tool_rates.items()},
        "tool_retries": options.tool_retries,
    }
    return {key: value for key, value in given.items() if value not in (None, {})}


def rate_text(rate: float) -> str:
    """``5/s``, ``2/min``: what ``--model-rate`` and ``--tool-rate`` take for ``rate``
    calls a second (read back to the same number)."""
    per_minute = rate * 60
    if rate != round(rate) and per_minute == round(per_minute):
        return f"{round(per_minute)}/min"
    return f"{rate!r}".removesuffix(".0") + "/s"


def limits_text(limits: UsageLimits) -> str:
    """``requests=3,total_tokens=2000``: what ``--usage-limit`` takes for ``limits``."""
    return ",".join(
        f"{name}={getattr(limits, 'max_' + name)}"
        for name in LIMIT_NAMES
        if getattr(limits, "max_" + name) is not None
    )


def continue_command(
    options: RunOptions, run_id: str, verb: Literal["resume", "recover"] = "resume"
) -> list[str]:
    """The ``toolloop resume RUN_ID ...`` (or ``recover``) command that rebuilds the product
    of ``options`` to continue run ``run_id``, without its decision (nor ``--api-key``: a key
    is never printed; nor where the output goes)."""
    words = ["toolloop", verb, run_id]
    if options.agent != "loop":
        words += ["--agent", options.agent]
    assert options.store is not None
    words += ["--store", redact_text(options.store)]
    for spec in options.tools:
        words += ["--tools", spec]
    for command in options.mcp:
        words += ["--mcp", command]
    for url in options.mcp_urls:
        words += ["--mcp-url", url]
    words += ["--model", options.model]
    defaults = RunOptions(request="", model="")
    for name, flag in (
        ("base_url", "--base-url"),
        ("planner", "--planner"),
        ("structured_output", "--structured-output"),
        ("max_tokens", "--max-tokens"),
        ("tool_choice", "--tool-choice"),
        ("temperature", "--temperature"),
        ("seed", "--seed"),
        ("max_retries", "--max-retries"),
        ("max_turns", "--max-turns"),
        ("concurrency", "--concurrency"),
        ("timeout", "--timeout"),
        ("tool_timeout", "--tool-timeout"),
        ("model_timeout", "--model-timeout"),
        ("requirement", "--requirement"),
        ("unknown_outcome", "--unknown-outcome"),
    ):
        value = getattr(options, name)
        if value is not None and value != getattr(defaults, name):
            words += [flag, redact_text(str(value))]
    for name, flag in (("streaming_dispatch", "--streaming-dispatch"), ("answer", "--answer")):
        if getattr(options, name):
            words.append(flag)
    if options.usage_limits is not None and limits_text(options.usage_limits):
        words += ["--usage-limit", limits_text(options.usage_limits)]
    for tool in options.needs_approval:
        words += ["--needs-approval", tool]
    for tool in options.idempotent_tools:
        words += ["--idempotent-tool", tool]
    if options.model_rate is not None:
        words += ["--model-rate", rate_text(options.model_rate)]
    for name, flag in (
        ("model_concurrency", "--model-concurrency"),
        ("model_retries", "--model-retries"),
        ("tool_retries", "--tool-retries"),
    ):
        if getattr(options, name) is not None:
            words += [flag, str(getattr(options, name))]
    for tool, rate in options.tool_rates.items():
        words += ["--tool-rate", f"{tool}={rate_text(rate)}"]
    return words


async def keep_meta(store: CheckpointStore, run_id: str, meta: dict[str, Any]) -> None:
    """Keep with run ``run_id`` what a trace's header would say of it (the product, the
    request, the options, the tools), so that ``toolloop replay --store`` makes it again;
    scrubbed as a trace is. A store that fails here does not fail the run."""
    from ..checkpoints import JournalEntry
    from ..kernel import REPLAY_NOTE
    from ..testing import StoredRun
    from ..tracing import redact

    note = JournalEntry.note(StoredRun.META_KEY, REPLAY_NOTE, {"meta": redact(meta)})
    with anyio.CancelScope(shield=True):
        try:
            if await store.get(run_id) is not None:
                await store.record_intent(run_id, note)
        except Exception:  # the run matters more than what replays it
            return


def open_store(spec: str) -> CheckpointStore:
    """The store ``--store`` names: a ``postgresql://`` URL, else a SQLite file.

    Raises:
        CLIError: PostgreSQL without the postgres extra (exit status 2).
    """
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from ..checkpoints import PostgresCheckpointStore
        except ImportError as exc:  # pragma: no cover - the dev extra has psycopg
            raise CLIError(
                f"--store {redact_text(spec)}: PostgreSQL needs the postgres extra: "
                "pip install 'toolloop[postgres]'",
                code=2,
            ) from exc
        return PostgresCheckpointStore(spec, keep_replies=True)  # toolloop replay --store
    from ..checkpoints import SQLiteCheckpointStore

    path = Path(spec)
    if path.is_dir():
        raise CLIError(f"--store {spec}: is a directory; give a SQLite file", code=2)
    return SQLiteCheckpointStore(path, keep_replies=True)  # toolloop replay --store reads it


def _planner(
    options: RunOptions, model: ChatModel, names: list[str]
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


Verb = Literal["run", "resume", "recover"]


async def async_run(
    options: RunOptions, *, out: TextIO | None = None, display: Display | None = None
) -> RunResult:
    """Run ``options.agent`` (the loop by default) on ``options.request`` as ``toolloop run``
    does, writing its progress and result to ``out``; return its result (the loop's: a
    :class:`~toolloop.LoopResult`), completed or paused.

    The MCP servers of ``options.mcp`` and ``options.mcp_urls`` are open for the whole run
    (their tools join the others) and closed after it; so is the store.

    Raises:
        CLIError: the tools cannot be loaded, an option does not fit (exit status 2), or
            the run failed with a store (the message says how to recover it); and what the
            run raises (``PlannerError``, ``ModelCallError``, ``MCPConnectionError``, ...;
            :func:`toolloop.cli.main` tells them in one line).
    """
    return await _session(options, "run", None, None, False, out=out, display=display)


async def async_resume(
    options: RunOptions,
    run_id: str,
    decision: HumanAnswer,
    *,
    out: TextIO | None = None,
    display: Display | None = None,
) -> RunResult:
    """Continue run ``run_id`` of ``options.store``, paused for a human, with ``decision``
    (``toolloop resume``); the product is rebuilt from ``options`` (the same tools).

    Raises:
        CLIError: as :func:`async_run`, and no ``store``; and what the resume raises
            (``RunNotFoundError``, ``RunNotResumableError``, ``DecisionError``, ...).
    """
    return await _session(options, "resume", run_id, decision, False, out=out, display=display)


async def async_recover(
    options: RunOptions,
    run_id: str,
    *,
    force: bool = False,
    out: TextIO | None = None,
    display: Display | None = None,
) -> RunResult:
    """Continue run ``run_id`` of ``options.store``, which failed or whose process died,
    from its last checkpoint, without running a finished tool call again
    (``toolloop recover``).

    Raises:
        CLIError: as :func:`async_resume`.
    """
    return await _session(options, "recover", run_id, None, force, out=out, display=display)


def _check(options: RunOptions, verb: Verb) -> None:
    """Refuse what does not fit the product, or the verb, before anything runs."""
    see = f" (see toolloop {verb} --help)"
    if options.agent != "loop":
        for given, flag in (
            (options.planner != "structured", "--planner"),
            (options.answer, "--answer"),
        ):
            if given:
                how = "answers by itself" if flag == "--answer" else "calls the model its own way"
                raise CLIError(
                    f"{flag} is the loop's; the {options.agent} agent {how}{see}", code=2
                )
    if options.agent == "status":
        for given, flag in (
            (options.tool_choice is not None, "--tool-choice"),
            (options.seed is not None, "--seed"),
        ):
            if given:
                raise CLIError(f"{flag} does not fit the status agent's steps{see}", code=2)
    _check_rates(options, see)
    if options.store is None:
        if verb != "run":
            raise CLIError(f"{verb} needs --store: the store that keeps the run{see}", code=2)
        for wanted, flag in (
            (bool(options.needs_approval), "--needs-approval"),
            (options.unknown_outcome != "fail", "--unknown-outcome"),
            (bool(options.idempotent_tools) and options.tool_retries is None, "--idempotent-tool"),
        ):
            if wanted:
                raise CLIError(
                    f"{flag} needs --store: a paused run is resumed from it{see}", code=2
                )
    if verb != "run" and options.run_id is not None:
        raise CLIError(f"--run-id is for run; {verb} takes the run's id (RUN_ID)", code=2)


def _check_rates(options: RunOptions, see: str) -> None:
    """Refuse rate limits and retries that do not fit together."""
    if options.tool_retries is not None and not options.idempotent_tools:
        raise CLIError(
            f"--tool-retries {options.tool_retries} retries only the calls of tools safe to "
            f"run twice, and none was given: add --idempotent-tool TOOL{see}",
            code=2,
        )
    if options.model_retries is not None and options.max_retries is not None:
        raise CLIError(
            f"--model-retries {options.model_retries} and --max-retries "
            f"{options.max_retries}: toolloop makes the model's retries with --model-retries "
            f"(the client's own are then off); give one{see}",
            code=2,
        )


def _rate_options(options: RunOptions, names: list[str]) -> dict[str, Any]:
    """The run options of ``--model-rate``, ``--model-concurrency``, ``--model-retries``,
    ``--tool-rate`` and ``--tool-retries``: new limiters (one run per command)."""
    from ..ratelimit import RateLimit, RetryPolicy

    given: dict[str, Any] = {}
    if options.model_rate is not None or options.model_concurrency is not None:
        given["model_rate_limit"] = RateLimit(
            options.model_rate, concurrency=options.model_concurrency, name="model"
        )
        if options.model_retries is None and options.max_retries is not None:
            given["model_retry"] = RetryPolicy(tries=options.max_retries + 1)
    if options.model_retries is not None:
        given["model_retry"] = RetryPolicy(tries=options.model_retries + 1)
    if options.tool_rates:
        unknown = [name for name in options.tool_rates if name not in names]
        if unknown:
            raise CLIError(
                f"--tool-rate {unknown[0]}: no such tool ({', '.join(names) or 'no tools loaded'})",
                code=2,
            )
        given["rate_limits"] = {
            name: RateLimit(rate, name=name) for name, rate in options.tool_rates.items()
        }
    if options.tool_retries is not None:
        given["tool_retry"] = RetryPolicy(tries=options.tool_retries + 1)
    return given


def _run_options(
    options: RunOptions, names: list[str], on_event: Any, run_id: str | None, verb: Verb
) -> dict[str, Any]:
    given: dict[str, Any] = {
        "concurrency": options.concurrency,
        "timeout": options.timeout,
        "tool_timeout": options.tool_timeout,
        "model_timeout": options.model_timeout,
        "on_timeout": "finish",
        "on_usage_limit": "finish",
        "on_event": on_event,
        "unknown_outcome": options.unknown_outcome,
    }
    if options.max_turns is not None:
        given["max_turns"] = options.max_turns
    if options.usage_limits is not None:
        given["usage_limits"] = options.usage_limits
    if options.idempotent_tools:
        given["idempotent_tools"] = list(options.idempotent_tools)
    if options.streaming_dispatch:
        given["streaming_dispatch"] = True
    given.update(_rate_options(options, names))
    if options.needs_approval:
        approval = options.needs_approval
        if "*" in approval:
            given["needs_approval"] = True
        else:
            unknown = [name for name in approval if name not in names]
            if unknown:
                raise CLIError(
                    f"--needs-approval {unknown[0]}: no such tool "
                    f"({', '.join(names) or 'no tools loaded'}; * for every tool)",
                    code=2,
                )
            given["needs_approval"] = list(dict.fromkeys(approval))
    if verb == "run" and run_id is not None:
        given["run_id"] = run_id
    return given


def _what(verb: Verb, options: RunOptions, run_id: str | None, decision: Any) -> str:
    if verb == "run":
        return f"request: {options.request}"
    if verb == "recover":
        return f"recover run {run_id}"
    return f"resume run {run_id}: {_decision_words(decision)}"


def _decision_words(decision: Any) -> str:
    if isinstance(decision, dict):
        return ", ".join(f"{key}: {value.kind}" for key, value in decision.items())
    text = str(decision.kind)
    if getattr(decision, "arguments", None):
        text += " " + ", ".join(decision.arguments)
    if decision.message:
        text += f" ({decision.message})"
    return text


async def _session(
    options: RunOptions,
    verb: Verb,
    run_id: str | None,
    decision: HumanAnswer | None,
    force: bool,
    *,
    out: TextIO | None,
    display: Display | None,
) -> RunResult:
    _check(options, verb)
    async with AsyncExitStack() as stack:
        store: CheckpointStore | None = None
        if options.store is not None:
            store = open_store(options.store)
            stack.push_async_callback(store.aclose)
            if verb == "run":
                run_id = options.run_id or uuid.uuid4().hex
        elif verb == "run":
            run_id = options.run_id
        mcp_tools = await open_mcp_tools(stack, options.mcp, options.mcp_urls)
        return await _observed(
            options,
            verb,
            run_id,
            decision,
            force,
            store,
            out=out,
            display=display,
            mcp_tools=mcp_tools,
        )


async def _observed(
    options: RunOptions,
    verb: Verb,
    run_id: str | None,
    decision: HumanAnswer | None,
    force: bool,
    store: CheckpointStore | None,
    *,
    out: TextIO | None,
    display: Display | None,
    mcp_tools: list[Any],
) -> RunResult:
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
    product = _product(options, model, registry)
    turn = {"loop": "round", "middleware": "model call", "status": "step"}[options.agent]
    display = display if display is not None else make_display(out, plain=options.plain, turn=turn)
    base_url = redact_text(model.base_url)
    display.message(_what(verb, options, run_id, decision))
    kind = f"{options.planner} planner" if options.agent == "loop" else f"{options.agent} agent"
    display.message(
        f"model {options.model} at {base_url} · {kind} · "
        f"{len(names)} tool{'s' * (len(names) != 1)}: {', '.join(names) or '-'}"
    )
    if store is not None:
        display.message(f"run {run_id} in {redact_text(options.store or '')}")
    display.message()
    meta = _meta(options, names, base_url)
    if run_id is not None:
        meta["run_id"] = run_id
    started = perf_counter()
    async with model:

        async def start(on_event: Any) -> RunResult:
            given = _run_options(options, names, on_event, run_id, verb)
            if store is not None:
                given["store"] = store
            if verb == "run":
                return await product.run(options.request, given)
            assert run_id is not None
            if verb == "resume":
                assert decision is not None
                return await product.resume(run_id, decision, given)
            return await product.recover(run_id, force, given)

        try:
            result, written = await observe(
                start, display=display, meta=meta, outputs=options, otel=options.otel
            )
        except Exception as exc:
            if store is not None and run_id is not None:
                await _tell_recover(exc, options, store, run_id)
            raise
        finally:
            if store is not None and run_id is not None and verb == "run":
                await keep_meta(store, run_id, meta)
        elapsed = perf_counter() - started
        if result.paused:
            command = continue_command(options, result.run_id or run_id or "", "resume")
            print_paused(out, result, command, elapsed=elapsed, written=written)
        else:
            print_result(out, result, elapsed=elapsed, written=written)
        if options.answer and not result.paused and isinstance(result, LoopResult):
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


async def _tell_recover(
    exc: Exception, options: RunOptions, store: CheckpointStore, run_id: str
) -> None:
    """When the run failed and its store keeps it to be recovered, say how (a
    :class:`CLIError` saying what went wrong and the ``toolloop recover`` command)."""
    from ._app import describe_error

    try:
        kept = await store.get(run_id)
    except Exception:  # the store's own trouble: the run's error is the one to tell
        return
    if kept is None or kept.status not in ("failed", "running"):
        return
    command = shlex.join(continue_command(options, run_id, "recover"))
    raise CLIError(
        f"{describe_error(exc)}; the run is kept in its store: continue it with `{command}`"
    ) from exc


def _product(options: RunOptions, model: ChatModel, registry: ToolRegistry) -> Product:
    settings: dict[str, Any] = {}
    if options.seed is not None:
        settings["seed"] = options.seed
    if options.agent == "loop":
        return make_product(
            "loop",
            model=model,
            registry=registry,
            planner=_planner(options, model, registry.names),
            loop_options=(  # a resumed run keeps its own requirement unless given again
                {"user_extra_requirement": options.requirement}
                if options.requirement is not None
                else {}
            ),
        )
    return make_product(
        options.agent,
        model=model,
        registry=registry,
        system_prompt=options.requirement,
        tool_choice=_agent_tool_choice(options, registry.names),
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        settings=settings,
    )


def _agent_tool_choice(options: RunOptions, names: list[str]) -> str | None:
    choice = options.tool_choice
    if choice is None or choice in ("auto", "required", "none"):
        return choice
    if choice not in names:
        raise CLIError(
            f"--tool-choice {choice!r} is neither auto, required, none nor a tool's name "
            f"({', '.join(names) or 'no tools loaded'})",
            code=2,
        )
    return choice
