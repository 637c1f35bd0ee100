"""Across processes, for real: a run paused in one process resumes in another, a process
killed between a tool's end and the next checkpoint never makes the tool run twice, and a
call a kill cut off follows the run's unknown_outcome (fail, retry, ask).

Each process is ``python status_support.py ...`` on one SQLite file; the tool counts how
often it really ran in a counter file.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from status_support import mail_agent

from toolloop.checkpoints import Reject, SQLiteCheckpointStore
from toolloop.kernel import REPLAY_NOTE

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="kills processes with SIGKILL"),
]

SUPPORT = Path(__file__).with_name("status_support.py")


class Files:
    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "runs.db"
        self.counter = tmp_path / "sent.txt"

    @property
    def sent(self) -> int:
        return int(self.counter.read_text()) if self.counter.exists() else 0


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


async def process(
    files: Files, backend: str, command: str, *extra: str, killed: bool = False
) -> dict[str, Any]:
    """Run one command in a new process; its result (or ``{}`` if it was killed)."""
    args = [sys.executable, str(SUPPORT), command, str(files.db), str(files.counter), "run-1"]
    done = await anyio.run_process([*args, *extra, "--backend", backend], check=False)
    if killed:
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()
        return {}
    assert done.returncode == 0, done.stderr.decode()
    data = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


async def test_a_run_paused_in_one_process_resumes_in_another(
    files: Files, anyio_backend: str
) -> None:
    paused = await process(files, anyio_backend, "run", "--approval")
    assert paused["status"] == "paused"
    request = paused["request"]
    assert request["kind"] == "approve_tool_calls"
    assert request["tool_calls"] == [
        {
            "call_id": "call-1",
            "tool_name": "send_mail",
            "arguments": {"to": "ada@example.org", "body": "hello"},
            "purpose": "tell Ada",
            "why": "send_mail needs approval",
            "allowed": ["approve", "edit", "reject"],
        }
    ]
    assert files.sent == 0  # the first process ended; nothing was sent

    done = await process(files, anyio_backend, "resume", '{"kind": "approve"}', "--approval")
    assert done["status"] == "completed"
    assert done["text"] == "done: mail 1 sent to ada@example.org"
    assert done["sources"] == ["ran"]
    assert files.sent == 1
    # a second resume, in yet another process, is refused
    again = await anyio.run_process(
        [
            sys.executable,
            str(SUPPORT),
            "resume",
            str(files.db),
            str(files.counter),
            "run-1",
            '{"kind": "approve"}',
        ],
        check=False,
    )
    assert again.returncode == 1
    assert b"RunNotResumableError" in again.stderr
    assert b"is completed, not paused" in again.stderr
    assert files.sent == 1


async def test_a_run_paused_in_another_process_resumes_here(files: Files) -> None:
    paused = await process(files, "asyncio", "run", "--approval")
    assert paused["status"] == "paused"
    async with SQLiteCheckpointStore(files.db) as store:
        agent = mail_agent(store, files.counter, approval=True, crash=None)
        request = await agent.request("run-1")
        assert request is not None and request.tool_calls[0].tool_name == "send_mail"
        result = await agent.resume(
            "run-1",
            {"kind": "edit", "arguments": {"call-1": {"to": "bob@example.org", "body": "hello"}}},
        )
    assert result.text == "done: mail 1 sent to bob@example.org"
    assert files.sent == 1


async def test_killed_after_the_tool_and_before_the_checkpoint_the_tool_runs_once(
    files: Files, anyio_backend: str
) -> None:
    # paused in a first process, approved in a second one that is killed (SIGKILL) right
    # after the mail went out and its outcome was journaled, before the checkpoint write
    await process(files, anyio_backend, "run", "--approval")
    await process(
        files,
        anyio_backend,
        "resume",
        '{"kind": "approve"}',
        "--approval",
        "--crash",
        "after_outcome",
        killed=True,
    )
    assert files.sent == 1
    async with SQLiteCheckpointStore(files.db) as store:
        checkpoint = await store.get("run-1")
        assert checkpoint is not None
        assert checkpoint.status == "running"  # the dead process never wrote another
        assert checkpoint.snapshot.state["node"] == "decision"
        calls = [(e.call_id, e.state) for e in checkpoint.journal if e.tool_name != REPLAY_NOTE]
        assert calls == [("call-1", "finished")]

    # a third process recovers it: the mail is not sent again
    done = await process(files, anyio_backend, "recover", "--approval")
    assert done["status"] == "completed"
    assert done["sources"] == ["replayed"]
    assert done["text"] == "done: mail 1 sent to ada@example.org"
    assert files.sent == 1


async def test_killed_inside_the_tool_the_call_is_put_to_a_human_when_asked(
    files: Files, anyio_backend: str
) -> None:
    # no approval: the first process runs the tool, which is killed after its effect and
    # before its outcome is journaled
    await process(files, anyio_backend, "run", "--crash", "in_tool", killed=True)
    assert files.sent == 1
    async with SQLiteCheckpointStore(files.db) as store:
        agent = mail_agent(store, files.counter, approval=False, crash=None)
        paused = await agent.recover("run-1", unknown_outcome="ask")
        assert files.sent == 1  # not run again
        assert paused.status == "paused"
        assert paused.request is not None
        assert paused.request.kind == "interrupted_tool_calls"
        assert paused.request.tool_calls[0].call_id == "call-1"
        assert "the process stopped after they started" in paused.request.reason
        assert "its process stopped" in str(paused.state.records[0].record.error)
        done = await agent.resume("run-1", Reject(message="it was sent; do not resend"))
    assert done.status == "completed"
    assert done.text is not None and "was interrupted" in done.text
    assert files.sent == 1


async def test_killed_inside_the_tool_the_call_fails_by_default(
    files: Files, anyio_backend: str
) -> None:
    await process(files, anyio_backend, "run", "--crash", "in_tool", killed=True)
    paused = await process(files, anyio_backend, "recover")
    assert files.sent == 1  # not run again
    assert paused["status"] == "paused"  # the reflection saw a failed call: a review
    assert paused["sources"] == ["interrupted"]
    (error,) = paused["errors"]
    assert error.startswith("call 'call-1' of tool 'send_mail' was interrupted: its process")
    request = paused["request"]
    assert request["kind"] == "review" and request["details"]["failed"][0]["error"] == error
    done = await process(files, anyio_backend, "resume", '{"kind": "continue"}')
    assert done["status"] == "completed" and files.sent == 1
    assert done["text"] == f"done: {error}"


async def test_killed_inside_the_tool_a_call_not_idempotent_fails_under_retry(
    files: Files, anyio_backend: str
) -> None:
    await process(files, anyio_backend, "run", "--crash", "in_tool", killed=True)
    # retry, but the mail is not said to be idempotent: as fail
    paused = await process(files, anyio_backend, "recover", "--unknown-outcome", "retry")
    assert paused["sources"] == ["interrupted"] and files.sent == 1


async def test_killed_inside_an_idempotent_tool_it_runs_again_under_retry(
    files: Files, anyio_backend: str
) -> None:
    await process(files, anyio_backend, "run", "--crash", "in_tool", killed=True)
    done = await process(
        files, anyio_backend, "recover", "--unknown-outcome", "retry", "--idempotent"
    )
    assert files.sent == 2  # sent again: it is safe to
    assert done["status"] == "completed"
    assert done["sources"] == ["ran"]
    assert done["text"] == "done: mail 2 sent to ada@example.org"


async def test_killed_after_a_model_call_its_usage_counts_after_recovery(
    files: Files, anyio_backend: str
) -> None:
    # the analysis asked the model (10 tokens); the process is killed before its checkpoint
    await process(
        files, anyio_backend, "run", "--metered", "--crash", "after_analysis", killed=True
    )
    done = await process(files, anyio_backend, "recover", "--metered")
    assert done["status"] == "completed" and files.sent == 1
    assert done["model_requests"] == 1  # the analysis asked again
    assert (done["usage"]["requests"], done["usage"]["total_tokens"]) == (2, 20)
