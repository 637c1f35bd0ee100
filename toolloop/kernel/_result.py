"""What every run hands back: one base, with the same fields in every product."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..checkpoints import HumanRequest
from ..models import Usage
from ..runner import ToolExecutionRecord
from ._vocabulary import StopReason

__all__ = ["RunResult", "RunStatus"]

RunStatus = Literal["completed", "paused"]


class RunResult(BaseModel):
    """How a run ended (``completed``) or stopped to wait for an answer (``paused``).

    The loop's :class:`~toolloop.loop.LoopResult`, the middleware agent's
    :class:`~toolloop.agents.AgentResult` and the status agent's
    :class:`~toolloop.status_agent.StatusAgentResult` are this, with what their product adds.
    Code that only needs how a run ended, what its tools did, what it cost and what it
    answered can take any of them.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str = ""
    """The run's id: the same across pauses and resumes, its key in a checkpoint store."""
    status: RunStatus = "completed"
    stop_reason: StopReason | None = None
    """Why a completed run stopped (``None`` while paused)."""
    usage: Usage = Field(default_factory=Usage)
    """The run's model calls, summed across pauses and resumes: requests and tokens (a call
    whose usage the server did not report counts in ``usage.unreported_requests``)."""
    request: HumanRequest | None = None
    """When paused for a human: what the run asks (which calls, which arguments, why);
    answer it with the product's ``resume`` and a decision."""
    text: str | None = None
    """The run's final text: the loop's final answer (when it asked for one; else what its
    planner wrote beside its last plan), the middleware agent's last answer, the status
    agent's answer; ``None`` when there is none."""
    structured_response: Any = None
    """The structured final answer, when the run was given a ``response_format`` (the loop:
    ``answer_with=AnswerWith(..., response_format=...)``) and answered: the validated value
    (a model instance for a pydantic schema), ``text`` its JSON; ``None`` otherwise. Read
    back from a store, it is a model instance again when the call that reads it gives the
    same ``response_format``."""

    @property
    def paused(self) -> bool:
        """``status == "paused"``."""
        return self.status == "paused"

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """One record per tool call the run made, in order."""
        return []
