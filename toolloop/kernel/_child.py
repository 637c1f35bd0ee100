"""A run as a tool of another run: one product's run called by another's model, sharing
the caller's budget, limits, events and store.

:func:`as_tool` makes a :class:`~toolloop.tools.Tool` of a product's runs (the loop's
``toolloop.loop.as_tool``, ``Agent.as_tool``, ``StatusAgent.as_tool`` are it). When a run
calls it, the call starts a child run, linked to its parent by :func:`drive`:

- **budget**: the child's usage meter has the parent's as its parent: each of its model
  calls is checked against the child's own ``usage_limits`` *and* the parent's (and the
  grandparent's, up the tree) before it is made, and while it streams; what it costs is
  counted in every ancestor's usage, so the parent's ``result.usage`` includes its
  children's;
- **limits**: the child takes the parent's ``limiter``, ``model_rate_limit``,
  ``rate_limits`` and ``deps`` when it has none of its own; the call itself holds no token
  of the limiter (its run's tool calls take them); the child runs in the parent's tool
  call, so the parent's ``timeout``, ``tool_timeout`` and cancellation end it (no task is
  left behind);
- **events**: every event of the child is told to the parent's observers as a
  :class:`ChildRunEvent` (the child's run id, the parent's run id, the parent's call id,
  the depth), so one stream, trace or viewer of the parent shows the tree;
- **bounds**: a run at ``max_depth`` cannot start a child, nor a run with
  ``max_children`` children running: the call fails with a :class:`ChildRunLimitError`
  the model reads;
- **a human**: a child of a durable parent that pauses for a human pauses its parent with
  the child's request (:func:`pause_parent`; :func:`child_asked` reads it back); the
  parent's resume with a decision notes it for the child (:func:`answer_child`) and
  recovers the parent, whose call, made again, resumes the child with it
  (:func:`child_answer`). A parent without a store fails the call instead
  (:class:`ChildRunPausedError`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import anyio
from pydantic import SerializeAsAny, ValidationError, field_validator
from pydantic_core import to_jsonable_python

from .._errors import ExecutionError, ResumeError, ToolCallError, UsageLimitError
from ..checkpoints import (
    Checkpoint,
    CheckpointedRun,
    CheckpointStore,
    HumanRequest,
    check_decision,
)
from ..flow import Context, Execution, FlowEvent
from ..models import CallObserver, Usage, UsageMeter, current_meter
from ..runner import json_safe
from ..tools import RunContext, Tool
from ._events import RunEvent
from ._options import RunOptions
from ._result import RunResult
from ._vocabulary import HUMAN_EVENT

__all__ = [
    "DEFAULT_MAX_CHILDREN",
    "DEFAULT_MAX_DEPTH",
    "ChildRunEvent",
    "ChildRunLimitError",
    "ChildRunPaused",
    "ChildRunPausedError",
    "ChildRuns",
    "RunsAsTools",
    "answer_child",
    "as_tool",
    "child_asked",
]

DEFAULT_MAX_DEPTH = 3
"""How deep runs nest by default: a top run (depth 0) may have children, grandchildren and
great-grandchildren (depth 3), no deeper."""

DEFAULT_MAX_CHILDREN = 8
"""How many children one run may have running at once, by default."""


class ChildRunLimitError(ToolCallError):
    """A run as a tool was not started: the caller is at ``max_depth``, or has
    ``max_children`` children running. The call's record says so (the model reads it)."""


class ChildRunPausedError(ToolCallError):
    """A run as a tool paused for a human, and its parent has no store to pause in: the
    call fails with this (its record says which run to resume). A durable parent pauses
    instead (:class:`ChildRunPaused`)."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        """The paused child's run id."""


class ChildRunPaused(ExecutionError):
    """A run's session ended because a run it called as a tool paused for a human: the
    kernel pauses the run (its store's checkpoint ``paused``) with ``request``, the child's
    request as its parent asks it (see :func:`child_asked`). Never seen by callers of a
    durable run."""

    def __init__(self, request: HumanRequest) -> None:
        super().__init__(request.reason)
        self.request = request


CHILD_ANSWER = "<child answer>"
"""The ``tool_name`` of the journal note of a decision for a paused child."""


def _for_parent(
    asked: HumanRequest, run_id: str, revision: int, call_id: str, tool_name: str
) -> HumanRequest:
    """The request of a child, as its parent asks it: the child's calls, kinds and reason,
    its ``details["child"]`` saying whose it is."""
    child = {
        "run_id": run_id,
        "revision": revision,
        "call_id": call_id,
        "tool_name": tool_name,
        "details": asked.details,
    }
    return asked.model_copy(
        update={
            "reason": f"the run {run_id!r} that tool {tool_name!r} started (call {call_id}) "
            f"asks: {asked.reason}",
            "details": {"child": child},
        }
    )


