"""Keeping an agent's runs in a checkpoint store (:mod:`toolloop.checkpoints`).

With ``create_agent(..., store=...)`` every run is a stored run, keyed by its ``run_id``
(the execution id): written ``running`` when it starts, ``paused`` with its snapshot and
what it asks when a middleware pauses it, ``completed`` or ``failed`` when it ends.
``agent.resume(run_id, answer)`` reads the paused run, checks the answer, and *claims* the
run before it goes on: the claim names the revision it read, so one paused run is resumed
once, whichever process tries first; a second attempt fails and changes nothing. How each
session ends is written by the kernel's driver (:func:`toolloop.kernel.drive`).
"""

from __future__ import annotations

from typing import Any

from ..checkpoints import (
    INTERRUPTED,
    Checkpoint,
    CheckpointedRun,
    CheckpointStore,
    CorruptCheckpointError,
    RunNotResumableError,
    expect_status,
    restore,
)
from ..flow import Execution
from ..runner import json_safe
from ._durable import RECOVER, progress_snapshot
from ._flow import ANSWERED, AgentDeps, agent_flow
from ._messages import Message, add_messages
from ._state import AgentState

__all__ = [
    "begin_run",
    "claim_run",
    "load_interrupted",
    "load_paused",
]


async def begin_run(
    store: CheckpointStore,
    execution: Execution[AgentState],
    new: list[Message],
    metadata: dict[str, Any] | None,
) -> CheckpointedRun:
    """Write the first checkpoint of a new run (``running``; its snapshot is the state it
    starts from, with the new messages in, so a run that dies at once can be recovered).

    Raises:
        CheckpointConflictError: the store already has a run with this id.
    """
    start = execution.state.model_copy(deep=True)
    add_messages(start.messages, new)
    snapshot = progress_snapshot(start, execution.id, "start", "begin")
    return await CheckpointedRun.begin(
        store,
        run_id=execution.id,
        flow=agent_flow.name,
        snapshot=snapshot,
        metadata={"agent": "middleware", **(metadata or {})},
    )


async def load_paused(
    store: CheckpointStore, run_id: str, deps: AgentDeps
) -> tuple[Checkpoint, Execution[AgentState]]:
    """The paused run ``run_id`` and its restored execution (nothing is written).

    Raises:
        RunNotFoundError: no such run.
        RunNotResumableError: the run is not paused (completed, running, or resumed already).
        CorruptCheckpointError: its checkpoint cannot be read back.
    """
    checkpoint = await CheckpointedRun.load(store, run_id)
    expect_status(checkpoint, ("paused",))
    if checkpoint.flow != agent_flow.name:
        raise RunNotResumableError(
            f"run {run_id!r} is a run of flow {checkpoint.flow!r}, not of the agent "
            f"({agent_flow.name!r}); resume it with the agent that made it"
        )
    return checkpoint, restore(agent_flow, checkpoint, deps=deps)


async def load_interrupted(
    store: CheckpointStore, run_id: str, deps: AgentDeps
) -> tuple[Checkpoint, Execution[AgentState], str, Any]:
    """The interrupted run ``run_id``, restored, with the event (and value) it goes on with:
    the answer it was being resumed with, or recovery from its last progress checkpoint.

    Raises:
        RunNotFoundError: no such run.
        RunNotResumableError: the run is paused (resume it) or completed.
        CorruptCheckpointError: its checkpoint cannot be read back, or has no step to go on
            from.
    """
    checkpoint = await CheckpointedRun.load(store, run_id)
    expect_status(checkpoint, INTERRUPTED)
    if checkpoint.flow != agent_flow.name:
        raise RunNotResumableError(
            f"run {run_id!r} is a run of flow {checkpoint.flow!r}, not of the agent "
            f"({agent_flow.name!r}); recover it with the agent that made it"
        )
    execution = restore(agent_flow, checkpoint, deps=deps)
    waits = execution.waiting
    if checkpoint.resume_event == ANSWERED and [w.event for w in waits] == [ANSWERED]:
        return checkpoint, execution, ANSWERED, checkpoint.resume_value
    if len(waits) == 1 and waits[0].event == RECOVER and isinstance(waits[0].request, dict):
        return checkpoint, execution, RECOVER, waits[0].request.get("route")
    raise CorruptCheckpointError(
        f"run {run_id!r} has no step to go on from (its snapshot waits for "
        f"{[w.event for w in waits]}); it was left as it is"
    )


async def claim_run(
    store: CheckpointStore, checkpoint: Checkpoint, event: str, answer: Any
) -> CheckpointedRun:
    """Take the paused run over, noting the answer it is resumed with (as given: a recovery
    checks it again).

    Raises:
        RunNotResumableError: someone resumed it since it was read; nothing was written.
    """
    value = json_safe(answer)
    return await CheckpointedRun.claim(store, checkpoint, event=event, value=value)
