"""The status agent's tool calls through the runner: the tool execution node's, and those a
decision starts while the model still writes it (``streaming_dispatch``).

:class:`StatusCalls` is the one way the agent runs its calls: one
:class:`~toolloop.runner.ToolBatch` (at most ``concurrency`` at once, the run's limiter and
``tool_timeout``), each call through the kernel's journal under its call id (the intent
before the tool starts, the outcome after; a call whose outcome is unknown follows the
run's ``unknown_outcome``), each told with ``ToolCallStarted`` and ``ToolCallFinished``,
one record per call whatever happens. A call that cannot run (no such tool, arguments off
its schema, arguments that cannot be kept) ends as a failed record without running.

With ``streaming_dispatch`` and the model's own decision step
(:meth:`~toolloop.status_agent.LLMStatusSteps.decide_streaming`), the decision node opens
a :class:`StatusCalls` while the decision streams, and each tool call starts the moment it
is complete in the stream, unless it waits: a call that needs approval (it runs once a
human approves it, as without streaming dispatch), and a call the journal already holds (a
decision cut off and asked again after a crash: the tool execution node answers it from
the journal). The records of the calls that ran are in the state when the decision's
checkpoint is written, so the tool execution node never runs them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..checkpoints import JournalEntry
from ..flow import Context
from ..kernel import journaled_call, resumes, tell_call_finished, tell_call_started, tell_kept
from ..runner import CallSource, ToolBatch, ToolExecutionRecord, cancelled_record, json_safe
from ._state import StatusAgentState, StatusCallRecord, StatusToolCall

if TYPE_CHECKING:
    from ._nodes import StatusDeps

__all__ = ["Done", "StatusCalls"]

Done = tuple[ToolExecutionRecord, CallSource]
"""A call's record, and how it came about."""


def _cancelled(call: StatusToolCall) -> Done:
    return cancelled_record(call.command()), "interrupted"


class StatusCalls:
    """Calls of the run, through one batch (see the module docs): open :attr:`batch`
    (``async with``), :meth:`submit` calls or :meth:`run_here` them, then :meth:`record`
    what they came to in the state."""

    __slots__ = ("batch", "calls", "ctx", "deps", "journal", "positions", "results", "turn")

    def __init__(
        self,
        ctx: Context[StatusAgentState],
        deps: StatusDeps,
        journal: Mapping[str, JournalEntry],
        turn: int,
    ) -> None:
        self.ctx = ctx
        self.deps = deps
        self.journal = journal
        self.turn = turn
        self.calls: list[StatusToolCall] = []
        self.positions: list[int] = []
        self.results: list[Done] = []
        observed = ctx.observed
        self.batch: ToolBatch[StatusToolCall, Done] = ToolBatch(
            self._one,
            _cancelled,
            concurrency=deps.options.concurrency,
            on_start=self._started if observed else None,
            on_finish=self._finished if observed else None,
            results=self.results,
        )

    def submit(self, position: int, call: StatusToolCall) -> None:
        """Start ``call`` (at ``position`` of its decision) now, or when a slot is free."""
        self.calls.append(call)
        self.positions.append(position)
        self.batch.submit(call)

    def run_here(self, calls: Iterable[StatusToolCall]) -> Awaitable[None]:
        """Submit ``calls`` and work on them in the calling task."""
        items = list(calls)
        self.positions.extend(range(len(self.calls), len(self.calls) + len(items)))
        self.calls.extend(items)
        return self.batch.run_here(items)

    def record(self, state: StatusAgentState) -> None:
        """Write the record of every call that has one, in submission order (once the
        batch has ended, also when it was cut off)."""
        for call, (record, source) in zip(self.calls, self.results, strict=False):
            state.records.append(
                StatusCallRecord(call_id=call.call_id, record=record, source=source)
            )

    async def _one(self, call: StatusToolCall, started: Callable[[], None]) -> Done:
        deps = self.deps
        command = call.command()
        if deps.scope is not None:  # a tool's run context has its call's id
            deps.scope.name_call(command, call.call_id)
        if call.refused is not None:
            refused = f"tool {call.tool_name!r} was not run: {call.refused}"
            return ToolExecutionRecord.failed(command, refused), "ran"
        if not deps.executor.registry.accepts(call.tool_name, call.arguments):
            # a call that cannot run has no effect to journal: its failed record says why
            return await deps.executor.call(command, on_start=started), "ran"
        # a call whose outcome is unknown does not run again: a failed record that says
        # what cut it off (the reflection sees a failed call, or asks a human under "ask")
        options = deps.options
        done = await journaled_call(
            deps.checkpoint,
            self.journal,
            call.call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            call=lambda: deps.executor.call(command, on_start=started),
            dump=json_safe,
            load=ToolExecutionRecord.model_validate,
            failed=lambda error: ToolExecutionRecord.failed(command, error),
            unknown_outcome=options.unknown_outcome,
            idempotent_tools=options.idempotent_tools,
            resumes=resumes(deps.executor.registry, call.tool_name),
        )
        return done.outcome, done.source

    def _started(self, k: int, call: StatusToolCall) -> None:
        tell_call_started(self.ctx, self.turn, self.positions[k], call.call_id, call.command())

    def _finished(self, k: int, done: Done, took: float) -> None:
        call_id = self.calls[k].call_id
        record = done[0]
        tell_call_finished(self.ctx, self.turn, self.positions[k], call_id, record, took, done[1])
        if record.success:
            limit = self.deps.options.max_result_chars
            tell_kept(self.ctx, call_id, f"r:{call_id}", record.tool_name, record.result, limit)