def child_asked(request: object) -> HumanRequest | None:
    """The request of a paused run (as its checkpoint keeps it) when it is its child's
    (``details["child"]``: the child's ``run_id``, the parent's ``call_id`` and
    ``tool_name``); ``None`` when it is the run's own."""
    if isinstance(request, HumanRequest):
        asked = request
    else:
        try:
            asked = HumanRequest.model_validate(request)
        except ValidationError:
            return None
    child = asked.details.get("child")
    if not isinstance(child, dict) or not isinstance(child.get("run_id"), str):
        return None
    return asked


def _note_key(run_id: str, revision: object) -> str:
    return f"child/{run_id}@{revision}"


async def answer_child(store: CheckpointStore, checkpoint: Checkpoint, decision: object) -> bool:
    """Answer a run paused for its child's request: the decision is checked against the
    request (nothing is written if it does not fit), noted in the run's journal for that
    child, and the run is left ``running`` without an owner, for the product to recover
    it (its call, made again, resumes the child with the decision). ``False`` (and nothing
    done) when the run's request is its own.

    Raises:
        DecisionError: the decision does not fit the request.
        RunNotResumableError: the run is not paused, or someone resumed it first.
    """
    asked = child_asked(checkpoint.request) if checkpoint.status == "paused" else None
    if asked is None:
        return False
    checked = check_decision(asked, decision)
    child = asked.details["child"]
    claimed = await CheckpointedRun.claim(store, checkpoint, expect=("paused",))
    try:
        with anyio.CancelScope(shield=True):
            await claimed.record_note(
                _note_key(child["run_id"], child.get("revision")),
                CHILD_ANSWER,
                {"decision": to_jsonable_python(checked)},
            )
    finally:
        await claimed.abandon()
    return True


async def child_answer(store: CheckpointStore, parent_id: str, child: Checkpoint) -> Any:
    """The decision noted in the parent's journal for ``child`` paused as it is now
    (``None``: none, or one for an earlier pause)."""
    parent = await store.get(parent_id)
    if parent is None:
        return None
    key = _note_key(child.run_id, child.revision)
    for entry in parent.journal:
        if entry.call_id == key and entry.state == "finished" and isinstance(entry.outcome, dict):
            return entry.outcome.get("decision")
    return None


class ChildRunEvent(RunEvent):
    """An event of a child run (a run called as a tool), told to its parent's observers.

    ``execution_id`` and ``at`` are the parent's (the run whose stream it is in: its
    clock); ``run_id`` the run the ``event`` is of (``event.at`` on that run's clock). A
    grandchild's events reach the top run as these too, each saying its own run, that
    run's parent and its depth: the stream holds the whole tree.
    """

    kind: Literal["child_run_event"] = "child_run_event"
    run_id: str
    """The run the event is of (the child's, the grandchild's...)."""
    parent_run_id: str
    """The run that called it as a tool."""
    call_id: str
    """The parent's tool call that runs it (``ToolCallStarted.call_id`` in the parent)."""
    tool_name: str
    """The tool the parent called."""
    depth: int
    """1 for a child of the top run, 2 for a grandchild..."""
    event: SerializeAsAny[FlowEvent]
    """The child's event, as it was told to the child's own observers."""

    @field_validator("event", mode="before")
    @classmethod
    def _typed(cls, value: Any) -> Any:
        """An event read back from JSON (a trace) as its own class, by its ``kind``."""
        if isinstance(value, dict):
            found = _event_class(value.get("kind"))
            if found is not None:
                return found.model_validate(value)
        return value


def _event_class(kind: object) -> type[FlowEvent] | None:
    pending: list[type[FlowEvent]] = [FlowEvent]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        field = cls.model_fields.get("kind")
        if field is not None and field.default == kind and cls is not FlowEvent:
            return cls
    return None


@dataclass(frozen=True, slots=True)
class ChildRuns:
    """How a product's runs are started as a child (what :func:`as_tool` calls).

    Args:
        run: ``await run(request, **options)``: a new run of ``request`` with run options
            (:class:`RunOptions` names) over the product's own.
        defaults: the product's own run options (an agent's constructor's; the loop's
            call's): what the child does not take from its parent.
        resume: ``await resume(run_id, decision, **options)`` of a paused child (a
            durable parent resumed with a decision for its child), if the product has it.
        recover: ``await recover(run_id, **options)`` of a child whose process died (a
            durable parent recovered), if the product has it.
    """

    run: Callable[..., Awaitable[RunResult]]
    defaults: RunOptions
    resume: Callable[..., Awaitable[RunResult]] | None = None
    recover: Callable[..., Awaitable[RunResult]] | None = None


