"""Functions, tools, jobs and a probe actor for the Ray tests, importable by Ray's workers
(the suite's cluster puts this folder on their ``PYTHONPATH``).

The probe is a named async actor through which a task or a run tells the test what it is
doing (started, interrupted, its process id) and waits for the test's go: order is proven
with these marks and gates, never with clocks.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import anyio
import ray

from toolloop import ToolCommand
from toolloop.agents import create_agent
from toolloop.models import ChatRequest
from toolloop.ray import Host
from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply, ScriptedPlanner
from toolloop.tools import RunContext

PROBE = "toolloop-test-probe"


class Probe:
    """Marks (key -> list of values) and gates (key -> event), shared by tasks and tests."""

    def __init__(self) -> None:
        self.marks: dict[str, list[Any]] = {}
        self.gates: dict[str, anyio.Event] = {}
        self.changed: anyio.Event | None = None

    def mark(self, key: str, value: Any = None) -> None:
        self.marks.setdefault(key, []).append(value)
        if self.changed is not None:
            self.changed.set()

    def get(self, key: str) -> list[Any]:
        return list(self.marks.get(key, []))

    async def until(self, key: str, count: int = 1) -> list[Any]:
        while len(self.marks.get(key, [])) < count:
            self.changed = anyio.Event()
            await self.changed.wait()
        return list(self.marks[key])

    def _gate(self, key: str) -> anyio.Event:
        if key not in self.gates:
            self.gates[key] = anyio.Event()
        return self.gates[key]

    def open(self, key: str) -> None:
        self._gate(key).set()

    async def wait_open(self, key: str, who: Any = None) -> None:
        """Wait for the gate; marks ``waiting``, then ``stopped waiting`` however it ends
        (a cancelled caller's wait is cancelled too: Ray cancels what a cancelled task
        submitted)."""
        self.mark("waiting", who)
        try:
            await self._gate(key).wait()
        finally:
            self.mark("stopped waiting", who)


def probe() -> Any:
    """The probe actor's handle (from a task, an actor or the driver)."""
    return ray.get_actor(PROBE)


def new_probe() -> Any:
    """A fresh probe, replacing the previous one (keep the handle: an actor whose last
    handle goes away is destroyed)."""
    try:
        ray.kill(ray.get_actor(PROBE))
    except ValueError:
        pass
    handle: Any = ray.remote(Probe).options(name=PROBE, num_cpus=0).remote()
    ray.get(handle.get.remote("ready"), timeout=60)
    return handle


# --- functions for ray_tool ---------------------------------------------------------------


def square(x: int) -> dict[str, int]:
    """The square of x, with the process it was computed in.

    Args:
        x: the number.
    """
    ray.get(probe().mark.remote("square", x))  # marked before the result is returned
    return {"square": x * x, "pid": os.getpid()}


def stubborn(seconds: float) -> str:
    """Runs for a long time unless cancelled; tells the probe it started and was interrupted.

    Args:
        seconds: how long it would run.
    """
    handle = probe()
    try:  # the interrupt may come as soon as the probe has the mark, before get returns
        ray.get(handle.mark.remote("started", os.getpid()))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.02)
    except KeyboardInterrupt:
        ray.get(handle.mark.remote("interrupted", os.getpid()))
        raise
    return "finished"


def meet(count: int) -> str:
    """Waits until ``count`` calls run at once; the node it ran on.

    Args:
        count: how many calls to wait for.
    """
    handle = probe()
    ray.get(handle.mark.remote("met"))
    ray.get(handle.until.remote("met", count))
    return str(ray.get_runtime_context().get_node_id())


def fails(reason: str) -> str:
    """Raises a ValueError with the reason.

    Args:
        reason: what to say.
    """
    raise ValueError(reason)


def burn(ms: int) -> int:
    """Pure-Python work for about ``ms`` milliseconds of one CPU.

    Args:
        ms: milliseconds of work.
    """
    end = time.process_time() + ms / 1000
    n = 0
    while time.process_time() < end:
        n += 1
    return n


class Counter:
    """A stateful tool's actor: counts what it was given."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, amount: int) -> int:
        """Add to the running total and return it.

        Args:
            amount: how much to add.
        """
        self.total += amount
        return self.total


class Sleeper:
    """An async actor whose calls can be cancelled; counts starts and cancellations."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.changed: anyio.Event | None = None

    def _changed(self) -> None:
        if self.changed is not None:
            self.changed.set()

    async def nap(self, seconds: float) -> str:
        """Sleep, unless cancelled.

        Args:
            seconds: how long.
        """
        self.started += 1
        self._changed()
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            self._changed()
            raise
        return "rested"

    async def until(self, started: int, cancelled: int) -> list[int]:
        """Wait until at least that many calls started and were cancelled."""
        while self.started < started or self.cancelled < cancelled:
            self.changed = anyio.Event()
            await self.changed.wait()
        return [self.started, self.cancelled]


# --- jobs for the pool --------------------------------------------------------------------


def lookup(topic: str) -> dict[str, str]:
    """What is known about a topic.

    Args:
        topic: the topic.
    """
    return {"topic": topic, "fact": topic[::-1]}


async def gated(topic: str) -> dict[str, str]:
    """Tells the probe it runs, then waits for the probe's gate 'go'.

    Args:
        topic: the topic.
    """
    handle = probe()
    await handle.mark.remote("gated", topic)
    await handle.wait_open.remote("go", topic)
    return {"topic": topic}


