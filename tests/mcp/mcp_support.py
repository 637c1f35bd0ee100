"""The MCP servers the tests talk to: ``mcp_server.py`` (written with the official SDK),
started over stdio by each session, and over HTTP once per test session."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolloop.mcp import MCPServerHTTP, MCPServerStdio

SERVER = Path(__file__).with_name("mcp_server.py")
START_TIMEOUT = 60.0
"""Seconds the HTTP server may take to print its port (about 1 s; a busy machine is slow)."""


def stdio_server(pid_file: Path | None = None, **options: Any) -> MCPServerStdio:
    """A session with a fresh ``mcp_server.py`` subprocess (started on ``async with``)."""
    args = [str(SERVER), "stdio"]
    if pid_file is not None:
        args += ["--pid-file", str(pid_file)]
    return MCPServerStdio(sys.executable, args, **options)


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except OSError:  # no /proc: trust the signal
        return True


@contextlib.contextmanager
def http_process() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``mcp_server.py http`` on 127.0.0.1 (a free port): its URL and its process."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = ""
        while not line and time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline().strip()
        assert line.isdigit(), f"the MCP HTTP server did not start (exit {process.poll()})"
        yield f"http://127.0.0.1:{line}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="session")
def http_url() -> Iterator[str]:
    """The URL of ``mcp_server.py http``, one server for the whole test session."""
    with http_process() as (url, _process):
        yield url


def http_server(url: str, **options: Any) -> MCPServerHTTP:
    return MCPServerHTTP(url, **options)
