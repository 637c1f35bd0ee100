"""A durable loop run in a process of its own, for the SIGKILL tests.

    python durable_support.py run|resume|decide STORE EFFECTS RUN_ID [--crash WHEN]
        [--backend asyncio|trio] [--policy fail|retry|ask] [--metered] [--max-requests N]
        [--decision approve|reject]

``STORE`` is a SQLite file or ``postgresql://...#schema``. Every tool call appends a line to
``EFFECTS`` (its side effect, counted by the tests). ``--crash`` kills this process with
SIGKILL at one point of the run: ``planning`` (inside the planner of round 1), ``mid_tool``
(inside tool call ``c``, after its side effect), ``between_rounds`` (round 1 finished, before
the next planner call and its checkpoint), ``final_checkpoint`` (while the completed
checkpoint is written), ``after_final_checkpoint`` (once it is written, before the call
returns). ``--metered``: each planner call is one model call (10 tokens), counted by the
run's usage; the result then has ``model_requests``, the model calls this process made.
``--max-requests``: the resumed run's budget (``usage_limits``, finishing at the limit).
``decide`` resumes a paused run with ``--decision``. Prints the run's result as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio

from toolloop import PlannerContext
from toolloop.checkpoints import (
    Checkpoint,
    PostgresCheckpointStore,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.flow import FlowEvent
from toolloop.loop import (
    RoundFinished,
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
)
from toolloop.models import ChatRequest, UsageLimits, stream_chat
from toolloop.testing import ScriptedChatModel, ScriptedChatReply

PLANS: list[dict[str, Any]] = [
    {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": "first", "tool_name": "effect", "tool_kwargs": {"key": "a"}},
            {"purpose": "second", "tool_name": "effect", "tool_kwargs": {"key": "b"}},
        ],
    },
    {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": "third", "tool_name": "effect", "tool_kwargs": {"key": "c"}}
        ],
    },
    {"next_action": "response", "execution_commands": []},
]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "resume", "decide"])
    parser.add_argument("store")
    parser.add_argument("effects", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("--crash", default=None)
    parser.add_argument("--backend", default="asyncio")
    parser.add_argument("--policy", default="fail")
    parser.add_argument("--metered", action="store_true")
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--decision", default="approve")
    args = parser.parse_args()
    crash = args.crash
    model = ScriptedChatModel(
        responder=lambda request: ScriptedChatReply("planning", usage={"total_tokens": 10})
    )

    def effect(key: str) -> str:
        with args.effects.open("a") as f:
            f.write(f"{key}\n")
            f.flush()
            os.fsync(f.fileno())
        if crash == "mid_tool" and key == "c":
            die()
        return f"did {key}"

    class Planner:
        async def plan(self, context: PlannerContext) -> dict[str, Any]:
            if crash == "planning" and context.round_index == 1:
                die()
            if args.metered:  # the model call a planner of a real model makes
                request = ChatRequest(messages=[{"role": "user", "content": "plan"}])
                async with stream_chat(model, request) as deltas:
                    async for _ in deltas:
                        pass
            return PLANS[min(context.round_index, len(PLANS) - 1)]

    def on_event(event: FlowEvent) -> None:
        if crash == "between_rounds" and isinstance(event, RoundFinished):
            if event.round_index == 1:
                die()

    def open_store() -> Any:
        spec: str = args.store
        if spec.startswith("postgresql://"):
            url, _, schema = spec.partition("#")
            cls = Killing(PostgresCheckpointStore)
            return cls(url, schema=schema)
        return Killing(SQLiteCheckpointStore)(spec)

    def Killing(cls: Any) -> Any:
        class Store(cls):  # type: ignore[misc]
            async def put(self, checkpoint: Checkpoint, *, expected_revision: int | None) -> Any:
                final = checkpoint.status == "completed"
                if crash == "final_checkpoint" and final:
                    die()
                written = await super().put(checkpoint, expected_revision=expected_revision)
                if crash == "after_final_checkpoint" and final:
                    die()
                return written

        return Store

    async def go() -> dict[str, Any]:
        async with open_store() as store:
            if args.mode == "run":
                result = await async_plan_and_execute(
                    "do a, b, then c",
                    tools=[effect],
                    planner=Planner(),
                    store=store,
                    run_id=args.run_id,
                    on_event=on_event,
                )
            elif args.mode == "decide":
                result = await async_resume_plan_and_execute(
                    args.run_id,
                    args.decision,
                    store=store,
                    tools=[effect],
                    planner=Planner(),
                )
            else:
                with anyio.fail_after(60):  # the server may take a moment to end a dead
                    while True:  # worker's session (and its lease)
                        try:
                            result = await async_recover_plan_and_execute(
                                args.run_id,
                                store=store,
                                tools=[effect],
                                planner=Planner(),
                                unknown_outcome=args.policy,
                                idempotent_tools=["effect"],
                                usage_limits=UsageLimits(max_requests=args.max_requests),
                                on_usage_limit="finish",
                            )
                            break
                        except RunNotResumableError as exc:
                            if "another live worker" not in str(exc):
                                raise
                            await anyio.sleep(0.05)
            data: dict[str, Any] = result.model_dump(mode="json")
            if args.metered:
                data["model_requests"] = len(model.requests)
            return data

    print(json.dumps(anyio.run(go, backend=args.backend)))


if __name__ == "__main__":
    main()
