"""The one error hierarchy of toolloop.

Definition mistakes (how something was built) are kept apart from failures while running::

    ToolloopError
    ├── DefinitionError                 something was built wrong; fix the code
    │   ├── FlowDefinitionError         a flow that cannot run as defined
    │   ├── ToolDefinitionError         a tool whose schema or function is unusable
    │   └── ResponseFormatError         a response_format that is no usable schema
    └── RunError                        something went wrong while running
        ├── ExecutionError              a flow execution ended badly (carries trace and state)
        │   ├── StepFailedError         a step raised; the cause is chained
        │   ├── ExecutionTimeoutError   the whole execution or one step ran out of time
        │   ├── ExecutionStalledError   nothing left to run, but no end was reached
        │   ├── PlannerError            the planner raised or timed out (keeps done_plans)
        │   ├── AnswerError             the final answer (answer_with=) failed (keeps done_plans)
        │   ├── StructuredOutputError   a structured answer failed its schema after every retry
        │   └── UsageLimitError         a run's usage passed its UsageLimits (keeps done_plans)
        ├── ResumeError                 a snapshot or an event that does not fit a paused run
        ├── ToolCallError               one tool call failed (becomes a record's error)
        │   ├── ToolNotFoundError
        │   ├── ToolArgumentsError      kwargs that fail the tool's schema; the tool did not run
        │   ├── ToolTimeoutError
        │   └── RateLimitedError        a tool's service refused a call for its rate (retry_after)
        ├── ModelCallError              the model could not be reached, or answered an error
        └── ModelOutputError            the model's output is unusable (malformed, truncated, empty)
            └── ModelRefusalError       the model refused to answer (its refusal is kept)

Subpackages add their own, under these: the agents' (``toolloop.agents``:
``AgentDefinitionError`` under ``DefinitionError``; ``AgentModelError``,
``ModelCallLimitError``, ``ToolCallLimitError`` under ``ExecutionError``), the
checkpoints' (``toolloop.checkpoints``: ``CheckpointError`` and its
``CheckpointConflictError``, ``CorruptCheckpointError`` under ``RunError``;
``RunNotFoundError``, ``RunNotResumableError``, ``DecisionError`` under ``ResumeError``),
``toolloop.tracing.TraceError`` for an unreadable trace file, MCP tools'
(``toolloop.mcp``: ``MCPToolError`` under ``ToolCallError``, ``MCPConnectionError`` under
``RunError``), and a replay's (``toolloop.testing``: ``ReplayError`` under ``RunError``,
and its ``ReplayMismatch``, also an ``AssertionError``).

Every message says what was expected, what came, and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flow import TraceEntry

__all__ = [
    "AnswerError",
    "DefinitionError",
    "ExecutionError",
    "ExecutionStalledError",
    "ExecutionTimeoutError",
    "FlowDefinitionError",
    "ModelCallError",
    "ModelOutputError",
    "ModelRefusalError",
    "PlannerError",
    "RateLimitedError",
    "ResponseFormatError",
    "ResumeError",
    "RunError",
    "StepFailedError",
    "StructuredOutputError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolDefinitionError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "ToolloopError",
    "UsageLimitError",
]


class ToolloopError(Exception):
    """Base of every error toolloop raises on purpose."""


class DefinitionError(ToolloopError):
    """Something was built wrong (a flow, a tool): a bug in the calling code."""


class FlowDefinitionError(DefinitionError):
    """A flow definition that cannot run: an unhandled event, an unreachable step, no end."""


class ToolDefinitionError(DefinitionError):
    """A tool whose function or schema cannot be used."""


class ResponseFormatError(DefinitionError):
    """A ``response_format`` that cannot be used: no pydantic model class nor JSON schema, a
    JSON schema that is not valid, or (for ``ToolStrategy``) the schema of no object."""


class RunError(ToolloopError):
    """A failure while running."""


class ExecutionError(RunError):
    """A flow execution ended badly.

    Attributes:
        trace: what ran before the failure, in order.
        state: the execution's state at the moment it ended (still readable).
    """

    def __init__(
        self, message: str, *, trace: Sequence[TraceEntry] = (), state: Any = None
    ) -> None:
        super().__init__(message)
        self.trace: list[TraceEntry] = list(trace)
        self.state: Any = state


class StepFailedError(ExecutionError):
    """A step raised. ``step`` names it; the original exception is the ``__cause__``."""

    def __init__(
        self,
        message: str,
        *,
        step: str,
        trace: Sequence[TraceEntry] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message, trace=trace, state=state)
        self.step = step


class ExecutionTimeoutError(ExecutionError, TimeoutError):
    """The whole execution, or one step (``step`` is then set), ran out of time."""

    def __init__(
        self,
        message: str,
        *,
        timeout: float,
        step: str | None = None,
        trace: Sequence[TraceEntry] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message, trace=trace, state=state)
        self.timeout = timeout
        self.step = step


class ExecutionStalledError(ExecutionError):
    """Every step finished but none reached the end, and nothing is awaited."""


class _KeepsRecords(ExecutionError):
    """A run's error that keeps every record the run made, ``done_plans``."""

    def __init__(
        self,
        message: str,
        *,
        done_plans: Sequence[Any] = (),
        trace: Sequence[TraceEntry] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message, trace=trace, state=state)
        self.done_plans: list[Any] = list(done_plans)


