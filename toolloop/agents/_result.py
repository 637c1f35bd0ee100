"""What a run of the middleware agent hands back: the kernel's :class:`RunResult`, with the
agent's state, its snapshot and where it paused."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError
from pydantic_core import to_json

from ..checkpoints import HumanRequest
from ..flow import Execution, FlowSnapshot, TraceEntry
from ..kernel import Ended, RunResult
from ..runner import ToolExecutionRecord
from ._messages import AssistantMessage, Message
from ._state import AgentState, Todo

__all__ = ["AgentResult", "result_of"]


class AgentResult(RunResult):
    """How a run ended (``completed``) or stopped to wait for an answer (``paused``).

    The kernel's fields (:class:`~toolloop.kernel.RunResult`): ``run_id`` (the same across
    pauses, its key in a store), ``status``, ``stop_reason``, ``usage`` (across pauses,
    resumes and recoveries), ``request`` (when paused for a human, the
    :class:`~toolloop.checkpoints.HumanRequest`), ``text`` (the last answer; a structured
    answer's JSON), ``structured_response`` (with a ``response_format``), ``records`` (one
    per tool call, the tool's value as it returned it) and ``paused``.

    ``stop_reason`` is one of: ``answered`` (the model answered without a tool call),
    ``structured_response`` (the answer fits the ``response_format``), ``tools`` (it ended
    after its tools: ``return_direct``, or a tool's jump), ``middleware`` (a hook ended
    it), ``max_turns`` (it made ``max_turns`` model calls), ``usage_limit`` (its budget,
    with ``on_usage_limit="finish"``), ``timeout`` (its ``timeout``, with
    ``on_timeout="finish"``), ``refusal`` (the model refused: see :attr:`refusal`) or
    ``cut_off`` (the token limit ended its last reply mid-way: :attr:`text` is incomplete;
    raise ``max_tokens``); ``None`` while paused.
    """

    state: AgentState
    """The final (or paused) state: messages, todos, structured response, values, records."""
    snapshot: FlowSnapshot | None = None
    """When paused, everything needed to resume the run, here or in another process
    (``snapshot.model_dump(mode="json")`` is plain JSON, for any store)."""
    paused_by: str | None = None
    """When paused, the name of the middleware that paused (``needs_approval`` for the
    agent's own approval)."""
    pause_request: Any = None
    """When paused, what the middleware asks, as JSON data (a custom middleware's
    :class:`~toolloop.agents.Pause` data; for a human, the :attr:`request`'s)."""
    trace: list[TraceEntry] = Field(default_factory=list)
    """The steps that ran, in order."""

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """One record per tool call of the run, in the order the calls were answered."""
        return self.state.records

    @property
    def messages(self) -> list[Message]:
        return self.state.messages

    @property
    def todos(self) -> list[Todo]:
        return self.state.todos

    @property
    def refusal(self) -> str | None:
        """What the model said when its last reply refused to answer; ``None`` otherwise."""
        for message in reversed(self.state.messages):
            if isinstance(message, AssistantMessage):
                return message.refusal
        return None

    def __repr__(self) -> str:
        return (
            f"AgentResult(run_id={self.run_id!r}, status={self.status!r}, "
            f"stop_reason={self.stop_reason!r}, messages={len(self.state.messages)}, "
            f"records={len(self.state.records)})"
        )


def _text(state: AgentState) -> str | None:
    """What the model answered last (``None`` when its last reply said nothing: only tool
    calls, or no reply yet); a structured answer's JSON."""
    if state.structured_response is not None:
        return to_json(state.structured_response).decode()
    for message in reversed(state.messages):
        if isinstance(message, AssistantMessage):
            return message.content or None
    return None


def _request(asked: Any) -> HumanRequest | None:
    if not isinstance(asked, dict) or "kind" not in asked:
        return None
    try:
        return HumanRequest.model_validate(asked)
    except ValidationError:
        return None  # a middleware of its own that asks something else


def result_of(ended: Ended[AgentState], execution: Execution[AgentState]) -> AgentResult:
    """The result of one session of a run."""
    state = ended.state
    flow = ended.flow
    where = state.paused_at if ended.status == "paused" else None
    asked = where.get("request") if where is not None else None
    return AgentResult.model_construct(  # of checked values: no validation on the hot path
        run_id=execution.id,
        status=ended.status,
        stop_reason=ended.stop_reason,
        usage=state.usage,
        request=_request(asked),
        text=_text(state),
        structured_response=state.structured_response,
        state=state,
        snapshot=flow.snapshot if flow is not None else None,
        paused_by=where.get("by") if where is not None else None,
        pause_request=asked,
        trace=flow.trace if flow is not None else execution.trace,
    )
