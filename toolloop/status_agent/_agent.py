"""The status-routed agent: analysis → planning → conversation | decision → tool execution
→ reflection → human intervention, with a human-in-the-loop pause that survives a restart.

::

    agent = StatusAgent(tools=[search, send_mail], model=model,
                        store=SQLiteCheckpointStore("runs.db"), require_approval=["send_mail"])
    result = await agent.run("Mail Ada the forecast")
    if result.paused:                      # result.request: which calls, which arguments, why
        ...                                # later, maybe in another process:
        result = await agent.resume(result.run_id, Approve())

Every node's transition is checkpointed in the store; a run whose process died is continued
with :meth:`StatusAgent.recover`. Tool calls go through the store's journal (intent before,
outcome after, keyed by a call id stable for the run), so no tool ever runs twice: a call
with a recorded outcome is replayed from the journal, and a call that started but has no
outcome (the process died while it ran, or the run's own timeout, cancellation or error
ended it, which its record says) is marked ``interrupted`` and put to a human — never
silently run again.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextlib import ExitStack
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from ..checkpoints import (
    Checkpoint,
    CheckpointedRun,
    CheckpointStatus,
    CheckpointStore,
    CorruptCheckpointError,
    DecisionError,
    HumanRequest,
    MemoryCheckpointStore,
    RunNotResumableError,
    check_decision,
    expect_status,
    note_cut_off,
    parse_answer,
    restore,
    usage_since,
)
from ..flow import Execution, FlowEvent, FlowResult
from ..models import ChatModel, Usage, UsageMeter
from ..runner import Executor, ToolExecutionRecord
from ..tools import RunScope, Tool, ToolRegistry
from ._flow import status_agent_flow
from ._human import HUMAN_EVENT
from ._llm import LLMStatusSteps
from ._nodes import FLOW_NAME, RECOVER_EVENT, StatusDeps, recover_snapshot
from ._state import StatusAgentState, StatusToolCall
from ._steps import StatusSteps, StepFunction

__all__ = ["RequireApproval", "StatusAgent", "StatusAgentResult"]

RequireApproval = bool | Collection[str] | Callable[[StatusToolCall], bool | str | None]
"""Which tool calls wait for a human's approval: all (``True``), none (``False``), the tools
named, or a function of the call (true or a reason: it waits)."""

OnEvent = Callable[[FlowEvent], None]
_PAUSED: tuple[CheckpointStatus, ...] = ("paused",)
_INTERRUPTED: tuple[CheckpointStatus, ...] = ("running", "failed")


class StatusAgentResult(BaseModel):
    """How a run call ended: ``completed`` with an answer, or ``paused`` with a question."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    status: Literal["completed", "paused"]
    answer: str | None = None
    request: HumanRequest | None = None
    """When paused: what the human is asked (which calls, which arguments, why)."""
    stop_reason: str | None = None
    """When completed: why (``answered``, ``finished``, ``stopped by the human``, a loop
    guard's reason, ...)."""
    state: StatusAgentState

    @property
    def paused(self) -> bool:
        return self.status == "paused"

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """The record of every call, in order (rejected and interrupted ones included)."""
        return [r.record for r in self.state.records]

    @property
    def usage(self) -> Usage:
        """The run's model usage (across pauses and resumes)."""
        return self.state.usage


def _approval(policy: RequireApproval) -> Callable[[StatusToolCall], str | None]:
    if policy is True:
        return lambda call: f"every call needs approval (tool {call.tool_name!r})"
    if policy is False:
        return lambda call: None
    if callable(policy):
        ask = policy

        def decide(call: StatusToolCall) -> str | None:
            answer = ask(call)
            if isinstance(answer, str):
                return answer
            return f"tool {call.tool_name!r} needs approval" if answer else None

        return decide
    names = frozenset(policy)
    return lambda call: (
        f"tool {call.tool_name!r} needs approval" if call.tool_name in names else None
    )


