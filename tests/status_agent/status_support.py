"""Support for the status agent's tests: scripted steps, tools, and a command line that runs
an agent in a subprocess (for the cross-process and crash tests).

    python status_support.py run|resume|recover DB COUNTER RUN_ID [DECISION] [--crash WHEN]
        [--approval] [--metered] [--unknown-outcome fail|retry|ask] [--idempotent]
        [--backend trio]

prints the result as one line of JSON. ``--crash after_outcome`` kills the process (SIGKILL)
right after a tool call's outcome is journaled, before the checkpoint is written;
``--crash in_tool`` kills it inside the tool, after its effect and before its outcome is
journaled; ``--crash after_analysis`` kills it once the analysis node ended, before its
checkpoint. ``--metered``: the analysis asks a model (one call, 10 tokens); the result then
has the run's usage and ``model_requests``, the model calls this process made.
``--unknown-outcome``: the run's policy for a call cut off (``--idempotent``: the mail is
safe to send twice).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from toolloop.checkpoints import CheckpointStore, SQLiteCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.models import ChatRequest, stream_chat
from toolloop.status_agent._agent import StatusAgent, StatusAgentResult
from toolloop.status_agent._steps import StatusView
from toolloop.testing import ScriptedChatModel, ScriptedChatReply


class Scripted:
    """A step that answers its ``n``-th call with ``outputs[n]`` (called with the view if
    callable, raised if an exception); it keeps every view it saw."""

    def __init__(self, *outputs: Any, name: str = "step") -> None:
        self.outputs = list(outputs)
        self.name = name
        self.views: list[StatusView] = []

    async def __call__(self, view: StatusView) -> Any:
        self.views.append(view)
        if len(self.views) > len(self.outputs):
            raise LookupError(
                f"the scripted {self.name} step has {len(self.outputs)} outputs; call "
                f"{len(self.views)} asked for one more"
            )
        output = self.outputs[len(self.views) - 1]
        if isinstance(output, BaseException):
            raise output
        if callable(output):
            output = output(view)
            if inspect.isawaitable(output):
                output = await output
        return output


def call(tool_name: str, purpose: str = "", **arguments: Any) -> dict[str, Any]:
    return {"tool_name": tool_name, "arguments": arguments, "purpose": purpose or tool_name}


def calls(*items: dict[str, Any], reason: str = "") -> dict[str, Any]:
    return {"action": "call_tools", "tool_calls": list(items), "reason": reason}


def finish(answer: str | None = None) -> dict[str, Any]:
    return {"action": "finish", "answer": answer}


class Tools:
    """Tools that note every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def search(self, query: str) -> str:
        """Search the web.

        Args:
            query: what to look for.
        """
        self.calls.append(("search", {"query": query}))
        return f"results for {query}"

    def fetch(self, url: str) -> str:
        """Fetch a page.

        Args:
            url: the page's address.
        """
        self.calls.append(("fetch", {"url": url}))
        if "broken" in url:
            raise ConnectionError(f"{url} is unreachable")
        return f"page {url}"

    def send_mail(self, to: str, body: str) -> str:
        """Send a mail.

        Args:
            to: the address.
            body: the text.
        """
        self.calls.append(("send_mail", {"to": to, "body": body}))
        return f"sent to {to}"

    @property
    def all(self) -> list[Callable[..., Any]]:
        return [self.search, self.fetch, self.send_mail]


def make_agent(
    tools: Tools | None = None,
    *,
    analyze: Any = None,
    plan: Any = None,
    decide: Any = None,
    reflect: Any = None,
    converse: Any = None,
    **options: Any,
) -> StatusAgent:
    """An agent of scripted steps; each step not given answers with a sensible default."""
    return StatusAgent(
        tools=(tools or Tools()).all,
        analyze=analyze or Scripted(*["the user wants something"] * 20, name="analyze"),
        plan=plan or Scripted(*[["use the tools"]] * 20, name="plan"),
        decide=decide or Scripted(*[finish("done")] * 20, name="decide"),
        reflect=reflect or Scripted(*[{"verdict": "finish"}] * 20, name="reflect"),
        converse=converse or Scripted(*["hello!"] * 20, name="converse"),
        **options,
    )


def paying_step(model: ScriptedChatModel, output: Any) -> Callable[[StatusView], Any]:
    """A step that asks ``model`` (one call), then answers ``output`` (raised if an
    exception)."""

    async def step(view: StatusView) -> Any:
        request = ChatRequest(messages=[{"role": "user", "content": view.user_input}])
        async with stream_chat(model, request) as deltas:
            async for _ in deltas:
                pass
        if isinstance(output, BaseException):
            raise output
        return output

    return step


