"""What every product's run hands back: one family of result shapes."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from ._records import ToolExecutionRecord

__all__ = ["RunResult"]


@runtime_checkable
class RunResult(Protocol):
    """The fields every run's result has: the loop's
    :class:`~toolloop.loop.LoopResult`, the middleware agent's
    :class:`~toolloop.agents.AgentResult` and the status agent's
    :class:`~toolloop.status_agent.StatusAgentResult`. Code that only needs how a run
    ended and what its tools did can take any of them.
    """

    @property
    def run_id(self) -> str:
        """The run's id (the same across pauses; its key in a checkpoint store)."""
        ...

    @property
    def status(self) -> Literal["completed", "paused"]:
        """Whether the run ended or waits for an answer."""
        ...

    @property
    def paused(self) -> bool:
        """``status == "paused"``."""
        ...

    @property
    def stop_reason(self) -> str | None:
        """Why a completed run stopped (``None`` while paused)."""
        ...

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """One record per tool call the run made, in order."""
        ...
