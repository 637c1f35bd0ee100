"""A middleware-agent run in a process of its own, for the crash tests::

    python agent_support.py run|recover|resume DB COUNTER RUN_ID [DECISION] [--crash WHEN]
        [--backend B] [--max-requests N] [--unknown-outcome fail|retry|ask] [--idempotent]

The tool ``send_mail`` counts how often a mail really went out in the file ``COUNTER``.
``--crash in_tool`` kills the process inside the tool (its intent is journaled, its outcome
is not); ``--crash after_outcome`` kills it once the outcome is journaled, before the next
progress checkpoint; ``--crash after_model`` kills it once its first model call ended (its
usage journaled), before the model step's checkpoint. Every model call costs 10 tokens;
``--max-requests`` is the run's budget (it finishes at the limit); ``--unknown-outcome`` and
``--idempotent`` (``send_mail`` is safe to run twice) are the run's options. The result is
printed as one JSON line, with the run's usage, its records, the kernel's events it
published, and ``model_requests``, the model calls this process made.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from toolloop.agents import Agent, AgentResult, AgentState, Runtime, after_model, create_agent
from toolloop.checkpoints import SQLiteCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.kernel import RunEvent
from toolloop.models import UsageLimits
from toolloop.runner import ToolCallFinished
from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply


def mail_agent(
    store: SQLiteCheckpointStore,
    model: ScriptedChatModel,
    counter: Path,
    crash: str | None,
    max_requests: int | None = None,
) -> Agent:
    def send_mail(to: str) -> str:
        """Send a mail.

        Args:
            to: the address.
        """
        sent = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(sent + 1))
        if crash == "in_tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"mail {sent + 1} sent to {to}"

    @after_model
    def die(state: AgentState, runtime: Runtime) -> None:
        os.kill(os.getpid(), signal.SIGKILL)  # the model call's usage is journaled by now

    return create_agent(
        model,
        [send_mail],
        middleware=[die] if crash == "after_model" else [],
        store=store,
        usage_limits=UsageLimits(max_requests=max_requests),
        on_usage_limit="finish",
    )


def mail_model() -> ScriptedChatModel:
    """Asks for the mail, then says it is done; every call costs 10 tokens."""

    def responder(request: Any) -> Any:
        ten = {"total_tokens": 10}
        answered = [m for m in request.messages if m["role"] == "tool"]
        if answered:
            return ScriptedChatReply(f"done: {answered[-1]['content']}", usage=ten)
        call = FakeToolCall("send_mail", '{"to": "ada"}')
        return ScriptedChatReply(tool_calls=(call,), usage=ten)

    return ScriptedChatModel(responder=responder)


def summary(
    result: AgentResult, model: ScriptedChatModel, events: list[FlowEvent]
) -> dict[str, Any]:
    request = result.request
    return {
        "status": result.status,
        "stop_reason": result.stop_reason,
        "text": result.text,
        "request": request.model_dump(mode="json") if request is not None else None,
        "usage": result.usage.model_dump(mode="json"),
        "records": [r.model_dump(mode="json") for r in result.records],
        "events": [e.model_dump(mode="json") for e in events if isinstance(e, RunEvent)],
        "model_requests": len(model.requests),
    }


async def main(args: argparse.Namespace) -> None:
    store = SQLiteCheckpointStore(args.db)
    model = mail_model()
    agent = mail_agent(store, model, Path(args.counter), args.crash, args.max_requests)

    events: list[FlowEvent] = []

    def on_event(event: FlowEvent) -> None:
        events.append(event)
        if args.crash == "after_outcome" and isinstance(event, ToolCallFinished):
            os.kill(os.getpid(), signal.SIGKILL)

    idempotent = ["send_mail"] if args.idempotent else []
    policy = args.unknown_outcome
    if args.command == "run":
        result = await agent.run("mail ada", run_id=args.run_id, on_event=on_event)
    elif args.command == "recover":
        result = await agent.recover(
            args.run_id, on_event=on_event, unknown_outcome=policy, idempotent_tools=idempotent
        )
    else:
        decision = json.loads(args.decision) if args.decision.startswith("{") else args.decision
        result = await agent.resume(args.run_id, decision, on_event=on_event)
    await store.aclose()
    print(json.dumps(summary(result, model, events)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "recover", "resume"])
    parser.add_argument("db")
    parser.add_argument("counter")
    parser.add_argument("run_id")
    parser.add_argument("decision", nargs="?", default="approve")
    parser.add_argument("--crash", choices=["in_tool", "after_outcome", "after_model"])
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--unknown-outcome", choices=["fail", "retry", "ask"], default="fail")
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--backend", default="asyncio")
    parsed = parser.parse_args()
    anyio.run(main, parsed, backend=parsed.backend)
    sys.exit(0)
