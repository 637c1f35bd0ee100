"""The model ↔ tools agent as a flow on the engine: the agent's turn logic.

::

    start ──▶ begin ──▶ model ──▶ model? ──tools──▶ tools ──▶ model | end
                          ▲          ├──model──┐
                          │          ├──end────┼──▶ finish ──▶ end
                          │          └──pause──┼──▶ wait_for_answer
                          └────────────────────┘
    answered (external) ──▶ resume ──▶ model | tools | end | pause

``begin`` runs the ``before_agent`` hooks, ``model`` one model turn (``before_model``
hooks, the model call through the ``wrap_model_call`` onion, structured output, the
``after_model`` hooks), ``tools`` runs the pending calls through the runner
(:class:`~toolloop.runner.ToolBatch`: each call through the ``wrap_tool_call`` onion, at most
``concurrency`` at once; with a store, each through the kernel's journal) and writes the
answers in call order, ``finish`` runs the ``after_agent`` hooks. Routing follows
:mod:`toolloop.agents._routing`. A middleware's :class:`~toolloop.agents.Pause` parks the run
in ``wait_for_answer``; the snapshot keeps where it stopped (which hook, the pending jump),
so ``resume`` goes on from the next hook, in this process or another. Every counter of
the run (model calls, structured-output failures, records) lives in :class:`AgentState`,
so the limits hold across pauses; :class:`AgentDeps` holds the run's configuration and
services only. Everything around the run (its budget, timeout, events, the store's
bookkeeping) is the kernel's (:func:`toolloop.kernel.drive`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import DefinitionError, ExecutionError, UsageLimitError
from ..checkpoints import CheckpointedRun, record_usage
from ..flow import Context, Flow, Step, Target
from ..kernel import (
    HUMAN_EVENT,
    CheckpointSaved,
    RunOptions,
    StopReason,
    cut_off_error,
    record_interrupted,
    tell,
)
from ..models import current_meter
from ..runner import Executor
from ..tools import RunScope
from ._dispatch import StreamedTurn, TurnTools
from ._durable import (
    RECOVER,
    RECOVERY,
    apply_recovery_answer,
    dump_outcome,
    interrupted_request,
    load_outcome,
    progress_snapshot,
)
from ._errors import AgentDefinitionError, AgentModelError
from ._messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    add_messages,
    new_id,
    pending_tool_calls,
)
from ._middleware import AgentMiddleware, ModelRequest, Pause, Runtime, call_hook, hook_outcome
from ._model_call import stream_model
from ._routing import Route, route_after_model, route_after_tools
from ._spec import AgentSpec, ApprovalCheck
from ._state import AgentState, JumpTo, apply_update, check_update
from ._structured_turn import structured_answer
from ._tool_call import ToolOutcome, error_message, record_of

__all__ = ["ANSWERED", "MAX_TURNS", "AgentDeps", "agent_flow", "settle", "stop_reason"]

ANSWERED = HUMAN_EVENT
"""The external event that resumes a paused run with its answer: the kernel's
:data:`~toolloop.kernel.HUMAN_EVENT`, as in every product."""
MAX_TURNS = 100
"""The agent's ``max_turns`` when none is given: model calls per run."""


@dataclass(slots=True)
class AgentDeps:
    """A run's configuration and services (not part of its state): the agent's spec, the
    run's options and what is made of them (its executor, its approval rule), and the
    hooks' :class:`Runtime` (made when the run starts or resumes)."""

    spec: AgentSpec
    options: RunOptions
    executor: Executor
    """The run's tools under its limits (``limiter``, ``tool_timeout``)."""
    approval: ApprovalCheck | None = None
    """The run's ``needs_approval``, compiled."""
    runtime: Runtime | None = None
    run: CheckpointedRun | None = None
    """With a store: the run's checkpoint (progress after each step, the tool journal)."""
    scope: RunScope | None = None
    """What the tools that take a run context are told (``None``: no tool takes one)."""


