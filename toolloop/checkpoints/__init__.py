"""Checkpoints: persist a run, pause it for a human, resume it later — in another process if
need be — without running any tool twice.

A :class:`CheckpointStore` keeps, per run id, the run's last :class:`Checkpoint` (a flow
snapshot plus status, request, owner and metadata) and the journal of its tool calls.
:class:`SQLiteCheckpointStore` (a file, no server) is the default;
:class:`PostgresCheckpointStore` serves many workers on many machines (runs are leased, see
:class:`LeasingStore`); :class:`MemoryCheckpointStore` serves tests.
:class:`CheckpointedRun` writes one run's checkpoints and the journal of its tool calls
(intent before, outcome after: the kernel's :func:`~toolloop.kernel.journaled_call` runs a
call through it), :func:`note_cut_off` journals what ended a run while its calls ran, and
:func:`record_usage` what its model calls cost; :class:`HumanRequest` and the decisions
(:class:`Approve`, :class:`Edit`, :class:`Reject`, :class:`Replan`, :class:`Continue`,
:class:`Stop`) are how a paused run talks with a person.
"""

from __future__ import annotations

from ._errors import CheckpointConflictError as CheckpointConflictError
from ._errors import CheckpointError as CheckpointError
from ._errors import CorruptCheckpointError as CorruptCheckpointError
from ._errors import DecisionError as DecisionError
from ._errors import RunNotFoundError as RunNotFoundError
from ._errors import RunNotResumableError as RunNotResumableError
from ._human import Approve as Approve
from ._human import Continue as Continue
from ._human import DecisionKind as DecisionKind
from ._human import Edit as Edit
from ._human import HumanAnswer as HumanAnswer
from ._human import HumanDecision as HumanDecision
from ._human import HumanRequest as HumanRequest
from ._human import Reject as Reject
from ._human import Replan as Replan
from ._human import RequestedCall as RequestedCall
from ._human import RequestKind as RequestKind
from ._human import Stop as Stop
from ._human import check_decision as check_decision
from ._human import parse_answer as parse_answer
from ._human import parse_decision as parse_decision
from ._journal import cut_off_causes as cut_off_causes
from ._journal import interrupted_error as interrupted_error
from ._journal import interruption as interruption
from ._journal import note_cut_off as note_cut_off
from ._memory import MemoryCheckpointStore as MemoryCheckpointStore
from ._model import Checkpoint as Checkpoint
from ._model import CheckpointStatus as CheckpointStatus
from ._model import JournalEntry as JournalEntry
from ._model import JournalState as JournalState
from ._model import Owner as Owner
from ._postgres import PostgresCheckpointStore as PostgresCheckpointStore
from ._run import INTERRUPTED as INTERRUPTED
from ._run import CheckpointedRun as CheckpointedRun
from ._run import expect_status as expect_status
from ._run import restore as restore
from ._sqlite import SQLiteCheckpointStore as SQLiteCheckpointStore
from ._store import CheckpointStore as CheckpointStore
from ._store import LeasingStore as LeasingStore
from ._usage import record_usage as record_usage
from ._usage import usage_since as usage_since

__all__ = [
    "INTERRUPTED",
    "Approve",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointError",
    "CheckpointStatus",
    "CheckpointStore",
    "CheckpointedRun",
    "Continue",
    "CorruptCheckpointError",
    "DecisionError",
    "DecisionKind",
    "Edit",
    "HumanAnswer",
    "HumanDecision",
    "HumanRequest",
    "JournalEntry",
    "JournalState",
    "LeasingStore",
    "MemoryCheckpointStore",
    "Owner",
    "PostgresCheckpointStore",
    "Reject",
    "Replan",
    "RequestKind",
    "RequestedCall",
    "RunNotFoundError",
    "RunNotResumableError",
    "SQLiteCheckpointStore",
    "Stop",
    "check_decision",
    "cut_off_causes",
    "expect_status",
    "interrupted_error",
    "interruption",
    "note_cut_off",
    "parse_answer",
    "parse_decision",
    "record_usage",
    "restore",
    "usage_since",
]
