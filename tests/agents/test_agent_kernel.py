"""The middleware agent as a product of the run kernel: the kernel's options with their
defaults (and a call's over the agent's), ``on_timeout="finish"``, the kernel's events, the
records holding the tools' values, the sync twins."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolloop import ExecutionTimeoutError
from toolloop.agents import (
    AgentModelError,
    AssistantMessage,
    ModelHandler,
    ModelRequest,
    ToolMessage,
    create_agent,
    wrap_model_call,
)
from toolloop.checkpoints import Approve, SQLiteCheckpointStore
from toolloop.errors import UsageLimitError
from toolloop.flow import FlowEvent
from toolloop.kernel import (
    CheckpointSaved,
    ModelCallFinished,
    ModelCallStarted,
    RunFinished,
    RunOptions,
    cut_off_error,
)
from toolloop.models import UsageLimits
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio


def calls(name: str, *args: dict[str, Any]) -> list[dict[str, str]]:
    return [{"name": name, "arguments": json.dumps(a)} for a in args]


def scripted(*replies: Any) -> ScriptedChatModel:
    model = ScriptedChatModel()
    for reply in replies:
        if isinstance(reply, list):
            model.add_reply(tool_calls=reply)
        else:
            model.add_reply(reply)
    return model


class Gate:
    """A tool whose calls wait inside until the test lets them go."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.go = anyio.Event()

    async def hold(self, n: int) -> int:
        """Wait for the gate.

        Args:
            n: which call.
        """
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        await self.go.wait()
        self.inside -= 1
        return n


