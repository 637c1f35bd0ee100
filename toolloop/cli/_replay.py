"""``toolloop replay``: a run recorded with ``toolloop run --trace`` (or kept in the store
of ``toolloop run --store``) played again through today's code, the model's replies and the
tools' results taken from the record."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from ..kernel import RunResult
from ..models import ChatModel, UsageLimits
from ..tools import ToolRegistry
from ..tracing import TraceError, redact_text
from ._app import describe_error
from ._load import CLIError, load_tools
from ._products import AGENTS
from ._run import LIMIT_NAMES, RunOptions, _product, _run_options, open_store

if TYPE_CHECKING:
    from ..testing import Recording

__all__ = ["ReplayOptions", "async_replay", "rerun"]


def _options_of(meta: Mapping[str, Any]) -> RunOptions:
    """The options of the ``toolloop run`` a trace's header tells (not its rate limits and
    retries: a replay asks no server, and a retried call is told by the reply it got)."""
    agent = meta.get("agent")
    if agent not in AGENTS:
        raise CLIError(
            f"the trace names no product toolloop knows (agent: {agent!r}); it was not "
            "written by `toolloop run --trace`",
            code=2,
        )
    request = meta.get("request")
    if not isinstance(request, str) or not request:
        raise CLIError(
            "the trace has no request: it is the trace of a resumed or recovered run; "
            "replay the trace of the run that began it",
            code=2,
        )
    given: dict[str, Any] = {"request": request, "model": str(meta.get("model") or "")}
    given["agent"] = agent
    for key in (
        "planner",
        "max_tokens",
        "tool_choice",
        "temperature",
        "seed",
        "max_turns",
        "concurrency",
        "streaming_dispatch",
        "requirement",
        "timeout",
        "tool_timeout",
        "model_timeout",
        "unknown_outcome",
    ):
        if meta.get(key) is not None:
            given[key] = meta[key]
    for key in ("needs_approval", "idempotent_tools"):
        if isinstance(meta.get(key), list):
            given[key] = [str(name) for name in meta[key]]
    limits = meta.get("usage_limits")
    if isinstance(limits, str) and limits:
        numbers = dict(part.split("=", 1) for part in limits.split(",") if "=" in part)
        given["usage_limits"] = UsageLimits(
            **{f"max_{k}": int(v) for k, v in numbers.items() if k in LIMIT_NAMES}
        )
    return RunOptions(**given)


def rerun(meta: Mapping[str, Any]) -> Callable[[ChatModel, ToolRegistry], Awaitable[RunResult]]:
    """How to run again the product a ``toolloop run --trace`` trace tells (its header:
    the product, the planner, the settings, the limits): ``await rerun(meta)(model, tools)``
    makes it on ``model`` and ``tools`` and runs the recorded request (what
    :func:`toolloop.testing.replay` does with a trace of the command line). A run that
    had a store gets a memory store of its own.

    Raises:
        CLIError: the header names no product, or no request (exit status 2).
    """
    options = _options_of(meta)

    async def run(model: ChatModel, tools: ToolRegistry) -> RunResult:
        product = _product(options, model, tools)
        given = _run_options(options, tools.names, None, None, "run")
        if options.needs_approval or options.unknown_outcome != "fail":
            from ..checkpoints import MemoryCheckpointStore

            given["store"] = MemoryCheckpointStore()
        return await product.run(options.request, given)

    return run


@dataclass
class ReplayOptions:
    """The options of ``toolloop replay`` (see ``toolloop replay --help``)."""

    file: Path
    """The trace; with ``store``: the run's id."""
    store: str | None = None
    """``--store``: replay run ``file`` of this store (a SQLite file, a PostgreSQL URL)."""
    tools: list[str] = field(default_factory=list)
    """``--tools``; none: the trace's own (``tool_specs``), else stand-ins."""
    live_tools: list[str] = field(default_factory=list)
    reask_from: int | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    compare_requests: Literal["off", "shape", "exact"] = "shape"


async def async_replay(options: ReplayOptions, *, out: TextIO) -> int:
    """Replay ``options.file`` (``toolloop replay``): 0 when the code does what the
    recorded run did; 1 when it does something else (the diff is written to ``out``).

    Raises:
        CLIError: the trace cannot be read, the tools cannot be loaded, an option does not
            fit (exit status 2), or the replay cannot be made.
    """

    async with AsyncExitStack() as stack:
        recording = await _recording(options, stack)
        return await _replayed(options, recording, stack, out=out)


