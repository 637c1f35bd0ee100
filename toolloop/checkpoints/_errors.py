"""Errors of checkpoints and of resuming a persisted run.

They extend the tree of :mod:`toolloop._errors`::

    RunError
    ├── ResumeError
    │   ├── RunNotFoundError          no checkpoint for that run id
    │   ├── RunNotResumableError      the run is not in a state to resume (done, already resumed)
    │   ├── DecisionError             a human decision that does not fit the question asked
    │   └── CorruptCheckpointError    a stored checkpoint that cannot be read (also below)
    └── CheckpointError               the store failed, or refused a write
        ├── CheckpointConflictError   someone else wrote the run first (a stale revision)
        └── CorruptCheckpointError

Every one of them is raised before anything is written: the store is left as it was.
"""

from __future__ import annotations

from .._errors import ResumeError, RunError

__all__ = [
    "CheckpointConflictError",
    "CheckpointError",
    "CorruptCheckpointError",
    "DecisionError",
    "RunNotFoundError",
    "RunNotResumableError",
]


class CheckpointError(RunError):
    """A checkpoint store failed (an unreadable file, a locked database) or refused a write."""


class CheckpointConflictError(CheckpointError):
    """The write expected another revision of the run: someone else wrote it first (or the
    run already exists, or no longer does). Nothing was written."""


class CorruptCheckpointError(CheckpointError, ResumeError):
    """A stored checkpoint (or its snapshot) cannot be read back. Nothing was changed."""


class RunNotFoundError(ResumeError):
    """No checkpoint is stored for the run id."""


class RunNotResumableError(ResumeError):
    """The run exists but cannot be resumed now: it completed, it is not waiting for a
    decision, or another caller resumed it first."""


class DecisionError(ResumeError):
    """A decision that does not fit the question the paused run asks (a kind it does not
    allow, an unknown call id, arguments that fail the tool's schema)."""
