"""``toolloop run``, ``resume`` and ``recover`` for every product, each as a process of its
own against a FakeOpenAIServer started here: a run to its end, a pause on
``--needs-approval`` answered from another process (approve, reject, edit) without any
tool running twice, a failed run recovered, a budget reached."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from cli_runs import (
    CALL,
    PRODUCTS,
    REJECTED,
    Model,
    calls,
    make_workdir,
    printed_command,
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


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return make_workdir(tmp_path)


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
