"""The surface of the tool loop: ``async_plan_and_execute``, resume and recover, their sync
twins, and a stream; every run driven by the kernel (:func:`toolloop.kernel.drive`)."""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import anyio
import sniffio

from .._errors import PlannerError, UsageLimitError
from ..checkpoints import HumanRequest
from ..flow import EventStream, Execution, FlowEvent
from ..kernel import (
    ApprovalSpec,
    Ended,
    RunOptions,
    StopReason,
    UnknownOutcome,
    approval_rule,
    drive,
)
from ..models import ChatModel, UsageLimits
from ..planners import PlannerLike
from ..runner import (
    Executor,
    ToolCallEvent,
    ToolExecutionRecord,
    ToolProgress,
    json_safe,
    progress_reporter,
)
from ..tools import Progress, RunScope, Tool, ToolRegistry
from ._events import LoopEvent
from ._flow import AnswerWith, LoopDeps, RoundState, loop_flow
from ._results import LoopResult

if TYPE_CHECKING:
    from ..checkpoints import CheckpointedRun, CheckpointStore

__all__ = [
    "LoopStream",
    "async_plan_and_execute",
    "async_recover_plan_and_execute",
    "async_resume_plan_and_execute",
    "plan_and_execute",
    "recover_plan_and_execute",
    "resume_plan_and_execute",
    "stream_plan_and_execute",
]

ToolsLike = ToolRegistry | Sequence[Tool | Callable[..., Any]]
AnswerLike = ChatModel | AnswerWith


class _Logic:
    """What the loop tells the kernel about its round state."""

    __slots__ = ()

    def stop_reason(self, state: RoundState) -> StopReason | None:
        return state.stop_reason

    def records(self, state: RoundState) -> list[ToolExecutionRecord]:
        return state.done_plans

    def turns(self, state: RoundState) -> int:
        return state.round_index


_LOGIC = _Logic()


def _answer_spec(answer_with: AnswerLike | None) -> AnswerWith | None:
    if answer_with is None or isinstance(answer_with, AnswerWith):
        return answer_with
    if not callable(getattr(answer_with, "stream", None)):
        raise TypeError(
            "answer_with must be a ChatModel (the final answer's model) or an AnswerWith, got "
            f"{type(answer_with).__name__}"
        )
    return AnswerWith(answer_with)


def _prepare(
    user_input: str,
    options: RunOptions,
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    max_turns: int = 5,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    state: RoundState | None = None,
    run_id: str | None = None,
    answer: AnswerWith | None = None,
) -> Execution[RoundState]:
    if not isinstance(user_input, str):
        raise TypeError(f"user_input must be a str, got {type(user_input).__name__}")
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    executor = Executor(
        registry,
        concurrency=options.concurrency,
        limiter=options.limiter,
        tool_timeout=options.tool_timeout,
    )
    loop_deps = LoopDeps(
        user_input=user_input,
        planner=planner,
        registry=registry,
        executor=executor,
        max_rounds=max_turns,
        user_extra_requirement=user_extra_requirement,
        model_timeout=options.model_timeout,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        available_tools=registry.specs(),
        usage_limits=options.usage_limits,
        deps=options.deps,
        scope=RunScope("", options.deps) if registry.takes_context else None,
        answer=answer,
    )
    if run_id is None:
        execution = loop_flow.execution(deps=loop_deps)
    else:
        execution = Execution(
            loop_flow, RoundState() if state is None else state, loop_deps, id=run_id
        )
    scope = loop_deps.scope
    if scope is not None:
        scope.run_id = execution.id
        scope.report = _reporter(execution)
    return execution


def _reporter(execution: Execution[RoundState]) -> Callable[[Progress], None]:
    """A tool's progress as a :class:`~toolloop.runner.ToolProgress` event of the run."""
    return progress_reporter(execution.context_for("execute"))


