"""A middleware-agent run cut off (cancelled, or its process killed) is recovered from its
last checkpoint: finished tool calls are replayed, never re-run; a call whose outcome is
unknown follows the run's ``unknown_outcome``: answered with what cut it off (``"fail"``),
run again when its tool is idempotent (``"retry"``), or put to a human (``"ask"``)."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolloop.agents import create_agent
from toolloop.checkpoints import (
    Approve,
    Edit,
    MemoryCheckpointStore,
    Reject,
    RunNotResumableError,
    SQLiteCheckpointStore,
)
from toolloop.errors import ResumeError
from toolloop.flow import FlowEvent
from toolloop.runner import ToolCallFinished, ToolCallStarted
from toolloop.testing import ScriptedChatModel, ScriptedChatReply

pytestmark = pytest.mark.anyio

SUPPORT = Path(__file__).with_name("agent_support.py")


def mail_model() -> ScriptedChatModel:
    def responder(request: Any) -> Any:
        from toolloop.testing import FakeToolCall, ScriptedChatReply

        answered = [m for m in request.messages if m["role"] == "tool"]
        if answered:
            return f"done: {answered[-1]['content']}"
        return ScriptedChatReply(tool_calls=(FakeToolCall("send_mail", '{"to": "ada"}'),))

    return ScriptedChatModel(responder=responder)


class Mailer:
    """A tool that can be held inside its call by a gate."""

    def __init__(self, hold: bool) -> None:
        self.sent = 0
        self.inside = anyio.Event()
        self.hold = hold

    async def send_mail(self, to: str) -> str:
        """Send a mail.

        Args:
            to: the address.
        """
        self.sent += 1
        self.inside.set()
        if self.hold:
            await anyio.sleep_forever()
        return f"mail {self.sent} sent to {to}"


async def cancelled_mid_tool(store: MemoryCheckpointStore) -> Mailer:
    mailer = Mailer(hold=True)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "mail ada", run_id="r"))
        with anyio.fail_after(30):
            await mailer.inside.wait()
        tg.cancel_scope.cancel()
    checkpoint = await store.get("r")
    assert checkpoint is not None and checkpoint.status == "running"
    return mailer


async def test_by_default_a_cut_off_call_is_answered_with_what_cut_it_off() -> None:
    store = MemoryCheckpointStore()
    assert (await cancelled_mid_tool(store)).sent == 1
    mailer = Mailer(hold=False)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store)
    with pytest.raises(RunNotResumableError, match="running"):
        await agent.resume("r", Approve())  # not paused: it is recovered, not resumed
    events: list[FlowEvent] = []
    done = await agent.recover("r", on_event=events.append)
    assert (done.status, done.stop_reason) == ("completed", "answered")
    assert mailer.sent == 0  # not re-run: the model was told, and decided
    (record,) = done.records
    assert not record.success and "was interrupted" in str(record.error)
    assert "the run's cancellation ended it while it ran" in str(record.error)
    assert done.text is not None and "the run's cancellation ended it" in done.text
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished.source == "interrupted" and finished.record == record
    stored = await store.get("r")
    assert stored is not None and stored.status == "completed"


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not_idempotent"])
async def test_retry_runs_an_idempotent_tool_again_and_fails_the_others(idempotent: bool) -> None:
    store = MemoryCheckpointStore()
    await cancelled_mid_tool(store)
    mailer = Mailer(hold=False)
    agent = create_agent(
        mail_model(),
        [mailer.send_mail],
        store=store,
        unknown_outcome="retry",
        idempotent_tools=["send_mail"] if idempotent else [],
    )
    done = await agent.recover("r")
    assert done.status == "completed"
    (record,) = done.records
    if idempotent:
        assert mailer.sent == 1 and record.success
        assert done.text == "done: mail 1 sent to ada"
    else:
        assert mailer.sent == 0 and "was interrupted" in str(record.error)


@pytest.mark.parametrize("answer", ["approve", "edit", "reject"])
async def test_ask_puts_a_cut_off_call_to_a_human(answer: str) -> None:
    store = MemoryCheckpointStore()
    await cancelled_mid_tool(store)
    mailer = Mailer(hold=False)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store)
    paused = await agent.recover("r", unknown_outcome="ask")
    assert paused.status == "paused"
    assert mailer.sent == 0  # not re-run on its own
    request = paused.request
    assert request is not None and request.kind == "interrupted_tool_calls"
    (asked,) = request.tool_calls
    assert asked.tool_name == "send_mail"
    assert "the run's cancellation ended them while they ran" in request.reason
    decision: Any = {
        "approve": Approve(),
        "edit": Edit(arguments={asked.call_id: {"to": "bob"}}),
        "reject": Reject(message="sent already"),
    }[answer]
    events: list[FlowEvent] = []
    done = await agent.resume("r", decision, on_event=events.append)
    assert done.status == "completed"
    (record,) = done.records
    if answer == "reject":
        assert mailer.sent == 0
        assert "a human chose not to run it again: sent already" in str(record.error)
        assert done.text is not None and "sent already" in done.text
    else:
        to = "bob" if answer == "edit" else "ada"
        assert mailer.sent == 1 and done.text == f"done: mail 1 sent to {to}"
        assert record.kwargs == {"to": to} and record.result == f"mail 1 sent to {to}"
        (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
        assert started.call_id == asked.call_id  # run again under its own id
    stored = await store.get("r")
    assert stored is not None and stored.status == "completed"


async def test_recover_needs_a_store_and_gives_a_completed_run_s_result() -> None:
    with pytest.raises(ResumeError, match="needs a store"):
        await create_agent(mail_model()).recover("r")
    store = MemoryCheckpointStore()
    mailer = Mailer(hold=False)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store)
    first = await agent.run("mail ada", run_id="done")
    again = await agent.recover("done")  # a completed run: its stored result, nothing runs
    assert (again.status, again.stop_reason, again.run_id) == ("completed", "answered", "done")
    assert [r.result for r in again.records] == [r.result for r in first.records]
    assert mailer.sent == 1


async def process(files: dict[str, Path], backend: str, *args: str) -> dict[str, Any] | None:
    """Run ``agent_support.py``; its JSON result, or ``None`` if it was killed."""
    with anyio.fail_after(120):  # a hang guard
        done = await anyio.run_process(
            [
                sys.executable,
                str(SUPPORT),
                args[0],
                str(files["db"]),
                str(files["counter"]),
                "r",
                *args[1:],
                "--backend",
                backend,
            ],
            check=False,
        )
    if done.returncode < 0:
        return None
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def sent(files: dict[str, Path]) -> int:
    return int(files["counter"].read_text()) if files["counter"].exists() else 0


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {"db": tmp_path / "runs.db", "counter": tmp_path / "sent"}


@pytest.mark.timeout(300)
async def test_killed_inside_the_tool_the_model_is_told_by_default(
    files: dict[str, Path], anyio_backend: str
) -> None:
    assert await process(files, anyio_backend, "run", "--crash", "in_tool") is None
    assert sent(files) == 1  # the mail went out, but its outcome was never recorded
    done = await process(files, anyio_backend, "recover")
    assert done is not None and done["status"] == "completed"
    assert sent(files) == 1  # recovery did not send it again
    (record,) = done["records"]
    assert not record["success"]
    assert "its process stopped after the call started" in record["error"]
    assert "its process stopped" in done["text"]  # the model saw it
    kinds = [e["kind"] for e in done["events"]]
    assert kinds[-1] == "run_finished" and "checkpoint_saved" in kinds
    assert kinds.count("model_call_started") == kinds.count("model_call_finished") == 1


@pytest.mark.timeout(300)
async def test_killed_inside_the_tool_an_idempotent_tool_runs_again_with_retry(
    files: dict[str, Path], anyio_backend: str
) -> None:
    assert await process(files, anyio_backend, "run", "--crash", "in_tool") is None
    done = await process(
        files, anyio_backend, "recover", "--unknown-outcome", "retry", "--idempotent"
    )
    assert done is not None and done["status"] == "completed"
    assert sent(files) == 2  # asked for: the tool is safe to run twice
    assert done["text"] == "done: mail 2 sent to ada"
    assert [r["result"] for r in done["records"]] == ["mail 2 sent to ada"]


@pytest.mark.timeout(300)
async def test_killed_inside_the_tool_the_call_is_put_to_a_human_with_ask(
    files: dict[str, Path], anyio_backend: str
) -> None:
    assert await process(files, anyio_backend, "run", "--crash", "in_tool") is None
    assert sent(files) == 1
    paused = await process(files, anyio_backend, "recover", "--unknown-outcome", "ask")
    assert paused is not None and paused["status"] == "paused"
    assert paused["request"]["kind"] == "interrupted_tool_calls"
    assert "the process stopped after they started" in paused["request"]["reason"]
    assert sent(files) == 1  # recovery did not send it again
    done = await process(files, anyio_backend, "resume", '{"kind": "reject"}')
    assert done is not None and done["status"] == "completed"
    assert sent(files) == 1
    store = SQLiteCheckpointStore(files["db"])
    checkpoint = await store.get("r")
    await store.aclose()
    assert checkpoint is not None and checkpoint.status == "completed"


@pytest.mark.timeout(300)
async def test_killed_after_the_outcome_is_journaled_the_tool_runs_once(
    files: dict[str, Path], anyio_backend: str
) -> None:
    assert await process(files, anyio_backend, "run", "--crash", "after_outcome") is None
    assert sent(files) == 1
    done = await process(files, anyio_backend, "recover")
    assert done is not None and done["status"] == "completed"
    assert done["text"] == "done: mail 1 sent to ada"  # the journaled outcome, replayed
    assert sent(files) == 1


# -- the budget across a crash: every model call made before counts -----------------------


@pytest.mark.timeout(300)
async def test_killed_after_a_model_call_it_counts_after_recovery(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Killed once its first model call ended (10 tokens), before that step's checkpoint:
    a recovery with ``max_requests=1`` makes no model call and says 1 request; one without
    a budget makes the model calls the run still needs, and says all of them."""
    capped = {"db": tmp_path / "capped.db", "counter": tmp_path / "capped"}
    free = {"db": tmp_path / "free.db", "counter": tmp_path / "free"}
    for files in (capped, free):
        assert await process(files, anyio_backend, "run", "--crash", "after_model") is None
    done = await process(capped, anyio_backend, "recover", "--max-requests", "1")
    assert done is not None and done["status"] == "completed"
    assert done["model_requests"] == 0 and done["stop_reason"] == "usage_limit"
    assert (done["usage"]["requests"], done["usage"]["total_tokens"]) == (1, 10)
    assert sent(capped) == 0
    done = await process(free, anyio_backend, "recover")
    assert done is not None and done["text"] == "done: mail 1 sent to ada"
    assert done["model_requests"] == 2  # the tool call asked again, then the answer
    assert (done["usage"]["requests"], done["usage"]["total_tokens"]) == (3, 30)