AgentContext = Context[AgentState, AgentDeps]


def _deps(ctx: AgentContext) -> AgentDeps:
    return ctx.deps


def _runtime(ctx: AgentContext, deps: AgentDeps) -> Runtime:
    deps.runtime = Runtime(ctx, deps.options.deps, deps)
    return deps.runtime


# -- records: one per call of the run, in the order the calls were answered ------------------


def _call_of(messages: list[Message], call_id: str) -> ToolCall | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call
    return None


def _note_answers(state: AgentState, start: int) -> None:
    """Record the calls that the messages from ``start`` on answer without the tools (a
    middleware's answer, a rejection, a limit, the structured-output tool)."""
    messages = state.messages
    for message in messages[start:]:
        if isinstance(message, ToolMessage):
            call = _call_of(messages, message.tool_call_id)
            if call is not None:
                state.records.append(record_of(call, message))


def _close_calls(state: AgentState, error: Callable[[ToolCall], str]) -> None:
    """Answer the calls still waiting with their ``error`` (the run ends before they run),
    so the conversation stays valid for a next run on this state."""
    left = pending_tool_calls(state.messages)
    if left:
        start = len(state.messages)
        state.messages.extend(error_message(call, error(call)) for call in left)
        _note_answers(state, start)


def _answer_ran(state: AgentState) -> None:
    """Answer (and record) the waiting calls that ran while the model streamed (their
    outcomes kept in the state): the run ends before its tools step answers them."""
    live, saved = state._ran, state.streamed
    if not live and not saved:
        return
    for call in pending_tool_calls(state.messages):
        outcome = live.get(call.id)
        if outcome is None and call.id in saved:
            outcome = load_outcome(saved[call.id])
        if outcome is not None:
            state.messages.append(outcome.message)
            state.records.append(outcome.record)
    live.clear()
    saved.clear()


def settle(state: AgentState, stop: StopReason) -> None:
    """A run the kernel finished mid-turn (its timeout, its budget): the calls it cut off
    are answered (and recorded) in the kernel's words."""
    _answer_ran(state)
    _close_calls(state, lambda call: cut_off_error(call.name, stop))


def stop_reason(state: AgentState) -> StopReason:
    """Why a completed run stopped (see :class:`~toolloop.agents.AgentResult`)."""
    if state.stop_reason is not None:
        return state.stop_reason
    if state.structured_response is not None:
        return "structured_response"
    last = state.messages[-1] if state.messages else None
    if isinstance(last, AssistantMessage) and not last.tool_calls:
        if last.refusal is not None:
            return "refusal"
        if last.finish_reason == "length":
            return "cut_off"
        return "answered"
    if isinstance(last, ToolMessage):
        return "tools"
    return "middleware"


# -- hooks -------------------------------------------------------------------------------------


def _apply(state: AgentState, update: Any, where: str) -> None:
    start = len(state.messages)
    try:
        apply_update(state, update)
    except ValueError as exc:
        raise AgentDefinitionError(f"{where} returned an update that does not fit: {exc}") from exc
    _note_answers(state, start)


async def _hook(
    deps: AgentDeps, mw: AgentMiddleware, hook: str, args: tuple[Any, ...], state: AgentState
) -> tuple[JumpTo | None, Pause | None]:
    """Call one hook, apply its update; its jump and pause."""
    result = await call_hook(mw, hook, args, deps.spec.hook_timeout)
    update, jump, pause = hook_outcome(
        result, mw, hook, may_pause=hook in ("before_model", "after_model", "resume")
    )
    if update:
        _apply(state, update, f"hook {mw.name}.{hook}")
    return jump, pause


def _paused(
    state: AgentState, mw: AgentMiddleware, hook: str, index: int, jump: Any, pause: Pause
) -> Route:
    state.paused_at = {
        "by": mw.name,
        "hook": hook,
        "index": index,
        "jump": jump,
        "request": pause.request,
    }
    return "pause"


