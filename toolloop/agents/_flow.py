"""The model ↔ tools agent as a flow on the engine.

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
``concurrency`` at once) and writes the answers in call order, ``finish`` runs the
``after_agent`` hooks. Routing follows
:mod:`toolloop.agents._routing`. A middleware's :class:`~toolloop.agents.Pause` parks the run
in ``wait_for_answer``; the snapshot keeps where it stopped (which hook, the pending jump),
so ``resume`` goes on from the next hook, in this process or another. Every counter of
the run (model calls, structured-output failures) lives in :class:`AgentState`, so the
limits hold across pauses; :class:`AgentDeps` holds configuration and services only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Literal

from .._errors import DefinitionError, ExecutionError, UsageLimitError
from ..checkpoints import CheckpointedRun, cut_off_causes, record_usage
from ..flow import Context, Flow, Step, Target
from ..models import current_meter
from ..runner import (
    ToolBatch,
    ToolCallFinished,
    ToolCallStarted,
    ToolCommand,
    ToolExecutionRecord,
)
from ..tools import RunScope
from ._durable import (
    RECOVER,
    RECOVERY,
    apply_recovery_answer,
    interrupted,
    interrupted_request,
    journaled_call,
    progress_snapshot,
)
from ._errors import AgentDefinitionError, AgentModelError, ModelCallLimitError
from ._events import AgentFinished, ModelCallFinished, ModelCallStarted
from ._messages import Message, ToolCall, add_messages, new_id, pending_tool_calls
from ._middleware import AgentMiddleware, ModelRequest, Pause, Runtime, call_hook, hook_outcome
from ._routing import Route, route_after_model, route_after_tools
from ._spec import AgentSpec
from ._state import AgentState, JumpTo, apply_update, check_update
from ._structured_turn import structured_answer
from ._tool_call import ToolOutcome, error_message, run_tool_call

__all__ = ["ANSWERED", "AgentDeps", "agent_flow"]

ANSWERED = "answered"
"""The external event that resumes a paused run with its answer."""


@dataclass(slots=True)
class AgentDeps:
    """A run's configuration and services (not part of its state): the agent's spec, the
    caller's ``context``, and the hooks' :class:`Runtime` (made when the run starts or
    resumes)."""

    spec: AgentSpec
    context: Any = None
    runtime: Runtime | None = None
    run: CheckpointedRun | None = None
    """With a store: the run's checkpoint (progress after each step, the tool journal)."""
    scope: RunScope | None = None
    """What the tools that take a run context are told (``None``: no tool takes one)."""


AgentContext = Context[AgentState, AgentDeps]


def _deps(ctx: AgentContext) -> AgentDeps:
    return ctx.deps


def _runtime(ctx: AgentContext, deps: AgentDeps) -> Runtime:
    deps.runtime = Runtime(ctx, deps.context)
    return deps.runtime


def _apply(state: AgentState, update: Any, where: str) -> None:
    try:
        apply_update(state, update)
    except ValueError as exc:
        raise AgentDefinitionError(f"{where} returned an update that does not fit: {exc}") from exc


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
        await run.save(progress_snapshot(ctx.state, ctx.execution_id, step, route))
    return route


def _count_usage(state: AgentState) -> None:
    """The state's usage as the run's meter counts it: the model calls of the tools too
    (the model step keeps its own)."""
    meter = current_meter()
    if meter is not None:
        state.usage = meter.usage


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


