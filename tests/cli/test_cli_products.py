"""``toolloop run``, ``resume`` and ``recover`` for every product, each as a process of its
own against a FakeOpenAIServer started here: a run to its end, a pause on
``--needs-approval`` answered from another process (approve, reject, edit) without any
tool running twice, a failed run recovered, a budget reached."""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply, FakeToolCall
from toolloop.testing._http import RecordedRequest

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: each test takes a few seconds
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

PRODUCTS = ("loop", "middleware", "status")
REJECTED = "not to Ann, please"

TOOLS_SOURCE = '''
import json
import pathlib

LOG = pathlib.Path(__file__).with_name("calls.log")


def send_email(to: str, body: str) -> dict:
    """Send an email.

    Args:
        to: the address.
        body: the text.
    """
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"to": to, "body": body}) + "\\n")
    return {"receipt": f"RCPT-{to}"}


TOOLS = [send_email]
'''

CALL = {"to": "ann@example.com", "body": "hi"}


@dataclass
class Model:
    """Answers each product's model calls from what the request holds: the tool call
    first; once a receipt (or the rejection) is in what the model is told, the answer.
    ``fail_after_tool``: a call after the tool ran fails (HTTP 500)."""

    product: str
    fail_after_tool: bool = False

    def __call__(self, request: RecordedRequest) -> FakeReply | FakeErrorReply | str:
        seen = json.dumps(request.body)
        done = "RCPT-" in seen or REJECTED in seen
        if done and self.fail_after_tool:
            return FakeErrorReply(status=500, message="the model server broke down")
        if self.product == "loop":
            if done:
                return '{"next_action": "response", "execution_commands": []}'
            command = {"purpose": "mail", "tool_name": "send_email", "tool_kwargs": CALL}
            return json.dumps({"next_action": "execute", "execution_commands": [command]})
        if self.product == "middleware":
            if done:
                return "Done."
            return FakeReply(tool_calls=(FakeToolCall("send_email", json.dumps(CALL)),))
        system = request.body["messages"][0]["content"]
        if "Analyze the request" in system:
            return "The user wants an email sent."
        if "Write a plan" in system:
            return '{"steps": ["send the email"]}'
        if "Decide the next move" in system and not done:
            call = {"tool_name": "send_email", "arguments": CALL, "purpose": "mail"}
            return json.dumps(
                {"action": "call_tools", "tool_calls": [call], "reason": "", "answer": None}
            )
        if "Decide the next move" in system:
            finish = {"action": "finish", "tool_calls": [], "reason": "", "answer": "Done."}
            return json.dumps(finish)
        if "Reflect on the last results" in system:
            return json.dumps({"verdict": "finish", "note": "", "answer": "Done."})
        return "Done."


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    return tmp_path


def calls(workdir: Path) -> list[dict[str, Any]]:
    log = workdir / "calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


async def toolloop(workdir: Path, backend: str, *argv: str) -> tuple[int, str, str]:
    """``python -m toolloop ARGV --backend BACKEND`` in ``workdir``."""
    command = [sys.executable, "-m", "toolloop", *argv, "--backend", backend]
    process = await anyio.run_process(command, cwd=workdir, check=False)
    return process.returncode, process.stdout.decode(), process.stderr.decode()


def product_flags(server: FakeOpenAIServer, product: str) -> list[str]:
    return [
        "--agent",
        product,
        "--tools",
        "tools:TOOLS",
        "--base-url",
        server.base_url,
        "--model",
        "fake-model",
        "--max-retries",
        "0",
    ]


