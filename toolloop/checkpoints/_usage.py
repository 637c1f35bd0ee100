"""What model calls cost, journaled: a crash after a model call and before the next
checkpoint does not lose it.

A run's checkpoint carries its usage as it was when it was written. A model call made
after that is journaled with its usage (``tool_name`` :data:`USAGE`) at a *position*: the
count the product's checkpoints carry (a loop's round index, an agent's model calls, a
status agent's node transitions), so that the checkpoint written at position ``n`` counts
every call journaled before ``n`` and none journaled at ``n`` or after. A resumed run
counts its checkpoint's usage and :func:`usage_since` its position: each call once, so a
budget holds exactly. A call cut off by the crash itself is not counted: what it cost
never reached the process.

The usage is JSON data here (this layer knows no models); the products read it back with
:class:`toolloop.models.Usage`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import anyio

from ._errors import CorruptCheckpointError
from ._model import JournalEntry
from ._run import CheckpointedRun

__all__ = ["USAGE", "record_usage", "usage_since"]

T = TypeVar("T")

USAGE = "<usage>"
"""The ``tool_name`` of a journal entry that keeps what model calls cost."""


async def record_usage(run: CheckpointedRun, at: int, usage: Any) -> None:
    """Journal ``usage`` (JSON data: what model calls cost) at position ``at`` of the run.

    Written even while the run is being cancelled: the calls were made.

    Args:
        run: the run, owned by this process.
        at: the position the run's checkpoints count (see the module's docs): the calls
            are counted by a resumed run whose checkpoint is at ``at`` or before.
        usage: e.g. ``Usage.model_dump(mode="json")``.
    """
    key = f"usage/{at}/{uuid.uuid4().hex}"
    with anyio.CancelScope(shield=True):
        await run.record_note(key, USAGE, {"at": at, "usage": usage})


def usage_since(
    journal: Mapping[str, JournalEntry] | Iterable[JournalEntry],
    at: int,
    read: Callable[[Any], T],
    run_id: str = "",
) -> list[T]:
    """The usage journaled at position ``at`` or after: what a checkpoint at ``at`` does
    not count yet, each read with ``read`` (e.g. ``Usage.model_validate``).

    Raises:
        CorruptCheckpointError: an entry cannot be read.
    """
    found: list[T] = []
    entries = journal.values() if isinstance(journal, Mapping) else journal
    for entry in entries:
        if entry.tool_name != USAGE or entry.state != "finished":
            continue
        data = entry.outcome
        try:
            if not isinstance(data, dict) or not isinstance(data.get("at"), int):
                raise ValueError(f"it is {data!r:.100}, not {{'at': <int>, 'usage': ...}}")
            if data["at"] >= at:
                found.append(read(data.get("usage")))
        except ValueError as exc:  # pydantic's ValidationError is one
            raise CorruptCheckpointError(
                f"the journaled usage {entry.call_id!r} of run {run_id!r} cannot be read "
                f"({exc}); it was left as it is"
            ) from exc
    return found
