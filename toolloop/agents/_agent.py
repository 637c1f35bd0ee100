"""``create_agent``: the model ↔ tools agent with middleware, and its runs.

Every run, resume and recovery of an agent is one session of the kernel's driver
(:func:`toolloop.kernel.drive`), with the agent's run options (``create_agent``'s) under
the call's own (``**options``: any of :class:`~toolloop.kernel.RunOverrides`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from typing_extensions import Unpack

from .._errors import ResumeError
from ..checkpoints import CheckpointedRun, CheckpointStore, HumanRequest, usage_since
from ..flow import Execution, Flow, FlowResult, FlowSnapshot
from ..kernel import (
    Backend,
    ChildRuns,
    ResponseFormat,
    RunDefaults,
    RunOptions,
    RunOverrides,
    RunsAsTools,
    RunStream,
    StopReason,
    StreamTwins,
    SyncTwins,
    answer_child,
    check_tool_names,
    decide,
    drive,
    run_sync,
    stream_run,
)
from ..models import ChatModel, ModelSettings, Usage, check_settings
from ..runner import ToolExecutionRecord
from ..tools import RunScope, Tool, ToolRegistry
from ._durable import RECOVERY
from ._flow import ANSWERED, MAX_TURNS, AgentDeps, agent_flow, settle, stop_reason
from ._messages import MessageLike, ToolMessage, as_messages
from ._middleware import AgentMiddleware
from ._persist import (
    begin_run,
    claim_run,
    load_interrupted,
    load_paused,
)
from ._result import AgentResult, result_of
from ._spec import AgentSpec, build_spec
from ._state import AgentState
from .middleware import HumanApprovalMiddleware

__all__ = ["Agent", "create_agent"]

Snapshot = FlowSnapshot | Mapping[str, Any] | str | bytes


def kept_result(state: AgentState, handle: str) -> str | None:
    """The whole text of the result of ``handle`` (``"r:<tool_call_id>"``): its tool
    message, as the run keeps it (``None``: no such result in the conversation)."""
    if not handle.startswith("r:"):
        return None
    call_id = handle[2:]
    for message in reversed(state.messages):
        if type(message) is ToolMessage and message.tool_call_id == call_id:
            return message.content if message.status == "success" else None
    return None


class _Logic:
    """What the kernel is told of the agent's states."""

    tool_step = "tools"

    def stop_reason(self, state: AgentState) -> StopReason | None:
        return stop_reason(state)

    def records(self, state: AgentState) -> list[ToolExecutionRecord]:
        return state.records

    def turns(self, state: AgentState) -> int:
        return state.model_calls

    settle = staticmethod(settle)  # (the agent flow's settle)
    kept = staticmethod(kept_result)


_LOGIC = _Logic()


