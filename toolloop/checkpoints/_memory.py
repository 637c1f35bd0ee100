"""A checkpoint store in memory, for tests: same behaviour as the SQLite one, no file."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio.lowlevel

from ._model import Checkpoint, CheckpointStatus, JournalEntry
from ._store import StoreBase, json_text, stored

__all__ = ["MemoryCheckpointStore"]


class MemoryCheckpointStore(StoreBase):
    """A :class:`CheckpointStore` in this process's memory.

    Checkpoints are kept as JSON text, as the SQLite store keeps them, so what comes back
    is a copy that shares nothing with what was written. Shared by every task of the
    process; gone with it.
    """

    def __init__(self, *, keep_replies: bool = False) -> None:
        self.keep_replies = keep_replies
        # run_id -> (revision, created_at, status, JSON text)
        self._rows: dict[str, tuple[int, float, CheckpointStatus, str]] = {}
        self._journals: dict[str, dict[str, JournalEntry]] = {}
        # shared results: key -> (JSON text, expires_at)
        self._shared: dict[str, tuple[str, float | None]] = {}

    async def get(self, run_id: str) -> Checkpoint | None:
        await anyio.lowlevel.checkpoint()
        row = self._rows.get(run_id)
        if row is None:
            return None
        journal = list(self._journals.get(run_id, {}).values())
        return Checkpoint.load_json(row[3], run_id=run_id, journal=journal)

    async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Checkpoint:
        await anyio.lowlevel.checkpoint()
        row = self._rows.get(checkpoint.run_id)
        new = stored(checkpoint, None if row is None else (row[0], row[1]), expected_revision)
        self._rows[new.run_id] = (new.revision, new.created_at, new.status, new.dump_json())
        return new

    async def delete(self, run_id: str) -> bool:
        await anyio.lowlevel.checkpoint()
        self._journals.pop(run_id, None)
        return self._rows.pop(run_id, None) is not None

    async def run_ids(self, *, status: CheckpointStatus | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        rows = sorted(self._rows.items(), key=lambda item: item[1][1])
        return [run_id for run_id, row in rows if status is None or row[2] == status]

    async def record_intent(self, run_id: str, entry: JournalEntry) -> JournalEntry:
        await anyio.lowlevel.checkpoint()
        journal = self._journals.setdefault(run_id, {})
        if entry.call_id not in journal:
            update: dict[str, Any] = {
                "arguments": json.loads(
                    json_text(entry.arguments, f"the arguments of {entry.call_id!r}")
                )
            }
            if entry.state != "started":  # a note: finished as it is written
                text = json_text(entry.outcome, f"the outcome of {entry.call_id!r}")
                update["outcome"] = json.loads(text)
                update["finished_at"] = entry.finished_at or time.time()
            journal[entry.call_id] = entry.model_copy(update=update)
        return journal[entry.call_id]

    async def _write_outcome(
        self, run_id: str, call_id: str, outcome: Any, state: str
    ) -> JournalEntry | None:
        await anyio.lowlevel.checkpoint()
        journal = self._journals.get(run_id, {})
        entry = journal.get(call_id)
        if entry is None or entry.state != "started":
            return entry
        data = json.loads(json_text(outcome, f"the outcome of {call_id!r}"))
        done = entry.model_copy(
            update={"state": state, "outcome": data, "finished_at": time.time()}
        )
        journal[call_id] = done
        return done

    async def get_shared(self, key: str, *, now: float) -> tuple[Any] | None:
        """The result kept under ``key`` (boxed), or ``None`` (none, or expired)."""
        await anyio.lowlevel.checkpoint()
        entry = self._shared.get(key)
        if entry is None:
            return None
        if entry[1] is not None and entry[1] <= now:
            del self._shared[key]
            return None
        return (json.loads(entry[0]),)

    async def put_shared(
        self, key: str, value: Any, *, expires_at: float | None, now: float
    ) -> None:
        """Keep ``value`` (JSON data) under ``key`` until ``expires_at``; the entries
        expired before ``now`` are forgotten."""
        await anyio.lowlevel.checkpoint()
        text = json_text(value, f"the shared result {key!r}")
        for old in [k for k, (_, ends) in self._shared.items() if ends is not None and ends <= now]:
            del self._shared[old]
        self._shared[key] = (text, expires_at)

    async def aclose(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> MemoryCheckpointStore:
        return self