def _result(execution: Execution[RoundState], ended: Ended[RoundState]) -> LoopResult:
    deps: LoopDeps = execution.deps
    state = ended.state
    request = None
    if ended.status == "paused" and isinstance(ended.request, dict):
        request = HumanRequest.model_validate(ended.request)
    return LoopResult.build(
        deps.user_input,
        state.done_plans,
        rounds=state.round_index,
        stop_reason=ended.stop_reason,  # type: ignore[arg-type]  # the loop's own reasons
        notes=state.notes,
        planner_text=state.planner_text,
        run_id=execution.id,
        request=request,
        usage=state.usage,
        text=state.answer,
        status=ended.status,
    )


async def _drive(
    execution: Execution[RoundState],
    options: RunOptions,
    *,
    run: CheckpointedRun | None = None,
) -> LoopResult:
    """One session of the run, through the kernel; its result."""
    state = execution.state
    made: list[LoopResult] = []

    def completed(ended: Ended[RoundState]) -> Any:
        made.append(_result(execution, ended))
        return json_safe(made[-1])

    timeout = options.timeout
    try:
        ended = await drive(
            execution,
            lambda: execution.run(timeout=timeout),
            options,
            _LOGIC,
            scope=execution.deps.scope,
            run=run,
            completed=completed,
        )
    except PlannerError as exc:
        exc.done_plans = list(state.done_plans)  # a streamed round cut short too
        raise
    except UsageLimitError as exc:
        state.stop_reason = "usage_limit"
        exc.done_plans = list(state.done_plans)
        exc.state = state
        if not exc.estimated and state.usage is not None:  # an estimate is kept as it is
            exc.usage = state.usage
        raise
    if ended.stop_reason is not None:
        state.stop_reason = ended.stop_reason  # type: ignore[assignment]  # the loop's own
    return made[-1] if made else _result(execution, ended)


def _options(**given: Any) -> RunOptions:
    return RunOptions(**given)


