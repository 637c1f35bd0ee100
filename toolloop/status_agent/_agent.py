"""The status-routed agent: analysis → planning → conversation | decision → tool execution
→ reflection → human intervention, with a human-in-the-loop pause that survives a restart.

::

    agent = StatusAgent(tools=[search, send_mail], model=model,
                        store=SQLiteCheckpointStore("runs.db"), needs_approval=["send_mail"])
    result = await agent.run("Mail Ada the forecast")
    if result.paused:                      # result.request: which calls, which arguments, why
        ...                                # later, maybe in another process:
        result = await agent.resume(result.run_id, Approve())

Every run, resume and recovery is a session of the run kernel (:func:`toolloop.kernel.drive`):
the same options as every product (limits, timeouts, a budget that holds across pauses and
recoveries, approvals, the policy for unknown outcomes, deps), the same events and the same
result base. Every node's transition is checkpointed in the store; a run whose process died
is continued with :meth:`StatusAgent.recover`. Tool calls go through the kernel's journal
(intent before, outcome after, keyed by a call id stable for the run), so no tool ever runs
twice: a call with a recorded outcome is replayed from the journal, and a call that started
but has no outcome (the process died while it ran, or the run's own timeout, cancellation
or error ended it, which its record says) follows ``unknown_outcome``: a failed record
(``"fail"``), run again if idempotent (``"retry"``), or put to a human (``"ask"``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from pydantic_core import to_jsonable_python
from typing_extensions import Unpack

from ..checkpoints import (
    INTERRUPTED,
    Checkpoint,
    CheckpointedRun,
    CheckpointStatus,
    CheckpointStore,
    CorruptCheckpointError,
    DecisionError,
    HumanRequest,
    MemoryCheckpointStore,
    RunNotResumableError,
    expect_status,
    parse_answer,
    restore,
    usage_since,
)
from ..flow import Execution, FlowResult
from ..kernel import (
    Backend,
    ChildRuns,
    Ended,
    ProviderStrategy,
    ResponseFormat,
    RunDefaults,
    RunOptions,
    RunOverrides,
    RunResult,
    RunsAsTools,
    RunStream,
    StopReason,
    StreamTwins,
    StructuredAnswer,
    SyncTwins,
    ToolStrategy,
    answer_child,
    approval_rule,
    check_tool_names,
    cut_off_record,
    decide,
    drive,
    output_schema,
    run_sync,
    stream_run,
)
from ..models import ChatModel, Usage
from ..runner import ToolExecutionRecord, result_text
from ..tools import RunScope, Tool, ToolRegistry
from ._flow import status_agent_flow
from ._human import HUMAN_EVENT
from ._llm import LLMStatusSteps
from ._nodes import FLOW_NAME, RECOVER_EVENT, StatusDeps, recover_snapshot
from ._state import StatusAgentState
from ._steps import StatusSteps, StatusView, StepFunction

__all__ = ["StatusAgent", "StatusAgentResult"]

MAX_TURNS = 50
"""The status agent's default ``max_turns``: node entries (steps) per run."""

_PAUSED: tuple[CheckpointStatus, ...] = ("paused",)


class StatusAgentResult(RunResult):
    """How a run call ended: ``completed`` (``text`` is the answer, ``stop_reason`` why),
    or ``paused`` with a question (``request``). The kernel's
    :class:`~toolloop.kernel.RunResult`, with the run's whole state.

    Stop reasons: ``answered`` (the conversation answered, or the reflection finished),
    ``stopped`` (a human's ``Stop``), ``max_turns``, ``guard`` (the loop guard: the run
    went in circles; ``state.stop_detail`` says how), ``timeout`` and ``usage_limit`` (with
    ``on_timeout`` / ``on_usage_limit`` set to ``"finish"``).

    With a ``response_format``, an answered run's :attr:`structured_response` is its
    answer (and ``text`` that answer's JSON).
    """

    state: StatusAgentState

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """The record of every call, in order (rejected and interrupted ones included)."""
        return [r.record for r in self.state.records]


