"""A durable run of each product killed (SIGKILL) while its tool runs, then continued by
``toolloop recover`` from another process: the call the kill cut off follows
``--unknown-outcome`` (a failed record by default, run again only when its tool is
idempotent, or put to a human), and no call runs twice on its own."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import anyio
import pytest
from cli_runs import (
    CALL,
    CUT_OFF,
    PRODUCTS,
    REJECTED,
    Model,
    calls,
    command,
    make_workdir,
    product_flags,
    toolloop,
)

from toolloop.testing import FakeOpenAIServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: each test takes a few seconds
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

HANG_GUARD = 120


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return make_workdir(tmp_path)


async def killed_mid_call(workdir: Path, backend: str, flags: list[str]) -> None:
    """``toolloop run --run-id k1 FLAGS``, killed with SIGKILL once its tool has started
    (the tool waits for the file ``release`` that only comes after the kill)."""
    (workdir / "hold").touch()
    argv = command(backend, "run", "Mail Ann", "--run-id", "k1", *flags)
    with (workdir / "run.out").open("wb") as out:
        process = await anyio.open_process(argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
        async with process:
            try:
                with anyio.fail_after(HANG_GUARD):
                    while not calls(workdir):  # the tool started: its intent is journaled
                        if process.returncode is not None:
                            pytest.fail(
                                f"the run ended first:\n{(workdir / 'run.out').read_text()}"
                            )
                        await anyio.sleep(0.01)
            finally:
                process.send_signal(signal.SIGKILL)
                with anyio.fail_after(HANG_GUARD):
                    await process.wait()
    assert process.returncode == -signal.SIGKILL
    assert calls(workdir) == [CALL]  # it started once, and its outcome was never written
    (workdir / "release").touch()  # from now on the tool returns at once


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_killed_run_is_recovered_and_its_cut_off_call_is_a_failed_record(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        await killed_mid_call(workdir, anyio_backend, flags)
        told = len(server.requests)
        code, out, err = await toolloop(workdir, anyio_backend, "recover", "k1", *flags)
        if product == "status":  # the status agent puts a failed call to a human's review
            assert (code, err) == (3, ""), out
            assert "\npaused: run k1 waits for a human" in out
            code, out, err = await toolloop(
                workdir, anyio_backend, "resume", "k1", "--continue", *flags
            )
        assert (code, err) == (0, ""), out
        assert "\nstop: answered · " in out
        assert CUT_OFF in str(server.requests[told].body)  # the model was told, once
        assert calls(workdir) == [CALL]  # not run again
        # recovered again, the completed run shows its result and runs nothing
        code, out, err = await toolloop(workdir, anyio_backend, "recover", "k1", *flags)
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out
    assert calls(workdir) == [CALL]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_cut_off_call_runs_again_only_when_its_tool_is_idempotent(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        await killed_mid_call(workdir, anyio_backend, flags)
        retry = ["--unknown-outcome", "retry", "--idempotent-tool", "send_email"]
        code, out, err = await toolloop(workdir, anyio_backend, "recover", "k1", *flags, *retry)
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out
    assert calls(workdir) == [CALL, CALL]  # once more, as asked


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_cut_off_call_is_put_to_a_human_when_asked(
    workdir: Path, anyio_backend: str, product: str
) -> None:
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", "runs.db"]
        await killed_mid_call(workdir, anyio_backend, flags)
        ask = ["--unknown-outcome", "ask"]
        code, out, err = await toolloop(workdir, anyio_backend, "recover", "k1", *flags, *ask)
        assert (code, err) == (3, ""), out
        assert "\npaused: run k1 waits for a human" in out
        assert "send_email" in out and calls(workdir) == [CALL]
        code, out, err = await toolloop(
            workdir, anyio_backend, "resume", "k1", "--reject", REJECTED, *flags
        )
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out
    assert calls(workdir) == [CALL]  # a human said no: it never ran again
