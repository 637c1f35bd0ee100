"""What a durable run keeps of itself for a replay: its model replies whole, beside the
journaled outcomes of its tool calls.

A run with a store journals its tool calls (intent, outcome) but not its model replies.
:class:`Keeper` (subscribed by :func:`~toolloop.kernel.drive` to every durable run, of every
product, whose store was made with ``keep_replies=True``) keeps the events a replay reads:
each model call (its reply whole, what mattered of its request), each tool call's start and
end, the run's end, as a trace writes them
(secrets scrubbed, strings whole), in journal notes (``tool_name`` :data:`REPLAY_NOTE`): one per
model call, and one as a session of the run ends. A note is written beside the run's next
journal or checkpoint write (:meth:`~toolloop.checkpoints.CheckpointedRun.keep`), in the
same commit with a store that groups commits: no commit of its own. A tool call's result is
not kept twice: when the run journaled the call's outcome, the note says so
(``"journaled": true``) and a replay takes the result from the journal.

:func:`toolloop.testing.replay` reads them back (``StoredRun(store, run_id)``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..checkpoints import CheckpointedRun
from ..flow import FlowEvent

__all__ = ["REPLAY_NOTE", "Keeper"]

REPLAY_NOTE = "<replay>"
"""The ``tool_name`` of a journal note that keeps events of the run for a replay (its
outcome: ``{"events": [event data, ...]}``, as a trace writes them)."""

_KINDS = frozenset(
    {
        "model_call_started",
        "model_call_finished",
        "tool_call_started",
        "tool_call_finished",
        "run_finished",
        "execution_paused",
        "execution_failed",
    }
)
_ENDS = frozenset({"model_call_finished", "run_finished", "execution_paused", "execution_failed"})


class Keeper:
    """The observer of a durable run that keeps what a replay needs (see the module docs)."""

    __slots__ = ("_events", "_models", "_run")

    def __init__(self, run: CheckpointedRun, models: int) -> None:
        self._run = run
        self._models = models
        """The model calls the run started before the events kept now (across sessions)."""
        self._events: list[dict[str, Any]] = []

    def __call__(self, event: FlowEvent) -> None:
        kind = event.kind
        if kind not in _KINDS:
            return
        from ..tracing import dump_event  # (tracing knows the products: imported late)

        data = dump_event(event, max_value_chars=None)
        if kind == "tool_call_finished" and _journaled(event, self._run):
            data["record"]["result"] = None
            data["journaled"] = True
        if not self._events and kind == "model_call_started":
            self._models = int(data["call_index"])
        self._events.append(data)
        if kind in _ENDS:
            self._keep()

    def _keep(self) -> None:
        events, self._events = self._events, []
        # ordered across sessions: by the model calls before, then by when
        key = f"replay/{self._models:08d}/{time.time_ns():020d}/{uuid.uuid4().hex[:8]}"
        self._models = max(
            [self._models, *(int(e["call_index"]) + 1 for e in events if "call_index" in e)]
        )
        self._run.keep(key, REPLAY_NOTE, {"events": events})


def _journaled(event: Any, run: CheckpointedRun) -> bool:
    """Whether the journal holds the call's result as the event tells it (the call ran
    here, and its outcome was journaled under its call id)."""
    return bool(
        event.source == "ran" and event.record.success and event.call_id in run.written_outcomes
    )
