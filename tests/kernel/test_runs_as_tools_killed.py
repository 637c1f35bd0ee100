"""A durable parent whose process is killed (SIGKILL) while its child run is in the middle
of its tools, then recovered from a fresh process: the child goes on from its checkpoint,
and its side effect, done before the kill, is not done again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)  # a hang guard: each process takes a second or two

HANG_GUARD = 120
ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''
import json
import os
import signal
import sys
from pathlib import Path

import anyio

from toolloop.agents import create_agent
from toolloop.checkpoints import SQLiteCheckpointStore
from toolloop.testing import ScriptedChatModel

HERE = Path(sys.argv[1])
MODE = sys.argv[2]


def send(to: str) -> str:
    """Send a mail (the side effect: a line in effects.log).

    Args:
        to: who gets it.
    """
    with (HERE / "effects.log").open("a", encoding="utf-8") as log:
        log.write(to + "\\n")
    return f"sent to {to}"


def wait() -> str:
    """Wait for the mail to arrive (the process dies here while the file kill exists)."""
    if (HERE / "kill").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    return "arrived"


def ask(model, tool, call_id, **arguments):
    call = {"name": tool, "arguments": json.dumps(arguments), "id": call_id}
    model.add_reply(tool_calls=[call])


lead_model, helper_model = ScriptedChatModel(), ScriptedChatModel()
if MODE == "run":
    ask(lead_model, "helper", "l1", request="mail ada")
    ask(helper_model, "send", "h1", to="ada")
    ask(helper_model, "wait", "h2")
# what comes after the kill (a fresh process is told only that)
helper_model.add_reply("mailed ada")
lead_model.add_reply("done")
helper = create_agent(
    helper_model, [send, wait], unknown_outcome="retry", idempotent_tools=["wait"]
).as_tool(name="helper", description="mails")
lead = create_agent(lead_model, [helper])


async def main() -> None:
    store = SQLiteCheckpointStore(HERE / "runs.db")
    if MODE == "run":
        await lead.run("mail ada", store=store, run_id="lead")
        print("not killed")
        return
    result = await lead.recover("lead", store=store)
    child = [r for r in await store.run_ids() if r.startswith("lead.helper.")]
    statuses = [(await store.get(r)).status for r in ["lead", *child]]
    print(json.dumps({
        "status": result.status,
        "text": result.text,
        "records": [[r.tool_name, r.success, r.result] for r in result.records],
        "statuses": statuses,
        "asked": [len(lead_model.requests), len(helper_model.requests)],
    }))


anyio.run(main)
'''


def run(folder: Path, mode: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}  # this checkout's code
    return subprocess.run(
        [sys.executable, str(folder / "script.py"), str(folder), mode],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        env=env,
        check=False,
    )


def test_a_parent_killed_while_its_child_runs_is_recovered_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    (tmp_path / "script.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "kill").write_text("", encoding="utf-8")
    killed = run(tmp_path, "run")
    assert killed.returncode == -9, killed.stderr  # SIGKILL, in the child's wait
    assert (tmp_path / "effects.log").read_text(encoding="utf-8") == "ada\n"
    (tmp_path / "kill").unlink()
    recovered = run(tmp_path, "recover")
    assert recovered.returncode == 0, recovered.stderr
    said = json.loads(recovered.stdout.strip().splitlines()[-1])
    assert said["status"] == "completed"
    assert said["text"] == "done"
    assert said["records"] == [["helper", True, "mailed ada"]]
    assert said["statuses"] == ["completed", "completed"]  # the parent and its one child
    assert said["asked"] == [1, 1]  # each model asked only what came after the kill
    # the child's send, done before the kill, was not done again
    assert (tmp_path / "effects.log").read_text(encoding="utf-8") == "ada\n"
