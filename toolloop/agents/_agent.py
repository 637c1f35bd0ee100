"""``create_agent``: the model ↔ tools agent with middleware, and what a run returns."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any, Literal

import anyio
import sniffio
from pydantic import ValidationError

from .._errors import ResumeError
from ..checkpoints import CheckpointedRun, CheckpointStore, HumanRequest, usage_since
from ..flow import Execution, Flow, FlowEvent, FlowResult, FlowSnapshot, TraceEntry
from ..models import ChatModel, ModelSettings, Usage, UsageLimits, UsageMeter, check_settings
from ..runner import ToolCommand, ToolExecutionRecord, progress_reporter
from ..tools import Progress, RunScope, Tool, ToolRegistry
from ._durable import RECOVERY, check_recovery_answer
from ._flow import ANSWERED, AgentDeps, agent_flow
from ._messages import AssistantMessage, Message, MessageLike, ToolCall, ToolMessage, as_messages
from ._middleware import AgentMiddleware
from ._persist import (
    begin_run,
    claim_interrupted,
    claim_run,
    drive,
    load_interrupted,
    load_paused,
)
from ._spec import AgentSpec, build_spec
from ._state import AgentState, Todo
from ._structured import ResponseFormat

__all__ = ["Agent", "AgentResult", "create_agent"]

Snapshot = FlowSnapshot | Mapping[str, Any] | str | bytes


class AgentResult:
    """How a run ended (``completed``) or stopped to wait for an answer (``paused``).

    Attributes:
        status: ``completed`` or ``paused``.
        state: the final (or paused) state: messages, todos, structured response, values.
        snapshot: when paused, everything needed to resume the run, here or in another
            process (``snapshot.model_dump(mode="json")`` is plain JSON, for any store).
        pause_request: when paused, what the middleware asks, as JSON data (for
            :class:`~toolloop.agents.middleware.HumanApprovalMiddleware`, a
            :class:`~toolloop.checkpoints.HumanRequest`'s: see :attr:`request`).
        paused_by: when paused, the name of the middleware that paused.
        execution_id: the run's id, the same across pauses (its ``run_id`` in a store).
    """

    __slots__ = ("_flow_result", "execution_id", "pause_request", "paused_by", "snapshot", "state")

    def __init__(self, result: FlowResult[AgentState]) -> None:
        self._flow_result = result
        self.state: AgentState = result.state
        self.snapshot: FlowSnapshot | None = result.snapshot
        self.execution_id = result.execution_id
        where = result.waiting[0].request if result.waiting else None
        self.pause_request: Any = where["request"] if isinstance(where, dict) else None
        self.paused_by: str | None = where["by"] if isinstance(where, dict) else None

    @property
    def run_id(self) -> str:
        """The run's id in the agent's store (the same as ``execution_id``)."""
        return self.execution_id

    @property
    def status(self) -> Literal["completed", "paused"]:
        return self._flow_result.status

    @property
    def paused(self) -> bool:
        return self._flow_result.status == "paused"

    @property
    def request(self) -> HumanRequest | None:
        """When paused for a human (the shared protocol of :mod:`toolloop.checkpoints`):
        what is asked; ``None`` otherwise."""
        if not isinstance(self.pause_request, dict) or "kind" not in self.pause_request:
            return None
        try:
            return HumanRequest.model_validate(self.pause_request)
        except ValidationError:
            return None  # a middleware of its own that asks something else

    @property
    def stop_reason(self) -> str | None:
        """Why a completed run stopped: ``structured_response`` (the answer fits the
        ``response_format``), ``answered`` (the model answered without a tool call),
        ``tools`` (it ended after its tools: ``return_direct``, or a tool's jump),
        ``middleware`` (a hook ended it), ``usage_limit`` (its budget, with
        ``on_usage_limit="finish"``), ``refusal`` (the model refused: see :attr:`refusal`)
        or ``cut_off`` (the token limit ended its last reply mid-way: :attr:`text` is
        incomplete; raise ``max_tokens``); ``None`` while paused."""
        if self.paused:
            return None
        if self.state.usage_limit is not None:
            return "usage_limit"
        if self.state.structured_response is not None:
            return "structured_response"
        last = self.state.messages[-1] if self.state.messages else None
        if isinstance(last, AssistantMessage) and not last.tool_calls:
            if last.refusal is not None:
                return "refusal"
            if last.finish_reason == "length":
                return "cut_off"
            return "answered"
        if isinstance(last, ToolMessage):
            return "tools"
        return "middleware"

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """One record per tool call the model made in this state's conversation, in order
        (its answer's text is the result, or the error)."""
        asked: dict[str, ToolCall] = {}
        records: list[ToolExecutionRecord] = []
        for message in self.state.messages:
            if isinstance(message, AssistantMessage):
                asked.update((call.id, call) for call in message.tool_calls)
            elif isinstance(message, ToolMessage) and message.tool_call_id in asked:
                call = asked[message.tool_call_id]
                kwargs = call.args if isinstance(call.args, dict) else {}
                command = ToolCommand(purpose=call.name, tool_name=call.name, tool_kwargs=kwargs)
                if message.status == "success":
                    records.append(ToolExecutionRecord.succeeded(command, message.content))
                else:
                    records.append(ToolExecutionRecord.failed(command, message.content))
        return records

    @property
    def messages(self) -> list[Message]:
        return self.state.messages

    @property
    def usage(self) -> Usage:
        """The run's model usage (across pauses and resumes): requests and tokens."""
        return self.state.usage

    @property
    def todos(self) -> list[Todo]:
        return self.state.todos

    @property
    def structured_response(self) -> Any:
        return self.state.structured_response

    @property
    def refusal(self) -> str | None:
        """What the model said when its last reply refused to answer; ``None`` otherwise."""
        for message in reversed(self.state.messages):
            if isinstance(message, AssistantMessage):
                return message.refusal
        return None

    @property
    def text(self) -> str:
        """The content of the last assistant message (``""`` if there is none)."""
        for message in reversed(self.state.messages):
            if isinstance(message, AssistantMessage):
                return message.content
        return ""

    @property
    def trace(self) -> list[TraceEntry]:
        """The steps that ran, in order."""
        return self._flow_result.trace

    def __repr__(self) -> str:
        return (
            f"AgentResult(status={self.status!r}, messages={len(self.state.messages)}, "
            f"todos={len(self.state.todos)})"
        )


class Agent:
    """A reusable agent made by :func:`create_agent`: each :meth:`run` is independent.

    Runs are executions of the shared :data:`~toolloop.agents.agent_flow`; the agent holds
    only configuration, so one agent serves many concurrent runs.
    """

    __slots__ = ("_spec", "store")

    def __init__(self, spec: AgentSpec, store: CheckpointStore | None = None) -> None:
        self._spec = spec
        self.store = store
        """Where runs are kept (``None``: runs live in memory; resume from the snapshot)."""

    @property
    def flow(self) -> Flow[AgentState]:
        return agent_flow

    @property
    def tools(self) -> list[Tool]:
        """The tools the model is offered (the agent's, the middleware's, the output tool)."""
        return list(self._spec.tools)

    @property
    def middleware(self) -> list[AgentMiddleware]:
        return list(self._spec.middleware)

    def to_mermaid(self) -> str:
        """The agent's flow as a Mermaid flowchart."""
        return agent_flow.to_mermaid()

    def _deps(self, context: Any, deps: Any = None) -> AgentDeps:
        scope = RunScope("", deps) if self._spec.registry.takes_context else None
        return AgentDeps(self._spec, context if context is not None else deps, scope=scope)

    async def _finish(
        self,
        execution: Execution[AgentState],
        started: Callable[[], Any],
        on_event: Callable[[FlowEvent], None] | None,
        run: CheckpointedRun | None = None,
    ) -> AgentResult:
        if on_event is not None:
            execution.subscribe(on_event)
        deps = execution.deps
        assert isinstance(deps, AgentDeps)
        meter = UsageMeter(self._spec.usage_limits)
        meter.usage = execution.state.usage  # the limits hold across pauses and resumes
        with ExitStack() as stack:
            stack.enter_context(meter.active())
            if deps.scope is not None:
                deps.scope.run_id = execution.id
                deps.scope.report = _reporter(execution)
                stack.enter_context(deps.scope.active())
            if run is None:
                return AgentResult(await started())
            deps.run = run  # progress checkpoints and the tool journal
            return AgentResult(await drive(run, started()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def run(
        self,
        messages: MessageLike | Iterable[MessageLike],
        *,
        state: AgentState | None = None,
        context: Any = None,
        deps: Any = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        timeout: float | None = None,
        on_event: Callable[[FlowEvent], None] | None = None,
    ) -> AgentResult:
        """Run the agent on ``messages`` until it answers (or pauses).

        Args:
            messages: the new message(s): a string (a user message), an OpenAI-style dict,
                a message, or a list of those.
            state: a previous run's state, to continue its conversation (a thread): it is
                copied, and the new messages are added to it.
            context: anything the hooks should see as ``runtime.context`` (not saved).
            deps: your dependencies (a DB pool, an HTTP client...), given to every tool that
                declares a :class:`~toolloop.tools.RunContext` parameter as ``ctx.deps``
                (and to the hooks as ``runtime.context`` when ``context`` is not given).
            run_id: the run's id (a new one by default); with a store it must be new there.
            metadata: kept with the run's checkpoints when the agent has a store (JSON).
            timeout: seconds for the whole run; everything running is cancelled when it
                passes and :class:`~toolloop.ExecutionTimeoutError` is raised.
            on_event: called with every event of the run, as it happens.

        Raises:
            AgentModelError: the model raised or timed out.
            StructuredOutputError: the answer failed its schema after every retry.
            ModelCallLimitError, ToolCallLimitError: a limit set to raise was reached.
            StepFailedError: a hook raised (the cause is chained).
            ExecutionTimeoutError: the run (or an async hook) ran out of time.
            CheckpointConflictError: the store already has a run with this ``run_id``.
            UsageLimitError: the run passed the agent's ``usage_limits``.
        """
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
                },
            )
        execution = Execution(agent_flow, start, self._deps(context, deps), id=run_id)
        run = None
        if self.store is not None:
            run = await begin_run(self.store, execution, new, metadata)
        return await self._finish(
            execution, functools.partial(execution.run, new, timeout=timeout), on_event, run
        )

    async def resume(
        self,
        paused: Snapshot,
        answer: Any = None,
        *,
        context: Any = None,
        deps: Any = None,
        timeout: float | None = None,
        on_event: Callable[[FlowEvent], None] | None = None,
    ) -> AgentResult:
        """Continue a paused run with the ``answer`` to its pause request.

        Args:
            paused: the paused run's ``run_id`` (with a store), or its ``snapshot``: the
                object, its JSON data or its JSON text (e.g. from your own store, in another
                process: the agent must be built with the same middleware).
            answer: what the middleware that paused expects (for
                :class:`~toolloop.agents.middleware.HumanApprovalMiddleware`: one decision per
                action).

        Raises:
            ResumeError: the snapshot is of no paused agent run, or the answer does not fit
                (the snapshot stays usable: resume it again with a better answer).
            RunNotFoundError, RunNotResumableError: with a store: no such run, or it is not
                paused (completed, or resumed already, maybe by another process).

        With a store, each of these errors is raised before anything is written.
        """
        agent_deps = self._deps(context, deps)
        checkpoint = None
        if isinstance(paused, str) and not paused.lstrip().startswith("{"):
            if self.store is None:
                raise ResumeError(
                    f"{paused!r} is a run id, but this agent has no store to find it in; "
                    "build it with create_agent(..., store=...), or resume the snapshot"
                )
            checkpoint, execution = await load_paused(self.store, paused, agent_deps)
        else:
            execution = agent_flow.restore(paused, deps=agent_deps)
            if self.store is not None:
                # A run the store keeps resumes through the store, whatever form the
                # caller hands it in: once, as by its id (never once per copy of a snapshot).
                stored = await self.store.get(execution.id)
                if stored is not None:
                    checkpoint, execution = await load_paused(self.store, execution.id, agent_deps)
        where, middleware = self._paused_by(execution)
        if middleware is None:  # recovery asked about interrupted calls
            checked: Any = check_recovery_answer(answer, where["request"])
        else:
            checked = middleware.check_answer(answer, where["request"])
        run = None
        if checkpoint is not None:
            assert self.store is not None
            run = await claim_run(self.store, checkpoint, ANSWERED, checked)
        return await self._finish(
            execution,
            functools.partial(execution.resume, ANSWERED, (where, checked), timeout=timeout),
            on_event,
            run,
        )

    async def recover(
        self,
        run_id: str,
        *,
        force: bool = False,
        context: Any = None,
        deps: Any = None,
        timeout: float | None = None,
        on_event: Callable[[FlowEvent], None] | None = None,
    ) -> AgentResult:
        """Continue a stored run whose process died (or whose step failed) from its last
        checkpoint.

        Tool calls with a journaled outcome are not run again (their outcome is replayed);
        calls that started without an outcome may or may not have taken effect, so the run
        pauses and asks a human (a :class:`~toolloop.checkpoints.HumanRequest` of kind
        ``interrupted_tool_calls``: resume with approve or edit to run them again, or
        reject). A run that was being resumed goes on with the answer it was resumed with.
        Every model call made before counts against the agent's ``usage_limits`` and in
        ``result.usage``: each one's usage is journaled when it ends (a call the crash
        itself cut off never reported what it cost, and is not counted).

        Args:
            force: take the run over even if its owning process may still run it (on
                another host its liveness cannot be checked).

        Raises:
            ResumeError: the agent has no store.
            RunNotFoundError: no such run.
            RunNotResumableError: the run is paused (resume it), completed, or still running.
            CorruptCheckpointError: the checkpoint cannot be read back.
        """
        if self.store is None:
            raise ResumeError("recover() needs a store: build the agent with store=...")
        agent_deps = self._deps(context, deps)
        checkpoint, execution, event, value = await load_interrupted(self.store, run_id, agent_deps)
        state = execution.state  # its usage: the model calls before the checkpoint, and those
        spent = usage_since(checkpoint.journal, state.model_calls, Usage.model_validate, run_id)
        if spent:  # journaled since (their checkpoint was never written)
            state.usage = sum(spent, state.usage)
        if event == ANSWERED:
            where, middleware = self._paused_by(execution)
            if middleware is None:
                answer: Any = check_recovery_answer(value, where["request"])
            else:
                answer = middleware.check_answer(value, where["request"])
            value = (where, answer)
        run = await claim_interrupted(self.store, checkpoint, force=force)
        return await self._finish(
            execution,
            functools.partial(execution.resume, event, value, timeout=timeout),
            on_event,
            run,
        )

    def _paused_by(
        self, execution: Execution[AgentState]
    ) -> tuple[dict[str, Any], AgentMiddleware | None]:
        waits = execution.waiting
        if not waits:
            raise ResumeError(
                f"run {execution.id} is not paused: its snapshot waits for nothing; start a "
                "new run with agent.run(..., state=...)"
            )
        where = waits[0].request
        if not isinstance(where, dict) or not {"by", "hook", "index", "request"} <= set(where):
            raise ResumeError(f"run {execution.id} was not paused by an agent middleware")
        if where["by"] == RECOVERY:
            return where, None
        middleware = self._spec.by_name.get(where["by"])
        if middleware is None:
            raise ResumeError(
                f"run {execution.id} was paused by the middleware {where['by']!r}, which this "
                f"agent does not have (it has {list(self._spec.by_name)}); resume it with an "
                "agent built with the same middleware"
            )
        return where, middleware

    def run_sync(
        self,
        messages: MessageLike | Iterable[MessageLike],
        *,
        backend: Literal["asyncio", "trio"] = "asyncio",
        **kwargs: Any,
    ) -> AgentResult:
        """The sync twin of :meth:`run`, for scripts (runs its own event loop)."""
        try:
            running = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            running = None
        if running is not None:
            raise RuntimeError(
                f"run_sync() was called inside a running {running} event loop; use "
                "`await agent.run(...)` there"
            )
        return anyio.run(functools.partial(self.run, messages, **kwargs), backend=backend)


def create_agent(
    model: ChatModel,
    tools: ToolRegistry | Sequence[Tool | Callable[..., Any]] = (),
    *,
    system_prompt: str | None = None,
    middleware: Sequence[AgentMiddleware] = (),
    response_format: ResponseFormat | None = None,
    tool_choice: Any = None,
    concurrency: int = 8,
    limiter: anyio.CapacityLimiter | None = None,
    model_timeout: float | None = 300.0,
    tool_timeout: float | None = 300.0,
    hook_timeout: float | None = 60.0,
    max_model_calls: int | None = 100,
    max_tokens: int | None = None,
    temperature: float | None = None,
    extra: Mapping[str, Any] | None = None,
    store: CheckpointStore | None = None,
    settings: ModelSettings | None = None,
    usage_limits: UsageLimits | None = None,
    on_usage_limit: Literal["raise", "finish"] = "raise",
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
        concurrency: at most this many tool calls of a run at once.
        limiter: an :class:`anyio.CapacityLimiter` shared by many runs and agents.
        model_timeout: seconds for each model call (the whole streamed answer).
        tool_timeout: seconds for each tool call (a tool's own, smaller timeout wins).
        hook_timeout: seconds for each async ``before_*``/``after_*``/``resume`` hook.
        max_model_calls: a hard bound on model calls per run, against endless loops
            (:class:`~toolloop.agents.ModelCallLimitError`); ``None``: no bound.
        max_tokens: the model's output limit per call.
        temperature: passed to the model.
        extra: provider-specific request parameters, passed through.
        store: a :class:`~toolloop.checkpoints.CheckpointStore` to keep every run in
            (running, paused with its snapshot and request, completed, failed); a paused
            run is then resumed by its ``run_id``, once, in any process.
        settings: more model settings for every call
            (:class:`~toolloop.models.ModelSettings`: ``seed``, ``top_p``, ...).
        usage_limits: each run's budget of model calls and tokens
            (:class:`~toolloop.models.UsageLimits`, across pauses and resumes), checked
            before each model call and while its answer streams.
        on_usage_limit: at the budget, ``"raise"``
            :class:`~toolloop.errors.UsageLimitError` (``.state`` keeps the conversation),
            or ``"finish"``: the run completes with what it has, its ``stop_reason``
            ``"usage_limit"``.

    Raises:
        AgentDefinitionError: middleware with one name, a response format that is no schema,
            an output tool named like a tool.
        ToolDefinitionError: two tools with one name, a function that cannot be a tool.
    """
    request_settings: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "extra": dict(extra or {}),
        "model_settings": check_settings(settings, "create_agent"),
    }
    if on_usage_limit not in ("raise", "finish"):
        raise ValueError(f"on_usage_limit must be 'raise' or 'finish', got {on_usage_limit!r}")
    if usage_limits is not None and not isinstance(usage_limits, UsageLimits):
        raise TypeError(
            f"usage_limits must be a toolloop.models.UsageLimits, got {type(usage_limits).__name__}"
        )
    return Agent(
        build_spec(
            model,
            tools,
            system_prompt=system_prompt,
            middleware=middleware,
            response_format=response_format,
            tool_choice=tool_choice,
            concurrency=concurrency,
            limiter=limiter,
            tool_timeout=tool_timeout,
            model_timeout=model_timeout,
            hook_timeout=hook_timeout,
            max_model_calls=max_model_calls,
            settings=request_settings,
            usage_limits=usage_limits,
            on_usage_limit=on_usage_limit,
        ),
        store,
    )


def _reporter(execution: Execution[AgentState]) -> Callable[[Progress], None]:
    """A tool's progress as a :class:`~toolloop.runner.ToolProgress` event of the run."""
    return progress_reporter(execution.context_for("tools"))