async def test_a_model_call_that_failed_counts_after_recovery() -> None:
    from toolloop.agents import AgentModelError
    from toolloop.models import UsageLimits

    store = MemoryCheckpointStore()
    broken = ScriptedChatModel()
    broken.add_reply("half an ans", chunk_size=4, error_after=2, error=ConnectionError("reset"))
    with pytest.raises(AgentModelError, match="reset"):
        await create_agent(broken, store=store).run("hi", run_id="r")
    model = mail_model()
    limits = UsageLimits(max_requests=1)
    agent = create_agent(model, store=store, usage_limits=limits, on_usage_limit="finish")
    done = await agent.recover("r")
    assert model.requests == []  # the failed call was one: the budget is spent
    assert done.stop_reason == "usage_limit"
    assert (done.usage.requests, done.usage.unreported_requests) == (1, 1)


async def test_the_tools_model_calls_and_a_cut_off_model_call_count_after_recovery() -> None:
    """A tool's model call is kept by the tools step's checkpoint; a model call cut off by
    a cancellation is journaled as what it is (a request whose usage is unknown)."""
    from toolloop.models import ChatRequest, stream_chat

    helper = ScriptedChatModel()
    helper.add_reply("short", usage={"total_tokens": 7})

    async def summarize(text: str) -> str:
        """Summarize a text with a model.

        Args:
            text: the text.
        """
        request = ChatRequest(messages=[{"role": "user", "content": text}])
        async with stream_chat(helper, request) as deltas:
            return "".join([delta.content async for delta in deltas])

    asked = anyio.Event()

    def second(request: Any) -> ScriptedChatReply:
        asked.set()
        return ScriptedChatReply("never", first_delay=60)  # cut off while it streams

    store = MemoryCheckpointStore()
    model = ScriptedChatModel(responder=second)
    model.add_reply(tool_calls=[{"name": "summarize", "arguments": '{"text": "x"}'}], usage=TEN)
    agent = create_agent(model, [summarize], store=store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(agent.run, "summarize x", run_id="r"))
        with anyio.fail_after(30):
            await asked.wait()
        tg.cancel_scope.cancel()
    again = ScriptedChatModel()
    again.add_reply("done", usage=TEN)
    done = await create_agent(again, [summarize], store=store).recover("r")
    assert done.text == "done" and len(helper.requests) == 1
    usage = done.usage
    assert (usage.requests, usage.total_tokens, usage.unreported_requests) == (4, 27, 1)