async def async_plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_turns: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    model_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    store: CheckpointStore | None = None,
    run_id: str | None = None,
    needs_approval: ApprovalSpec = (),
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    answer_with: AnswerLike | None = None,
) -> LoopResult:
    """Plan, execute tools, and plan again, round after round; return the results.

    The options below that are not the loop's own (``concurrency``, ``limiter``,
    ``timeout``, ``tool_timeout``, ``model_timeout``, ``on_timeout``, ``max_turns``,
    ``usage_limits``, ``on_usage_limit``, ``store``, ``run_id``, ``needs_approval``,
    ``unknown_outcome``, ``idempotent_tools``, ``deps``, ``on_event``) are every product's,
    with the same defaults (:class:`~toolloop.kernel.RunOptions`).

    Args:
        user_input: the user's request, given to the planner every round.
        tools: the tools the planner may call: typed functions, :class:`~toolloop.Tool`
            objects, or a :class:`~toolloop.tools.ToolRegistry`.
        planner: decides each round (see :class:`~toolloop.planners.Planner`).
        max_turns: at most this many rounds execute tools; checked before the planner is
            called, so no planner call is wasted (stop reason ``max_turns``).
        concurrency: at most this many tool calls of this run at once.
        limiter: a :class:`anyio.CapacityLimiter` shared by many runs (both limits hold).
        timeout: seconds for the whole run; every running planner call and tool is cancelled
            when it passes.
        tool_timeout: seconds for each tool call (a tool's own, smaller timeout wins).
        model_timeout: seconds for each planner call (and the final answer's).
        user_extra_requirement: more instructions for the planner.
        max_commands: commands past this many in one round fail without running.
        streaming_dispatch: with a planner that streams (``plan_streaming``, e.g.
            :class:`~toolloop.planners.StructuredPlanner`), start each command as soon as
            it is complete in the stream, while the rest of the plan is still written (a
            durable run too: a command that needs approval is held until it is answered).
        on_timeout: ``"raise"`` :class:`~toolloop.ExecutionTimeoutError` (its ``.state``
            keeps the records), or ``"finish"``: return the result so far with
            ``stop_reason="timeout"``.
        on_event: called with every event of the run, as it happens.
        store: make the run durable: a :class:`~toolloop.checkpoints.CheckpointStore`
            (SQLite, PostgreSQL, ...) that keeps its round state after every round and the
            journal of its planner outputs and tool calls, so that
            :func:`async_recover_plan_and_execute` continues it if its process dies, and
            :func:`async_resume_plan_and_execute` when it paused (see the durability guide).
        run_id: the durable run's id (a new one by default: ``result.run_id``).
        needs_approval: which calls wait for a human (needs ``store``): tool names, a mapping,
            a rule, or ``True`` (:data:`~toolloop.kernel.ApprovalSpec`). When a round plans
            one, the round waits and the run returns a result with ``paused`` true and
            ``result.request`` (a :class:`~toolloop.checkpoints.HumanRequest`); resume it
            with :func:`async_resume_plan_and_execute` and a decision, in any process.
        unknown_outcome: what a recovered run does with a call that started and has no
            recorded outcome (:data:`~toolloop.kernel.UnknownOutcome`: ``"fail"``,
            ``"retry"`` idempotent tools, or ``"ask"`` a human).
        idempotent_tools: names of the tools that are safe to run twice.
        usage_limits: the run's budget of model calls and tokens
            (:class:`~toolloop.models.UsageLimits`), checked before each model call (the
            final answer's too) and while a stream runs.
        on_usage_limit: ``"raise"`` :class:`~toolloop.errors.UsageLimitError` (its
            ``.done_plans`` keeps the records), or ``"finish"``: return the result so far
            with ``stop_reason="usage_limit"``.
        deps: your dependencies (a DB pool, an HTTP client...), handed to every tool that
            declares a :class:`~toolloop.tools.RunContext` parameter as ``ctx.deps``.
        answer_with: a :class:`~toolloop.models.ChatModel` (or an
            :class:`~toolloop.loop.AnswerWith` with its settings): once the loop stops, the
            run writes the final answer with it (:func:`~toolloop.loop.final_answer`) as
            its last model call, counted in ``result.usage`` and held to the budget; the
            answer is ``result.text``.

    Returns:
        The records, folded into ``prompt`` (``action_results``, ``extra_instruction``) and
        ``extra`` (``tool_logs``) when there are any; ``text``: the final answer with
        ``answer_with``, else the planner's text.

    Raises:
        PlannerError: the planner raised or timed out (``.done_plans`` keeps the records).
        ExecutionTimeoutError: the run outlived ``timeout`` (with ``on_timeout="raise"``).
        CheckpointConflictError: the store already has a run ``run_id``.
        UsageLimitError: the run passed ``usage_limits`` (with ``on_usage_limit="raise"``).
    """
    options = _options(
        concurrency=concurrency,
        limiter=limiter,
        tool_timeout=tool_timeout,
        model_timeout=model_timeout,
        timeout=timeout,
        on_timeout=on_timeout,
        max_turns=max_turns,
        usage_limits=usage_limits,
        on_usage_limit=on_usage_limit,
        store=store,
        run_id=run_id,
        needs_approval=needs_approval,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        deps=deps,
        on_event=on_event,
    )
    if store is None and (run_id is not None or needs_approval):
        what = f"run_id={run_id!r} names" if run_id is not None else "needs_approval= pauses"
        raise ValueError(f"{what} a durable run, which needs store= (a CheckpointStore)")
    if store is not None and run_id is None:
        run_id = uuid.uuid4().hex
    execution = _prepare(
        user_input,
        options,
        planner=planner,
        tools=tools,
        max_turns=options.turns(5),
        user_extra_requirement=user_extra_requirement,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        run_id=run_id,
        answer=_answer_spec(answer_with),
    )
    if store is None:
        return await _drive(execution, options)
    from ._durable import DurableLoop, begin

    approval_rule(needs_approval, execution.deps.registry.names)  # refused before any write
    checkpointed = await begin(store, execution.id, execution.deps, options)
    durable = DurableLoop(
        checkpointed, execution.state, options, tool_names=execution.deps.registry.names
    )
    execution.deps = durable.wrap(execution.deps)
    return await _drive(execution, options, run=checkpointed)


