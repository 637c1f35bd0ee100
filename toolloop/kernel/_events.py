"""The events every run publishes, whatever the product: one class per fact.

- :class:`ModelCallStarted` / :class:`ModelCallFinished`: each request to a model the run
  makes (the loop's planners, the middleware agent's turns, the status agent's steps, the
  final answer), told at the one place every model call passes;
- :class:`RetryScheduled`: a model call or a tool call failed and will be tried again (its
  :class:`~toolloop.ratelimit.RetryPolicy`), after a wait;
- :class:`RateLimitChanged`: a :class:`~toolloop.ratelimit.RateLimit` backed off, held
  its calls for a ``Retry-After``, or probed up, on a call of the run;
- :class:`CheckpointSaved`: a durable run wrote a checkpoint;
- :class:`RunFinished`: the run completed, and why (a paused run ends with the engine's
  :class:`~toolloop.flow.ExecutionPaused`, whose request is what it asks).

The runner's :class:`~toolloop.runner.ToolCallStarted`, :class:`~toolloop.runner.ToolCallFinished`
and :class:`~toolloop.runner.ToolProgress` tell the tool calls, the same in every product.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..flow import Context, FlowEvent
from ..models import Usage
from ..ratelimit import ChangeReason, RateLimitState, RetryTarget
from ..runner import (
    CallSource,
    ToolCallFinished,
    ToolCallStarted,
    ToolCommand,
    ToolExecutionRecord,
)
from ._vocabulary import StopReason

__all__ = [
    "CheckpointSaved",
    "ModelCallFinished",
    "ModelCallStarted",
    "RateLimitChanged",
    "RetryScheduled",
    "RunEvent",
    "RunFinished",
    "tell",
    "tell_call_finished",
    "tell_call_started",
]


class RunEvent(FlowEvent):
    """Base of the events every run publishes."""


class ModelCallStarted(RunEvent):
    """The run is about to call a model (its budget allowed it)."""

    kind: Literal["model_call_started"] = "model_call_started"
    call_index: int
    """0 for the run's first model call (counted across pauses and resumes)."""
    attempt: int = 1
    """The try of the call (1 for the first; more when ``model_retry`` tries it again)."""


class ModelCallFinished(RunEvent):
    """A model call ended: read to its end, closed early (the short-circuit, a budget), or
    failed. What the model said is here as it was read."""

    kind: Literal["model_call_finished"] = "model_call_finished"
    call_index: int
    attempt: int = 1
    """The try of the call (1 for the first; more when ``model_retry`` tries it again)."""
    duration: float
    """Seconds from the request to the end of the reply."""
    usage: Usage | None = None
    """This call's usage (unknown counts when the server reported none)."""
    text: str = ""
    reasoning: str | None = None
    reasoning_field: str | None = None
    """Where the reasoning came from (``reasoning_content``, ``reasoning``, ``thinking``,
    ``think_tags``): how it goes back to the model in the next request."""
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """``{"id", "name", "arguments"}`` of each tool call of the reply, arguments as text."""
    finish_reason: str | None = None
    closed_early: bool = False
    """The reader left before the reply's end (the short-circuit, a token budget)."""
    error: str | None = None
    """What made the call fail, when it did."""
    request: dict[str, Any] | None = None
    """What matters of the request the call answered
    (:meth:`ChatRequest.summary <toolloop.models.ChatRequest.summary>`: its messages' count
    and digest, the tools offered, the structured output, the settings), so that a replay
    can tell whether the code still asks the same."""


class RetryScheduled(RunEvent):
    """A call failed and will be tried again (a model call, or a call of one of the run's
    ``idempotent_tools``), after ``wait`` seconds."""

    kind: Literal["retry_scheduled"] = "retry_scheduled"
    target: RetryTarget
    """``"model"`` or ``"tool"``."""
    tool_name: str = ""
    """The tool's name (``""`` for a model call)."""
    call_index: int | None = None
    """The model call's index (as in ``ModelCallStarted``)."""
    attempt: int
    """The try that failed (1 for the first)."""
    wait: float
    """Seconds before the next try (which may then wait for its limiter too)."""
    error: str
    """What the failed try raised."""
    status: int | None = None
    """The HTTP status it answered, if any."""
    retry_after: float | None = None
    """The seconds the server asked to wait (its ``Retry-After``), if it said."""


class RateLimitChanged(RateLimitState, RunEvent):
    """A :class:`~toolloop.ratelimit.RateLimit` changed on a call of this run: it backed
    off (a refusal for the rate), held every call for a ``Retry-After``, or probed up. A
    limiter shared by many runs is told to the run whose call changed it. Its fields are
    the limiter's :class:`~toolloop.ratelimit.RateLimitState` after the change."""

    kind: Literal["rate_limit_changed"] = "rate_limit_changed"
    reason: ChangeReason
    """Why it changed."""


class CheckpointSaved(RunEvent):
    """A durable run wrote a checkpoint: after a step (the agents) or a round (the loop),
    and, in every product, as it pauses for a human (the last event before its
    ``ExecutionPaused``)."""

    kind: Literal["checkpoint_saved"] = "checkpoint_saved"
    step: str
    """Where the run was: the step or round the checkpoint follows."""


class RunFinished(RunEvent):
    """The run completed."""

    kind: Literal["run_finished"] = "run_finished"
    stop_reason: StopReason
    records: int
    """Tool calls the run made (one record each)."""
    usage: Usage | None = None
    """The run's model calls, summed (across pauses and resumes); ``None``: none counted."""
    turns: int = 0
    """The turns it took: the loop's rounds, the agent's model calls, the status agent's
    steps."""


def tell(ctx: Context[Any, Any], kind: type[FlowEvent], **fields: Any) -> None:
    """Publish an event of ``kind`` from a step, with its run's id and the time filled in,
    when anyone observes the run (else nothing is built)."""
    if ctx.observed:
        ctx.publish(kind(execution_id=ctx.execution_id, at=ctx.elapsed(), **fields))


def tell_call_started(
    ctx: Context[Any, Any], turn: int, index: int, call_id: str, command: ToolCommand
) -> None:
    """Tell that the ``index``-th call of turn ``turn`` started (the runner's
    :class:`~toolloop.runner.ToolCallStarted`, the same in every product)."""
    tell(ctx, ToolCallStarted, round_index=turn, index=index, call_id=call_id, command=command)


def tell_call_finished(
    ctx: Context[Any, Any],
    turn: int,
    index: int,
    call_id: str,
    record: ToolExecutionRecord,
    duration: float,
    source: CallSource = "ran",
) -> None:
    """Tell the record of the ``index``-th call of turn ``turn`` (the runner's
    :class:`~toolloop.runner.ToolCallFinished`), and where it came from."""
    tell(
        ctx,
        ToolCallFinished,
        round_index=turn,
        index=index,
        call_id=call_id,
        record=record,
        duration=duration,
        source=source,
    )