async def peak_of(agent: Any, gate: Gate, **options: Any) -> int:
    """Run ``agent`` on six held calls; how many were inside at once, all blocked."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "go", **options))
        with anyio.fail_after(30):  # a hang guard
            while gate.inside == 0:
                await anyio.wait_all_tasks_blocked()
            await anyio.wait_all_tasks_blocked()  # every call that can start, started
        inside = gate.inside
        gate.go.set()
    return inside


def six_calls() -> ScriptedChatModel:
    return scripted(calls("hold", *({"n": i} for i in range(6))), "done")


# -- the kernel's options and defaults --------------------------------------------------------


def test_an_agent_s_defaults_are_the_kernel_s() -> None:
    agent = create_agent(ScriptedChatModel())
    assert agent.options == RunOptions(max_turns=100)
    options = agent.options
    assert (options.concurrency, options.tool_timeout, options.model_timeout) == (4, None, None)
    assert (options.timeout, options.on_timeout, options.on_usage_limit) == (None, "raise", "raise")
    assert (options.unknown_outcome, options.store, options.deps) == ("fail", None, None)


async def test_at_most_four_calls_at_once_by_default_and_a_call_may_say_otherwise() -> None:
    gate = Gate()
    assert await peak_of(create_agent(six_calls(), [gate.hold]), gate) == 4
    gate = Gate()
    agent = create_agent(six_calls(), [gate.hold], concurrency=1)
    assert await peak_of(agent, gate, concurrency=3) == 3  # this run's, over the agent's
    gate = Gate()
    agent = create_agent(six_calls(), [gate.hold], concurrency=1)
    assert await peak_of(agent, gate) == 1  # the call's option changed nothing of the agent


async def test_a_call_s_timeouts_and_budget_override_the_agent_s() -> None:
    async def slow() -> str:
        """Slow."""
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    model = scripted(calls("slow", {}), "done")
    with anyio.fail_after(30):  # a hang guard
        result = await create_agent(model, [slow]).run("go", tool_timeout=0.05)
    (record,) = result.records
    assert "did not finish within 0.05 s" in str(record.error)

    hanging = ScriptedChatModel([ScriptedChatReply("late", first_delay=30)])
    with anyio.fail_after(20), pytest.raises(AgentModelError, match=r"within 0\.05 s"):
        await create_agent(hanging).run("go", model_timeout=0.05)

    budget = UsageLimits(max_requests=0)
    with pytest.raises(UsageLimitError, match="max_requests=0"):
        await create_agent(scripted("hi")).run("go", usage_limits=budget)
    finished = await create_agent(scripted("hi")).run(
        "go", usage_limits=budget, on_usage_limit="finish"
    )
    assert (finished.stop_reason, finished.text) == ("usage_limit", None)


async def test_a_bad_option_of_a_call_is_refused_before_anything_runs() -> None:
    model = scripted("hi")
    agent = create_agent(model)
    with pytest.raises(
        TypeError, match=r"no run option named 'concurency'; did you mean 'concurrency'"
    ):
        await agent.run("go", concurency=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="tool_timeout must be a number of seconds above 0"):
        await agent.run("go", tool_timeout=-1)
    assert model.requests == []


# -- on_timeout -------------------------------------------------------------------------------


async def test_on_timeout_finish_ends_the_run_with_what_it_has(tmp_path: Path) -> None:
    gate = Gate()
    model = scripted(calls("hold", {"n": 1}, {"n": 2}), "on it")
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    events: list[FlowEvent] = []
    agent = create_agent(model, [gate.hold], store=store, on_timeout="finish")
    with anyio.fail_after(30):  # a hang guard: the run's own timeout ends it
        result = await agent.run("go", run_id="r", timeout=0.2, on_event=events.append)
    assert (result.status, result.stop_reason) == ("completed", "timeout")
    assert len(model.requests) == 1
    assert [r.success for r in result.records] == [False, False]  # both calls answered
    assert str(result.records[0].error) == cut_off_error("hold", "timeout")
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert (end.stop_reason, end.records, end.turns) == ("timeout", 2, 1)
    stored = await store.get("r")
    assert stored is not None and stored.status == "completed"
    # the conversation stays valid: a next run on its state goes on
    again = await create_agent(model, [gate.hold]).run("and now?", state=result.state)
    assert again.text == "on it"
    sent = [m["role"] for m in model.requests[-1].messages]
    assert sent == ["user", "assistant", "tool", "tool", "user"]
    with pytest.raises(ExecutionTimeoutError):  # the default: raise
        await create_agent(scripted(calls("hold", {"n": 3})), [Gate().hold]).run("go", timeout=0.1)
    await store.aclose()


# -- the kernel's events ------------------------------------------------------------------------


def echo(data: dict[str, Any]) -> dict[str, Any]:
    """Give the data back.

    Args:
        data: any JSON object.
    """
    return {"echoed": data}


async def test_a_durable_run_tells_its_model_calls_checkpoints_and_end_in_order(
    tmp_path: Path,
) -> None:
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    model = scripted(calls("echo", {"data": {"a": [1, 2]}}), "done")
    events: list[FlowEvent] = []
    result = await create_agent(model, [echo], store=store).run("go", on_event=events.append)
    await store.aclose()
    told = [
        (e.kind, getattr(e, "step", None))
        for e in events
        if isinstance(
            e,
            (ModelCallStarted, ModelCallFinished, CheckpointSaved, ToolCallStarted, RunFinished),
        )
        or isinstance(e, ToolCallFinished)
    ]
    assert told == [
        ("model_call_started", None),
        ("model_call_finished", None),
        ("checkpoint_saved", "model"),
        ("tool_call_started", None),
        ("tool_call_finished", None),
        ("checkpoint_saved", "tools"),
        ("model_call_started", None),
        ("model_call_finished", None),
        ("checkpoint_saved", "model"),
        ("run_finished", None),
    ]
    assert events[-1].kind == "execution_finished"  # RunFinished comes before the engine's end
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    asked = next(e for e in events if isinstance(e, ModelCallFinished))
    assert asked.tool_calls[0]["id"] == started.call_id  # one id for the call
    # the record holds the tool's value as it came; the model saw its JSON text
    (record,) = result.records
    assert record.result == {"echoed": {"a": [1, 2]}}
    answer = result.messages[2]
    assert isinstance(answer, ToolMessage)
    assert json.loads(answer.content) == {"echoed": {"a": [1, 2]}}
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished.record == record and finished.source == "ran"


async def test_a_reply_a_middleware_made_up_is_no_model_call() -> None:
    @wrap_model_call
    def canned(request: ModelRequest, handler: ModelHandler) -> AssistantMessage:
        return AssistantMessage(content="canned")

    events: list[FlowEvent] = []
    model = ScriptedChatModel()
    result = await create_agent(model, middleware=[canned]).run("go", on_event=events.append)
    assert result.text == "canned" and model.requests == []
    assert not [e for e in events if isinstance(e, (ModelCallStarted, ModelCallFinished))]
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert end.turns == 1  # a turn, but no model call
    assert end.usage is not None and end.usage.requests == 0


# -- the sync twins -----------------------------------------------------------------------------


def send(to: str) -> str:
    """Send a mail.

    Args:
        to: the address.
    """
    return f"sent to {to}"


def test_the_sync_twins_run_resume_and_recover(tmp_path: Path) -> None:
    store = SQLiteCheckpointStore(tmp_path / "runs.db")
    model = scripted(calls("send", {"to": "ada"}), "mailed")
    agent = create_agent(model, [send], store=store, needs_approval=["send"])
    paused = agent.run_sync("mail ada", run_id="r", backend="trio")
    assert paused.paused and paused.request is not None
    done = agent.resume_sync("r", Approve())
    assert (done.status, done.text) == ("completed", "mailed")

    gate = Gate()
    held = create_agent(scripted(calls("hold", {"n": 1})), [gate.hold], store=store)

    async def cut_off() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(held.run, "go", run_id="cut"))
            with anyio.fail_after(30):
                while gate.inside == 0:
                    await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()

    anyio.run(cut_off)
    recovering = create_agent(scripted("the call was cut off"), [gate.hold], store=store)
    recovered = recovering.recover_sync("cut")
    assert (recovered.status, recovered.text) == ("completed", "the call was cut off")
    (record,) = recovered.records
    assert "the run's cancellation ended it while it ran" in str(record.error)
    anyio.run(store.aclose)
