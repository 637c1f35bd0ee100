"""JSON-ready pictures of a paused execution, to resume it later, elsewhere."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._trace import TraceEntry

__all__ = ["FlowSnapshot", "Wait"]

SNAPSHOT_VERSION = 1


class Wait(BaseModel):
    """An external event a paused execution waits for, and what it asks."""

    model_config = ConfigDict(frozen=True)

    event: str
    """The external event that resumes the execution."""
    request: Any = None
    """What the execution asks of whoever answers (JSON-ready), e.g. a question for a human."""
    step: str | None = None
    """The step that paused."""


class FlowSnapshot(BaseModel):
    """Everything needed to resume a paused execution in a new execution object.

    ``snapshot.model_dump(mode="json")`` is plain JSON; ``FlowSnapshot.model_validate(data)``
    reads it back.
    """

    model_config = ConfigDict(frozen=True)

    version: int = SNAPSHOT_VERSION
    flow: str
    execution_id: str
    state: Any
    waiting: list[Wait] = Field(default_factory=list)
    trace: list[TraceEntry] = Field(default_factory=list)
    elapsed: float = 0.0
    """Seconds the execution had run before it paused (trace times continue from here)."""