async def _continued(
    run_id: str,
    *,
    store: CheckpointStore,
    tools: ToolsLike,
    planner: PlannerLike,
    options: RunOptions,
    decision: object,
    force: bool,
    streaming_dispatch: bool,
    answer: AnswerWith | None,
) -> LoopResult:
    """A stored run continued: a paused one with ``decision``, else one whose process died
    or that failed."""
    from ..checkpoints import CheckpointedRun, RunNotResumableError
    from ._durable import (
        DECISIONS,
        DurableLoop,
        approval_of_checkpoint,
        decision_of,
        journal_verdicts,
        resume_checkpoint,
        verdicts_data,
    )

    checkpoint = await CheckpointedRun.load(store, run_id)
    begun, state = resume_checkpoint(checkpoint)  # a run of the loop?
    if checkpoint.status == "completed":
        if decision is not None:
            raise RunNotResumableError(
                f"run {run_id!r} has completed, not paused: a decision has nothing to answer "
                "(was it answered already?); recover it without one for its result"
            )
        return LoopResult.model_validate(checkpoint.result)
    paused = checkpoint.status == "paused"
    if paused != (decision is not None):
        raise RunNotResumableError(
            f"run {run_id!r} is paused for a human: resume it with a decision (an answer to "
            "its request): async_resume_plan_and_execute(run_id, decision, ...)"
            if paused
            else f"run {run_id!r} is {checkpoint.status}, not paused: there is nothing to "
            "decide; recover it: async_recover_plan_and_execute(run_id, ...)"
        )
    options = approval_of_checkpoint(checkpoint, options)
    execution = _prepare(
        str(begun.get("user_input", "")),
        options,
        planner=planner,
        tools=tools,
        max_turns=int(begun.get("max_turns", begun.get("max_rounds", 5))),
        user_extra_requirement=begun.get("user_extra_requirement"),
        max_commands=int(begun.get("max_commands", 64)),
        streaming_dispatch=streaming_dispatch,
        state=state,
        run_id=run_id,
        answer=answer,
    )
    registry = execution.deps.registry
    verdicts: Any = None
    if paused:
        decided = decision_of(checkpoint, decision, registry)
        asked = checkpoint.request if isinstance(checkpoint.request, dict) else {}
        verdicts = verdicts_data(decided, again=asked.get("kind") == "interrupted_tool_calls")
        # noted with the claim, so a process that dies before journaling them has them
        claimed = await CheckpointedRun.claim(
            store, checkpoint, expect=("paused",), event=DECISIONS, value=verdicts
        )
        decided_at = claimed.checkpoint.revision
    else:
        claimed = await CheckpointedRun.claim(
            store, checkpoint, expect=("running", "failed"), force=force
        )
        if checkpoint.resume_event == DECISIONS:  # it may have died before journaling them
            verdicts = checkpoint.resume_value
        decided_at = checkpoint.revision
    try:
        journal = await claimed.journal()
        if verdicts is not None and await journal_verdicts(claimed, journal, decided_at, verdicts):
            journal = await claimed.journal()
    except BaseException:
        await claimed.abandon()
        raise
    durable = DurableLoop(claimed, state, options, journal=journal, tool_names=registry.names)
    durable.count_journaled_usage()
    execution.deps = durable.wrap(execution.deps)
    return await _drive(execution, options, run=claimed)


