"""The status agent's job, in this process (no cluster): the agent is built once per actor,
each run gets the actor's limiter and forwards its events, and the job's options are run
options over the agent's."""

from __future__ import annotations

import json
import pickle
from typing import Any

import anyio
import pytest

from toolloop.flow import FlowEvent
from toolloop.kernel import RunFinished
from toolloop.models import ChatRequest
from toolloop.status_agent import StatusAgent
from toolloop.testing import ScriptedChatModel

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'toolloop[ray]'")

from toolloop.ray import Host, StatusAgentJob

pytestmark = pytest.mark.anyio

built: list[StatusAgent] = []
limiters: list[anyio.CapacityLimiter] = []
held: list[int] = []


async def lookup(topic: str) -> dict[str, str]:
    """What is known about a topic.

    Args:
        topic: the topic.
    """
    held.append(limiters[-1].borrowed_tokens)  # the run's calls hold the actor's limiter
    return {"topic": topic}


def respond(request: ChatRequest) -> str:
    """Each step of the status agent: look tea up, then finish."""
    system = request.messages[0]["content"]
    if "Analyze the request" in system:
        return "the user asks about tea"
    if "Write a plan" in system:
        return '{"steps": ["look tea up"]}'
    if "Reflect on the last results" in system:
        return json.dumps({"verdict": "finish", "note": "", "answer": "tea"})
    call = {"tool_name": "lookup", "arguments": {"topic": "tea"}, "purpose": "tea"}
    return json.dumps({"action": "call_tools", "tool_calls": [call], "reason": "", "answer": None})


def make_agent() -> StatusAgent:
    agent = StatusAgent(model=ScriptedChatModel(responder=respond), tools=[lookup], max_turns=40)
    built.append(agent)
    return agent


async def test_a_status_agent_job_builds_its_agent_once_and_gives_each_run_the_host() -> None:
    built.clear()
    held.clear()
    job = StatusAgentJob(agent=make_agent, options={"max_turns": 4})
    events: list[FlowEvent] = []
    limiters.append(anyio.CapacityLimiter(3))
    host = Host(limiter=limiters[-1], on_event=events.append, actor_index=0)
    job.setup()
    first = await job.run("tea?", host)
    second = await job.run("tea again?", host)
    assert len(built) == 1  # one agent serves the actor's runs
    assert first.stop_reason == second.stop_reason == "max_turns"  # the job's option
    assert first.records[0].result == {"topic": "tea"}  # the tool's value, as it came
    assert held == [1, 1]
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["max_turns"] * 2
    shipped: Any = pickle.loads(pickle.dumps(StatusAgentJob(agent=make_agent)))
    assert shipped._agent is None  # built again where it runs
