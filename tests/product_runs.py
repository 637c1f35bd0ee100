"""Each product of the run kernel driven through its public API with a scripted model, for
the tests of the surfaces (viewer, timeline, spans): a run that calls one tool and answers,
or that pauses for a human's approval of the call and is resumed.

Every model call reports ``USAGE``; the loop's planner reads each plan to its end, so every
call's usage is counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from toolloop.agents import create_agent
from toolloop.checkpoints import Approve, MemoryCheckpointStore
from toolloop.flow import FlowEvent
from toolloop.kernel import RunResult
from toolloop.loop import async_plan_and_execute, async_resume_plan_and_execute
from toolloop.planners import StructuredPlanner
from toolloop.status_agent import StatusAgent
from toolloop.testing import ScriptedChatModel
from toolloop.tools import RunContext

PRODUCTS = ("loop", "agent", "status")
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
MODEL_CALLS = {"loop": 2, "agent": 2, "status": 4}
"""The model calls of a run of each product, paused and resumed or not."""

OnEvent = Callable[[FlowEvent], None]


async def send(ctx: RunContext[None], to: str) -> str:
    """Send a mail.

    Args:
        to: who gets it.
    """
    ctx.report("sending", to=to)
    return f"sent to {to}"


def _model(product: str) -> ScriptedChatModel:
    model = ScriptedChatModel()
    if product == "loop":
        command = {"purpose": "mail", "tool_name": "send", "tool_kwargs": {"to": "ada"}}
        model.add_reply(
            json.dumps({"next_action": "execute", "execution_commands": [command]}), usage=USAGE
        )
        model.add_reply(json.dumps({"next_action": "response", "content": "sent"}), usage=USAGE)
    elif product == "agent":
        model.add_reply(tool_calls=[{"name": "send", "arguments": '{"to": "ada"}'}], usage=USAGE)
        model.add_reply("sent", usage=USAGE)
    else:
        call = {"tool_name": "send", "arguments": {"to": "ada"}, "purpose": "mail"}
        decision = {"action": "call_tools", "tool_calls": [call], "reason": "", "answer": None}
        model.add_reply("the user wants a mail sent", usage=USAGE)
        model.add_reply(json.dumps({"steps": ["send the mail"]}), usage=USAGE)
        model.add_reply(json.dumps(decision), usage=USAGE)
        model.add_reply(
            json.dumps({"verdict": "finish", "note": "", "answer": "sent"}), usage=USAGE
        )
    return model


class Driven:
    """One product's run: ``run`` it (``pause``: its tool call needs approval), ``resume``
    it approved."""

    def __init__(self, product: str) -> None:
        self.product = product
        self.model = _model(product)
        self.store = MemoryCheckpointStore()
        self.status_agent = StatusAgent(model=self.model, tools=[send], store=self.store)

    async def run(self, on_event: OnEvent, *, pause: bool = False, **more: Any) -> RunResult:
        """Run it (``more``: other run options, e.g. ``max_result_chars``)."""
        options: dict[str, Any] = {"on_event": on_event, **more}
        if pause:
            options["needs_approval"] = ["send"]
        if self.product == "loop":
            planner = StructuredPlanner(self.model, short_circuit=False)
            return await async_plan_and_execute(
                "mail ada", tools=[send], planner=planner, store=self.store, **options
            )
        if self.product == "agent":
            agent = create_agent(self.model, [send])
            return await agent.run("mail ada", store=self.store, **options)
        return await self.status_agent.run("mail ada", **options)

    async def resume(self, run_id: str, on_event: OnEvent) -> RunResult:
        if self.product == "loop":
            planner = StructuredPlanner(self.model, short_circuit=False)
            return await async_resume_plan_and_execute(
                run_id, Approve(), planner=planner, tools=[send], store=self.store,
                on_event=on_event,
            )  # fmt: skip
        if self.product == "agent":
            agent = create_agent(self.model, [send])
            return await agent.resume(run_id, Approve(), store=self.store, on_event=on_event)
        return await self.status_agent.resume(run_id, Approve(), on_event=on_event)
