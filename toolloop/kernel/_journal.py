"""One journaled tool call for every product: the intent before, the outcome after, never
twice.

:func:`journaled_call` runs a call of a checkpointed run under its ``call_id``:

- no entry: the intent is written, the call runs, its outcome is written (even while the run
  is being cancelled: it did run) and comes back;
- an entry with an outcome: the call does not run; the outcome comes back, read again
  (``"replayed"``);
- an intent without an outcome (the call was cut off while it ran, so it may or may not have
  taken effect): what the run's ``unknown_outcome`` policy says (see
  :data:`~toolloop.kernel.UnknownOutcome`). Under ``"retry"`` an idempotent tool runs again
  under the same intent; otherwise the call ends as a failure that says what cut it off
  (``"interrupted"``, with the :class:`Interrupted` facts), written to the journal as its
  end, or left for a human to answer (``"ask"``: the product writes the answer with
  :func:`record_interrupted`).

With streaming dispatch a call starts, and is journaled, before the turn that made it is
checkpointed: a turn cut off then (its process died, its model call failed) is asked again,
and may come back with other calls under the same ids. :func:`own_key` keeps them apart: a
journaled outcome is replayed only to the same call (:func:`same_call`: its tool, its
arguments); another call runs under a key of its own.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

from ..checkpoints import (
    CheckpointedRun,
    CorruptCheckpointError,
    JournalEntry,
    cut_off_causes,
    interrupted_error,
)
from ..runner import MAX_JSON_DEPTH, CallSource, json_safe, nesting_depth
from ..tools import ToolRegistry
from ._options import UnknownOutcome

__all__ = [
    "MAX_ARGUMENT_BYTES",
    "Interrupted",
    "Journaled",
    "arguments_problem",
    "journaled_call",
    "own_key",
    "record_interrupted",
    "resumes",
    "same_call",
]

T = TypeVar("T")

MAX_ARGUMENT_BYTES = 256 * 1024
"""Arguments larger than this (as JSON) are not journaled, and the call does not run."""


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A call whose intent is journaled without an outcome: it may or may not have taken
    effect. ``cause`` is what ended the run while it ran (``None``: its process stopped)."""

    call_id: str
    tool_name: str
    cause: str | None = None
    answered: Any = None
    """What the journal already says of it (it was marked interrupted before), if
    anything."""

    @property
    def error(self) -> str:
        """What the call's record (or the model's answer to it) says."""
        return interrupted_error(self.call_id, self.tool_name, self.cause)


@dataclass(frozen=True, slots=True)
class Journaled(Generic[T]):
    """What came of a journaled call, and from where: ``"ran"`` here, ``"replayed"`` from
    the journal, or ``"interrupted"`` (its outcome unknown; ``cut`` says what cut it off)."""

    outcome: T
    source: CallSource
    cut: Interrupted | None = None


async def journaled_call(
    run: CheckpointedRun,
    journal: Mapping[str, JournalEntry],
    call_id: str,
    *,
    tool_name: str,
    arguments: Mapping[str, Any],
    call: Callable[[], Awaitable[T]],
    dump: Callable[[T], Any],
    load: Callable[[Any], T],
    failed: Callable[[str], T],
    unknown_outcome: UnknownOutcome = "fail",
    idempotent_tools: Collection[str] = (),
    settled: bool = True,
    resumes: bool = False,
) -> Journaled[T]:
    """The outcome of the call ``call_id``, its tool run at most once ever (see the module
    docs), and where it came from.

    A call cut off before, whose outcome is unknown and that does not run again, ends as
    the journal says it ended when it says so, else as ``failed(error)`` (the error says
    what cut it off), written to the journal as its end when ``settled`` (``False``: the
    product asks a human first, and writes the answer with :func:`record_interrupted`).

    Args:
        journal: the run's journal, as read when this process took the run over.
        call: runs the tool (once) and gives its outcome.
        dump: the outcome as JSON data, for the journal.
        load: an outcome read back from the journal (raising on data that is none).
        failed: the outcome of a call cut off before, given what its error says.
        resumes: the tool resumes its own journaled work when called again (a run as a
            tool, :func:`~toolloop.kernel.as_tool`, whose run is durable too): a call cut
            off runs again, whatever ``unknown_outcome`` says (what it did is not done
            twice).

    Raises:
        CorruptCheckpointError: a journaled outcome that ``load`` refuses.
    """
    entry = journal.get(call_id)
    if entry is None:
        problem = arguments_problem(arguments)
        if problem is not None:  # never journaled, never run: the same on every recovery
            return Journaled(failed(f"tool {tool_name!r} was not run: {problem}"), "ran")
        mine = JournalEntry(call_id=call_id, tool_name=tool_name, arguments=dict(arguments))
        entry = await run.record_intent(mine)
        if entry.state == "started" and entry.started_at == mine.started_at:
            return Journaled(await _run_and_record(run, call_id, call, dump), "ran")
    if entry.state == "finished":
        return Journaled(_load(load, entry.outcome, "outcome", call_id, run), "replayed")
    if entry.state == "started" and (
        resumes or (unknown_outcome == "retry" and tool_name in idempotent_tools)
    ):
        run.reopen(call_id)  # running here now, under the intent journaled before
        return Journaled(await _run_and_record(run, call_id, call, dump), "ran")
    cut = Interrupted(call_id, tool_name, cut_off_causes(journal).get(call_id), entry.outcome)
    if entry.state == "interrupted":  # how it ended was decided before
        return Journaled(_load(load, entry.outcome, "answer", call_id, run), "interrupted", cut)
    ended = failed(cut.error)
    if settled:
        await record_interrupted(run, call_id, dump(ended))
    return Journaled(ended, "interrupted", cut)


