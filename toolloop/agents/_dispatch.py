"""The tool calls of a model turn through the runner: the tools step's, and those a turn
starts while the model still writes its reply (``streaming_dispatch``).

:class:`TurnTools` is the one way the agent runs a turn's calls: one
:class:`~toolloop.runner.ToolBatch` (at most ``concurrency`` calls at once, the run's
limiter and ``tool_timeout``), each call through the ``wrap_tool_call`` onion (whose
innermost handler checks the arguments against the tool's schema: a call that fails it
never runs), with a store through the kernel's journal under its call id (the intent
before the tool starts, the outcome after), each told with ``ToolCallStarted`` and
``ToolCallFinished``, one outcome per call whatever happens.

With ``streaming_dispatch``, a model turn opens a :class:`StreamedTurn` around its model
call: the model call hands it each tool call the moment the call is complete in the
stream (its arguments a whole JSON value: :meth:`~toolloop.models.ToolCallReader.complete`),
and the call starts at once in the turn's batch, unless it waits for the whole turn:

- a call an approval asks about (``needs_approval``, a ``HumanApprovalMiddleware``): the
  approval asks about a whole turn's calls at once, so such a call runs after the answer,
  as without streaming dispatch (the turn's other calls run meanwhile);
- a call of the structured-output tool (the turn answers it), and a call the run's journal
  already holds (a turn cut off and asked again: the tools step answers it from the
  journal, never running it twice).

An agent with middleware that reads a whole turn before its calls run (a
``wrap_model_call``, or an ``after_model`` hook other than an approval's: the call
limits, the todo list's check) starts no call early: its turns run as without streaming
dispatch.

The calls that ran are answered by the tools step, in call order with the others, so the
messages, records, tools' state updates and routing are those of a turn without streaming
dispatch; until then their outcomes stay in the state (as JSON in
:attr:`~toolloop.agents.AgentState.streamed` when the run pauses for an approval, so a
resumed run never runs them again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from ..checkpoints import JournalEntry, RequestedCall
from ..flow import Context
from ..kernel import (
    Interrupted,
    journaled_call,
    own_key,
    resumes,
    same_call,
    tell_call_finished,
    tell_call_started,
    tell_kept,
)
from ..runner import CallSource, ToolBatch, cancelled_error, result_handle
from ._durable import dump_outcome, load_outcome
from ._messages import AssistantMessage, ToolCall, pending_tool_calls
from ._state import AgentState
from ._tool_call import ToolOutcome, command_of, run_tool_call

if TYPE_CHECKING:
    from ._flow import AgentDeps

    AgentContext = Context[AgentState, AgentDeps]

__all__ = ["StreamedTurn", "TurnTools", "cancelled_outcome"]


def cancelled_outcome(call: ToolCall) -> ToolOutcome:
    """The outcome of a call cut short, or never started."""
    return ToolOutcome.failed(call, cancelled_error(call.name))


class TurnTools:
    """The calls of one turn, run through one batch (see the module docs): open
    :attr:`batch` (``async with``), then :meth:`submit` calls or :meth:`run_here` them."""

    __slots__ = (
        "asked",
        "batch",
        "calls",
        "ctx",
        "journal",
        "positions",
        "rerun",
        "sources",
        "turn",
    )

    def __init__(self, ctx: AgentContext, journal: Mapping[str, JournalEntry], turn: int) -> None:
        self.ctx = ctx
        self.journal = journal
        """The run's journal as read when the turn's calls began (empty without a store)."""
        self.turn = turn
        self.rerun = frozenset(ctx.state.rerun)  # approved by a human to run again
        self.asked: list[tuple[ToolCall, Interrupted]] = []
        """Calls whose outcome is unknown, left for a human (``unknown_outcome="ask"``)."""
        self.sources: dict[str, CallSource] = {}
        self.calls: list[ToolCall] = []
        """The calls submitted, in order (the batch's items)."""
        self.positions: list[int] = []
        """The place of each in its turn's reply, as the events tell it."""
        observed = ctx.observed
        self.batch: ToolBatch[ToolCall, ToolOutcome] = ToolBatch(
            self._call,
            cancelled_outcome,
            concurrency=ctx.deps.options.concurrency,
            on_start=self._started if observed else None,
            on_finish=self._finished if observed else None,
        )

    def submit(self, position: int, call: ToolCall) -> None:
        """Start ``call`` (at ``position`` of its reply) now, or when a slot is free."""
        self.calls.append(call)
        self.positions.append(position)
        self.batch.submit(call)

    def run_here(self, calls: Iterable[tuple[int, ToolCall]]) -> Awaitable[None]:
        """Submit ``(position, call)`` pairs and work on them in the calling task (see
        :meth:`~toolloop.runner.ToolBatch.run_here`)."""
        items: list[ToolCall] = []
        for position, call in calls:
            items.append(call)
            self.positions.append(position)
        self.calls.extend(items)
        return self.batch.run_here(items)

    async def _call(self, call: ToolCall, started: Callable[[], None]) -> ToolOutcome:
        started()  # the onion (middleware included) is the call
        deps = self.ctx.deps
        spec, runtime = deps.spec, deps.runtime
        state = self.ctx.state
        assert runtime is not None

        def onion() -> Awaitable[ToolOutcome]:
            return run_tool_call(call, spec.call_tool, spec.registry, state, runtime)

        run = deps.run
        if run is None or not spec.registry.accepts(call.name, call.args):
            return await onion()  # a call that cannot run has no effect to journal
        options = deps.options
        again = call.id in self.rerun
        done = await journaled_call(
            run,
            self.journal,
            call.id,
            tool_name=call.name,
            arguments=call.args,
            call=onion,
            dump=dump_outcome,
            load=load_outcome,
            failed=lambda error: ToolOutcome.failed(call, error),
            unknown_outcome="retry" if again else options.unknown_outcome,
            idempotent_tools=(call.name,) if again else options.idempotent_tools,
            settled=options.unknown_outcome != "ask",  # else a human answers it first
            resumes=resumes(spec.registry, call.name),
        )
        self.sources[call.id] = done.source
        if done.cut is not None and done.cut.answered is None and options.unknown_outcome == "ask":
            self.asked.append((call, done.cut))  # not answered: the run asks a human
        return done.outcome

    def _started(self, k: int, call: ToolCall) -> None:
        tell_call_started(self.ctx, self.turn, self.positions[k], call.id, command_of(call))

    def _finished(self, k: int, outcome: ToolOutcome, duration: float) -> None:
        call = self.calls[k]
        source = self.sources.get(call.id, "ran")
        tell_call_finished(
            self.ctx, self.turn, self.positions[k], call.id, outcome.record, duration, source
        )
        message = outcome.message
        if message.status == "success":
            limit = self.ctx.deps.options.max_result_chars
            tell_kept(self.ctx, call.id, result_handle(call.id), call.name, message.content, limit)


class StreamedTurn:
    """A model turn whose tool calls start while the model writes them (see the module
    docs). ``async with`` it around the model call and the ``after_model`` hooks: leaving
    it waits for the calls that started (or, when the block fails or is cancelled, cuts
    them short), and keeps their outcomes in the state."""

    __slots__ = ("_checks", "_orphans", "_used", "offered", "tools")

    def __init__(self, ctx: AgentContext, journal: Mapping[str, JournalEntry]) -> None:
        deps = ctx.deps
        state = ctx.state
        spec = deps.spec
        self.tools = TurnTools(ctx, journal, state.model_calls)
        self._used: set[str] = {
            call.id
            for message in state.messages
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
        }
        runtime = deps.runtime
        checks = [mw._rule(runtime) for mw in spec.approvers] if runtime is not None else []
        self._checks = [check for check in checks if check is not None]
        # calls of a turn that was cut off before it was kept (its process died): a call of
        # this turn that is one of them is answered by the journal, not run again
        self._orphans = [
            (key, entry)
            for key, entry in journal.items()
            if key not in self._used and entry.tool_name in spec.registry
        ]
        self.offered: dict[int, ToolCall] = {}
        """The calls of the reply so far, by position, with their ids in the run."""

    @classmethod
    async def open(cls, ctx: AgentContext) -> StreamedTurn:
        """The streamed turn of the model call about to be made (a durable run's journal
        read first)."""
        run = ctx.deps.run
        journal = await run.journal() if run is not None else {}
        return cls(ctx, journal)

    def offer(self, position: int, call: ToolCall) -> ToolCall:
        """The call at ``position`` of the reply is complete: give it its id in the run
        and start it, unless it waits for the whole turn. Returns it with that id (the
        reply keeps it so)."""
        known = self.offered.get(position)
        if known is not None:
            return known
        call, waits = self._own(call)
        self.offered[position] = call
        if not waits:
            self.tools.submit(position, call)
        return call

    def _own(self, call: ToolCall) -> tuple[ToolCall, bool]:
        """``call`` with an id of its own in the run (as the reply's ids are made unique
        when it is kept: a model may repeat an id it gave before), and whether it waits for
        the whole turn."""
        used = self._used
        spec = self.tools.ctx.deps.spec
        journal = self.tools.journal
        cid = call.id
        if cid in used:
            turn = self.tools.turn
            cid = f"{cid}.{turn}"
            while cid in used:
                cid = f"{cid}.{turn}"
        waits = call.name in spec.structured_tools  # the turn answers it
        if journal and call.error is None:
            cid, _ = own_key(journal, cid, call.name, call.args)
            if cid not in journal:  # the same call as one a cut-off turn made?
                for key, entry in self._orphans:
                    if key not in used and same_call(entry, call.name, call.args):
                        cid = key
                        break
            if cid in journal:
                waits = True  # the tools step answers it from the journal
        used.add(cid)
        if cid != call.id:
            call = call.model_copy(update={"id": cid})
        if not waits and self._checks and spec.registry.accepts(call.name, call.args):
            asked = RequestedCall(call_id=call.id, tool_name=call.name, arguments=call.args)
            waits = any(check(asked) is not None for check in self._checks)
        return call, waits

    async def __aenter__(self) -> StreamedTurn:
        scope = self.tools.ctx.deps.scope
        if scope is not None:
            scope.round_index = self.tools.turn
        await self.tools.batch.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        ended = False
        try:
            suppressed = await self.tools.batch.__aexit__(exc_type, exc, tb)
            ended = exc is None
            return suppressed
        finally:
            self._keep(ended)

    def _keep(self, ended: bool) -> None:
        """The outcomes of the calls that started: kept for the tools step when the turn
        ended as it should; else (the model call failed, the run was cut off) written now,
        so every call has its one record (its answer too, when the reply is kept)."""
        tools = self.tools
        if not tools.calls:
            return
        state = tools.ctx.state
        outcomes = tools.batch.results
        if ended:
            ran = state._ran
            for call, outcome in zip(tools.calls, outcomes, strict=True):
                ran[call.id] = outcome
            return
        pending = {call.id for call in pending_tool_calls(state.messages)}
        for call, outcome in zip(tools.calls, outcomes, strict=True):
            if call.id in pending:  # the reply is kept: the call is answered
                state.messages.append(outcome.message)
            state.records.append(outcome.record)
