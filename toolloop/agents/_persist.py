"""Keeping an agent's runs in a checkpoint store (:mod:`toolloop.checkpoints`).

With ``create_agent(..., store=...)`` every run is a stored run, keyed by its ``run_id``
(the execution id): written ``running`` when it starts, ``paused`` with its snapshot and
what it asks when a middleware pauses it, ``completed`` or ``failed`` when it ends.
``agent.resume(run_id, answer)`` reads the paused run, checks the answer, and *claims* the
run before it goes on: the claim names the revision it read, so one paused run is resumed
once, whichever process tries first; a second attempt fails and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from pydantic_core import to_jsonable_python

from ..checkpoints import (
    Checkpoint,
    CheckpointedRun,
    CheckpointStore,
    RunNotResumableError,
    expect_status,
    restore,
)
from ..flow import Execution, FlowResult, FlowSnapshot
from ._flow import AgentDeps, agent_flow
from ._state import AgentState

__all__ = ["begin_run", "claim_run", "drive", "load_paused"]


def summary(state: AgentState) -> dict[str, Any]:
    """What a completed run's checkpoint keeps as its result (JSON)."""
    text = ""
    for message in reversed(state.messages):
        if message.role == "assistant":
            text = message.content
            break
    return {
        "text": text,
        "structured_response": to_jsonable_python(state.structured_response, fallback=str),
        "messages": len(state.messages),
    }


async def begin_run(
    store: CheckpointStore,
    execution: Execution[AgentState],
    metadata: dict[str, Any] | None,
) -> CheckpointedRun:
    """Write the first checkpoint of a new run (``running``; its snapshot is the state it
    starts from).

    Raises:
        CheckpointConflictError: the store already has a run with this id.
    """
    snapshot = FlowSnapshot(
        flow=agent_flow.name,
        execution_id=execution.id,
        state=execution.state.model_dump(mode="json"),
    )
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


async def claim_run(
    store: CheckpointStore, checkpoint: Checkpoint, event: str, answer: Any
) -> CheckpointedRun:
    """Take the paused run over, noting the answer it is resumed with.

    Raises:
        RunNotResumableError: someone resumed it since it was read; nothing was written.
    """
    value = to_jsonable_python(answer, fallback=str)
    return await CheckpointedRun.claim(store, checkpoint, event=event, value=value)


async def drive(
    run: CheckpointedRun, started: Awaitable[FlowResult[AgentState]]
) -> FlowResult[AgentState]:
    """Run (or resume) a stored run and write how it ended."""
    try:
        result = await started
    except Exception as exc:
        try:
            await run.fail(f"{type(exc).__name__}: {exc}")
        except Exception:  # the run's own error matters more than this write's
            run.release()
        raise
    except BaseException:  # cancelled: nothing more is written
        run.release()
        raise
    if result.paused:
        await run.pause(result)
    else:
        await run.complete(summary(result.state))
    return result
