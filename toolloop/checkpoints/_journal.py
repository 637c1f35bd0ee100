"""Tool calls that never run twice: journal the intent before, the outcome after.

:func:`call_once` runs one tool command of a checkpointed run under a stable call id:

- no entry in the journal: write the intent, run the call, write the outcome;
- an entry with an outcome: the call is not run; its recorded outcome comes back
  (``replayed``) — this is what makes a crash between the end of a call and the next
  checkpoint harmless;
- an intent without an outcome: the process stopped while the call ran, so it may or may
  not have taken effect. It is **not** run again: it is marked ``interrupted`` in the
  journal and comes back as a failed record saying so, for a human (or the model) to decide
  what to do — e.g. approve running it again under a new call id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import ValidationError

from ..runner import CallSource, Executor, ToolCommand, ToolExecutionRecord, json_safe
from ._errors import CorruptCheckpointError
from ._model import JournalEntry
from ._run import CheckpointedRun

__all__ = ["CallSource", "call_once", "interrupted_error"]


def interrupted_error(call_id: str, tool_name: str) -> str:
    """The error of the record of an interrupted call."""
    return (
        f"call {call_id!r} of tool {tool_name!r} was interrupted: its process stopped after the "
        "call started and before its outcome was recorded, so it may or may not have taken "
        "effect; it was not run again"
    )


async def call_once(
    run: CheckpointedRun,
    call_id: str,
    command: ToolCommand,
    executor: Executor,
    *,
    journal: Mapping[str, JournalEntry],
    on_start: Callable[[], object] | None = None,
) -> tuple[ToolExecutionRecord, CallSource]:
    """The record of ``command`` under ``call_id``, running the tool at most once ever.

    Args:
        journal: the run's journal, read since this process owns the run.
        on_start: called when the tool is about to run (its intent is journaled).

    Returns:
        The record, and whether the tool ``ran`` now, was ``replayed`` from the journal, or
        was ``interrupted`` before (a failed record; the tool did not run again).
    """
    entry = journal.get(call_id)
    if entry is None:
        mine = JournalEntry(
            call_id=call_id, tool_name=command.tool_name, arguments=command.tool_kwargs
        )
        entry = await run.record_intent(mine)
        if entry.state == "started" and entry.started_at == mine.started_at:
            record = await executor.call(command, on_start=on_start)
            await run.record_outcome(call_id, _dump(record))
            return record, "ran"
    if entry.state == "started":
        record = ToolExecutionRecord.failed(command, interrupted_error(call_id, command.tool_name))
        await run.record_outcome(call_id, _dump(record), state="interrupted")
        return record, "interrupted"
    try:
        record = ToolExecutionRecord.model_validate(entry.outcome)
    except ValidationError as exc:
        raise CorruptCheckpointError(
            f"the journaled outcome of call {call_id!r} of run {run.run_id!r} is no tool record "
            f"({exc.error_count()} problems); it was left as it is"
        ) from exc
    return record, "replayed" if entry.state == "finished" else "interrupted"


def _dump(record: ToolExecutionRecord) -> object:
    """The record as JSON data (see :func:`~toolloop.runner.json_safe`)."""
    return json_safe(record)
