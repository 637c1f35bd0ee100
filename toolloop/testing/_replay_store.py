"""A durable run read back from its store, as a :class:`Recording`: what ``replay`` plays.

Every durable run (any product, any store) keeps in its journal the events a replay reads
(its model replies whole, its tool calls, its end: see
:data:`~toolloop.kernel.REPLAY_NOTE`), beside the journaled outcomes of its tool calls,
across its pauses and resumes. :class:`StoredRun` names such a run;
:meth:`StoredRun.read` makes the recording of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..checkpoints import CheckpointStore, JournalEntry
from ..flow import FlowEvent
from ..kernel import REPLAY_NOTE
from ..runner import ToolCallFinished, ToolCallStarted
from ..tracing import TraceError, load_event, redact
from ._recording import Recording
from ._replay_diff import ReplayError

__all__ = ["StoredRun"]


@dataclass(frozen=True)
class StoredRun:
    """A durable run in a store, to replay: ``await replay(StoredRun(store, run_id), build)``.

    Args:
        store: the store the run was made with (``store=``).
        run_id: the run's id (its result's ``run_id``).
        label: how messages name it (default: ``run '<id>' of <the store's class>``).
    """

    store: CheckpointStore
    run_id: str
    label: str | None = None

    META_KEY: ClassVar[str] = "replay/meta"
    """The journal key of a note that says what the run was, as ``{"meta": {...}}``:
    ``toolloop run --store`` keeps there what a trace's header would say (the product,
    the request, the options, the tools), so that ``toolloop replay --store`` makes it
    again."""

    @property
    def source(self) -> str:
        return self.label or f"run {self.run_id!r} of {type(self.store).__name__}"

    async def read(self) -> Recording:
        """The run as its store kept it: every session of it (a paused run's and its
        resumption's), a tool call's result taken from its journaled outcome.

        Raises:
            ReplayError: the store has no such run, or the run kept nothing to replay (it
                ran before toolloop kept model replies).
            CorruptCheckpointError: the run's checkpoint cannot be read.
        """
        checkpoint = await self.store.get(self.run_id)
        if checkpoint is None:
            raise ReplayError(
                f"{self.source} cannot be replayed: the store has no run {self.run_id!r} "
                "(store.run_ids() lists them)"
            )
        journal = {entry.call_id: entry for entry in checkpoint.journal}
        notes = sorted(
            (e for e in checkpoint.journal if e.tool_name == REPLAY_NOTE),
            key=lambda e: e.call_id,
        )
        meta: dict[str, Any] = {}
        events: list[FlowEvent] = []
        try:
            for note in notes:
                data = note.outcome if isinstance(note.outcome, Mapping) else {}
                if isinstance(data.get("meta"), Mapping):
                    meta = dict(data["meta"])
                for item in data.get("events") or ():
                    _add(events, self._event(item, journal))
        except (TraceError, TypeError, KeyError) as exc:
            raise ReplayError(
                f"{self.source} cannot be replayed: what it kept cannot be read ({exc})"
            ) from exc
        if not events:
            raise ReplayError(
                f"{self.source} cannot be replayed: it keeps no model replies (its store was "
                "not made with keep_replies=True when it ran); make the store so, or trace such "
                "a run while it runs"
            )
        return Recording.from_events(events, meta=meta, source=self.source)

    def _event(self, item: Mapping[str, Any], journal: Mapping[str, JournalEntry]) -> FlowEvent:
        data = {**item, "execution_id": self.run_id}  # every session of the run is one
        if data.pop("journaled", False):
            entry = journal.get(str(data.get("call_id")))
            record = _record_in(entry.outcome if entry is not None else None)
            if record is None:
                raise KeyError(f"the journaled outcome of call {data.get('call_id')!r}")
            data["record"] = {**data["record"], "result": redact(record.get("result"))}
        return load_event(data)


def _record_in(outcome: Any) -> Mapping[str, Any] | None:
    """The tool's record in a journaled outcome: the outcome itself (the loop, the status
    agent), or its ``record`` (the middleware agent's outcome holds its message too)."""
    if not isinstance(outcome, Mapping):
        return None
    inner = outcome.get("record")
    if isinstance(inner, Mapping) and "message" in outcome:
        return inner
    return outcome


def _add(events: list[FlowEvent], event: FlowEvent) -> None:
    """``event`` added to the run's events, except a call a resumed session answered from
    the journal (``"replayed"``: the session before it ran it, and says so), with its
    start."""
    if isinstance(event, ToolCallFinished) and event.source == "replayed":
        for i in range(len(events) - 1, -1, -1):
            started = events[i]
            if (
                isinstance(started, ToolCallStarted)
                and started.call_id == event.call_id
                and (started.round_index, started.index) == (event.round_index, event.index)
            ):
                del events[i]
                break
        return
    events.append(event)
