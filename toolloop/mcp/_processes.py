"""The processes of a stdio server: whatever it started ends with its session.

The SDK starts the server in a session of its own (``start_new_session``: the server's pid
is its session id and its process group id) and, on the way out, closes its stdin, waits up
to 2 s and only then signals its process group. A server that exits at once when its stdin
closes leaves the processes it started running. So once the SDK's transport has closed,
every process still in the server's session (its own process group and any group a helper
made in it) gets SIGTERM, then SIGKILL after a grace, each wait bounded.

Only a process that left the session (``setsid``: a daemon, by design) outlives it. On
Linux the session's members are read from ``/proc``; elsewhere on POSIX only the server's
process group is reached; on Windows the SDK's job object ends the tree.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio

__all__ = ["end_session", "ending_session"]

_LOG = logging.getLogger("toolloop")
_GRACE = 2.0
"""Seconds the session's processes have after SIGTERM, and again after SIGKILL."""
_POLL = 0.01


@asynccontextmanager
async def ending_session(transport: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
    """The SDK's stdio transport, and on the way out the end of the server's session.

    Args:
        transport: ``mcp.client.stdio.stdio_client(...)``, not entered yet.
    """
    leader: int | None = None
    try:
        async with transport as streams:
            leader = _server_pid(transport)
            if leader is None and sys.platform != "win32":
                _LOG.warning(
                    "MCP: the server's process id could not be found; processes it starts may "
                    "outlive the session"
                )
            yield streams
    finally:
        if leader is not None and sys.platform != "win32":
            with anyio.CancelScope(shield=True):  # bounded: 2 x _GRACE at most
                await end_session(leader)


def _server_pid(transport: Any) -> int | None:
    """The pid of the process ``stdio_client`` started (a local of the suspended generator:
    the SDK hands the process to no one)."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) and pid > 0 else None


async def end_session(leader: int, *, grace: float = _GRACE) -> None:
    """End every process of the session (Linux) or process group (elsewhere) that the
    process ``leader`` started as its leader: SIGTERM, then SIGKILL what is left after
    ``grace`` seconds, then wait up to ``grace`` again. Returns at once when none is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        groups = _groups(leader)
        if not groups:
            return
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass  # gone meanwhile
            except PermissionError:  # a member of another user (setuid): not ours to end
                _LOG.warning("MCP: no permission to signal process group %d", group)
        with anyio.move_on_after(grace):
            while _groups(leader):  # noqa: ASYNC110 - nothing tells when a process ends
                await anyio.sleep(_POLL)
            return
    if _groups(leader):
        _LOG.warning(
            "MCP: processes of the server's session %d are still running after SIGKILL", leader
        )


def _groups(leader: int) -> set[int]:
    """The process groups with a live member in the session of ``leader``."""
    if sys.platform.startswith("linux") and os.path.isdir("/proc/self"):
        return _session_groups(leader)
    try:
        os.killpg(leader, 0)
    except ProcessLookupError:
        return set()
    except PermissionError:
        pass  # a member we may not signal: still there
    return {leader}


def _session_groups(sid: int) -> set[int]:
    """From ``/proc``: the groups of the processes of session ``sid`` that are not zombies
    (a zombie is dead; its parent reaps it)."""
    groups: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        # after the command: state, ppid, pgrp, session
        if len(fields) >= 4 and int(fields[3]) == sid and fields[0] != b"Z":
            groups.add(int(fields[2]))
    return groups
