"""What a store keeps of a run: its checkpoint, and the journal of its tool calls.

A :class:`Checkpoint` is the last picture of a run: the flow snapshot (JSON-ready, resumable
with :meth:`toolloop.flow.Flow.restore`), the run's status, what it asks when paused, who is
running it, and free-form metadata. Its :attr:`~Checkpoint.revision` grows by one with every
write, so a writer that read revision ``n`` can insist on overwriting exactly that one.

The :class:`JournalEntry` list is kept apart from the checkpoint and only grows: an *intent*
is written before a tool call starts, its *outcome* right after it ends. A crash between the
end of a call and the next checkpoint leaves the outcome in the journal, so the call is never
run again.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..flow import FlowSnapshot
from ._errors import CorruptCheckpointError

__all__ = ["Checkpoint", "CheckpointStatus", "JournalEntry", "JournalState", "Owner", "RunToolCall"]

CheckpointStatus = Literal["running", "paused", "completed", "failed"]
"""``running``: a process is running it (or died doing so); ``paused``: it waits for an
external event (a human's decision); ``completed``; ``failed``: a step raised (the snapshot is
the last one written before, so it can be retried)."""

JournalState = Literal["started", "finished", "interrupted"]
"""``started``: the intent is written, no outcome yet; ``finished``: the outcome is written;
``interrupted``: the call started but was cut off before the outcome was written (its
process stopped, or the run's own end stopped it), and the run was recovered since (the call
may or may not have taken effect)."""


class Owner(BaseModel):
    """Who runs a run: a process on a host, and a token unique to one run call."""

    model_config = ConfigDict(frozen=True)

    host: str
    pid: int
    token: str

    @classmethod
    def here(cls) -> Owner:
        """An owner for a run call made now in this process."""
        return cls(host=socket.gethostname(), pid=os.getpid(), token=uuid.uuid4().hex)

    def process_alive(self) -> bool | None:
        """Whether the owning process still runs: ``None`` when it is on another host."""
        if self.host != socket.gethostname():
            return None
        if self.pid == os.getpid():
            return True
        if sys.platform == "win32":  # os.kill(pid, 0) would end the process there
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, under another user
            return True
        except OSError:
            return None
        return True


class RunToolCall(BaseModel):
    """A tool call of a run, as the journal and a human request name it."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    """Stable id of the call within its run (the journal's key)."""
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class JournalEntry(RunToolCall):
    """One tool call of a run: its intent, then its outcome."""

    state: JournalState = "started"
    outcome: Any = None
    """JSON data of what came of the call (e.g. a ``ToolExecutionRecord``); ``None`` while
    ``started``."""
    started_at: float = Field(default_factory=time.time)
    finished_at: float | None = None

    @classmethod
    def note(cls, call_id: str, tool_name: str, outcome: Any) -> JournalEntry:
        """A note: an entry finished as it is written, ``outcome`` its JSON data (what a
        run keeps of itself: the planner's answers, its model replies, a human's
        decisions; see :meth:`~toolloop.checkpoints.CheckpointedRun.record_note`)."""
        return cls(
            call_id=call_id,
            tool_name=tool_name,
            state="finished",
            outcome=outcome,
            finished_at=time.time(),
        )


class Checkpoint(BaseModel):
    """The last picture of one run, as a store keeps it.

    ``journal`` is filled by :meth:`CheckpointStore.get`; :meth:`CheckpointStore.put`
    ignores it (the journal grows only through ``record_intent`` / ``record_outcome``, so a
    checkpoint written from an older copy never loses an entry).
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    flow: str
    """The name of the flow whose snapshot this is."""
    status: CheckpointStatus
    snapshot: FlowSnapshot
    revision: int = 0
    """Set by the store: 1 for the first write, one more for each write after it."""
    request: Any = None
    """When paused: what the run asks (JSON), e.g. a :class:`HumanRequest`'s data."""
    resume_event: str | None = None
    """Set while a claimed run is delivering an event to its snapshot: recovering the run
    after a crash delivers it again."""
    resume_value: Any = None
    owner: Owner | None = None
    """Who runs it (``None`` while paused or done)."""
    result: Any = None
    """When completed: the run's result (JSON)."""
    error: str | None = None
    """When failed: what went wrong."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    journal: list[JournalEntry] = Field(default_factory=list)

    def entry(self, call_id: str) -> JournalEntry | None:
        """The journal entry of ``call_id``, if any."""
        for entry in self.journal:
            if entry.call_id == call_id:
                return entry
        return None

    def dump_json(self) -> str:
        """The checkpoint as JSON text, without its journal (what a store writes)."""
        return self.model_dump_json(exclude={"journal"})

    @classmethod
    def load_json(
        cls, text: str | bytes, *, run_id: str, journal: list[JournalEntry] | None = None
    ) -> Checkpoint:
        """Read :meth:`dump_json` text back.

        Raises:
            CorruptCheckpointError: the text is not a checkpoint of ``run_id``.
        """
        try:
            checkpoint = cls.model_validate_json(text)
        except ValidationError as exc:
            raise CorruptCheckpointError(
                f"the checkpoint of run {run_id!r} cannot be read ({exc.error_count()} "
                f"problems; first: {_first_error(exc)}); it was left as it is: delete it or "
                "restore it from a backup"
            ) from exc
        if checkpoint.run_id != run_id:
            raise CorruptCheckpointError(
                f"the checkpoint stored for run {run_id!r} is the one of run "
                f"{checkpoint.run_id!r}; it was left as it is"
            )
        if journal:
            checkpoint = checkpoint.model_copy(update={"journal": journal})
        return checkpoint


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error.get("loc", ())) or "the document"
    return f"{where}: {error.get('msg', '')}"