async def async_resume_plan_and_execute(
    run_id: str,
    decision: object,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    model_timeout: float | None = None,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    needs_approval: ApprovalSpec = (),
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    streaming_dispatch: bool = False,
    answer_with: AnswerLike | None = None,
) -> LoopResult:
    """Continue the durable run ``run_id`` that paused for a human, with their ``decision``:
    its round runs as decided (approved calls as they are, edited ones with the new
    arguments, rejected ones as failed records the planner sees), without running a finished
    tool call again.

    ``decision`` answers the run's request (``result.request``): one
    :class:`~toolloop.checkpoints.HumanDecision` for all its calls
    (:class:`~toolloop.checkpoints.Approve`, :class:`~toolloop.checkpoints.Edit` with new
    arguments by call id, :class:`~toolloop.checkpoints.Reject` with a message for the
    planner), its data, a bare kind (``"approve"``), or one per call
    (``{call_id: decision}``). The request, ``max_turns`` and the planner's extra
    requirement come from the stored run; the tools and the planner are given again (they
    are code), and so is a ``needs_approval`` rule (names are kept with the run). The other
    arguments are those of :func:`async_plan_and_execute`. A budget counts every model call
    the run made before it paused too, and so does ``result.usage``.

    Raises:
        RunNotFoundError: no run ``run_id`` in the store.
        RunNotResumableError: the run is not paused (recover it), a live worker runs it (or
            another caller resumed it first), or it is no run of the loop.
        DecisionError: the decision does not fit what the paused run asks.
    """
    return await _continued(
        run_id,
        store=store,
        tools=tools,
        planner=planner,
        options=_options(
            concurrency=concurrency,
            limiter=limiter,
            tool_timeout=tool_timeout,
            model_timeout=model_timeout,
            timeout=timeout,
            on_timeout=on_timeout,
            usage_limits=usage_limits,
            on_usage_limit=on_usage_limit,
            store=store,
            run_id=run_id,
            needs_approval=needs_approval,
            unknown_outcome=unknown_outcome,
            idempotent_tools=idempotent_tools,
            deps=deps,
            on_event=on_event,
        ),
        decision=_required(decision),
        force=False,
        streaming_dispatch=streaming_dispatch,
        answer=_answer_spec(answer_with),
    )


def _required(decision: object) -> object:
    if decision is None:
        raise TypeError(
            "async_resume_plan_and_execute needs the human's decision (e.g. Approve()); a run "
            "whose process died is continued with async_recover_plan_and_execute"
        )
    return decision


async def async_recover_plan_and_execute(
    run_id: str,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    force: bool = False,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    model_timeout: float | None = None,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    needs_approval: ApprovalSpec = (),
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    streaming_dispatch: bool = False,
    answer_with: AnswerLike | None = None,
) -> LoopResult:
    """Continue the durable run ``run_id`` whose process died, or that failed, from its last
    round, without running a finished tool call again; a completed run gives its stored
    result and runs nothing.

    A call that started and has no recorded outcome (its process died while it ran: it may
    or may not have taken effect) follows ``unknown_outcome``: ``"fail"`` (a failed record
    that says so, for the planner to decide), ``"retry"`` (run it again if its tool is in
    ``idempotent_tools``), or ``"ask"`` (the run pauses and asks a human). Such a call is
    never run again silently. The other arguments are those of
    :func:`async_plan_and_execute`, and ``force``: take over a run marked running even if
    its owner may still run it.

    Raises:
        RunNotFoundError: no run ``run_id`` in the store.
        RunNotResumableError: the run is paused (resume it with a decision), a live worker
            runs it, or it is no run of the loop.
    """
    return await _continued(
        run_id,
        store=store,
        tools=tools,
        planner=planner,
        options=_options(
            concurrency=concurrency,
            limiter=limiter,
            tool_timeout=tool_timeout,
            model_timeout=model_timeout,
            timeout=timeout,
            on_timeout=on_timeout,
            usage_limits=usage_limits,
            on_usage_limit=on_usage_limit,
            store=store,
            run_id=run_id,
            needs_approval=needs_approval,
            unknown_outcome=unknown_outcome,
            idempotent_tools=idempotent_tools,
            deps=deps,
            on_event=on_event,
        ),
        decision=None,
        force=force,
        streaming_dispatch=streaming_dispatch,
        answer=_answer_spec(answer_with),
    )


