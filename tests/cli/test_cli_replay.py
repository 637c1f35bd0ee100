"""``toolloop replay``: a trace written by ``toolloop run --trace`` runs again offline, for
every product, through the code as it is now: the same product and options, the model's
replies and the tools' results taken from the trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runs import (
    CALL,
    PRODUCTS,
    TOOLS_SOURCE,
    Model,
    calls,
    product_flags,
    toolloop,
)

from toolloop.testing import FakeOpenAIServer, Recording

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: each test takes a few seconds
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

STRICT_SOURCE = '''
from typing import Literal


def send_email(to: Literal["bob@example.com"], body: str) -> dict:
    """Send an email, to Bob only now.

    Args:
        to: the address.
        body: the text.
    """
    raise AssertionError("a replayed call never runs")


TOOLS = [send_email]
'''


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_trace_of_toolloop_run_replays_offline(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--trace", "run.jsonl"]
        code, out, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
    assert (code, err) == (0, ""), out
    assert calls(workdir) == [CALL]
    meta = Recording.from_trace(workdir / "run.jsonl").meta
    assert meta["tool_specs"] == ["tools:TOOLS"]

    # the server is gone: the replay is offline, and no tool runs again
    code, out, err = await toolloop(workdir, anyio_backend, "replay", "run.jsonl")
    assert (code, err) == (0, ""), out
    assert f"replaying run.jsonl: the {product} product" in out
    assert "the code did what the recorded run did (as recorded): answered, 1 record\n" in out
    assert calls(workdir) == [CALL]

    # a live tool runs for real
    code, out, err = await toolloop(
        workdir, anyio_backend, "replay", "run.jsonl", "--live-tool", "send_email"
    )
    assert (code, err) == (0, ""), out
    assert calls(workdir) == [CALL, CALL]

    # the code changed: the tool's schema refuses the recorded address now
    (workdir / "strict.py").write_text(STRICT_SOURCE, encoding="utf-8")
    code, out, err = await toolloop(
        workdir, anyio_backend, "replay", "run.jsonl", "--tools", "strict:TOOLS"
    )
    assert (code, err) == (1, ""), out
    assert "the replay of run.jsonl diverged: " in out
    lines = out.splitlines()
    assert "--- recorded" in lines and "+++ now" in lines
    recorded = [line for line in lines if line.startswith("-     [0.0] send_email ")]
    refused = [line for line in lines if line.startswith("+     [0.0] send_email ")]
    assert len(recorded) == len(refused) == 1
    assert "(not run: arguments for tool 'send_email' do not fit its schema" in refused[0]
    assert calls(workdir) == [CALL, CALL]


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_run_of_toolloop_run_store_replays_from_the_store(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", "runs.db", "--run-id", "r1"]
        code, out, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
    assert (code, err) == (0, ""), out
    assert calls(workdir) == [CALL]

    # offline: the replies and the result come from the store; the tool does not run again
    code, out, err = await toolloop(workdir, anyio_backend, "replay", "--store", "runs.db", "r1")
    assert (code, err) == (0, ""), out
    assert f"replaying run r1 of the store: the {product} product" in out
    assert "the code did what the recorded run did (as recorded): answered, 1 record\n" in out
    assert calls(workdir) == [CALL]

    # the code changed: the tool's schema refuses the recorded address now
    (workdir / "strict.py").write_text(STRICT_SOURCE, encoding="utf-8")
    code, out, err = await toolloop(
        workdir, anyio_backend, "replay", "--store", "runs.db", "r1", "--tools", "strict:TOOLS"
    )
    assert (code, err) == (1, ""), out
    assert "the replay of run r1 in runs.db diverged: " in out
    assert "+ (stopped here)" in out or "(not run: arguments for tool 'send_email'" in out

    code, _, err = await toolloop(workdir, anyio_backend, "replay", "--store", "runs.db", "r2")
    assert code == 2
    assert "the store has no run 'r2'" in err


async def test_replay_refuses_what_it_cannot_do(workdir: Path, anyio_backend: str) -> None:
    code, _, err = await toolloop(workdir, anyio_backend, "replay", "missing.jsonl")
    assert code == 2
    assert "toolloop: replay: cannot read missing.jsonl" in err
    (workdir / "library.jsonl").write_text('{"toolloop_trace": 1, "meta": {}}\n')
    code, _, err = await toolloop(workdir, anyio_backend, "replay", "library.jsonl")
    assert code == 2
    assert "it was not written by `toolloop run --trace`" in err
