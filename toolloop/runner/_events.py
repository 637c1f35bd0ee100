"""The tool-call events: one vocabulary for the loop and both agents.

Every tool call, in any product, is told by the same two events, with the same fields:
:class:`ToolCallStarted` when the call starts, :class:`ToolCallFinished` when it has its
record (a cancelled call too). They are published on the run's event stream beside the
product's own events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from ..flow import Context, FlowEvent
from ..tools import Progress
from ._records import ToolCommand, ToolExecutionRecord

__all__ = [
    "CallSource",
    "ToolCallEvent",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolProgress",
    "progress_reporter",
]

CallSource = Literal["ran", "replayed", "interrupted"]
"""How a call's record came about: the tool ran now; its outcome was read from a journal (a
resumed run does not run it again); it was interrupted before (not run again)."""


class ToolCallEvent(FlowEvent):
    """Base of the two tool-call events.

    Attributes:
        round_index: the loop's round; the middleware agent's model turn whose reply asked
            for the call; the status agent's tool-execution step.
        index: the call's place among the calls of that round or turn.
        call_id: the call's id: ``"<round>.<index>"`` in the loop, the model's tool-call id
            in the middleware agent, the journal's call id in the status agent.
    """

    round_index: int
    index: int
    call_id: str


class ToolCallStarted(ToolCallEvent):
    """A tool call starts (what was asked: ``command.tool_name``, ``command.tool_kwargs``)."""

    kind: Literal["tool_call_started"] = "tool_call_started"
    command: ToolCommand


class ToolCallFinished(ToolCallEvent):
    """A tool call has its record (``record.success``, ``record.result``, ``record.error``)."""

    kind: Literal["tool_call_finished"] = "tool_call_finished"
    record: ToolExecutionRecord
    duration: float
    """Seconds from the call's start to its record (0 when it never started)."""
    source: CallSource = "ran"


class ToolProgress(FlowEvent):
    """A tool told how its call is going (:meth:`toolloop.tools.RunContext.report`)."""

    kind: Literal["tool_progress"] = "tool_progress"
    round_index: int
    tool_name: str
    purpose: str
    """The command's purpose (the tool's name in the middleware agent)."""
    call_id: str
    """The id of the call that reports, as :class:`ToolCallStarted` tells it (the same in
    every product)."""
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


def progress_reporter(ctx: Context[Any]) -> Callable[[Progress], None]:
    """What a run hands its tools' :class:`~toolloop.tools.RunContext` to report with: each
    report becomes a :class:`ToolProgress` event of the run (when anyone observes it)."""

    def report(progress: Progress) -> None:
        if ctx.observed:
            ctx.publish(
                ToolProgress(
                    execution_id=ctx.execution_id,
                    at=ctx.elapsed(),
                    round_index=progress.round_index,
                    tool_name=progress.tool_name,
                    purpose=progress.purpose,
                    call_id=progress.call_id,
                    message=progress.message,
                    data=progress.data,
                )
            )

    return report
