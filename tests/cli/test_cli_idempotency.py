"""An outside system that does a side effect once per idempotency key, and a durable run of
each product killed (SIGKILL) at every point around its tool's side effect, then recovered
by ``toolloop recover`` from another process with the call run again
(``--unknown-outcome retry``): the call keeps its key, so the effect happens once.

The tool, ``send_email``, notes its key in ``keys.log`` and does its effect in
``outside.db`` (a row per key: a key used before does nothing); the file ``kill_at`` beside
it says where its process dies: ``before_effect`` or ``after_effect`` (the effect done, its
outcome never journaled). ``after_outcome``: the test kills the process once the model is
told the outcome (the outcome journaled, the run not over)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_runs import PRODUCTS, Model, command, product_flags, toolloop

from toolloop.testing import FakeErrorReply, FakeOpenAIServer, FakeReply
from toolloop.testing._http import RecordedRequest

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: each test takes a few seconds
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

HANG_GUARD = 120

TOOLS_SOURCE = '''
import os
import pathlib
import signal
import sqlite3

from toolloop.tools import RunContext

HERE = pathlib.Path(__file__).parent


def send_email(to: str, body: str, ctx: RunContext) -> dict:
    """Send an email.

    Args:
        to: the address.
        body: the text.
    """
    with (HERE / "keys.log").open("a", encoding="utf-8") as log:
        log.write(ctx.idempotency_key + "\\n")
    kill_at = HERE / "kill_at"
    point = kill_at.read_text() if kill_at.exists() else ""
    if point == "before_effect":
        os.kill(os.getpid(), signal.SIGKILL)
    with sqlite3.connect(HERE / "outside.db") as db:  # the effect: once per key
        db.execute("CREATE TABLE IF NOT EXISTS sent (key TEXT PRIMARY KEY, to_ TEXT)")
        db.execute("INSERT OR IGNORE INTO sent VALUES (?, ?)", (ctx.idempotency_key, to))
    if point == "after_effect":
        os.kill(os.getpid(), signal.SIGKILL)
    return {"receipt": f"RCPT-{to}"}


TOOLS = [send_email]
'''


class KillingModel(Model):
    """The product's model, that kills the run's process (``pid``) the first time it is
    told the tool's outcome, before answering."""

    def __init__(self, product: str) -> None:
        super().__init__(product)
        self.pid: int | None = None

    def __call__(self, request: RecordedRequest) -> FakeReply | FakeErrorReply | str:
        if self.pid is not None and "RCPT-" in json.dumps(request.body):
            pid, self.pid = self.pid, None
            os.kill(pid, signal.SIGKILL)
        return super().__call__(request)


def effects(workdir: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(workdir / "outside.db") as db:
        return list(db.execute("SELECT key, to_ FROM sent"))


def keys(workdir: Path) -> list[str]:
    return (workdir / "keys.log").read_text(encoding="utf-8").split()


async def killed(workdir: Path, backend: str, flags: list[str], model: KillingModel) -> None:
    """``toolloop run --run-id k1 FLAGS``, which dies where ``kill_at`` (or ``model``) says."""
    argv = command(backend, "run", "Mail Ann", "--run-id", "k1", *flags)
    with (workdir / "run.out").open("wb") as out:
        process = await anyio.open_process(argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        async with process:
            if not (workdir / "kill_at").exists():
                model.pid = process.pid
            with anyio.fail_after(HANG_GUARD):
                await process.wait()
    assert process.returncode == -signal.SIGKILL, (workdir / "run.out").read_text()
    (workdir / "kill_at").unlink(missing_ok=True)


def cases() -> list[Any]:
    params = []
    for product in PRODUCTS:
        for point in ("before_effect", "after_effect", "after_outcome"):
            for backend in ("asyncio", "trio") if point == "after_effect" else ("asyncio",):
                params.append(
                    pytest.param(product, point, backend, id=f"{product}-{point}-{backend}")
                )
    return params


@pytest.mark.parametrize(("product", "point", "anyio_backend"), cases())
async def test_a_killed_run_recovered_does_the_side_effect_once(
    tmp_path: Path, product: str, point: str, anyio_backend: str
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    if point != "after_outcome":
        (tmp_path / "kill_at").write_text(point, encoding="utf-8")
    model = KillingModel(product)
    retry = ["--unknown-outcome", "retry", "--idempotent-tool", "send_email"]
    async with FakeOpenAIServer(responder=model) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        await killed(tmp_path, anyio_backend, flags, model)
        code, out, err = await toolloop(tmp_path, anyio_backend, "recover", "k1", *flags, *retry)
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out
    tried = keys(tmp_path)
    assert len(set(tried)) == 1  # every try of the call had the same key
    assert len(tried) == (1 if point == "after_outcome" else 2)  # run again only when unknown
    assert effects(tmp_path) == [(tried[0], "ann@example.com")]  # the effect happened once