def _sync(name: str, twin: str, call: Callable[[], Any], backend: str) -> Any:
    try:
        running = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        running = None
    if running is not None:
        raise RuntimeError(
            f"{name}() was called inside a running {running} event loop; "
            f"use `await {twin}(...)` there"
        )
    return anyio.run(call, backend=backend)


def plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_turns: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    model_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    store: CheckpointStore | None = None,
    run_id: str | None = None,
    needs_approval: ApprovalSpec = (),
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    answer_with: AnswerLike | None = None,
    backend: Literal["asyncio", "trio"] = "asyncio",
) -> LoopResult:
    """The sync twin of :func:`async_plan_and_execute`, for scripts (the same arguments,
    and ``backend``: the event loop it runs, ``"asyncio"`` or ``"trio"``).

    Runs its own event loop; from async code, ``await async_plan_and_execute(...)``.
    """
    call = functools.partial(
        async_plan_and_execute,
        user_input,
        tools=tools,
        planner=planner,
        max_turns=max_turns,
        concurrency=concurrency,
        limiter=limiter,
        timeout=timeout,
        tool_timeout=tool_timeout,
        model_timeout=model_timeout,
        user_extra_requirement=user_extra_requirement,
        max_commands=max_commands,
        streaming_dispatch=streaming_dispatch,
        on_timeout=on_timeout,
        on_event=on_event,
        store=store,
        run_id=run_id,
        needs_approval=needs_approval,
        unknown_outcome=unknown_outcome,
        idempotent_tools=idempotent_tools,
        usage_limits=usage_limits,
        on_usage_limit=on_usage_limit,
        deps=deps,
        answer_with=answer_with,
    )
    result: LoopResult = _sync("plan_and_execute", "async_plan_and_execute", call, backend)
    return result


def resume_plan_and_execute(
    run_id: str,
    decision: object,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    backend: Literal["asyncio", "trio"] = "asyncio",
    **options: Any,
) -> LoopResult:
    """The sync twin of :func:`async_resume_plan_and_execute` (the same arguments, and
    ``backend``), for scripts."""
    call = functools.partial(
        async_resume_plan_and_execute,
        run_id,
        decision,
        store=store,
        tools=tools,
        planner=planner,
        **options,
    )
    result: LoopResult = _sync(
        "resume_plan_and_execute", "async_resume_plan_and_execute", call, backend
    )
    return result


def recover_plan_and_execute(
    run_id: str,
    *,
    store: CheckpointStore,
    tools: ToolsLike = (),
    planner: PlannerLike,
    backend: Literal["asyncio", "trio"] = "asyncio",
    **options: Any,
) -> LoopResult:
    """The sync twin of :func:`async_recover_plan_and_execute` (the same arguments, and
    ``backend``), for scripts."""
    call = functools.partial(
        async_recover_plan_and_execute,
        run_id,
        store=store,
        tools=tools,
        planner=planner,
        **options,
    )
    result: LoopResult = _sync(
        "recover_plan_and_execute", "async_recover_plan_and_execute", call, backend
    )
    return result


_LOOP_EVENTS = (LoopEvent, ToolCallEvent, ToolProgress)


class LoopStream:
    """A run in progress: iterate over its events; ``result`` is set once it is over."""

    def __init__(self, events: EventStream, *, loop_only: bool = False) -> None:
        self._events = events
        self._result: LoopResult | None = None
        self._exhausted = False
        self._left_early = False
        self._loop_only = loop_only

    def __aiter__(self) -> LoopStream:
        return self

    async def __anext__(self) -> FlowEvent:
        from ..kernel import RunEvent

        try:
            while True:
                event = await self._events.__anext__()
                if not self._loop_only or isinstance(event, (*_LOOP_EVENTS, RunEvent)):
                    return event
        except StopAsyncIteration:
            self._exhausted = True
            raise

    @property
    def result(self) -> LoopResult:
        """The run's result (after the events ended)."""
        if self._result is None:
            if self._left_early:
                raise RuntimeError(
                    "the run was cancelled when its block was left before its events ended, "
                    "so it has no result; read the events to the end inside the block"
                )
            raise RuntimeError("the run has not finished; read its events to the end first")
        return self._result


