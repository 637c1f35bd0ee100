"""What ran: one frozen entry per step, router or end an execution went through."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["Outcome", "RawEntry", "TraceEntry", "materialize"]

Outcome = Literal["ok", "failed", "timeout", "cancelled", "routed", "ended"]


class TraceEntry(BaseModel):
    """One step (or router, or end) of an execution.

    Times are seconds since the execution started, so a trace serializes and compares well.
    """

    model_config = ConfigDict(frozen=True)

    step: str
    """The step's name (a router is named after the step it follows, e.g. ``plan?``)."""
    event: str
    """What triggered it: ``start``, the name of the step it follows, or an event name."""
    started: float
    ended: float
    outcome: Outcome
    detail: str | None = None
    """For a router, the route taken; for a failure, the error."""

    @property
    def duration(self) -> float:
        """Seconds the step took."""
        return self.ended - self.started


RawEntry = tuple[str, str, float, float, Outcome, "str | None"]
"""What the engine notes on its hot path: (step, event, started, ended, outcome, detail)."""


def materialize(raw: list[RawEntry]) -> list[TraceEntry]:
    """Trace entries from the engine's notes (made only when someone reads the trace)."""
    return [
        TraceEntry.model_construct(
            step=step, event=event, started=started, ended=ended, outcome=outcome, detail=detail
        )
        for step, event, started, ended, outcome, detail in raw
    ]
