"""A tree of runs called as tools (a lead agent, a helper agent, a loop that sends a mail),
for the tests of the surfaces that show child runs (trace, timeline, OpenTelemetry, viewer)."""

from __future__ import annotations

import json
from typing import Any

import anyio

from toolloop.agents import create_agent
from toolloop.kernel import RunResult
from toolloop.loop import as_tool as loop_as_tool
from toolloop.planners import StructuredPlanner
from toolloop.testing import ScriptedChatModel

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def send(to: str) -> str:
    """Send a mail.

    Args:
        to: who gets it.
    """
    return f"sent to {to}"


def ask(model: ScriptedChatModel, tool: str, call_id: str, **arguments: Any) -> None:
    call = {"name": tool, "arguments": json.dumps(arguments), "id": call_id}
    model.add_reply(tool_calls=[call], usage=USAGE)


async def tree(on_event: Any) -> RunResult:
    """A lead agent calls a helper agent, which calls a loop that sends a mail."""
    loop_model = ScriptedChatModel()
    command = {"purpose": "mail", "tool_name": "send", "tool_kwargs": {"to": "ada"}}
    loop_model.add_reply(
        json.dumps({"next_action": "execute", "execution_commands": [command]}), usage=USAGE
    )
    loop_model.add_reply(json.dumps({"next_action": "response", "content": "sent"}), usage=USAGE)
    deeper = loop_as_tool(
        planner=StructuredPlanner(loop_model, short_circuit=False),
        tools=[send],
        name="deeper",
        description="mails",
    )
    helper_model = ScriptedChatModel()
    ask(helper_model, "deeper", "h1", request="mail ada")
    helper_model.add_reply("mailed ada", usage=USAGE)
    helper = create_agent(helper_model, [deeper]).as_tool(name="helper", description="helps")
    lead_model = ScriptedChatModel()
    ask(lead_model, "helper", "l1", request="get ada mailed")
    lead_model.add_reply("done", usage=USAGE)
    lead = create_agent(lead_model, [helper])
    with anyio.fail_after(30):  # a hang guard
        return await lead.run("mail ada", on_event=on_event)
