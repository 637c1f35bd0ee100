"""Every product through the command line, each ``toolloop`` a process of its own against a
FakeOpenAIServer: the tools file it loads, the model that answers each product, the flags
that name the product, and how a test runs the command (for tests/cli and the product
table's checks).

The one tool, ``send_email``, notes every call in ``calls.log`` beside it as it starts. With
a file ``hold`` beside it, it then waits until a file ``release`` is there too: a test kills
the process at that known point (the call started, its outcome unknown).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply, FakeToolCall
from toolloop.testing._http import RecordedRequest

PRODUCTS = ("loop", "middleware", "status")
REJECTED = "not to Ann, please"
CUT_OFF = "may or may not have taken effect"
"""What a call cut off by a dead process says (under ``--unknown-outcome fail``)."""

TOOLS_SOURCE = '''
import json
import pathlib
import time

HERE = pathlib.Path(__file__).parent
LOG = HERE / "calls.log"


def send_email(to: str, body: str) -> dict:
    """Send an email.

    Args:
        to: the address.
        body: the text.
    """
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps({"to": to, "body": body}) + "\\n")
    if (HERE / "hold").exists():  # a test kills the process here
        while not (HERE / "release").exists():
            time.sleep(0.01)
    return {"receipt": f"RCPT-{to}"}


TOOLS = [send_email]
'''

CALL = {"to": "ann@example.com", "body": "hi"}


@dataclass
class Model:
    """Answers each product's model calls from what the request holds: the tool call
    first; once a receipt, the rejection or a cut-off call is in what the model is told, the
    answer. ``fail_after_tool``: a call after the tool ran fails (HTTP 500)."""

    product: str
    fail_after_tool: bool = False

    def __call__(self, request: RecordedRequest) -> FakeReply | FakeErrorReply | str:
        seen = json.dumps(request.body)
        done = "RCPT-" in seen or REJECTED in seen or CUT_OFF in seen
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


def make_workdir(folder: Path) -> Path:
    """``folder`` with the tools file the commands load (``--tools tools:TOOLS``)."""
    (folder / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    return folder


def calls(workdir: Path) -> list[dict[str, Any]]:
    """Every call of ``send_email`` that started, in order."""
    log = workdir / "calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def command(backend: str, *argv: str) -> list[str]:
    """``python -m toolloop ARGV --backend BACKEND``."""
    return [sys.executable, "-m", "toolloop", *argv, "--backend", backend]


async def toolloop(workdir: Path, backend: str, *argv: str) -> tuple[int, str, str]:
    """``python -m toolloop ARGV --backend BACKEND`` in ``workdir``: its exit status, output
    and errors."""
    process = await anyio.run_process(command(backend, *argv), cwd=workdir, check=False)
    return process.returncode, process.stdout.decode(), process.stderr.decode()


def product_flags(server: FakeOpenAIServer, product: str) -> list[str]:
    """The flags that run ``product`` with the tools file and the server's model."""
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