class _RunLink(UsageMeter):
    """A run's usage meter, and what the run lends its tools (active as the meter of the
    run's tasks, made by :func:`drive`): to the children they start, its budget, options
    and depth; to ``read_result``, its kept results. One object, set once for the run: a
    run's tasks find it as their current meter."""

    __slots__ = ("children", "depth", "execution", "kept", "limit", "options", "run_id")

    def __init__(
        self,
        execution: Execution[Any],
        options: RunOptions,
        depth: int,
        kept: Callable[[Any, str], str | None] | None,
        limit: int | None,
        *,
        observer: CallObserver | None,
        parent: UsageMeter | None,
    ) -> None:
        super().__init__(
            options.usage_limits,
            observer=observer,
            rate_limit=options.model_rate_limit,
            retry=options.model_tries,
            parent=parent,
        )
        self.execution = execution
        self.run_id = execution.id
        self.options = options
        self.depth = depth
        self.children = 0
        self.kept = kept
        """The whole text of the run's result of a handle (``None``: no such result)."""
        self.limit = limit
        """The run's ``max_result_chars`` (``None``: it cuts nothing)."""

    def kept_result(self, handle: str) -> str | None:
        """The whole text of the run's result of ``handle`` (``None``: none)."""
        kept = self.kept
        return None if kept is None else kept(self.execution.state, handle)


def current_run() -> _RunLink | None:
    """The run whose task this is (``None``: outside a run of :func:`drive`, or in a block
    that counts its model calls with a meter of its own)."""
    meter = current_meter()
    return meter if type(meter) is _RunLink else None


@dataclass(frozen=True, slots=True)
class _ChildOf:
    """Set by a run-as-tool call for the run it starts: whose child it is, and where."""

    parent: _RunLink
    call_id: str
    tool_name: str


_CHILD: ContextVar[_ChildOf | None] = ContextVar("toolloop_child_of", default=None)


def child_of() -> _ChildOf | None:
    """The link to its parent of a run starting now as a tool of another run (``None``: a
    run of its own). Only the run the call started is the child: a run started later in
    that run's own tools is not (the run in progress there is the child, not the parent)."""
    child = _CHILD.get()
    if child is None or child.parent is not current_run():
        return None
    return child


def run_meter(
    execution: Execution[Any],
    options: RunOptions,
    child: _ChildOf | None,
    kept: Callable[[Any, str], str | None] | None = None,
    limit: int | None = None,
    *,
    observer: CallObserver | None = None,
) -> _RunLink:
    """The usage meter of a run of ``execution``: active (``with``), it makes the run the
    one whose tasks' run-as-tool calls start its children (``child``: the run's own link
    to its parent) and whose ``read_result`` calls read its ``kept`` results."""
    depth = 0 if child is None else child.parent.depth + 1
    parent = None if child is None else child.parent
    return _RunLink(execution, options, depth, kept, limit, observer=observer, parent=parent)


def forward_to_parent(execution: Execution[Any], child: _ChildOf) -> Callable[[], None] | None:
    """Tell a child's events to its parent's observers (when it has any), as
    :class:`ChildRunEvent`; returns what stops it."""
    parent = child.parent.execution
    if not parent.observed:
        return None
    depth = child.parent.depth + 1
    return execution.subscribe(
        _Forward(parent.context_for(child.tool_name), execution.id, child, depth)
    )


class _Forward:
    """A child's events, told to its parent's observers as :class:`ChildRunEvent`."""

    __slots__ = ("child", "ctx", "depth", "run_id")

    def __init__(self, ctx: Context[Any, Any], run_id: str, child: _ChildOf, depth: int) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.child = child
        self.depth = depth

    def __call__(self, event: FlowEvent) -> None:
        ctx = self.ctx
        if not ctx.observed:
            return
        if isinstance(event, ChildRunEvent):  # a grandchild's: passed up as it is
            update = {"execution_id": ctx.execution_id, "at": ctx.elapsed()}
            ctx.publish(event.model_copy(update=update))
            return
        child = self.child
        ctx.publish(
            ChildRunEvent(
                execution_id=ctx.execution_id,
                at=ctx.elapsed(),
                run_id=self.run_id,
                parent_run_id=child.parent.run_id,
                call_id=child.call_id,
                tool_name=child.tool_name,
                depth=self.depth,
                event=event,
            )
        )