async def _call_model(ctx: AgentContext, deps: AgentDeps) -> JumpTo | None:
    """One model call; the answer is appended. A structured-output retry jumps to the model."""
    spec, state, runtime = deps.spec, ctx.state, deps.runtime
    assert runtime is not None
    index = state.model_calls
    if spec.max_model_calls is not None and index >= spec.max_model_calls:
        raise ModelCallLimitError(
            f"the run made {index} model calls, its max_model_calls; raise it, or bound the "
            "run with ModelCallLimitMiddleware(run_limit=..., exit_behavior='end')",
            state=state,
        )
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
    observed = ctx.observed
    if observed:
        ctx.publish(
            ModelCallStarted(execution_id=ctx.execution_id, at=ctx.elapsed(), call_index=index)
        )
    started = perf_counter()
    meter = current_meter()
    mark = meter.calls if meter is not None else 0
    try:
        response = await spec.call_model(request)
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
    state.messages.append(message)
    state.messages.extend(response.tool_results)  # answered by a middleware: they do not run
    if observed:
        ctx.publish(
            ModelCallFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                call_index=index,
                message=message,
                duration=perf_counter() - started,
                usage=meter.since(mark) if meter is not None else None,
            )
        )
    if spec.strategy is None:
        return None
    return structured_answer(spec, state, message)


async def _model_turn(
    ctx: AgentContext,
    deps: AgentDeps,
    *,
    before_from: int = 0,
    after_from: int | None = None,
    retry: JumpTo | None = None,
) -> Route:
    """``before_model`` hooks (from ``before_from``), the model call, ``after_model`` hooks
    (from ``after_from``: a resumed turn starts there), and where to go next."""
    spec, state, runtime = deps.spec, ctx.state, deps.runtime
    if after_from is None:
        hooks = spec.before_model
        for i in range(before_from, len(hooks)):
            jump, pause = await _hook(deps, hooks[i], "before_model", (state, runtime), state)
            if pause is not None:
                return _paused(state, hooks[i], "before_model", i, None, pause)
            if jump is not None:
                return jump  # the model is not called
        try:
            retry = await _call_model(ctx, deps)
        except UsageLimitError as exc:
            if spec.on_usage_limit == "raise":
                raise
            state.usage_limit = exc.limit  # the run ends here, with what it has
            return "end"
        after_from = 0
    hooks = spec.after_model
    for i in range(after_from, len(hooks)):
        jump, pause = await _hook(deps, hooks[i], "after_model", (state, runtime), state)
        if pause is not None:
            return _paused(state, hooks[i], "after_model", i, retry, pause)
        if jump is not None:
            return route_after_model(state, jump)
    return route_after_model(state, retry)


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
    """Park the run until the answer to a middleware's ``Pause`` comes."""
    ctx.pause(ANSWERED, ctx.state.paused_at)


async def resume_step(value: tuple[dict[str, Any], Any], ctx: AgentContext) -> Route:
    """The answer came: the middleware that paused takes it, then the turn goes on."""
    where, answer = value
    state, deps = ctx.state, _deps(ctx)
    _runtime(ctx, deps)
    state.paused_at = None
    if where["by"] == RECOVERY:  # a human answered about interrupted calls
        apply_recovery_answer(state, answer, where.get("causes") or {})
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


def _command(call: ToolCall) -> ToolCommand:
    """The call as the runner's events tell it."""
    kwargs = call.args if isinstance(call.args, dict) else {}
    return ToolCommand.model_construct(
        purpose=call.name, tool_name=call.name, tool_kwargs=kwargs, todo_suggestion=""
    )


def _record(call: ToolCall, outcome: ToolOutcome) -> ToolExecutionRecord:
    """The call's outcome as a record (its message's text is the result or the error)."""
    message = outcome.message
    command = _command(call)
    if message.status == "success":
        return ToolExecutionRecord.succeeded(command, message.content)
    return ToolExecutionRecord.failed(command, message.content)


def _cancelled(call: ToolCall) -> ToolOutcome:
    return ToolOutcome(error_message(call, "the run was cancelled before this call finished"))


