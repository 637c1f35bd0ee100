"""A run called as a tool of another (a child run) in the live viewer, in a real headless
Chromium: drawn inside its parent's run, under the call that started it, its own calls and
its own child's under it."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from conftest import Browser

from toolloop.agents import create_agent
from toolloop.kernel import RunResult
from toolloop.loop import as_tool as loop_as_tool
from toolloop.planners import StructuredPlanner
from toolloop.testing import ScriptedChatModel
from toolloop.viewer import ViewerSink

pytestmark = pytest.mark.timeout(300)

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


async def tree(sink: ViewerSink) -> RunResult:
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
    with anyio.fail_after(30):  # a hang guard
        return await create_agent(lead_model, [helper]).run("mail ada", on_event=sink)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_viewer_draws_a_child_run_under_its_parent_s_call(
    chromium: Browser, backend: str
) -> None:
    with ViewerSink(meta={"request": "mail ada"}) as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)
        result = anyio.run(tree, sink, backend=backend)
        top = result.run_id
        chromium.wait_for(
            f"const r = document.querySelector('#runs > article.run[data-execution-id=\"{top}\"]');"
            " return !!r && r.dataset.state === 'finished' &&"
            " r.querySelectorAll('article.run[data-state=finished]').length === 2;",
            what="the run and its two children finished",
        )
        shown = chromium.js(
            """
            const top = document.querySelector(
              `#runs > article.run[data-execution-id="${arguments[0]}"]`);
            const record = top.querySelector(':scope .records > li.record[data-tool=helper]');
            const child = record.querySelector(':scope > .child-runs > article.run');
            const deeper = child.querySelector('li.record[data-tool=deeper]');
            const grandchild = deeper.querySelector(':scope > .child-runs > article.run');
            const calls = (run) => [
              ...run.querySelectorAll(':scope > .rounds > section > ol > li.record')
            ].map(r => r.dataset.tool);
            return {
              tops: [...document.querySelectorAll('#runs > article.run')].length,
              topCalls: calls(top),
              childCalls: calls(child),
              grandchildCalls: calls(grandchild),
              grandchildSent: grandchild.querySelector('li.record[data-tool=send] .result')
                .textContent,
            };
            """,
            top,
        )
    assert shown["tops"] == 1  # the children are inside their parent, not runs of their own
    assert shown["topCalls"] == ["helper"]
    assert shown["childCalls"] == ["deeper"]
    assert shown["grandchildCalls"] == ["send"]
    assert "sent to ada" in shown["grandchildSent"]
    _, errors = chromium.drain()
    assert not errors, errors