_INHERITED = ("limiter", "model_rate_limit", "deps")


def _inherited(parent: RunOptions, own: RunOptions) -> dict[str, Any]:
    """The options a child takes from its parent: those it has none of its own of."""
    given: dict[str, Any] = {}
    for name in _INHERITED:
        if getattr(own, name) is None and getattr(parent, name) is not None:
            given[name] = getattr(parent, name)
    if parent.rate_limits:
        given["rate_limits"] = {**parent.rate_limits, **own.rate_limits}
    return given


def count_in_parents(parent: UsageMeter | None, usage: Usage) -> None:
    """Count ``usage``, spent by a child run in an earlier session (before a pause or a
    crash), in the usage of ``parent`` (the meter of the run it is a tool of) and up: their
    call of it is made again from a checkpoint taken before the call, which does not count
    it."""
    ancestor = parent
    while ancestor is not None:
        ancestor.usage = ancestor.usage + usage
        ancestor = ancestor.parent


def _spent(parent: _RunLink) -> bool:
    """A child ran out of budget: when it was the parent's (or an ancestor's), the parent
    ends as its own model call refused would (``on_usage_limit``), not with a failed
    call; whether it does."""
    try:
        parent.check_before_call()
    except UsageLimitError as spent:
        parent.execution.fail(spent)
        return True
    return False


def answer_of(result: RunResult) -> Any:
    """What a finished child answers its parent's model: its structured response (as JSON
    data) when it has one, else its text (``""`` when it has none).

    Raises:
        ChildRunPausedError: the child paused for a human.
    """
    if result.status == "paused":
        asked = result.request.kind if result.request is not None else "an answer"
        raise ChildRunPausedError(
            f"the run {result.run_id!r} this tool started paused for a human ({asked}); a "
            "parent without a store cannot pause for its child: give the parent a store= "
            "(it then pauses with the child's request), resume that run with its product's "
            "resume, or give the child no needs_approval",
            run_id=result.run_id,
        )
    if result.structured_response is not None:
        return json_safe(result.structured_response)
    return result.text or ""


_PARAMETERS = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "What to do, in full."}},
    "required": ["request"],
    "additionalProperties": False,
}