class StatusAgent:
    """The status-routed agent (see the module docs); one agent serves many runs.

    Args:
        tools: typed functions, :class:`~toolloop.Tool` objects, or a registry.
        model: the chat model of the default steps (any step given below replaces its
            default; without a model, all five must be given).
        analyze: the analysis step (each step sees a :class:`~toolloop.status_agent.StatusView`).
        plan: the planning step.
        decide: the decision step.
        reflect: the reflection step.
        converse: the conversation step.
        store: where checkpoints live; a :class:`~toolloop.checkpoints.MemoryCheckpointStore`
            of this agent by default (use a SQLite store to resume in another process).
        require_approval: which calls wait for a human before they run.
        max_steps: a run ends after this many node entries.
        max_idle_visits: a run ends when a node is reached this many times with no progress.
        concurrency: at most this many tool calls of a run at once.
        tool_timeout: seconds per tool call.
        limiter: shared with other runs; bounds tool calls across them.
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
        store: CheckpointStore | None = None,
        require_approval: RequireApproval = False,
        max_steps: int = 50,
        max_idle_visits: int = 3,
        concurrency: int = 4,
        tool_timeout: float | None = None,
        limiter: anyio.CapacityLimiter | None = None,
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
        self.steps = StatusSteps(
            **{name: fn if fn is not None else getattr(llm, name) for name, fn in given.items()}
        )
        if max_steps < 1 or max_idle_visits < 2:
            raise ValueError("max_steps must be >= 1 and max_idle_visits >= 2")
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.executor = Executor(
            self.registry, concurrency=concurrency, limiter=limiter, tool_timeout=tool_timeout
        )
        self.store: CheckpointStore = store if store is not None else MemoryCheckpointStore()
        self.needs_approval = _approval(require_approval)
        self.max_steps = max_steps
        self.max_idle_visits = max_idle_visits
        self.concurrency = concurrency

    async def run(
        self,
        user_input: str,
        *,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        timeout: float | None = None,
        on_event: OnEvent | None = None,
        deps: Any = None,
    ) -> StatusAgentResult:
        """Run a new request until it completes or pauses for a human.

        Args:
            run_id: the run's id in the store (a new one by default); it must be new.
            deps: your dependencies, given to every tool that declares a
                :class:`~toolloop.tools.RunContext` parameter as ``ctx.deps`` (not saved:
                give them again to ``resume`` and ``recover``).
            metadata: kept with the run's checkpoints (JSON data).
            timeout: seconds for this call; past it the run fails (recover it to retry).
            on_event: called with every event of the run (flow and status events).

        Raises:
            CheckpointConflictError: the store already has a run with this id.
            StepFailedError: a step raised; the run is marked failed and can be recovered.
        """
        if not isinstance(user_input, str):
            raise TypeError(f"user_input must be a str, got {type(user_input).__name__}")
        run_id = run_id or uuid.uuid4().hex
        state = StatusAgentState(run_id=run_id, user_input=user_input)
        agent_deps = self._deps(deps)
        agent_deps.run = await CheckpointedRun.begin(
            self.store,
            run_id=run_id,
            flow=FLOW_NAME,
            snapshot=recover_snapshot(state, run_id, "start"),
            metadata={"agent": "status", **(metadata or {})},
        )
        execution = Execution(self.flow, state, agent_deps, id=run_id)
        if on_event is not None:
            execution.subscribe(on_event)
        return await self._drive(
            agent_deps.run, execution, lambda: execution.run(user_input, timeout=timeout)
        )

    async def resume(
        self,
        run_id: str,
        decision: object,
        *,
        timeout: float | None = None,
        on_event: OnEvent | None = None,
        deps: Any = None,
    ) -> StatusAgentResult:
        """Continue a run paused for a human with their decision (in any process that has
        this agent's tools and steps and the run's store).

        Args:
            decision: :class:`~toolloop.checkpoints.Approve`, ``Edit``, ``Reject``,
                ``Replan``, ``Continue`` or ``Stop`` (or its data, or its bare kind); it must
                be one the run's request allows.

        Raises:
            RunNotFoundError: no such run.
            RunNotResumableError: the run is not paused (done, or resumed already).
            DecisionError: the decision does not fit the question.
            CorruptCheckpointError: the checkpoint cannot be read back.

        Each error is raised before anything is written: the store is unchanged.
        """
        checkpoint = await CheckpointedRun.load(self.store, run_id)
        expect_status(checkpoint, _PAUSED)
        deps = self._deps(deps)
        execution = self._restore(checkpoint, deps)
        question = execution.state.question
        waits = [w.event for w in execution.waiting]
        if waits != [HUMAN_EVENT] or question is None:
            raise CorruptCheckpointError(
                f"run {run_id!r} is paused but not for a human decision (it waits for "
                f"{waits}); it was left as it is"
            )
        checked = check_decision(question, decision, validate_arguments=self._check_arguments)
        run = await CheckpointedRun.claim(
            self.store, checkpoint, event=HUMAN_EVENT, value=to_jsonable_python(checked)
        )
        deps.run = run
        if on_event is not None:
            execution.subscribe(on_event)
        return await self._drive(
            run, execution, lambda: execution.resume(HUMAN_EVENT, checked, timeout=timeout)
        )

    async def recover(
        self,
        run_id: str,
        *,
        force: bool = False,
        timeout: float | None = None,
        on_event: OnEvent | None = None,
        deps: Any = None,
    ) -> StatusAgentResult:
        """Continue a run whose process died (or whose step failed) from its last checkpoint.

        Tool calls with a journaled outcome are not run again; calls that started without
        an outcome are marked interrupted and put to a human. The run's usage counts every
        model call made before: each node's is journaled when the node ends (a call the
        crash itself cut off never reported what it cost, and is not counted).

        Args:
            force: take the run over even if its owning process may still be running it
                (on another host, its liveness cannot be checked).

        Raises:
            RunNotFoundError: no such run.
            RunNotResumableError: the run is paused (resume it), completed, or still running.
            CorruptCheckpointError: the checkpoint cannot be read back.
        """
        checkpoint = await CheckpointedRun.load(self.store, run_id)
        expect_status(checkpoint, _INTERRUPTED)
        deps = self._deps(deps)
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
        run = await CheckpointedRun.claim(
            self.store,
            checkpoint,
            expect=_INTERRUPTED,
            event=checkpoint.resume_event,
            value=checkpoint.resume_value,
            force=force,
        )
        deps.run = run
        if on_event is not None:
            execution.subscribe(on_event)
        return await self._drive(
            run, execution, lambda: execution.resume(event, value, timeout=timeout)
        )

    async def request(self, run_id: str) -> HumanRequest | None:
        """What the run asks a human, if it is paused; ``None`` otherwise."""
        checkpoint = await CheckpointedRun.load(self.store, run_id)
        if checkpoint.status != "paused" or checkpoint.request is None:
            return None
        try:
            return HumanRequest.model_validate(checkpoint.request)
        except ValueError as exc:
            raise CorruptCheckpointError(
                f"the request of paused run {run_id!r} cannot be read: {exc}"
            ) from exc

    # -- internals ------------------------------------------------------------------------

    def _deps(self, deps: Any = None) -> StatusDeps:
        return StatusDeps(
            scope=RunScope("", deps) if self.registry.takes_context else None,
            steps=self.steps,
            executor=self.executor,
            tools=self.registry.specs(),
            needs_approval=self.needs_approval,
            max_steps=self.max_steps,
            max_idle_visits=self.max_idle_visits,
            concurrency=self.concurrency,
        )

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
        run: CheckpointedRun,
        execution: Execution[StatusAgentState],
        start: Callable[[], Awaitable[FlowResult[StatusAgentState]]],
    ) -> StatusAgentResult:
        meter = UsageMeter()
        meter.usage = execution.state.usage  # a resumed run goes on counting
        deps = execution.deps
        assert isinstance(deps, StatusDeps)
        try:
            with ExitStack() as stack:
                stack.enter_context(meter.active())
                if deps.scope is not None:
                    deps.scope.run_id = execution.id
                    stack.enter_context(deps.scope.active())
                try:
                    result = await start()
                finally:
                    execution.state.usage = meter.usage
        except Exception as exc:
            await note_cut_off(run, exc)  # a timeout, an error: what ended the calls it ran
            try:
                await run.fail(f"{type(exc).__name__}: {exc}")
            except Exception:  # the run's own error matters more than this write's
                run.release()
            raise
        except BaseException as exc:  # cancelled: the run stays "running", to be recovered
            await note_cut_off(run, exc)
            await run.abandon()  # (its lease, with a leasing store, is given back)
            raise
        state = result.state
        if result.paused:
            await run.pause(result)
            return StatusAgentResult(
                run_id=run.run_id, status="paused", request=state.question, state=state
            )
        await run.complete({"answer": state.answer, "stop_reason": state.stop_reason})
        return StatusAgentResult(
            run_id=run.run_id,
            status="completed",
            answer=state.answer,
            stop_reason=state.stop_reason,
            state=state,
        )