async def _recording(options: ReplayOptions, stack: AsyncExitStack) -> Recording:
    """The recorded run ``options`` name: a trace, or a run of a store (opened on ``stack``)."""
    from ..testing import Recording, ReplayError, StoredRun

    if options.store is None:
        try:
            return Recording.from_trace(options.file)
        except TraceError as exc:
            raise CLIError(
                f"replay: {options.file} is not a toolloop trace: {exc}", code=2
            ) from exc
        except OSError as exc:
            raise CLIError(f"replay: cannot read {options.file}: {exc.strerror}", code=2) from exc
    store = open_store(options.store)
    stack.push_async_callback(store.aclose)
    run_id = str(options.file)
    label = f"run {run_id} in {redact_text(options.store)}"
    try:
        recording = await StoredRun(store, run_id, label=label).read()
    except ReplayError as exc:
        raise CLIError(f"replay: {exc}", code=2) from exc
    if not recording.meta.get("agent"):
        raise CLIError(
            f"replay: {label} was not made by `toolloop run --store`: it does not say which "
            "product ran; replay it from Python (toolloop.testing.replay with "
            "StoredRun(store, run_id) and run=)",
            code=2,
        )
    return recording


async def _replayed(
    options: ReplayOptions, recording: Recording, stack: AsyncExitStack, *, out: TextIO
) -> int:
    from ..testing import ReplayError, ReplayMismatch, replay

    meta = recording.meta
    run = rerun(meta)
    specs = options.tools or [str(s) for s in meta.get("tool_specs") or ()]
    try:
        tools = load_tools(specs)
    except CLIError as exc:
        if options.tools:
            raise
        raise CLIError(
            f"replay: the trace's tools cannot be loaded ({exc}); run from the directory the "
            "run was made in, or give --tools",
            code=2,
        ) from exc
    if options.reask_from is not None and options.model is None:
        raise CLIError("replay: --reask-from needs --model: the model asked again", code=2)
    if options.model is not None and options.reask_from is None:
        raise CLIError("replay: --model is for --reask-from (the model asked again)", code=2)
    stand_ins = [str(n) for n in meta.get("tools") or () if str(n) not in tools.names]
    models, tool_calls = len(recording.model_calls), len(recording.tool_calls)
    what_ran = f"run {options.file} of the store" if options.store else str(options.file)
    out.write(
        f"replaying {what_ran}: the {meta.get('agent')} product, {models} model "
        f"call{'s' * (models != 1)}, {tool_calls} tool call{'s' * (tool_calls != 1)}\n"
    )
    if stand_ins:
        out.write(f"stand-ins (no schema check) for: {', '.join(stand_ins)}\n")
    live_model: ChatModel | None = None
    if options.model is not None:
        from ..models import OpenAIChatModel

        opened = OpenAIChatModel(
            options.model,
            base_url=options.base_url or os.environ.get("OPENAI_BASE_URL") or None,
            api_key=options.api_key or os.environ.get("OPENAI_API_KEY") or None,
        )
        live_model = await stack.enter_async_context(opened)
    try:
        result = await replay(
            recording,
            run,
            tools=tools,
            live_tools=options.live_tools,
            reask_from=options.reask_from,
            model=live_model,
            compare_requests=options.compare_requests,
        )
    except ReplayMismatch as exc:
        out.write(f"\n{redact_text(str(exc))}\n")
        return 1
    except ReplayError as exc:
        raise CLIError(f"replay: {exc}") from exc
    except ValueError as exc:
        raise CLIError(f"replay: {exc}", code=2) from exc
    except Exception as exc:  # the recorded run failed the same way (else: a mismatch)
        out.write(
            "the code did what the recorded run did: it failed again "
            f"({redact_text(describe_error(exc))})\n"
        )
        return 0
    what = (
        "as recorded"
        if options.reask_from is None
        else f"as recorded up to model call #{options.reask_from}, re-asked after"
    )
    count = len(result.records)
    end = f"{result.stop_reason}, {count} record{'s' * (count != 1)}"
    if result.paused:
        end = "paused"
    out.write(f"the code did what the recorded run did ({what}): {end}\n")
    return 0
