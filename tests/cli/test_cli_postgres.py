"""``toolloop run --store postgresql://...`` for every product, on the suite's throwaway
PostgreSQL server (tests/postgres_cluster.py; skipped, saying why, without the server's
binaries): the run pauses for an approval in the database, and ``toolloop resume`` answers
it from another process, which runs the call once. The URL's password is never printed."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cli_runs import (
    CALL,
    PRODUCTS,
    Model,
    calls,
    make_workdir,
    printed_command,
    product_flags,
    toolloop,
)

from toolloop.testing import FakeOpenAIServer

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from toolloop.checkpoints import PostgresCheckpointStore

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: each test takes a few seconds
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

SECRET = "pg-s3cret-never-shown"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return make_workdir(tmp_path)


def with_password(url: str) -> str:
    """``url`` with a password (the suite's server trusts its socket: it is not checked,
    only carried, as a real one would be)."""
    scheme, rest = url.split("://", 1)
    user, at, place = rest.partition("@")
    assert at and ":" not in user, url
    return f"{scheme}://{user}:{SECRET}@{place}"


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_run_paused_in_postgresql_is_resumed_by_another_process(
    workdir: Path, anyio_backend: str, product: str, postgres_url: str
) -> None:
    url = with_password(postgres_url)
    run_id = f"pg-{product}-{uuid.uuid4().hex[:8]}"
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--store", url]
        flags += ["--needs-approval", "send_email"]
        code, out, err = await toolloop(
            workdir, anyio_backend, "run", "Mail Ann", "--run-id", run_id, *flags
        )
        assert (code, err) == (3, ""), out
        assert f"\npaused: run {run_id} waits for a human" in out
        assert calls(workdir) == []  # nothing ran: the call waits, in the database
        assert SECRET not in out
        command = printed_command(out, "to continue: ")
        assert command[:2] == ["resume", run_id] and command[-1] == "--approve"
        shown = command.index("--store") + 1
        assert command[shown].startswith("postgresql://") and SECRET not in command[shown]
        command[shown] = url  # the password is given again, as the user would
        code, out, err = await toolloop(workdir, anyio_backend, *command)
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out and SECRET not in out
    assert calls(workdir) == [CALL]  # approved, run once
    async with PostgresCheckpointStore(postgres_url) as store:
        stored = await store.get(run_id)
    assert stored is not None and stored.status == "completed"