class Agent(SyncTwins[AgentResult], StreamTwins[AgentResult], RunsAsTools):
    """A reusable agent made by :func:`create_agent`: each :meth:`run` is independent.

    Runs are executions of the shared :data:`~toolloop.agents.agent_flow`; the agent holds
    only configuration (its run options are each run's defaults), so one agent serves many
    concurrent runs. The sync twins for scripts: :meth:`run_sync`, and ``resume_sync`` and
    ``recover_sync`` (:class:`~toolloop.kernel.SyncTwins`, the same in both agents). The
    stream twins, to read a run's events as they happen: :meth:`stream`, and
    ``stream_resume`` and ``stream_recover`` (:class:`~toolloop.kernel.StreamTwins`).
    """

    __slots__ = ("_spec",)

    def __init__(self, spec: AgentSpec) -> None:
        self._spec = spec

    @property
    def options(self) -> RunOptions:
        """The run options every run starts from (a call's ``**options`` override them)."""
        return self._spec.options

    @property
    def store(self) -> CheckpointStore | None:
        """Where runs are kept by default (``None``: runs live in memory; resume from the
        snapshot)."""
        return self._spec.options.store

    @property
    def flow(self) -> Flow[AgentState]:
        return agent_flow

    @property
    def tools(self) -> list[Tool]:
        """The tools the model is offered (the agent's, the middleware's, the output tool)."""
        return list(self._spec.tools)

    @property
    def middleware(self) -> list[AgentMiddleware]:
        """The middleware given to :func:`create_agent`, in order."""
        return list(self._spec.middleware)

    def to_mermaid(self) -> str:
        """The agent's flow as a Mermaid flowchart."""
        return agent_flow.to_mermaid()

    # -- one session of a run, through the kernel ------------------------------------------

    def _options(self, given: Mapping[str, Any]) -> RunOptions:
        return self._spec.options.merged(**given)

    def _deps(self, options: RunOptions) -> AgentDeps:
        spec = self._spec
        check_tool_names(spec.registry, options.max_result_chars)
        scope = RunScope("", options.deps) if spec.registry.takes_context else None
        return AgentDeps(
            spec, options, spec.executor_for(options), spec.approval_for(options), scope=scope
        )

    async def _session(
        self,
        execution: Execution[AgentState],
        start: Callable[[], Awaitable[FlowResult[AgentState]]],
        options: RunOptions,
        run: CheckpointedRun | None,
    ) -> AgentResult:
        deps = execution.deps
        assert isinstance(deps, AgentDeps)
        deps.run = run  # progress checkpoints and the tool journal
        return await drive(
            execution,
            start,
            options,
            _LOGIC,
            result_of=lambda ended: result_of(ended, execution),
            run=run,
            max_result_chars=options.max_result_chars,
        )

    def _validate(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Edited arguments checked against the tool's schema (kept as given: JSON)."""
        self._spec.registry.get(tool_name).validate(arguments)
        return arguments

    def _check_answer(self, where: dict[str, Any], answer: Any) -> Any:
        """The answer to a pause, checked by whoever paused (nothing is written before)."""
        request = where["request"]
        if where["by"] == RECOVERY:  # interrupted calls
            asked = HumanRequest.model_validate(request)
            return decide(asked, answer, validate_arguments=self._validate)
        middleware = self._spec.by_name[where["by"]]
        if isinstance(middleware, HumanApprovalMiddleware):
            return middleware.check_answer(answer, request, validate_arguments=self._validate)
        return middleware.check_answer(answer, request)

    def _paused_at(self, execution: Execution[AgentState]) -> dict[str, Any]:
        if not execution.waiting:
            raise ResumeError(
                f"run {execution.id} is not paused: its snapshot waits for nothing; start a "
                "new run with agent.run(..., state=...)"
            )
        where = execution.state.paused_at
        if not isinstance(where, dict) or not {"by", "hook", "index", "request"} <= set(where):
            raise ResumeError(f"run {execution.id} was not paused by an agent middleware")
        if where["by"] != RECOVERY and where["by"] not in self._spec.by_name:
            raise ResumeError(
                f"run {execution.id} was paused by the middleware {where['by']!r}, which this "
                f"agent does not have (it has {list(self._spec.by_name)}); resume it with an "
                "agent built with the same middleware"
            )
        return where

    @staticmethod
    def _same_run(options: Mapping[str, Any], run_id: str) -> None:
        given = options.get("run_id")
        if given is not None and given != run_id:
            raise ValueError(
                f"run_id={given!r} names another run than the one resumed ({run_id!r}); leave "
                "it out"
            )

    # -- the verbs ----------------------------------------------------------------------------

    async def run(
        self,
        messages: MessageLike | Iterable[MessageLike],
        *,
        state: AgentState | None = None,
        metadata: dict[str, Any] | None = None,
        **options: Unpack[RunOverrides],
    ) -> AgentResult:
        """Run the agent on ``messages`` until it answers (or pauses).

        Args:
            messages: the new message(s): a string (a user message), an OpenAI-style dict,
                a message, or a list of those.
            state: a previous run's state, to continue its conversation (a thread): it is
                copied, and the new messages are added to it (its counters, usage and
                records start afresh: this is a new run).
            metadata: kept with the run's checkpoints when the run has a store (JSON).
            **options: any run option (:class:`~toolloop.kernel.RunOptions`), over the
                agent's: ``deps`` (the tools' ``ctx.deps``, the hooks' ``runtime.deps``),
                ``run_id``, ``timeout``, ``on_event``, ``usage_limits``, ``max_turns``...

        Raises:
            AgentModelError: the model raised or timed out.
            StructuredOutputError: the answer failed its schema after every retry.
            ModelCallLimitError, ToolCallLimitError: a middleware's limit set to raise.
            StepFailedError: a hook raised (the cause is chained).
            ExecutionTimeoutError: the run ran out of time (with ``on_timeout="raise"``),
                or an async hook did.
            UsageLimitError: the run passed its ``usage_limits`` (with
                ``on_usage_limit="raise"``).
            CheckpointConflictError: the store already has a run with this ``run_id``.
            ValueError, TypeError: an option of the wrong kind (nothing ran).
        """
        opts = self._options(options)
        new = as_messages(messages)
        if state is None:
            start = AgentState()
        else:  # a new run: the counters of the one that made this state do not carry over
            start = state.model_copy(
                deep=True,
                update={
                    "model_calls": 0,
                    "structured_failures": 0,
                    "paused_at": None,
                    "usage": Usage(),
                    "usage_limit": None,
                    "stop_reason": None,
                    "records": [],
                    "rerun": [],
                },
            )
        execution = Execution(agent_flow, start, self._deps(opts), id=opts.run_id)
        run = None
        if opts.store is not None:
            run = await begin_run(opts.store, execution, new, metadata)
        started = functools.partial(execution.run, new, timeout=opts.timeout)
        return await self._session(execution, started, opts, run)

    async def resume(
        self,
        paused: Snapshot,
        decision: Any,
        /,
        **options: Unpack[RunOverrides],
    ) -> AgentResult:
        """Continue a paused run with the ``decision`` (the answer to its pause request).

        Args:
            paused: the paused run's ``run_id`` (with a store), or its ``snapshot``: the
                object, its JSON data or its JSON text (e.g. from your own store, in another
                process: the agent must be built with the same middleware).
            decision: what the middleware that paused expects (for a
                :class:`~toolloop.checkpoints.HumanRequest`: one decision for every call,
                or one per call, ``{call_id: decision}``).
            **options: any run option, over the agent's (``deps`` is not saved: give it
                again; ``timeout`` is this session's).

        Raises:
            ResumeError: the snapshot is of no paused agent run, or the decision does not
                fit (a :class:`~toolloop.checkpoints.DecisionError`; the snapshot stays
                usable: resume it again with a better one).
            RunNotFoundError, RunNotResumableError: with a store: no such run, or it is not
                paused (completed, or resumed already, maybe by another process).

        With a store, each of these errors is raised before anything is written.
        """
        opts = self._options(options)
        deps = self._deps(opts)
        store = opts.store
        checkpoint = None
        if isinstance(paused, str) and not paused.lstrip().startswith("{"):
            if store is None:
                raise ResumeError(
                    f"{paused!r} is a run id, but this agent has no store to find it in; "
                    "build it with create_agent(..., store=...) (or pass store=), or resume "
                    "the snapshot"
                )
            if await answer_child(store, await CheckpointedRun.load(store, paused), decision):
                return await self.recover(paused, **options)  # its call resumes its child
            checkpoint, execution = await load_paused(store, paused, deps)
        else:
            execution = agent_flow.restore(paused, deps=deps)
            if store is not None:
                # A run the store keeps resumes through the store, whatever form the
                # caller hands it in: once, as by its id (never once per copy of a snapshot).
                stored = await store.get(execution.id)
                if stored is not None and await answer_child(store, stored, decision):
                    return await self.recover(execution.id, **options)
                if stored is not None:
                    checkpoint, execution = await load_paused(store, execution.id, deps)
        self._same_run(options, execution.id)
        where = self._paused_at(execution)
        checked = self._check_answer(where, decision)
        run = None
        if checkpoint is not None:
            assert store is not None
            run = await claim_run(store, checkpoint, ANSWERED, decision)
        started = functools.partial(
            execution.resume, ANSWERED, (where, checked), timeout=opts.timeout
        )
        return await self._session(execution, started, opts, run)

    async def recover(
        self, run_id: str, /, *, force: bool = False, **options: Unpack[RunOverrides]
    ) -> AgentResult:
        """Continue a stored run whose process died (or whose step failed) from its last
        checkpoint.

        A completed run gives its stored result and runs nothing. Tool calls with a
        journaled outcome are not run again (their outcome is replayed);
        a call that started without an outcome may or may not have taken effect: it
        follows the run's ``unknown_outcome`` (``"fail"``: it is answered with an error
        saying what cut it off, and the model decides; ``"retry"``: a tool in
        ``idempotent_tools`` runs again; ``"ask"``: the run pauses with a
        :class:`~toolloop.checkpoints.HumanRequest` of kind ``interrupted_tool_calls``:
        resume with approve or edit to run them again, or reject). A run that was being
        resumed goes on with the answer it was resumed with. Every model call made before
        counts against the run's ``usage_limits`` and in ``result.usage``: each one's usage
        is journaled when it ends (a call the crash itself cut off never reported what it
        cost, and is not counted).

        Args:
            force: take the run over even if its owning process may still run it (on
                another host its liveness cannot be checked).
            **options: any run option, over the agent's.

        Raises:
            ResumeError: no store (the agent's, or ``store=``).
            RunNotFoundError: no such run.
            RunNotResumableError: the run is paused (resume it) or still running.
            CorruptCheckpointError: the checkpoint cannot be read back.
        """
        opts = self._options(options)
        self._same_run(options, run_id)
        store = opts.store
        if store is None:
            raise ResumeError("recover() needs a store: build the agent with store=...")
        stored = await CheckpointedRun.load(store, run_id)
        if stored.status == "completed" and stored.flow == agent_flow.name:
            return AgentResult.model_validate(stored.result)
        checkpoint, execution, event, value = await load_interrupted(
            store, run_id, self._deps(opts)
        )
        state = execution.state  # its usage: the model calls before the checkpoint, and those
        spent = usage_since(checkpoint.journal, state.model_calls, Usage.model_validate, run_id)
        if spent:  # journaled since (their checkpoint was never written)
            state.usage = sum(spent, state.usage)
        if event == ANSWERED:
            where = self._paused_at(execution)
            value = (where, self._check_answer(where, value))
        run = await CheckpointedRun.recover(store, checkpoint, force=force)
        started = functools.partial(execution.resume, event, value, timeout=opts.timeout)
        return await self._session(execution, started, opts, run)

    # -- the stream and sync twins ----------------------------------------------------------------

    def stream(
        self,
        messages: MessageLike | Iterable[MessageLike],
        *,
        state: AgentState | None = None,
        metadata: dict[str, Any] | None = None,
        engine_events: bool = True,
        **options: Unpack[RunOverrides],
    ) -> AbstractAsyncContextManager[RunStream[AgentResult]]:
        """The stream twin of :meth:`run` (its arguments, and ``engine_events``): read the
        run's typed events in ``async with agent.stream("Mail Ada") as run: async for event in
        run``, then ``run.result`` (see :func:`~toolloop.kernel.stream_run`).

        ``engine_events=False`` leaves the engine's events out: the run's own are model
        and tool calls, tool progress, checkpoints, the middleware's, a pause, the end.
        """
        call = functools.partial(self.run, messages, state=state, metadata=metadata)
        return stream_run(call, options, engine_events=engine_events)

    def _child_runs(self) -> ChildRuns:
        return ChildRuns(
            run=self.run, defaults=self._spec.options, resume=self.resume, recover=self.recover
        )

    def run_sync(
        self,
        messages: MessageLike | Iterable[MessageLike],
        *,
        backend: Backend = "asyncio",
        state: AgentState | None = None,
        metadata: dict[str, Any] | None = None,
        **options: Unpack[RunOverrides],
    ) -> AgentResult:
        """The sync twin of :meth:`run`, for scripts (runs its own event loop)."""
        call = functools.partial(self.run, messages, state=state, metadata=metadata, **options)
        return run_sync(call, backend, name="run_sync", instead="agent.run")


def create_agent(
    model: ChatModel,
    tools: ToolRegistry | Sequence[Tool | Callable[..., Any]] = (),
    *,
    system_prompt: str | None = None,
    middleware: Sequence[AgentMiddleware] = (),
    response_format: ResponseFormat | None = None,
    tool_choice: Any = None,
    hook_timeout: float | None = 60.0,
    max_tokens: int | None = None,
    temperature: float | None = None,
    extra: Mapping[str, Any] | None = None,
    settings: ModelSettings | None = None,
    **options: Unpack[RunDefaults],
) -> Agent:
    """Build an agent: the model answers or calls tools, the tools run, the model sees their
    results, until it answers without a tool call.

    Args:
        model: any :class:`~toolloop.models.ChatModel` (e.g.
            :class:`~toolloop.models.OpenAIChatModel`).
        tools: typed functions, :class:`~toolloop.Tool` objects or a
            :class:`~toolloop.tools.ToolRegistry` (``return_direct`` tools end the run).
        system_prompt: sent first on every model call.
        middleware: :class:`AgentMiddleware` instances, in order (the first registered is
            the outermost ``wrap_*``; ``before_*`` hooks run in order, ``after_*`` reversed).
        response_format: a pydantic model class, a JSON schema,
            :class:`~toolloop.agents.ToolStrategy` (the default for a bare schema) or
            :class:`~toolloop.agents.ProviderStrategy`; the answer lands in
            ``structured_response``.
        tool_choice: sent to the model (``"auto"`` by default; ``"required"`` with a
            ``ToolStrategy``, whose answer is a tool call).
        hook_timeout: seconds for each async ``before_*``/``after_*``/``resume`` hook.
        max_tokens: the model's output limit per call.
        temperature: passed to the model.
        extra: provider-specific request parameters, passed through.
        settings: more model settings for every call
            (:class:`~toolloop.models.ModelSettings`: ``seed``, ``top_p``, ...).

        **options: the run options, with the kernel's defaults
            (:class:`~toolloop.kernel.RunOptions`; every one but ``run_id``): each run uses
            them unless its call gives its own (``agent.run(..., timeout=5)``):

            - ``concurrency`` (4): at most this many tool calls of a run at once;
              ``limiter``: an :class:`anyio.CapacityLimiter` shared by many runs and agents.
            - ``tool_timeout``: seconds for each tool call (a tool's own, smaller timeout
              wins); ``model_timeout``: seconds for each model call (the whole streamed
              answer; ``None``: the model client's own timeout).
            - ``timeout``: seconds for each run (each call of ``run``, ``resume``,
              ``recover``); ``on_timeout``: at the ``timeout``, ``"raise"``
              :class:`~toolloop.ExecutionTimeoutError`, or ``"finish"``: the run completes
              with what it has, its ``stop_reason`` ``"timeout"``.
            - ``max_turns`` (100): model calls per run (across its pauses): the run then
              ends, its ``stop_reason`` ``"max_turns"``.
            - ``usage_limits``: each run's budget of model calls and tokens
              (:class:`~toolloop.models.UsageLimits`, across pauses, resumes and
              recoveries), checked before each model call and while its answer streams;
              ``on_usage_limit``: at the budget, ``"raise"``
              :class:`~toolloop.errors.UsageLimitError` (``.state`` keeps the
              conversation), or ``"finish"``: its ``stop_reason`` ``"usage_limit"``.
            - ``store``: a :class:`~toolloop.checkpoints.CheckpointStore` to keep every run
              in (running, paused with its snapshot and request, completed, failed); a
              paused run is then resumed by its ``run_id``, once, in any process, and a run
              whose process died is recovered.
            - ``needs_approval``: which tool calls wait for a human (the kernel's approval
              spec: ``True``, tool names, a mapping, a rule; see
              :class:`~toolloop.agents.middleware.HumanApprovalMiddleware`).
            - ``unknown_outcome``: what a recovered run does with a call whose outcome is
              unknown: ``"fail"``, ``"retry"`` (for ``idempotent_tools``, the tools safe to
              run twice) or ``"ask"``.
            - ``deps``: your dependencies: the tools' ``ctx.deps``, the hooks'
              ``runtime.deps``; ``on_event``: called with every event of every run.

    Raises:
        AgentDefinitionError: middleware with one name, a response format that is no schema,
            an output tool named like a tool.
        ToolDefinitionError: two tools with one name, a function that cannot be a tool.
        ValueError, TypeError: a run option of the wrong kind, or ``needs_approval``
            naming no tool of the agent.
    """
    defaults = RunOptions.defaults(options, where="create_agent()", max_turns=MAX_TURNS)
    request_settings: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "extra": dict(extra or {}),
        "model_settings": check_settings(settings, "create_agent"),
    }
    return Agent(
        build_spec(
            model,
            tools,
            system_prompt=system_prompt,
            middleware=middleware,
            response_format=response_format,
            tool_choice=tool_choice,
            hook_timeout=hook_timeout,
            settings=request_settings,
            options=defaults,
        )
    )