TEN = {"total_tokens": 10}


async def test_a_call_the_runs_timeout_ended_says_so_after_recovery() -> None:
    from toolloop.errors import ExecutionTimeoutError

    store = MemoryCheckpointStore()
    mailer = Mailer(hold=True)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store)
    with pytest.raises(ExecutionTimeoutError):
        await agent.run("mail ada", run_id="r", timeout=0.5)
    mailer = Mailer(hold=False)
    agent = create_agent(mail_model(), [mailer.send_mail], store=store, unknown_outcome="ask")
    paused = await agent.recover("r")
    request = paused.request
    assert request is not None and request.kind == "interrupted_tool_calls"
    assert "the run's timeout of 0.5 s ended them while they ran" in request.reason
    assert "process stopped" not in request.reason
    assert "the run's timeout of 0.5 s ended it" in str(request.tool_calls[0].why)
    done = await agent.resume("r", Reject(message="sent already"))
    assert mailer.sent == 0
    answer = done.messages[-2]  # the call's answer, before the model's last word
    assert "the run's timeout of 0.5 s ended it while it ran" in answer.content
    assert "a human chose not to run it again: sent already" in answer.content


async def test_a_call_its_tools_timeout_ended_says_so() -> None:
    mailer = Mailer(hold=True)
    agent = create_agent(
        mail_model(), [mailer.send_mail], store=MemoryCheckpointStore(), tool_timeout=0.2
    )
    done = await agent.run("mail ada", run_id="r")
    assert done.status == "completed"
    assert "did not finish within 0.2 s" in str(done.text)
    (record,) = done.records
    assert "did not finish within 0.2 s" in str(record.error)