class StatusAgent(SyncTwins[StatusAgentResult], StreamTwins[StatusAgentResult], RunsAsTools):
    """The status-routed agent (see the module docs); one agent serves many runs.

    Its own arguments first; then the run options of every product (see
    :class:`~toolloop.kernel.RunOptions`), the defaults of its runs, which each call of
    :meth:`run`, :meth:`resume` and :meth:`recover` may override. The sync twins for
    scripts: :meth:`run_sync`, and ``resume_sync`` and ``recover_sync``
    (:class:`~toolloop.kernel.SyncTwins`, the same in both agents). The stream twins, to
    read a run's events as they happen: :meth:`stream`, and ``stream_resume`` and
    ``stream_recover`` (:class:`~toolloop.kernel.StreamTwins`).

    Args:
        tools: typed functions, :class:`~toolloop.Tool` objects, or a registry.
        model: the chat model of the default steps (any step given below replaces its
            default; without a model, all five must be given).
        analyze: the analysis step (each step sees a :class:`~toolloop.status_agent.StatusView`).
        plan: the planning step.
        decide: the decision step.
        reflect: the reflection step.
        converse: the conversation step.
        response_format: the answer is structured: a pydantic model class, a JSON schema,
            or a :class:`~toolloop.kernel.ToolStrategy` (the default for a bare schema: the
            model answers by calling a tool of that schema) /
            :class:`~toolloop.kernel.ProviderStrategy` (the provider's ``json_schema``).
            The conversation step writes it, with ``model``, once the run has its results
            (a reflection's ``finish`` goes there too); one that fails is sent back with
            its errors, ``retries`` times, each try a model call of the run, before
            :class:`~toolloop.errors.StructuredOutputError`. The result's
            ``structured_response`` is the validated value.
        max_idle_visits: a run ends (stop reason ``guard``) when a node is reached this many
            times with no progress.
        **options: the run options, the defaults of its runs (every one but ``run_id``):

            - ``concurrency`` (4): at most this many tool calls of a run at once;
              ``limiter``: shared with other runs, bounds tool calls across them.
            - ``tool_timeout``: seconds per tool call. ``model_timeout``: seconds per step
              (its model call): a step that outlives it fails as a model call that failed
              does (a :class:`~toolloop.errors.ModelCallError`).
            - ``timeout``: seconds per call of ``run``, ``resume`` or ``recover``;
              ``on_timeout``: ``"raise"`` (the run fails; recover it to go on) or
              ``"finish"`` (stop reason ``timeout``).
            - ``max_turns`` (50): a run ends (stop reason ``max_turns``) after this many
              steps (node entries), across its pauses and recoveries.
            - ``usage_limits``: the run's budget (:class:`~toolloop.models.UsageLimits`),
              across its pauses and recoveries: checked before every model call of its
              steps; ``on_usage_limit``: ``"raise"`` or ``"finish"`` (stop reason
              ``usage_limit``).
            - ``store``: where checkpoints live; a
              :class:`~toolloop.checkpoints.MemoryCheckpointStore` of this agent by default
              (use a SQLite store to resume in another process).
            - ``needs_approval``: which calls wait for a human before they run (the
              kernel's one spec: ``True``, tool names, a mapping, or a rule; see
              :data:`~toolloop.kernel.ApprovalSpec`).
            - ``unknown_outcome``: what a resumed or recovered run does with a call whose
              outcome is unknown: ``"fail"`` (a failed record saying what cut it off; the
              reflection sees a failed call), ``"retry"`` (run it again if its tool is in
              ``idempotent_tools``, the tools safe to run twice), ``"ask"`` (pause with a
              request of kind ``interrupted_tool_calls``).
            - ``deps``: the tools' ``ctx.deps``; ``on_event``: called with every event of
              every run.

    Raises:
        ValueError, TypeError: an option no run can take (the message says which), a step
            missing without a model, ``needs_approval`` naming no tool of the agent, a
            ``response_format`` without a model or with a ``converse`` step of its own.
        ResponseFormatError: a ``response_format`` that is no usable schema.
    """

    flow = status_agent_flow

    def __init__(
        self,
        *,
        tools: ToolRegistry | Sequence[Tool | Callable[..., Any]] = (),
        model: ChatModel | None = None,
        analyze: StepFunction | None = None,
        plan: StepFunction | None = None,
        decide: StepFunction | None = None,
        reflect: StepFunction | None = None,
        converse: StepFunction | None = None,
        response_format: ResponseFormat | None = None,
        max_idle_visits: int = 3,
        **options: Unpack[RunDefaults],
    ) -> None:
        given = {
            "analyze": analyze,
            "plan": plan,
            "decide": decide,
            "reflect": reflect,
            "converse": converse,
        }
        missing = [name for name, fn in given.items() if fn is None]
        if missing and model is None:
            raise ValueError(
                f"StatusAgent needs model= for its default steps, or functions for {missing}"
            )
        llm = LLMStatusSteps(model) if model is not None else None
        self.response_format: ToolStrategy | ProviderStrategy | None = output_schema(
            response_format
        )
        """The structured answer's strategy (``None``: the answer is text)."""
        if self.response_format is not None and (llm is None or converse is not None):
            raise ValueError(
                "response_format= is answered by the model's conversation step: give "
                "model=, and no converse= of your own"
            )
        self._llm = llm
        self.steps = StatusSteps(
            **{name: fn if fn is not None else getattr(llm, name) for name, fn in given.items()}
        )
        if not isinstance(max_idle_visits, int) or max_idle_visits < 2:
            raise ValueError(f"max_idle_visits must be 2 or more, got {max_idle_visits!r}")
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        defaults = RunOptions.defaults(options, where="StatusAgent()", max_turns=MAX_TURNS)
        store = defaults.store
        self.store: CheckpointStore = store if store is not None else MemoryCheckpointStore()
        """The runs' store (given, or this agent's own in memory)."""
        self.options = defaults.merged(store=self.store)
        """The defaults of every run (each call may override them)."""
        approval_rule(defaults.needs_approval, self.registry.names)  # misspelt: refused now
        self.max_idle_visits = max_idle_visits

    async def run(
        self,
        user_input: str,
        *,
        metadata: dict[str, Any] | None = None,
        **options: Unpack[RunOverrides],
    ) -> StatusAgentResult:
        """Run a new request until it completes or pauses for a human.

        Args:
            metadata: kept with the run's checkpoints (JSON data).
            **options: any run option, over the agent's defaults (see
                :class:`~toolloop.kernel.RunOptions`): ``run_id`` (a new one by default; it
                must be new in the store), ``deps`` (your dependencies: ``ctx.deps`` of
                every tool that declares a :class:`~toolloop.tools.RunContext`; not saved,
                give them again to ``resume`` and ``recover``), ``on_event`` (called with
                every event of the run), ``timeout``, ``usage_limits``, ...

        Raises:
            CheckpointConflictError: the store already has a run with this id.
            StepFailedError: a step raised; the run is marked failed and can be recovered.
            ExecutionTimeoutError, UsageLimitError: with ``on_timeout`` /
                ``on_usage_limit`` ``"raise"``; the run is marked failed (recover it).
        """
        if not isinstance(user_input, str):
            raise TypeError(f"user_input must be a str, got {type(user_input).__name__}")
        chosen = self._options(options)
        run_id = chosen.run_id or uuid.uuid4().hex
        state = StatusAgentState(run_id=run_id, user_input=user_input)
        deps = self._deps(chosen, run_id)
        deps.run = await CheckpointedRun.begin(
            self._store(chosen),
            run_id=run_id,
            flow=FLOW_NAME,
            snapshot=recover_snapshot(state, run_id, "start"),
            metadata={"agent": "status", **(metadata or {})},
        )
        execution = Execution(self.flow, state, deps, id=run_id)
        return await self._drive(
            execution, lambda: execution.run(user_input, timeout=chosen.timeout), chosen
        )

    async def resume(
        self, run_id: str, decision: object, /, **options: Unpack[RunOverrides]
    ) -> StatusAgentResult:
        """Continue a run paused for a human with their decision (in any process that has
        this agent's tools and steps and the run's store).

        Args:
            decision: :class:`~toolloop.checkpoints.Approve`, ``Edit``, ``Reject``,
                ``Replan``, ``Continue`` or ``Stop`` (or its data, or its bare kind), or
                one per call (``{call_id: decision}``, the ids of the request's calls); it
                must be one the run's request allows. Edited arguments are checked against
                the tool's schema.
            **options: any run option, over the agent's defaults (``deps`` again, a
                ``timeout`` for this call, ...); the budget counts what the run spent
                before.

        Raises:
            RunNotFoundError: no such run.
            RunNotResumableError: the run is not paused (done, or resumed already).
            DecisionError: the decision does not fit the question.
            CorruptCheckpointError: the checkpoint cannot be read back.

        Each error is raised before anything is written: the store is unchanged.
        """
        chosen = self._options(options, run_id=run_id)
        store = self._store(chosen)
        checkpoint = await CheckpointedRun.load(store, run_id)
        expect_status(checkpoint, _PAUSED)
        if await answer_child(store, checkpoint, decision):
            return await self.recover(run_id, **options)  # its call resumes its child
        deps = self._deps(chosen, run_id)
        execution = self._restore(checkpoint, deps)
        question = execution.state.question
        waits = [w.event for w in execution.waiting]
        if waits != [HUMAN_EVENT] or question is None:
            raise CorruptCheckpointError(
                f"run {run_id!r} is paused but not for a human decision (it waits for "
                f"{waits}); it was left as it is"
            )
        checked = decide(question, decision, validate_arguments=self._check_arguments).decision
        deps.run = await CheckpointedRun.claim(
            store, checkpoint, event=HUMAN_EVENT, value=to_jsonable_python(checked)
        )
        return await self._drive(
            execution,
            lambda: execution.resume(HUMAN_EVENT, checked, timeout=chosen.timeout),
            chosen,
        )

    async def recover(
        self, run_id: str, /, *, force: bool = False, **options: Unpack[RunOverrides]
    ) -> StatusAgentResult:
        """Continue a run whose process died (or whose step failed, or which its timeout or
        budget ended) from its last checkpoint.

        A completed run gives its stored result and runs nothing. Tool calls with a
        journaled outcome are not run again; calls that started without
        an outcome follow ``unknown_outcome``. The run's usage counts every model call made
        before: each node's is journaled when the node ends (a call the crash itself cut
        off never reported what it cost, and is not counted), and its budget holds across.

        Args:
            force: take the run over even if its owning process may still be running it
                (on another host, its liveness cannot be checked).
            **options: any run option, over the agent's defaults.

        Raises:
            RunNotFoundError: no such run.
            RunNotResumableError: the run is paused (resume it) or still running.
            CorruptCheckpointError: the checkpoint cannot be read back.
        """
        chosen = self._options(options, run_id=run_id)
        store = self._store(chosen)
        checkpoint = await CheckpointedRun.load(store, run_id)
        if checkpoint.status == "completed" and checkpoint.flow == FLOW_NAME:
            return self._typed(StatusAgentResult.model_validate(checkpoint.result))
        expect_status(checkpoint, INTERRUPTED)
        deps = self._deps(chosen, run_id)
        execution = self._restore(checkpoint, deps)
        state = execution.state  # its usage: the model calls before the checkpoint, and those
        at = len(state.history)
        spent = usage_since(checkpoint.journal, at, Usage.model_validate, run_id)
        if spent:  # journaled since (their node's checkpoint was never written)
            state.usage = sum(spent, state.usage)
        waits = [w.event for w in execution.waiting]
        value: Any = None
        if checkpoint.resume_event == HUMAN_EVENT and waits == [HUMAN_EVENT]:
            try:
                value = parse_answer(checkpoint.resume_value)
            except DecisionError as exc:
                raise CorruptCheckpointError(
                    f"run {run_id!r} was being resumed with a decision that cannot be read "
                    f"({exc}); it was left as it is"
                ) from exc
            event = HUMAN_EVENT
        elif waits == [RECOVER_EVENT]:
            event = RECOVER_EVENT
        else:
            raise CorruptCheckpointError(
                f"run {run_id!r} has no step to continue from (its snapshot waits for {waits}); "
                "it was left as it is"
            )
        deps.run = await CheckpointedRun.recover(store, checkpoint, force=force)
        return await self._drive(
            execution, lambda: execution.resume(event, value, timeout=chosen.timeout), chosen
        )

    async def request(
        self, run_id: str, *, store: CheckpointStore | None = None
    ) -> HumanRequest | None:
        """What the run asks a human, if it is paused; ``None`` otherwise.

        Args:
            store: the run's store, when it is not the agent's.
        """
        checkpoint = await CheckpointedRun.load(store or self.store, run_id)
        if checkpoint.status != "paused" or checkpoint.request is None:
            return None
        try:
            return HumanRequest.model_validate(checkpoint.request)
        except ValueError as exc:
            raise CorruptCheckpointError(
                f"the request of paused run {run_id!r} cannot be read: {exc}"
            ) from exc

    # -- stream and sync twins ------------------------------------------------------------

    def stream(
        self,
        user_input: str,
        *,
        metadata: dict[str, Any] | None = None,
        engine_events: bool = True,
        **options: Unpack[RunOverrides],
    ) -> AbstractAsyncContextManager[RunStream[StatusAgentResult]]:
        """Read the run's typed events as they happen (``async for event in run`` in
        ``async with agent.stream(user_input) as run``), then ``run.result``: the twin of
        :meth:`run`, with its arguments, made by :func:`~toolloop.kernel.stream_run`. With
        ``engine_events=False`` only the run's own events come: its statuses, model and tool
        calls, tool progress, checkpoints, a pause, the end.
        """
        call = functools.partial(self.run, user_input, metadata=metadata)
        return stream_run(call, options, engine_events=engine_events)

    def _child_runs(self) -> ChildRuns:
        return ChildRuns(
            run=self.run, defaults=self.options, resume=self.resume, recover=self.recover
        )

    def run_sync(
        self,
        user_input: str,
        *,
        metadata: dict[str, Any] | None = None,
        backend: Backend = "asyncio",
        **options: Unpack[RunOverrides],
    ) -> StatusAgentResult:
        """The sync twin of :meth:`run`, for scripts (runs its own event loop on
        ``backend``)."""
        call = functools.partial(self.run, user_input, metadata=metadata, **options)
        return run_sync(call, backend, name="run_sync", instead="agent.run")

    # -- internals ------------------------------------------------------------------------

    def _options(self, given: RunOverrides, *, run_id: str | None = None) -> RunOptions:
        """The agent's defaults with this call's options over them, checked (``run_id``: the
        run continued, which a ``run_id=`` given must name)."""
        named = given.get("run_id")
        if run_id is not None and named is not None and named != run_id:
            raise ValueError(
                f"run_id={named!r} names another run than the one continued ({run_id!r}); "
                "leave it out"
            )
        return self.options.merged(**given)

    def _store(self, options: RunOptions) -> CheckpointStore:
        return options.store if options.store is not None else self.store

    def _deps(self, options: RunOptions, run_id: str) -> StatusDeps:
        check_tool_names(self.registry, options.max_result_chars)
        return StatusDeps(
            scope=RunScope(run_id, options.deps) if self.registry.takes_context else None,
            steps=self.steps,
            executor=options.tool_executor(self.registry),
            tools=self.registry.specs(),
            options=options,
            approval=approval_rule(options.needs_approval, self.registry.names),
            max_turns=options.turns(MAX_TURNS),
            max_idle_visits=self.max_idle_visits,
            answer=self._answer_writer(),
        )

    def _typed(self, result: StatusAgentResult) -> StatusAgentResult:
        """``result`` with its structured answer as the schema gives it (a model instance
        again, once read back from a checkpoint)."""
        if self.response_format is None or result.structured_response is None:
            return result
        value = self.response_format.output.restore(result.structured_response)
        result.state.structured_response = value
        return result.model_copy(update={"structured_response": value})

    def _answer_writer(self) -> Callable[[StatusView], Awaitable[StructuredAnswer]] | None:
        strategy, llm = self.response_format, self._llm
        if strategy is None or llm is None:
            return None
        return functools.partial(llm.structured, strategy=strategy)

    def _restore(self, checkpoint: Checkpoint, deps: StatusDeps) -> Execution[StatusAgentState]:
        if checkpoint.flow != FLOW_NAME:
            raise RunNotResumableError(
                f"run {checkpoint.run_id!r} is a run of flow {checkpoint.flow!r}, not of the "
                f"status agent ({FLOW_NAME!r}); resume it with the agent that made it"
            )
        return restore(self.flow, checkpoint, deps=deps)

    def _check_arguments(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.registry.get(tool_name).validate(arguments)
        return arguments

    async def _drive(
        self,
        execution: Execution[StatusAgentState],
        start: Callable[[], Awaitable[FlowResult[StatusAgentState]]],
        options: RunOptions,
    ) -> StatusAgentResult:
        deps = execution.deps
        assert isinstance(deps, StatusDeps)
        return await drive(
            execution,
            start,
            options,
            _LOGIC,
            result_of=lambda ended: self._typed(_result(execution.id, ended)),
            run=deps.run,
            max_result_chars=options.max_result_chars,
        )


def _kept_result(state: StatusAgentState, handle: str) -> str | None:
    """The whole text of the result of ``handle`` (``"r:<call_id>"``), from the run's
    records (as its checkpoints keep them)."""
    if not handle.startswith("r:"):
        return None
    call_id = handle[2:]
    for call in reversed(state.records):
        if call.call_id == call_id:
            return result_text(call.record.result) if call.record.success else None
    return None


def _settle(state: StatusAgentState, stop: StopReason) -> None:
    """A run its timeout or budget finished mid-step: the calls it cut off say so, in the
    kernel's words."""
    for i, call in enumerate(state.records):
        told = cut_off_record(call.record, stop)
        if told is not call.record:
            state.records[i] = call.model_copy(update={"record": told})


class _Logic:
    """What the kernel reads of a status agent run's state."""

    tool_step = "tool_execution"

    def stop_reason(self, state: StatusAgentState) -> StopReason | None:
        return state.stop_reason

    def records(self, state: StatusAgentState) -> list[ToolExecutionRecord]:
        return [r.record for r in state.records]

    def turns(self, state: StatusAgentState) -> int:
        return state.steps

    settle = staticmethod(_settle)
    kept = staticmethod(_kept_result)


_LOGIC = _Logic()


def _result(run_id: str, ended: Ended[StatusAgentState]) -> StatusAgentResult:
    state = ended.state
    if ended.status == "paused":
        return StatusAgentResult(
            run_id=run_id, status="paused", request=state.question, usage=state.usage, state=state
        )
    if state.stop_reason is None:  # ended by its timeout or its budget, with "finish"
        state.stop_reason = ended.stop_reason
    return StatusAgentResult(
        run_id=run_id,
        status="completed",
        stop_reason=ended.stop_reason,
        usage=state.usage,
        text=state.answer,
        structured_response=state.structured_response,
        state=state,
    )