class PlannerError(_KeepsRecords):
    """The planner raised or timed out. ``done_plans`` keeps every record made so far;
    ``round_index`` is the round whose planner call failed (when known)."""

    def __init__(
        self,
        message: str,
        *,
        done_plans: Sequence[Any] = (),
        round_index: int | None = None,
        trace: Sequence[TraceEntry] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message, done_plans=done_plans, trace=trace, state=state)
        self.round_index = round_index


class AnswerError(_KeepsRecords):
    """The final answer a run makes once its loop stops (``answer_with=``) failed: its model
    call raised, refused, or timed out (``model_timeout``). The original exception is the
    ``__cause__``; ``done_plans`` keeps every record the run made."""


class UsageLimitError(ExecutionError):
    """A run's model usage passed its :class:`~toolloop.models.UsageLimits`: before a model
    call (none was made) or while a stream ran (it was closed).

    Attributes:
        usage: the run's usage when the limit was found passed; when a stream was closed,
            with the reply in progress as the check counted it (see ``estimated``).
        limit: which limit: ``"max_requests"``, ``"max_input_tokens"``,
            ``"max_output_tokens"`` or ``"max_total_tokens"``.
        estimated: ``usage`` counts the reply in progress by an estimate (a token a
            delta: the server had not reported its count when the stream was closed); its
            request is then one of ``usage.unreported_requests``.
        done_plans: the records made so far (set by the loop).
    """

    def __init__(
        self,
        message: str,
        *,
        usage: Any = None,
        limit: str = "",
        estimated: bool = False,
        done_plans: Sequence[Any] = (),
        trace: Sequence[TraceEntry] = (),
        state: Any = None,
    ) -> None:
        super().__init__(message, trace=trace, state=state)
        self.usage: Any = usage
        self.limit = limit
        self.estimated = estimated
        self.done_plans: list[Any] = list(done_plans)


class ResumeError(RunError):
    """A snapshot or an event that does not fit a paused execution."""


class ToolCallError(RunError):
    """One tool call failed. Inside the loop it becomes the error of its record."""


class ToolNotFoundError(ToolCallError):
    """The command names a tool that is not registered."""


class ToolArgumentsError(ToolCallError):
    """The arguments fail the tool's JSON schema; the tool was not run."""


class ToolTimeoutError(ToolCallError, TimeoutError):
    """A tool call ran out of time and was cancelled."""


class RateLimitedError(ToolCallError):
    """A tool's service refused the call for its rate: raise it from a tool (an HTTP 429 or
    503 that the tool's client raised is read the same way).

    A :class:`~toolloop.ratelimit.RateLimit` given to the tool backs off when a call raises
    it, and admits no call before ``retry_after`` seconds; a
    :class:`~toolloop.ratelimit.RetryPolicy` (for idempotent tools) tries the call again, not
    before then.

    Attributes:
        retry_after: seconds the service asked to wait (``None``: it did not say).
        status: the HTTP status it answered (429 unless told otherwise).
    """

    def __init__(
        self,
        message: str = "the service refused the call for its rate",
        *,
        retry_after: float | None = None,
        status: int = 429,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ModelCallError(RunError):
    """The model could not be reached, or its server answered with an error (after the
    client's own retries, or toolloop's: see :class:`~toolloop.ratelimit.RetryPolicy`).
    ``status`` is the HTTP status when there was one, ``request_id`` the server's id of the
    request when it gave one (for its support), ``retry_after`` the seconds the server asked
    to wait before the next request (its ``Retry-After``), when it said. The message is
    scrubbed of the caller's secrets, and so is the whole chain: the client's own exception,
    which keeps what the server echoed (a key, in a 401's body), is never chained."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.request_id = request_id
        self.retry_after = retry_after


class ModelOutputError(RunError):
    """The model's output cannot be used: malformed or truncated JSON, a broken schema."""


class ModelRefusalError(ModelOutputError):
    """The model refused to answer (OpenAI's ``refusal``, e.g. under strict structured
    output): ``refusal`` is what it said."""

    def __init__(self, message: str, *, refusal: str) -> None:
        super().__init__(message)
        self.refusal = refusal


class StructuredOutputError(_KeepsRecords, ModelOutputError):
    """A structured answer (``response_format=``) still failed its schema after every retry:
    the message says what was expected and what came the last time. ``state`` is the run's
    (its records, its usage); the loop also keeps its records in ``done_plans``."""
