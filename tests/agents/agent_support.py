"""A middleware-agent run in a process of its own, for the crash tests::

    python agent_support.py run|recover|resume DB COUNTER RUN_ID [--crash WHEN] [--backend B]

The tool ``send_mail`` counts how often a mail really went out in the file ``COUNTER``.
``--crash in_tool`` kills the process inside the tool (its intent is journaled, its outcome
is not); ``--crash after_outcome`` kills it once the outcome is journaled, before the next
progress checkpoint. The result is printed as one JSON line.
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

from toolloop.agents import Agent, AgentResult, create_agent
from toolloop.checkpoints import SQLiteCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.runner import ToolCallFinished
from toolloop.testing import ScriptedChatModel


def mail_agent(store: SQLiteCheckpointStore, counter: Path, crash: str | None) -> Agent:
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

    def responder(request: Any) -> Any:
        from toolloop.testing import FakeToolCall, ScriptedChatReply

        answered = [m for m in request.messages if m["role"] == "tool"]
        if answered:
            return f"done: {answered[-1]['content']}"
        return ScriptedChatReply(tool_calls=(FakeToolCall("send_mail", '{"to": "ada"}'),))

    return create_agent(ScriptedChatModel(responder=responder), [send_mail], store=store)


def summary(result: AgentResult) -> dict[str, Any]:
    request = result.request
    return {
        "status": result.status,
        "text": result.text,
        "request": request.model_dump(mode="json") if request is not None else None,
    }


async def main(args: argparse.Namespace) -> None:
    store = SQLiteCheckpointStore(args.db)
    agent = mail_agent(store, Path(args.counter), args.crash)

    def on_event(event: FlowEvent) -> None:
        if args.crash == "after_outcome" and isinstance(event, ToolCallFinished):
            os.kill(os.getpid(), signal.SIGKILL)

    if args.command == "run":
        result = await agent.run("mail ada", run_id=args.run_id, on_event=on_event)
    elif args.command == "recover":
        result = await agent.recover(args.run_id, on_event=on_event)
    else:
        decision = json.loads(args.decision) if args.decision.startswith("{") else args.decision
        result = await agent.resume(args.run_id, decision, on_event=on_event)
    await store.aclose()
    print(json.dumps(summary(result)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "recover", "resume"])
    parser.add_argument("db")
    parser.add_argument("counter")
    parser.add_argument("run_id")
    parser.add_argument("decision", nargs="?", default="approve")
    parser.add_argument("--crash", choices=["in_tool", "after_outcome"])
    parser.add_argument("--backend", default="asyncio")
    parsed = parser.parse_args()
    anyio.run(main, parsed, backend=parsed.backend)
    sys.exit(0)