def resumes(registry: ToolRegistry, tool_name: str) -> bool:
    """Whether the tool ``tool_name`` of ``registry`` resumes its own work when called
    again (:attr:`~toolloop.tools.Tool.resumes`; ``False`` for a tool it does not have)."""
    return tool_name in registry and registry.get(tool_name).resumes


def _load(load: Callable[[Any], T], data: Any, what: str, call_id: str, run: CheckpointedRun) -> T:
    try:
        return load(data)
    except Exception as exc:
        raise CorruptCheckpointError(
            f"the journaled {what} of call {call_id!r} of run {run.run_id!r} cannot be read "
            f"back ({type(exc).__name__}: {exc}); it was left as it is"
        ) from exc


async def _run_and_record(
    run: CheckpointedRun, call_id: str, call: Callable[[], Awaitable[T]], dump: Callable[[T], Any]
) -> T:
    outcome = await call()
    with anyio.CancelScope(shield=True):  # written even while cancelled: it did run
        await run.record_outcome(call_id, dump(outcome))
    return outcome


async def record_interrupted(run: CheckpointedRun, call_id: str, outcome: Any) -> None:
    """Write how an interrupted call ended (e.g. its failed record), marking it
    ``interrupted``: it never runs again on its own."""
    with anyio.CancelScope(shield=True):
        await run.record_outcome(call_id, outcome, state="interrupted")


def arguments_problem(arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` cannot be journaled (nor kept in a checkpoint) as they are, so the
    call must not run, or ``None`` when they can: a cycle, nesting past
    :data:`~toolloop.runner.MAX_JSON_DEPTH` levels, a NaN or an infinity, a value JSON
    cannot hold, more than :data:`MAX_ARGUMENT_BYTES`."""
    depth = nesting_depth(arguments)
    if depth is None:
        return "its arguments contain themselves (a cycle), which JSON cannot say"
    if depth > MAX_JSON_DEPTH:
        return f"its arguments nest more than {MAX_JSON_DEPTH} levels deep; send flatter ones"
    try:
        size = len(json.dumps(arguments, allow_nan=False, separators=(",", ":")))
    except ValueError:
        return "its arguments hold a NaN or an infinity, which JSON cannot say"
    except TypeError as exc:
        return f"its arguments hold a value JSON cannot say ({exc})"
    if size > MAX_ARGUMENT_BYTES:
        return (
            f"its arguments are {size} bytes as JSON, more than the limit of {MAX_ARGUMENT_BYTES}"
        )
    return None


def same_call(entry: JournalEntry, tool_name: str, arguments: Any) -> bool:
    """Whether the journal's ``entry`` is a call of ``tool_name`` with ``arguments``."""
    if entry.tool_name != tool_name:
        return False
    try:
        return _canonical(entry.arguments) == _canonical(json_safe(arguments))
    except (TypeError, ValueError):
        return False


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=repr)


def own_key(
    journal: Mapping[str, JournalEntry], key: str, tool_name: str, arguments: Any
) -> tuple[str, JournalEntry | None]:
    """The journal key of a call of ``tool_name`` with ``arguments`` made at ``key`` (its
    call id): ``key`` itself, unless the journal holds another call under it. That happens
    only with streaming dispatch: a call started before its turn was kept, the turn never
    was (its process died, its model call failed), and the turn was asked again, with
    another call there. The earlier call is not this one: its outcome is not handed to this
    call, which runs under a key of its own (``"{key}~{n}"``).

    Returns:
        The key, and the entry of the other call found at ``key`` (``None``: there was
        none), for the product to say what the earlier call was.
    """
    entry = journal.get(key)
    if entry is None or same_call(entry, tool_name, arguments):
        return key, None
    other = entry
    n = 0
    mine = key
    while entry is not None and not same_call(entry, tool_name, arguments):
        n += 1
        mine = f"{key}~{n}"
        entry = journal.get(mine)
    return mine, other
