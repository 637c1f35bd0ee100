"""Tool calls that never run twice: the journal's side of it.

A run's tool call is journaled with its intent before it runs and its outcome after (the
kernel's :func:`toolloop.kernel.journaled_call` does it for every product): an outcome in the
journal is replayed, never run again, and an intent without an outcome is a call that was
cut off while it ran, so it may or may not have taken effect (the run's ``unknown_outcome``
says what then).

What cut a call off is said truthfully. When the run itself ended while calls ran (its
timeout, a cancellation, an error), :func:`note_cut_off` journals what ended it and which
calls it cut off (``tool_name`` :data:`CUT_OFF`); their records then say so ("the run's
timeout of 5 s ended it while it ran"). An intent without an outcome and without such a
note is a crash's: its process stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import anyio

from .._errors import ExecutionTimeoutError
from ._model import JournalEntry
from ._run import CheckpointedRun

__all__ = [
    "CUT_OFF",
    "cut_off_cause",
    "cut_off_causes",
    "interrupted_error",
    "interruption",
    "note_cut_off",
]

CUT_OFF = "<cut off>"
"""The ``tool_name`` of a journal note: the run itself ended while the calls it lists ran
(its outcome: ``{"cause": ..., "calls": [call ids]}``)."""


def interruption(cause: str | None, *, plural: bool = False) -> str:
    """What cut a call (or, ``plural``, calls) off, as a clause: ``cause`` is what ended
    the run while it ran (see :func:`cut_off_cause`); ``None``: its process stopped."""
    if cause is None:
        if plural:
            return "the process stopped after they started and before their outcome was recorded"
        return "its process stopped after the call started and before its outcome was recorded"
    if plural:
        return f"{cause} ended them while they ran, before their outcome was recorded"
    return f"{cause} ended it while it ran, before its outcome was recorded"


def interrupted_error(call_id: str, tool_name: str, cause: str | None = None) -> str:
    """The error of the record of an interrupted call (``cause``: see :func:`interruption`)."""
    return (
        f"call {call_id!r} of tool {tool_name!r} was interrupted: {interruption(cause)}, so it "
        "may or may not have taken effect; it was not run again"
    )


def cut_off_cause(exc: BaseException) -> str | None:
    """What ended a run, from what it raised: its timeout, a step's timeout, its
    cancellation, or an error; ``None`` for what stops the process (``KeyboardInterrupt``,
    ``SystemExit``...): that is a crash's. Called in the run's task."""
    if isinstance(exc, ExecutionTimeoutError):
        if exc.step is not None:
            return f"the timeout of {exc.timeout:g} s of step {exc.step!r}"
        return f"the run's timeout of {exc.timeout:g} s"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "the run's cancellation"
    if not isinstance(exc, Exception):
        return None
    said = f"{type(exc).__name__}: {exc}"
    return f"the run's error ({said[:200]})"


async def note_cut_off(run: CheckpointedRun, exc: BaseException) -> None:
    """Journal that the run's own end (``exc``: see :func:`cut_off_cause`) cut off the calls
    this process still runs (:attr:`CheckpointedRun.open_calls`), so that a resumed run
    tells them apart from calls a crash cut off. Nothing is written when none runs, or when
    the process itself is stopping; written even while the run is being cancelled; a store
    that fails here is not raised (the run's own end matters more)."""
    calls = sorted(run.open_calls)
    cause = cut_off_cause(exc) if calls else None
    if cause is None:
        return
    key = f"cut-off/{uuid.uuid4().hex}"
    data = {"cause": cause, "calls": calls}
    with anyio.CancelScope(shield=True):
        try:
            await run.record_note(key, CUT_OFF, data)
        except Exception:  # then a resumed run says "its process stopped": less precise
            return


def cut_off_causes(journal: Mapping[str, JournalEntry] | Iterable[JournalEntry]) -> dict[str, str]:
    """What cut each call off, by call id, from the journal's :data:`CUT_OFF` notes (a call
    not in it was cut off by a crash, if at all)."""
    entries = journal.values() if isinstance(journal, Mapping) else journal
    causes: dict[str, str] = {}
    for entry in entries:
        data = entry.outcome
        if entry.tool_name != CUT_OFF or not isinstance(data, dict):
            continue
        cause, calls = data.get("cause"), data.get("calls")
        if isinstance(cause, str) and isinstance(calls, list):
            causes.update((str(call_id), cause) for call_id in calls)
    return causes