def ten_tokens() -> ScriptedChatModel:
    """A model whose every answer costs 10 tokens (one request)."""
    return ScriptedChatModel(
        responder=lambda request: ScriptedChatReply("ok", usage={"total_tokens": 10})
    )


def path_of(result: StatusAgentResult) -> list[str]:
    """The run's transitions as ``node:status``."""
    return [f"{t.node}:{t.status}" for t in result.state.history]


# -- the agent of the subprocess tests ---------------------------------------------------


def mail_agent(
    store: CheckpointStore,
    counter: Path,
    *,
    approval: bool,
    crash: str | None,
    model: ScriptedChatModel | None = None,
    **options: Any,
) -> StatusAgent:
    """Mails Ada once; ``counter`` counts how often the mail really went out; with a
    ``model``, the analysis asks it first."""

    def send_mail(to: str, body: str) -> str:
        """Send a mail.

        Args:
            to: the address.
            body: the text.
        """
        sent = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(sent + 1))
        if crash == "in_tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"mail {sent + 1} sent to {to}"

    def summary(view: StatusView) -> str:
        last = view.records[-1].record
        return f"done: {last.result if last.success else last.error}"

    def decide(view: StatusView) -> dict[str, Any]:
        if not view.records:
            return calls(call("send_mail", "tell Ada", to="ada@example.org", body="hello"))
        return finish(summary(view))

    async def analyze(view: StatusView) -> str:
        if model is not None:
            request = ChatRequest(messages=[{"role": "user", "content": view.user_input}])
            async with stream_chat(model, request) as deltas:
                return "".join([delta.content async for delta in deltas])
        return "mail Ada"

    return StatusAgent(
        tools=[send_mail],
        analyze=analyze,
        plan=lambda view: ["send the mail"],
        decide=decide,
        reflect=lambda view: {"verdict": "finish", "answer": summary(view)},
        converse=lambda view: "nothing to say",
        store=store,
        needs_approval=["send_mail"] if approval else False,
        **options,
    )


def result_data(
    result: StatusAgentResult, model: ScriptedChatModel | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": result.status,
        "text": result.text,
        "request": None if result.request is None else result.request.model_dump(mode="json"),
        "path": path_of(result),
        "sources": [r.source for r in result.state.records],
        "errors": [r.record.error for r in result.state.records],
    }
    if model is not None:
        data["usage"] = result.usage.model_dump(mode="json")
        data["model_requests"] = len(model.requests)
    return data


def analyst() -> ScriptedChatModel:
    """A model whose every answer costs 10 tokens."""
    return ScriptedChatModel(
        responder=lambda request: ScriptedChatReply("mail Ada", usage={"total_tokens": 10})
    )


async def _main(args: argparse.Namespace) -> None:
    def on_event(event: FlowEvent) -> None:
        if args.crash == "after_outcome" and event.kind == "tool_call_finished":
            os.kill(os.getpid(), signal.SIGKILL)  # after the outcome, before the checkpoint
        if args.crash == "after_analysis" and event.kind == "status_changed":
            os.kill(os.getpid(), signal.SIGKILL)  # the first node ended, before its checkpoint

    model = analyst() if args.metered else None
    async with SQLiteCheckpointStore(args.db) as store:
        agent = mail_agent(
            store,
            Path(args.counter),
            approval=args.approval,
            crash=args.crash,
            model=model,
            unknown_outcome=args.unknown_outcome,
            idempotent_tools=["send_mail"] if args.idempotent else (),
        )
        if args.command == "run":
            result = await agent.run("Mail Ada", run_id=args.run_id, on_event=on_event)
        elif args.command == "resume":
            decision = json.loads(args.decision)
            result = await agent.resume(args.run_id, decision, on_event=on_event)
        else:
            result = await agent.recover(args.run_id, on_event=on_event)
    print(json.dumps(result_data(result, model)))


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "resume", "recover"])
    parser.add_argument("db")
    parser.add_argument("counter")
    parser.add_argument("run_id")
    parser.add_argument("decision", nargs="?", default="null")
    parser.add_argument("--crash", choices=["after_outcome", "in_tool", "after_analysis"])
    parser.add_argument("--approval", action="store_true")
    parser.add_argument("--metered", action="store_true")
    parser.add_argument("--unknown-outcome", default="fail", choices=["fail", "retry", "ask"])
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--backend", default="asyncio")
    args = parser.parse_args(argv)
    anyio.run(_main, args, backend=args.backend)


if __name__ == "__main__":
    main(sys.argv[1:])