@asynccontextmanager
async def stream_plan_and_execute(
    user_input: str,
    *,
    tools: ToolsLike = (),
    planner: PlannerLike,
    max_turns: int = 5,
    concurrency: int = 4,
    limiter: anyio.CapacityLimiter | None = None,
    timeout: float | None = None,
    tool_timeout: float | None = None,
    model_timeout: float | None = None,
    user_extra_requirement: str | None = None,
    max_commands: int = 64,
    streaming_dispatch: bool = False,
    on_timeout: Literal["raise", "finish"] = "raise",
    on_event: Callable[[FlowEvent], None] | None = None,
    store: CheckpointStore | None = None,
    run_id: str | None = None,
    needs_approval: ApprovalSpec = (),
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Sequence[str] = (),
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
    deps: Any = None,
    answer_with: AnswerLike | None = None,
    loop_events_only: bool = False,
) -> AsyncIterator[LoopStream]:
    """Run the loop in the background and read its typed events as they happen::

        async with stream_plan_and_execute("...", tools=..., planner=...) as run:
            async for event in run:
                print(event.kind)
        print(run.result.action_results)

    Takes the arguments of :func:`async_plan_and_execute` (a durable run too: ``store=``),
    and ``loop_events_only``: read only the run's own events (rounds, plans, model and tool
    calls, the end), not the engine's (``step_started``, ...). Leaving the block early
    cancels the run; an error of the run is raised when the block exits. To keep an event
    as JSON (its results may be any Python value), use :func:`toolloop.tracing.dump_event`.
    """
    send, receive = anyio.create_memory_object_stream[FlowEvent](max_buffer_size=math.inf)
    stream = _ChannelStream(receive, loop_only=loop_events_only)
    failure: list[BaseException] = []

    async def drive_it() -> None:
        try:
            stream._result = await async_plan_and_execute(
                user_input,
                tools=tools,
                planner=planner,
                max_turns=max_turns,
                concurrency=concurrency,
                limiter=limiter,
                timeout=timeout,
                tool_timeout=tool_timeout,
                model_timeout=model_timeout,
                user_extra_requirement=user_extra_requirement,
                max_commands=max_commands,
                streaming_dispatch=streaming_dispatch,
                on_timeout=on_timeout,
                on_event=_Forward(send, on_event),
                store=store,
                run_id=run_id,
                needs_approval=needs_approval,
                unknown_outcome=unknown_outcome,
                idempotent_tools=idempotent_tools,
                usage_limits=usage_limits,
                on_usage_limit=on_usage_limit,
                deps=deps,
                answer_with=answer_with,
            )
        except Exception as exc:
            failure.append(exc)
        finally:
            send.close()  # the events end: the reader's iteration stops

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive_it)
        try:
            yield stream
        finally:
            if not stream._exhausted:  # left early: the run is not wanted any more
                stream._left_early = True
                tg.cancel_scope.cancel()
            receive.close()
    if failure:
        raise failure[0]


class _Forward:
    """The run's events into the stream's channel, and to the caller's ``on_event``."""

    __slots__ = ("_also", "_send")

    def __init__(self, send: Any, also: Callable[[FlowEvent], None] | None) -> None:
        self._send = send
        self._also = also

    def __call__(self, event: FlowEvent) -> None:
        if self._also is not None:
            self._also(event)
        try:
            self._send.send_nowait(event)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the reader left


class _ChannelStream(LoopStream):
    """A :class:`LoopStream` fed by a channel (the run's events as it publishes them)."""

    def __init__(self, receive: Any, *, loop_only: bool) -> None:
        super().__init__(receive, loop_only=loop_only)
