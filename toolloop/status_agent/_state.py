"""The status-routed agent's state: one pydantic model, checkpointed whole.

Every node sets :attr:`StatusAgentState.status` (one of :data:`AgentStatus`) and the routers
read only that; :attr:`~StatusAgentState.node` names the node that set it, so a run
recovered from a checkpoint continues exactly where it was.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..checkpoints import DecisionKind, HumanAnswer, HumanRequest
from ..kernel import StopReason
from ..models import Usage
from ..runner import ToolCommand, ToolExecutionRecord

__all__ = [
    "AgentStatus",
    "NodeName",
    "Note",
    "StatusAgentState",
    "StatusCallRecord",
    "StatusToolCall",
    "Transition",
]

AgentStatus = Literal[
    "started",
    "analysis_completed",
    # planning
    "conversation_ready",
    "decision_ready",
    # conversation
    "conversation_completed",
    "conversation_error",
    # decision (and human intervention)
    "waiting_for_human",
    "ready_for_execution",
    "decision_completed",
    # tool execution
    "tools_completed",
    "tool_execution_failed",
    # reflection (and human intervention)
    "needs_human",
    "replan",
    "continue",
    "reflection_completed",
    # human intervention
    "plan_modified",
    "human_stopped",
]
"""Every status a node sets. By node:

- analysis: ``analysis_completed``;
- planning: ``conversation_ready`` (empty plan) | ``decision_ready``;
- conversation: ``conversation_completed`` | ``conversation_error``;
- decision: ``waiting_for_human`` | ``ready_for_execution`` (calls pending) |
  ``decision_completed`` (nothing to run);
- tool execution: ``tools_completed`` | ``tool_execution_failed``;
- reflection: ``needs_human`` (errors or repeated calls detected, or the step asks) |
  ``replan`` | ``continue`` | ``reflection_completed`` | ``conversation_ready`` (finished,
  with a ``response_format``: the conversation writes the structured answer);
- human intervention: ``waiting_for_human`` (no decision yet) | ``ready_for_execution``
  (approved) | ``plan_modified`` (edited or rejected) | ``continue`` | ``replan`` |
  ``human_stopped``.
"""

NodeName = Literal[
    "start",
    "analysis",
    "planning",
    "conversation",
    "decision",
    "tool_execution",
    "reflection",
    "human_intervention",
]


class StatusToolCall(BaseModel):
    """A tool call the decision step asked for, with a call id stable for the whole run."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    purpose: str = ""
    approved: bool = False
    """Cleared to run (no approval needed, or a human approved it)."""
    why: str = ""
    """Why it waits for a human, when it does."""
    allowed: list[DecisionKind] | None = None
    """The decisions a human may take on it, when its approval allows fewer than all."""
    refused: str | None = None
    """Why it cannot run (its arguments could not be kept as they came: they are left out);
    it ends as a failed record that says so."""

    def command(self) -> ToolCommand:
        return ToolCommand(
            purpose=self.purpose or f"call {self.tool_name}",
            tool_name=self.tool_name,
            tool_kwargs=self.arguments,
        )


class StatusCallRecord(BaseModel):
    """What came of one call: the tool's record and how it came about."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    record: ToolExecutionRecord
    source: Literal["ran", "replayed", "interrupted", "rejected"] = "ran"
    """``ran`` now; ``replayed`` from the journal after a crash (the tool did not run again);
    ``interrupted`` (cut off before its outcome was recorded, by a crash or the run's own
    end: it may or may not have taken effect; not run again, its record says what cut it
    off); ``rejected`` by a human (never ran)."""


class Note(BaseModel):
    """Words for the model: a human's message, or a reflection's note."""

    model_config = ConfigDict(frozen=True)

    source: Literal["human", "reflection"]
    text: str


class Transition(BaseModel):
    model_config = ConfigDict(frozen=True)

    node: NodeName
    status: AgentStatus


class StatusAgentState(BaseModel):
    """Everything a run of the status-routed agent knows; checkpointed after every node."""

    run_id: str = ""
    user_input: str = ""
    status: AgentStatus = "started"
    node: NodeName = "start"
    """The node that set ``status``."""
    analysis: str | None = None
    plan: list[str] = Field(default_factory=list)
    pending_calls: list[StatusToolCall] = Field(default_factory=list)
    """Calls decided, not yet run."""
    records: list[StatusCallRecord] = Field(default_factory=list)
    """Every call's record, in the order the calls were decided (with streaming dispatch,
    the calls that ran while their decision streamed come before its others)."""
    unreflected: list[str] = Field(default_factory=list)
    """Ids of the calls run since the last reflection."""
    notes: list[Note] = Field(default_factory=list)
    question: HumanRequest | None = None
    """What the human is (about to be) asked."""
    decisions: list[HumanAnswer] = Field(default_factory=list)
    """The human's answers, in order (a decision, or one per call)."""
    answer: str | None = None
    """The run's answer so far (the result's ``text``; with a ``response_format``, the
    structured answer's JSON)."""
    structured_response: Any = None
    """The structured answer (with a ``response_format``): a model instance for a pydantic
    schema (its JSON data once read back from a checkpoint)."""
    error: str | None = None
    """The last error a step reported (e.g. the conversation's)."""
    stop_reason: StopReason | None = None
    """Why the run stopped, once it did (``answered``, ``stopped``, ``max_turns``,
    ``guard``, ``timeout``, ``usage_limit``)."""
    stop_detail: str | None = None
    """What stopped it, in words: the loop guard's explanation (the cycle, the last steps),
    the human's words with ``Stop``."""
    call_seq: int = 0
    steps: int = 0
    """Nodes entered so far (the turns ``max_turns`` bounds, and the loop guard's count)."""
    visits: dict[str, int] = Field(default_factory=dict)
    """Entries per node since the last progress (the loop guard's memory)."""
    history: list[Transition] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    """The run's model usage so far (across pauses and resumes)."""

    def new_call_id(self) -> str:
        """The next call id of the run: ``call-1``, ``call-2``, ..."""
        self.call_seq += 1
        return f"call-{self.call_seq}"

    def record_of(self, call_id: str) -> StatusCallRecord | None:
        for record in self.records:
            if record.call_id == call_id:
                return record
        return None