async def tools_step(_: Any, ctx: AgentContext) -> Route:
    """Run the calls of the last assistant message that have no answer yet, through the
    runner (each through the ``wrap_tool_call`` onion, at most ``concurrency`` at once);
    then :func:`after_tools`."""
    state, deps = ctx.state, ctx.deps
    spec, runtime = deps.spec, deps.runtime
    assert runtime is not None
    calls = pending_tool_calls(state.messages)
    observed = ctx.observed
    turn = state.model_calls - 1
    if deps.scope is not None:
        deps.scope.round_index = turn

    run = deps.run
    journal = await run.journal() if run is not None else {}
    cut_off: list[tuple[ToolCall, str | None]] = []  # and what cut it off (None: a crash)

    async def call_tool(call: ToolCall, started: Callable[[], None]) -> ToolOutcome:
        started()  # the onion (middleware included) is the call

        def onion() -> Awaitable[ToolOutcome]:
            return run_tool_call(call, spec.call_tool, spec.registry, state, runtime)

        if run is None:
            return await onion()
        key = f"{turn}.{call.id}"
        outcome = await journaled_call(run, journal, key, call, onion)
        if outcome is None:  # an earlier attempt's outcome is unknown: ask, do not re-run
            cause = cut_off_causes(journal).get(key)
            cut_off.append((call, cause))
            return ToolOutcome(error_message(call, interrupted(cause)))
        return outcome

    def on_start(k: int, call: ToolCall) -> None:
        ctx.publish(
            ToolCallStarted(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=turn,
                index=k,
                call_id=call.id,
                command=_command(call),
            )
        )

    def on_finish(k: int, outcome: ToolOutcome, duration: float) -> None:
        call = calls[k]
        ctx.publish(
            ToolCallFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                round_index=turn,
                index=k,
                call_id=call.id,
                record=_record(call, outcome),
                duration=duration,
            )
        )

    batch: ToolBatch[ToolCall, ToolOutcome] = ToolBatch(
        call_tool,
        _cancelled,
        concurrency=spec.concurrency,
        on_start=on_start if observed else None,
        on_finish=on_finish if observed else None,
    )
    async with batch:
        await batch.run_here(calls)
    if cut_off:  # answer the others; the interrupted ones wait for a human
        asked = {call.id for call, _ in cut_off}
        done = [o for o in batch.results if o.message.tool_call_id not in asked]
        after_tools(done, ctx)
        causes = {call.id: cause for call, cause in cut_off if cause is not None}
        state.paused_at = interrupted_request([call for call, _ in cut_off], causes)
        return await _progress(ctx, "tools", "pause")
    return await _progress(ctx, "tools", after_tools(batch.results, ctx))


def after_tools(outcomes: list[ToolOutcome], ctx: AgentContext) -> Route:
    """Write the answers (in call order, right after the assistant message), then the
    tools' state updates; route."""
    state, deps = ctx.state, _deps(ctx)
    updates: list[tuple[int, Any]] = []
    for i, outcome in enumerate(outcomes):
        if outcome.update:
            updates.append((i, outcome.update))
    messages = state.messages
    for i, update in updates:
        try:
            check_update(update)
        except ValueError as exc:
            call_id = outcomes[i].message.tool_call_id
            outcomes[i].message = error_message(
                ToolCall(id=call_id, name=outcomes[i].message.name),
                f"the tool's state update does not fit: {exc}",
            )
            outcomes[i].update = None
            outcomes[i].return_direct = False
    messages.extend(outcome.message for outcome in outcomes)
    jump: JumpTo | None = None
    for outcome in outcomes:
        if outcome.update:
            apply_update(state, outcome.update)
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
    left = pending_tool_calls(state.messages)
    if left:  # a jump ended the run before them: answer them, so the conversation stays valid
        state.messages.extend(
            error_message(call, "the run ended before this call ran") for call in left
        )
    for mw in deps.spec.after_agent:
        jump, _p = await _hook(deps, mw, "after_agent", (state, runtime), state)
        if jump not in (None, "end"):
            raise AgentDefinitionError(
                f"hook {mw.name}.after_agent asked to jump to {jump!r}; the run is ending, "
                "so after_agent can only update the state"
            )
    if ctx.observed:
        ctx.publish(
            AgentFinished(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                model_calls=state.model_calls,
                messages=len(state.messages),
                usage=state.usage if state.usage.requests else None,
            )
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