def as_tool(
    runs: ChildRuns,
    *,
    name: str,
    description: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_children: int = DEFAULT_MAX_CHILDREN,
) -> Tool:
    """A tool whose call is a run of a product: a child of the run that calls it.

    The tool takes ``{"request": str}`` and answers the child's structured response (as
    JSON data) or its final text. The child shares its parent's budget, limits, events and
    cancellation (see the module docs); called outside any run, it is a run of its own.

    Args:
        runs: how the product's runs start (the products' ``as_tool`` give it).
        name: the tool's name, for the model.
        description: what the child does, for the model.
        max_depth: the depth of runs below which this one may start (the top run is 0):
            a call from a run at ``max_depth`` fails with :class:`ChildRunLimitError`.
        max_children: the children one run may have running at once through this kind of
            call; one more fails with :class:`ChildRunLimitError`.

    Raises:
        ValueError: ``max_depth`` below 1 or ``max_children`` below 1.
    """
    if isinstance(max_depth, bool) or not (isinstance(max_depth, int) and max_depth >= 1):
        raise ValueError(f"max_depth must be an int of 1 or more, got {max_depth!r}")
    if isinstance(max_children, bool) or not (isinstance(max_children, int) and max_children >= 1):
        raise ValueError(f"max_children must be an int of 1 or more, got {max_children!r}")

    async def call(request: str, ctx: RunContext[Any]) -> Any:
        parent = current_run()
        if parent is None:  # called by hand, outside a run: a run of its own
            return answer_of(await runs.run(request))
        if parent.depth >= max_depth:
            raise ChildRunLimitError(
                f"tool {name!r} starts a run, but the run calling it is at depth "
                f"{parent.depth}, which is max_depth={max_depth}; answer without it, or "
                "raise max_depth in as_tool(...)"
            )
        if parent.children >= max_children:
            raise ChildRunLimitError(
                f"tool {name!r} starts a run, but the run calling it has {parent.children} "
                f"running already, which is max_children={max_children}; call it again "
                "once one has answered, or raise max_children in as_tool(...)"
            )
        parent.children += 1
        token = _CHILD.set(_ChildOf(parent, ctx.call_id, name))
        try:
            options = _inherited(parent.options, runs.defaults)
            store = parent.options.store
            if store is None:
                result = await runs.run(request, **options)
            else:  # a durable parent: the child is journaled in its store, under its call
                child_id = _child_id(parent, name, ctx)
                got = await _durable(runs, store, parent, child_id, request, options)
                if isinstance(got, Checkpoint) or got.status == "paused":
                    await _pause_parent(parent, store, child_id, ctx.call_id, name)
                result = got
        except ExecutionError as exc:
            if isinstance(exc, UsageLimitError) and _spent(parent):
                raise  # the parent's budget: the parent ends
            # the child's own end (its own budget, its model, its timeout): the call fails,
            # in every product (a run's own error would end the parent's run)
            raise ToolCallError(
                f"the run this tool started failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            _CHILD.reset(token)
            parent.children -= 1
        return answer_of(result)

    made = Tool(name=name, description=description, parameters=_PARAMETERS, function=call)
    made.holds_limiter = False
    made.resumes = True
    return made


def _child_id(parent: _RunLink, name: str, ctx: RunContext[Any]) -> str:
    """The run id of the child a call of a durable parent starts: made from the parent's
    run id and the call's identity (its idempotency key), so that the same call, made
    again after a crash, finds the same child."""
    return f"{parent.run_id}.{name}.{ctx.idempotency_key[:16]}"


async def _pause_parent(
    parent: _RunLink, store: CheckpointStore, run_id: str, call_id: str, tool_name: str
) -> NoReturn:
    """The child ``run_id`` is paused for a human: its parent's session ends
    (:class:`ChildRunPaused`), paused with the child's request. The call itself never
    returns: it is cancelled with the parent's session, so that its outcome is not
    journaled (the call is made again when the parent is resumed)."""
    found = await store.get(run_id)
    asked = None if found is None else _own(found.request)
    if found is None or asked is None or found.status != "paused":
        raise ChildRunPausedError(
            f"the run {run_id!r} this tool started paused, but its store holds no request "
            "of it to ask",
            run_id=run_id,
        )
    asked = _for_parent(asked, run_id, found.revision, call_id, tool_name)
    parent.execution.pause(
        ChildRunPaused(asked), waiting_for=HUMAN_EVENT, request=asked.model_dump(mode="json")
    )
    await anyio.lowlevel.checkpoint()  # cancelled here, with the parent's session
    raise ChildRunPausedError(  # (only if the parent's session had ended before)
        f"the run {run_id!r} this tool started paused for a human", run_id=run_id
    )


def _own(request: object) -> HumanRequest | None:
    try:
        return HumanRequest.model_validate(request)
    except ValidationError:
        return None


async def _durable(
    runs: ChildRuns,
    store: CheckpointStore,
    parent: _RunLink,
    run_id: str,
    request: str,
    options: dict[str, Any],
) -> RunResult | Checkpoint:
    """The child ``run_id`` in ``store``: started, or, when the store has it (the parent's
    call is made again after a crash or a pause), recovered: a completed child gives its
    result, a cut-off one goes on from its last checkpoint, its finished tool calls not run
    again; a paused one is resumed with the decision its parent's journal notes for it, or
    given back as it is (its checkpoint) when there is none."""
    options["store"] = store
    found = await store.get(run_id)
    if found is None or runs.recover is None:
        return await runs.run(request, run_id=run_id, **options)
    if found.status == "completed":  # its result, as stored: what it cost is counted here
        done = await runs.recover(run_id, **options)
        count_in_parents(parent, done.usage)
        return done
    if found.status == "paused":
        decision = await child_answer(store, parent.run_id, found)
        if decision is None or runs.resume is None:
            return found
        try:
            return await runs.resume(run_id, decision, **options)
        except ResumeError:  # nothing was written (the decision did not fit): it asks again
            again = await store.get(run_id)
            if again is None or again.status != "paused":
                raise
            return again
    # the parent's process, which owned it, is the one that died: taken over at once
    return await runs.recover(run_id, force=True, **options)


class RunsAsTools:
    """What makes an agent class a tool of other runs: :meth:`as_tool` (a product class
    derives from it and says how its runs start in ``_child_runs``)."""

    __slots__ = ()

    def _child_runs(self) -> ChildRuns:
        raise NotImplementedError

    def as_tool(
        self,
        *,
        name: str,
        description: str,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_children: int = DEFAULT_MAX_CHILDREN,
    ) -> Tool:
        """This agent as a tool of another run (of any product): each call is a run of
        the agent on the call's ``request``, a child of the calling run, sharing its
        budget, limits, events and cancellation; it answers the run's structured
        response or final text (see :func:`toolloop.kernel.as_tool`, whose arguments
        these are, and the guide *runs as tools*)."""
        return as_tool(
            self._child_runs(),
            name=name,
            description=description,
            max_depth=max_depth,
            max_children=max_children,
        )