async def _progress(ctx: AgentContext, step: str, route: Route) -> Route:
    """With a store, write a progress checkpoint: the state (its usage counting the tools'
    model calls too), and where the run goes next."""
    run = ctx.deps.run
    if run is not None:
        _count_usage(ctx.state)
        await run.save(progress_snapshot(ctx.state, ctx.execution_id, step, route, ctx.elapsed()))
        tell(ctx, CheckpointSaved, step=step)
    return route


def _count_usage(state: AgentState) -> None:
    """The state's usage as the run's meter counts it: the model calls of the tools too
    (the model step keeps its own)."""
    meter = current_meter()
    if meter is not None:
        state.usage = meter.usage


# -- the steps ---------------------------------------------------------------------------------


async def begin(messages: list[Message], ctx: AgentContext) -> Route:
    """Take the new messages in; run the ``before_agent`` hooks."""
    state, deps = ctx.state, _deps(ctx)
    runtime = _runtime(ctx, deps)
    add_messages(state.messages, messages)
    state.structured_response = None
    return await _before_agent(state, deps, runtime)


async def _before_agent(state: AgentState, deps: AgentDeps, runtime: Runtime) -> Route:
    for mw in deps.spec.before_agent:
        jump, _ = await _hook(deps, mw, "before_agent", (state, runtime), state)
        if jump is not None:
            return jump
    return "model"