def printed_command(stdout: str, prefix: str) -> list[str]:
    """The ``toolloop ...`` command the output gives after ``prefix``."""
    found = re.search(rf"^{re.escape(prefix)}(toolloop .*)$", stdout, re.M)
    assert found, stdout
    words = shlex.split(found.group(1))
    assert words[0] == "toolloop"
    return words[1:]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_run_each_product_to_its_end(workdir: Path, anyio_backend: str, product: str) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        code, out, err = await toolloop(
            workdir, anyio_backend, "run", "Mail Ann", *product_flags(server, product)
        )
    assert (code, err) == (0, "")
    assert calls(workdir) == [CALL]
    assert "\nstop: answered · " in out
    kind = "structured planner" if product == "loop" else f"{product} agent"
    assert f" · {kind} · 1 tool: send_email" in out
    if product != "loop":
        assert "\nanswer:\nDone.\n" in out
        turn = "model call" if product == "middleware" else "step"
        assert re.search(rf"finished: answered after \d+ {turn}s?, 1 record", out)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_streaming_dispatch_is_every_product_s(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--streaming-dispatch"]
        code, out, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
    assert (code, err) == (0, ""), out
    assert calls(workdir) == [CALL]  # once
    assert "\nstop: answered · " in out


@pytest.mark.parametrize("decision", ["approve", "reject", "edit"])
@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_pause_is_answered_from_another_process(
    workdir: Path, anyio_backend: str, product: str, decision: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        flags += ["--needs-approval", "send_email"]
        code, out, err = await toolloop(
            workdir, anyio_backend, "run", "Mail Ann", "--run-id", "r1", *flags
        )
        assert (code, err) == (3, ""), out
        assert calls(workdir) == []  # nothing ran: the call waits
        assert "\npaused: run r1 waits for a human · 0 records so far" in out
        found = re.search(
            r"^  call (\S+): send_email (\{.*\}) \(send_email needs approval\)$", out, re.M
        )
        assert found, out
        call_id = found.group(1)
        assert json.loads(found.group(2)) == CALL
        assert re.search(r"^allowed: approve, edit, reject\b", out, re.M)
        # the command printed is the one that answers it, from a new process
        command = printed_command(out, "to continue: ")
        assert command[:2] == ["resume", "r1"] and command[-1] == "--approve"
        assert "--needs-approval" in command and "--store" in command
        answer = {
            "approve": ["--approve"],
            "reject": ["--reject", REJECTED],
            "edit": ["--edit", f'{call_id}={{"to": "bob@example.com", "body": "hi"}}'],
        }[decision]
        code, out, err = await toolloop(workdir, anyio_backend, *command[:-1], *answer)
        assert (code, err) == (0, ""), out
        assert "\nstop: answered · " in out
        expected = {
            "approve": [CALL],
            "reject": [],
            "edit": [{"to": "bob@example.com", "body": "hi"}],
        }[decision]
        assert calls(workdir) == expected
        if decision == "reject":  # the model was told why
            assert REJECTED in json.dumps(server.requests[-1].body)
        # answered once: a second answer finds nothing to resume, and runs nothing
        code, out, err = await toolloop(workdir, anyio_backend, *command)
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "r1" in err and "paused" in err
    assert calls(workdir) == expected


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_failed_run_is_recovered(workdir: Path, anyio_backend: str, product: str) -> None:
    model = Model(product, fail_after_tool=True)
    async with FakeOpenAIServer(responder=model) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        code, out, err = await toolloop(
            workdir, anyio_backend, "run", "Mail Ann", "--run-id", "r2", *flags
        )
        assert code == 1, out
        assert calls(workdir) == [CALL]
        assert err.count("\n") == 1 and "Traceback" not in err
        command = shlex.split(err.rsplit("continue it with `", 1)[1].rstrip("`\n"))
        assert command[:3] == ["toolloop", "recover", "r2"]
        model.fail_after_tool = False  # the server is back
        code, out, err = await toolloop(workdir, anyio_backend, *command[1:])
        assert (code, err) == (0, ""), out
        assert "\nstop: answered · " in out
        assert calls(workdir) == [CALL]  # the call's outcome was kept: it did not run again
        # a completed run recovered again shows its result and runs nothing
        code, out, err = await toolloop(workdir, anyio_backend, *command[1:])
    assert (code, err) == (0, "")
    assert "\nstop: answered · " in out
    assert calls(workdir) == [CALL]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_usage_limit_ends_the_run(workdir: Path, anyio_backend: str, product: str) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--usage-limit", "requests=1"]
        code, out, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
        requests = len(server.requests)
    assert code == 1, out
    assert requests == 1
    assert "\nstop: usage_limit · " in out
    assert err == (
        "toolloop: the run reached its usage limit (requests=1); the results so far are above\n"
    )
