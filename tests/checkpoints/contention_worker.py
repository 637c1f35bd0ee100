"""A worker process of the contention tests: it goes through every run of a shared store, in
its own order, and resumes or recovers each run it can claim (its one tool call appends a
line to a side-effect file), then completes it.

    python contention_worker.py STORE EFFECTS SEED

``STORE`` is a SQLite file or ``postgresql://...#schema``. Prints a JSON list of the runs it
completed.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import anyio

from toolloop.checkpoints import (
    CheckpointedRun,
    PostgresCheckpointStore,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.kernel import journaled_call
from toolloop.runner import Executor, ToolCommand, ToolExecutionRecord, json_safe


def open_store(spec: str) -> PostgresCheckpointStore | SQLiteCheckpointStore:
    if spec.startswith("postgresql://"):
        url, _, schema = spec.partition("#")
        return PostgresCheckpointStore(url, schema=schema, max_size=4)
    return SQLiteCheckpointStore(spec, timeout=60)


async def main(spec: str, effects: Path, seed: int) -> list[str]:
    def effect(run: str) -> str:
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{run}\n".encode())
        finally:
            os.close(fd)
        return f"done {run}"

    executor = Executor([effect])
    store = open_store(spec)
    done: list[str] = []
    async with store:
        run_ids = await store.run_ids()
        random.Random(seed).shuffle(run_ids)
        for run_id in run_ids:
            checkpoint = await store.get(run_id)
            assert checkpoint is not None
            if checkpoint.status == "completed":
                continue
            try:
                run = await CheckpointedRun.claim(
                    store, checkpoint, expect=("paused", "running"), event="go"
                )
            except RunNotResumableError:
                continue
            journal = await run.journal()
            command = ToolCommand(purpose="p", tool_name="effect", tool_kwargs={"run": run_id})
            ended = await journaled_call(
                run,
                journal,
                "effect-1",
                tool_name="effect",
                arguments=command.tool_kwargs,
                call=lambda: executor.call(command),  # noqa: B023 (awaited in this iteration)
                dump=json_safe,
                load=ToolExecutionRecord.model_validate,
                failed=lambda error: ToolExecutionRecord.failed(command, error),  # noqa: B023
            )
            assert ended.source != "interrupted"
            await run.complete({"result": ended.outcome.result})
            done.append(run_id)
    return done


if __name__ == "__main__":
    spec, effects, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(anyio.run(main, spec, effects, seed)))
