"""Closing a stdio session ends every process the server started (its process group and its
session), whether the server exits at once when its stdin closes or not; real servers
(``helper_server.py``, the official SDK's) that start a helper with ``subprocess.Popen``."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp_support import is_alive

from toolloop.mcp import MCPServerStdio

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, on Linux"),
]

HELPER_SERVER = Path(__file__).with_name("helper_server.py")
HANG_GUARD = 30.0
"""Seconds a close may take before the test fails (the slowest case here takes about 5 s)."""


@pytest.fixture
def helper_pid_file(tmp_path: Path) -> Iterator[Path]:
    """Where the helper writes its pid; a helper left behind is killed after the test."""
    path = tmp_path / "helper.pid"
    yield path
    if path.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(read_pid(path), signal.SIGKILL)


def read_pid(path: Path) -> int:
    return int(path.read_text())


def helper_server(pid_file: Path, *options: str) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [str(HELPER_SERVER), str(pid_file), *options])


async def close_and_check(server: MCPServerStdio, pid_file: Path) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with server:
            helper = read_pid(pid_file)
            assert is_alive(helper)
            assert await server.call_tool("ping", {}) == "pong"
        # the block is left: the helper must be gone now, not some time later
        assert not is_alive(helper)


async def test_a_helper_ends_with_a_server_that_exits_when_its_stdin_closes(
    helper_pid_file: Path,
) -> None:
    await close_and_check(helper_server(helper_pid_file), helper_pid_file)


async def test_a_helper_in_a_process_group_of_its_own_ends_too(helper_pid_file: Path) -> None:
    await close_and_check(helper_server(helper_pid_file, "--own-group"), helper_pid_file)


async def test_a_helper_that_ignores_sigterm_is_killed(helper_pid_file: Path) -> None:
    await close_and_check(helper_server(helper_pid_file, "--stubborn"), helper_pid_file)


async def test_a_helper_ends_with_a_server_slow_to_exit(helper_pid_file: Path) -> None:
    # the server outlives the SDK's grace after its stdin closed: the SDK ends its process
    # group; a helper in a group of its own is ended with the session
    server = helper_server(helper_pid_file, "--own-group", "--linger", "5")
    await close_and_check(server, helper_pid_file)