def _unique_ids(
    messages: list[Message], message: AssistantMessage, answered: tuple[ToolMessage, ...], turn: int
) -> tuple[AssistantMessage, tuple[ToolMessage, ...]]:
    """The reply with tool-call ids of its own in the run: a model may repeat an id it gave
    in an earlier reply (``call_0`` at every turn); such a call becomes ``call_0.<turn>``,
    its one id in the run's events, requests, decisions and journal."""
    if not message.tool_calls:
        return message, answered
    used = {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    if used.isdisjoint(c.id for c in message.tool_calls):
        return message, answered
    renamed: dict[str, str] = {}
    calls = []
    for call in message.tool_calls:
        if call.id in used:
            fresh = f"{call.id}.{turn}"
            while fresh in used:
                fresh = f"{fresh}.{turn}"
            used.add(fresh)
            renamed[call.id] = fresh
            call = call.model_copy(update={"id": fresh})
        calls.append(call)
    answered = tuple(
        m.model_copy(update={"tool_call_id": renamed[m.tool_call_id]})
        if m.tool_call_id in renamed
        else m
        for m in answered
    )
    return message.model_copy(update={"tool_calls": calls}), answered


async def _call_model(
    ctx: AgentContext, deps: AgentDeps, turn: StreamedTurn | None = None
) -> JumpTo | None:
    """One model call; the answer is appended. A structured-output retry jumps to the model.
    With a streamed ``turn``, the reply's tool calls are handed to it as they stream."""
    spec, state, runtime = deps.spec, ctx.state, deps.runtime
    assert runtime is not None
    index = state.model_calls
    state.model_calls = index + 1
    request = ModelRequest(
        model=spec.model,
        messages=list(state.messages),
        system_prompt=spec.system_prompt,
        tools=spec.tools,
        tool_choice=spec.tool_choice,
        response_format=spec.strategy,
        settings=spec.settings,
        state=state,
        runtime=runtime,
    )
    meter = current_meter()
    mark = meter.calls if meter is not None else 0
    try:
        if turn is None:
            response = await spec.call_model(request)
        else:  # no middleware wraps the model call (see StreamedTurn)
            timeout = deps.options.model_timeout
            response = await stream_model(
                request, timeout=timeout, cache=spec.openai_tools, dispatch=turn
            )
    except UsageLimitError as exc:
        exc.state = state
        raise
    except (ExecutionError, DefinitionError):
        raise
    except Exception as exc:
        raise AgentModelError(
            f"model call {index} failed: {type(exc).__name__}: {exc}; the conversation so far "
            "is in .state.messages",
            state=state,
        ) from exc
    finally:
        if meter is not None:
            state.usage = meter.usage  # kept in the state: the limits hold across pauses
            if deps.run is not None and meter.calls > mark:  # and journaled: across a crash
                spent = meter.since(mark)
                assert spent is not None
                await record_usage(deps.run, index, spent.model_dump(mode="json"))
    message = response.message
    if message.id is None:
        message = message.model_copy(update={"id": new_id()})
    message, answered = _unique_ids(state.messages, message, response.tool_results, index)
    start = len(state.messages)
    state.messages.append(message)
    state.messages.extend(answered)  # answered by a middleware: they do not run
    retry = None if spec.strategy is None else structured_answer(spec, state, message)
    _note_answers(state, start + 1)
    return retry


async def _model_turn(
    ctx: AgentContext,
    deps: AgentDeps,
    *,
    before_from: int = 0,
    after_from: int | None = None,
    retry: JumpTo | None = None,
) -> Route:
    """``before_model`` hooks (from ``before_from``), the model call, ``after_model`` hooks
    (from ``after_from``: a resumed turn starts there), and where to go next. A run that
    made ``max_turns`` model calls ends before the next turn (stop reason ``max_turns``)."""
    state = ctx.state
    if after_from is None:
        if before_from == 0 and state.model_calls >= deps.options.turns(MAX_TURNS):
            state.stop_reason = "max_turns"
            return "end"
        routed = await _model_hooks(deps, state, "before_model", before_from, None)
        if routed is not None:
            return routed  # the model is not called
        try:
            if deps.options.streaming_dispatch and deps.spec.streams_calls:
                return await _streamed_turn(ctx, deps)
            retry = await _call_model(ctx, deps)
        except UsageLimitError as exc:
            if deps.options.on_usage_limit == "raise":
                raise
            state.usage_limit = exc.limit  # the run ends here, with what it has
            state.stop_reason = "usage_limit"
            return "end"
        after_from = 0
    routed = await _model_hooks(deps, state, "after_model", after_from, retry)
    return routed if routed is not None else route_after_model(state, retry)


async def _streamed_turn(ctx: AgentContext, deps: AgentDeps) -> Route:
    """A model turn whose tool calls start while the model writes them (streaming dispatch,
    see :mod:`toolloop.agents._dispatch`): the model call and the ``after_model`` hooks
    (approvals only) with the turn's batch open; where the turn goes next."""
    state = ctx.state
    async with await StreamedTurn.open(ctx) as turn:
        retry = await _call_model(ctx, deps, turn)
        routed = await _model_hooks(deps, state, "after_model", 0, retry)
        route = routed if routed is not None else route_after_model(state, retry)
    if not state._ran:
        return route
    if route == "pause":  # a call waits for a human: the snapshot keeps what ran
        state.streamed.update({key: dump_outcome(o) for key, o in state._ran.items()})
    elif route != "tools":  # no tools step follows: the calls that ran are answered now
        _answer_ran(state)
    return route


async def _model_hooks(
    deps: AgentDeps,
    state: AgentState,
    hook: Literal["before_model", "after_model"],
    start: int,
    retry: JumpTo | None,
) -> Route | None:
    """The ``before_model`` or ``after_model`` hooks from the ``start``-th on; where the
    turn goes when one of them pauses the run or jumps (``None``: on as planned)."""
    hooks = deps.spec.before_model if hook == "before_model" else deps.spec.after_model
    for i in range(start, len(hooks)):
        jump, pause = await _hook(deps, hooks[i], hook, (state, deps.runtime), state)
        if pause is not None:
            return _paused(state, hooks[i], hook, i, retry, pause)
        if jump is not None:
            return jump if hook == "before_model" else route_after_model(state, jump)
    return None


async def model_step(_: Any, ctx: AgentContext) -> Route:
    """One model turn."""
    return await _progress(ctx, "model", await _model_turn(ctx, _deps(ctx)))


async def recover_step(route: Route | Literal["begin"], ctx: AgentContext) -> Route:
    """A recovered run goes on where its last progress checkpoint said it would."""
    runtime = _runtime(ctx, ctx.deps)
    if route == "begin":  # it died before its first step: the new messages are in the state
        return await _before_agent(ctx.state, ctx.deps, runtime)
    return route


def wait_for_answer(_: Any, ctx: AgentContext) -> None:
    """Park the run until the answer to a middleware's ``Pause`` comes: the pause asks what
    the middleware asks (the run's state keeps which middleware paused, and where)."""
    where = ctx.state.paused_at
    ctx.pause(ANSWERED, where.get("request") if where is not None else None)


async def resume_step(value: tuple[dict[str, Any], Any], ctx: AgentContext) -> Route:
    """The answer came: the middleware that paused takes it, then the turn goes on."""
    where, answer = value
    state, deps = ctx.state, _deps(ctx)
    _runtime(ctx, deps)
    state.paused_at = None
    if where["by"] == RECOVERY:  # a human answered about interrupted calls
        rejected = apply_recovery_answer(state, answer, where.get("causes") or {})
        state.messages.extend(outcome.message for outcome in rejected)
        state.records.extend(outcome.record for outcome in rejected)
        if deps.run is not None:
            for outcome in rejected:  # they never run again, whatever comes
                await record_interrupted(
                    deps.run, outcome.message.tool_call_id, dump_outcome(outcome)
                )
        return await _progress(ctx, "resume", route_after_model(state))
    return await _progress(ctx, "resume", await _answered(where, answer, ctx))


async def _answered(where: dict[str, Any], answer: Any, ctx: AgentContext) -> Route:
    state, deps = ctx.state, ctx.deps
    runtime = deps.runtime
    assert runtime is not None
    mw = deps.spec.by_name[where["by"]]
    hook, index, retry = where["hook"], int(where["index"]), where["jump"]
    jump, pause = await _hook(deps, mw, "resume", (answer, state, runtime), state)
    if pause is not None:  # asked again
        return _paused(state, mw, hook, index, retry, pause)
    if hook == "before_model":
        if jump is not None:
            return jump
        return await _model_turn(ctx, deps, before_from=index + 1)
    if jump is not None:
        return route_after_model(state, jump)
    return await _model_turn(ctx, deps, after_from=index + 1, retry=retry)


async def tools_step(_: Any, ctx: AgentContext) -> Route:
    """Run the calls of the last assistant message that have no answer yet, through the
    runner (each through the ``wrap_tool_call`` onion, at most ``concurrency`` at once, with
    a store each through the kernel's journal); then :func:`after_tools`. A call that ran
    while the model streamed (streaming dispatch) is answered with its outcome."""
    state, deps = ctx.state, ctx.deps
    assert deps.runtime is not None
    calls = pending_tool_calls(state.messages)
    turn = state.model_calls - 1
    if deps.scope is not None:
        deps.scope.round_index = turn
    ran = _ran(state, calls)
    todo = [(k, c) for k, c in enumerate(calls) if c.id not in ran] if ran else enumerate(calls)
    run = deps.run
    journal = await run.journal() if run is not None else {}
    tools = TurnTools(ctx, journal, turn)
    async with tools.batch:
        await tools.run_here(todo)
    state.rerun = []
    outcomes = tools.batch.results
    if ran:  # in call order, with the calls that ran while the model streamed
        done = iter(outcomes)
        outcomes = [ran.get(call.id) or next(done) for call in calls]
        state._ran.clear()
        state.streamed.clear()
    if tools.asked:  # answer the others; the interrupted ones wait for a human
        waiting = {call.id for call, _ in tools.asked}
        after_tools([o for o in outcomes if o.message.tool_call_id not in waiting], ctx)
        state.paused_at = interrupted_request(tools.asked)
        return await _progress(ctx, "tools", "pause")
    return await _progress(ctx, "tools", after_tools(outcomes, ctx))


def _ran(state: AgentState, calls: list[ToolCall]) -> dict[str, ToolOutcome]:
    """The outcomes of ``calls`` that ran while the model streamed, by call id."""
    live, saved = state._ran, state.streamed
    if not live and not saved:
        return {}
    ran: dict[str, ToolOutcome] = {}
    for call in calls:
        outcome = live.get(call.id)
        if outcome is None and call.id in saved:
            outcome = load_outcome(saved[call.id])
        if outcome is not None:
            ran[call.id] = outcome
    return ran


def after_tools(outcomes: list[ToolOutcome], ctx: AgentContext) -> Route:
    """Write the answers (in call order, right after the assistant message) and their
    records, then the tools' state updates; route."""
    state, deps = ctx.state, _deps(ctx)
    for outcome in outcomes:
        if not outcome.update:
            continue
        try:
            check_update(outcome.update)
        except ValueError as exc:
            call = ToolCall(id=outcome.message.tool_call_id, name=outcome.message.name)
            call = _call_of(state.messages, call.id) or call
            failed = ToolOutcome.failed(call, f"the tool's state update does not fit: {exc}")
            outcome.message, outcome.record = failed.message, failed.record
            outcome.update = None
            outcome.return_direct = False
    state.messages.extend(outcome.message for outcome in outcomes)
    state.records.extend(outcome.record for outcome in outcomes)
    jump: JumpTo | None = None
    for outcome in outcomes:
        if outcome.update:
            _apply(state, outcome.update, f"tool {outcome.message.name!r}")
        if jump is None and outcome.jump is not None:
            jump = outcome.jump
    return route_after_tools(
        state,
        [outcome.return_direct for outcome in outcomes],
        deps.spec.structured_tools,
        jump,
    )


async def finish(_: Any, ctx: AgentContext) -> None:
    """Answer the calls a jump left behind; run the ``after_agent`` hooks."""
    state, deps = ctx.state, _deps(ctx)
    runtime = deps.runtime
    _count_usage(state)
    _answer_ran(state)
    _close_calls(state, lambda call: "the run ended before this call ran")
    for mw in deps.spec.after_agent:
        jump, _p = await _hook(deps, mw, "after_agent", (state, runtime), state)
        if jump not in (None, "end"):
            raise AgentDefinitionError(
                f"hook {mw.name}.after_agent asked to jump to {jump!r}; the run is ending, "
                "so after_agent can only update the state"
            )


def _route(route: Route) -> Route:
    return route


def _build() -> Flow[AgentState]:
    flow = Flow("agent", state=AgentState)
    model = Step(model_step, name="model")
    tools = Step(tools_step, name="tools")
    end = Step(finish, name="finish")
    flow.start.to(begin).match(_route, {"model": model, "tools": tools, "end": end})
    cases: dict[Hashable, Target] = {"model": "model", "tools": "tools", "end": "finish"}
    flow.step("model").match(_route, {**cases, "pause": wait_for_answer})
    flow.step("tools").match(_route, {**cases, "pause": "wait_for_answer"})
    flow.when(ANSWERED, external=True).to(Step(resume_step, name="resume")).match(
        _route, {**cases, "pause": "wait_for_answer"}
    )
    flow.when(RECOVER, external=True).to(Step(recover_step, name="recovered")).match(
        _route, {**cases, "pause": "wait_for_answer"}
    )
    flow.step("finish").end()
    flow.validate()
    return flow


agent_flow: Flow[AgentState] = _build()
"""The agent's flow definition, shared by every agent and run (runs are executions of it)."""