def plan_for(item: Any) -> ScriptedPlanner:
    """A scripted planner for one item: look the topic up (twice for a long topic), then
    answer. Made in the actor, per run."""
    topic = item if isinstance(item, str) else item["user_input"]
    tool = "gated" if topic.startswith("gate") else "lookup"
    commands = [{"purpose": f"about {topic}", "tool_name": tool, "tool_kwargs": {"topic": topic}}]
    if len(topic) > 6:
        commands.append(
            {"purpose": f"again {topic}", "tool_name": tool, "tool_kwargs": {"topic": topic}}
        )
    return ScriptedPlanner([{"next_action": "execute", "execution_commands": commands}])


class NodeJob:
    """A job that answers with where it ran (node, process) and the limiter's tokens."""

    def setup(self) -> None:
        pass

    async def run(self, item: Any, host: Host) -> dict[str, Any]:
        if item == "boom":
            raise RuntimeError("the job refused 'boom'")
        return {
            "item": item,
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "tokens": None if host.limiter is None else host.limiter.total_tokens,
            "actor": host.actor_index,
        }


class CountingJob(NodeJob):
    """A job carrying a big payload, counting (in the driver) how often it is pickled."""

    pickled = 0

    def __init__(self) -> None:
        self.payload = b"x" * 2_000_000

    def __getstate__(self) -> dict[str, Any]:
        CountingJob.pickled += 1
        return dict(self.__dict__)


def _respond(request: ChatRequest) -> ScriptedChatReply | str:
    """Looks the user's topic up, then answers with what the tool said."""
    last = request.messages[-1]
    if last.get("role") == "tool":
        data = json.loads(last["content"])
        return f"About {data['topic']}: {data['fact']}"
    topic = next(m["content"] for m in request.messages if m.get("role") == "user")
    call = FakeToolCall(name="lookup", arguments=json.dumps({"topic": topic}))
    return ScriptedChatReply(tool_calls=(call,))


def make_agent() -> Any:
    """An agent on a scripted model, made in the actor (each run gets the actor's limiter)."""
    return create_agent(ScriptedChatModel(responder=_respond), [lookup])


def command(tool_name: str, **kwargs: Any) -> ToolCommand:
    return ToolCommand(purpose=f"call {tool_name}", tool_name=tool_name, tool_kwargs=kwargs)


# --- one durable task for every product's job ----------------------------------------------
# "mail ada": one call of send(to="ada"), then the answer "sent"; the model of each product
# answers from what it is told (so one agent, or planner, serves every run of an actor)


def send(ctx: RunContext[Any], to: str) -> str:
    """Send a mail (and tell the run's deps, when they are a function).

    Args:
        to: who gets it.
    """
    if callable(ctx.deps):
        ctx.deps(to)
    return f"sent to {to}"


def _mailed(request: ChatRequest) -> bool:
    return "sent to " in json.dumps(request.messages)


def plan_mail(context: Any) -> dict[str, Any]:
    """The loop's planner: mail the person the request names, then answer."""
    if context.done_plans:
        return {"next_action": "response", "content": "sent"}
    to = context.user_input.split()[-1]
    command = {"purpose": "mail", "tool_name": "send", "tool_kwargs": {"to": to}}
    return {"next_action": "execute", "execution_commands": [command]}


def mail_planner(item: Any) -> Any:
    """The loop job's planner factory (the same planner for every item)."""
    return plan_mail


def _agent_mail(request: ChatRequest) -> ScriptedChatReply | str:
    if _mailed(request):
        return "sent"
    to = request.messages[-1]["content"].split()[-1]
    return ScriptedChatReply(tool_calls=(FakeToolCall("send", json.dumps({"to": to})),))


def _status_mail(request: ChatRequest) -> str:
    system = request.messages[0]["content"]
    if "Analyze the request" in system:
        return "the user wants a mail sent"
    if "Write a plan" in system:
        return '{"steps": ["send the mail"]}'
    if "Reflect on the last results" in system:
        return json.dumps({"verdict": "finish", "note": "", "answer": "sent"})
    if _mailed(request):
        return json.dumps({"action": "finish", "tool_calls": [], "reason": "", "answer": "sent"})
    asked = json.dumps(request.messages)
    to = "bob" if "mail bob" in asked else "ada"
    call = {"tool_name": "send", "arguments": {"to": to}, "purpose": "mail"}
    return json.dumps({"action": "call_tools", "tool_calls": [call], "reason": "", "answer": None})


def make_mail_agent() -> Any:
    """The middleware agent of the mail task, made in the actor."""
    return create_agent(ScriptedChatModel(responder=_agent_mail), [send])


def make_mail_status_agent() -> Any:
    """The status agent of the mail task, made in the actor."""
    from toolloop.status_agent import StatusAgent

    return StatusAgent(model=ScriptedChatModel(responder=_status_mail), tools=[send])


def mail_job(product: str, **given: Any) -> Any:
    """The job of ``product`` (``loop``, ``middleware``, ``status``) for the mail task."""
    from toolloop.ray import AgentJob, LoopJob, StatusAgentJob

    if product == "loop":
        return LoopJob(planner=mail_planner, tools=[send], **given)
    if product == "middleware":
        return AgentJob(agent=make_mail_agent, **given)
    return StatusAgentJob(agent=make_mail_status_agent, **given)
