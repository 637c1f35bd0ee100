"""A throwaway PostgreSQL cluster for the tests: made in a temporary folder, listening only
on a unix socket there, stopped and removed at the end.

PostgreSQL refuses to run as root, and CI runs as root: then the cluster runs as an
unprivileged user (``nobody``), which owns its folder. ``TOOLLOOP_POSTGRES_URL`` points the
tests at an existing server instead (nothing is started then).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

HOW_TO_GET_ONE = (
    "no PostgreSQL server binaries (initdb, pg_ctl) were found: install them "
    "(Debian/Ubuntu: apt-get install postgresql; `python3 dev.py test` does it when run as "
    "root), or point TOOLLOOP_POSTGRES_URL at an existing server "
    "(e.g. postgresql://user:password@127.0.0.1:5432/db)"
)


def find_bin_dir() -> Path | None:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``, if any."""
    found = shutil.which("pg_ctl")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


WATCHDOG = """
import os, shutil, subprocess, sys
root, pg_ctl, user = sys.argv[1], sys.argv[2], sys.argv[3]
sys.stdin.buffer.read()  # returns when the test session's end of the pipe closes
data = os.path.join(root, "data")
if os.path.exists(os.path.join(data, "postmaster.pid")):
    cmd = [pg_ctl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"]
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    subprocess.run(cmd, capture_output=True, timeout=60, cwd="/")
shutil.rmtree(root, ignore_errors=True)
"""
"""Stops the cluster and removes its folder once the test session is gone, however it
ended (even killed: its end of the pipe closes with it)."""


@dataclass
class Cluster:
    """A running throwaway cluster."""

    bin_dir: Path
    root: Path
    user: str | None
    """The system user it runs as (``None``: this process's own)."""
    watchdog: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://toolloop@/postgres?host={self.root}&port=5432"

    def _cmd(self, *args: str) -> list[str]:
        if self.user is None:
            return list(args)
        return ["runuser", "-u", self.user, "--", *args]

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if done.returncode:
            log = self.root / "server.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({done.returncode}):\n{done.stdout}\n"
                f"{done.stderr}\n{tail}"
            )

    def start(self) -> None:
        self.watchdog = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WATCHDOG,
                str(self.root),
                str(self.bin_dir / "pg_ctl"),
                self.user or "",
            ],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C of the session does not stop it first
        )
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "toolloop",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        options = (
            f"-k {self.root} -c listen_addresses='' -c max_connections=200 "
            "-c fsync=off -c full_page_writes=off -c shared_buffers=32MB"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        """Stop the server (fast) and remove its folder; never raises."""
        try:
            if (self.data / "postmaster.pid").exists():
                subprocess.run(
                    self._cmd(
                        str(self.bin_dir / "pg_ctl"),
                        "-D",
                        str(self.data),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "30",
                        "stop",
                    ),
                    capture_output=True,
                    timeout=60,
                    cwd="/",
                )
        except (OSError, subprocess.SubprocessError):
            pass
        finally:
            self._kill_leftover()
            shutil.rmtree(self.root, ignore_errors=True)
            watchdog, self.watchdog = self.watchdog, None
            if watchdog is not None and watchdog.stdin is not None:
                watchdog.stdin.close()  # nothing is left for it to do
                try:
                    watchdog.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    watchdog.kill()

    def _kill_leftover(self) -> None:
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def start_cluster() -> Cluster:
    """Make and start a cluster (as ``nobody`` when this process is root).

    Raises:
        FileNotFoundError: no server binaries (the message says how to get them).
        RuntimeError: the server did not start (with its log).
    """
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError(HOW_TO_GET_ONE)
    user = None
    root = Path(tempfile.mkdtemp(prefix="toolloop-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            shutil.rmtree(root, ignore_errors=True)
            raise FileNotFoundError("as root, starting PostgreSQL needs runuser (util-linux)")
        user = "nobody"
        shutil.chown(root, user=user)
    cluster = Cluster(bin_dir=bin_dir, root=root, user=user)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_ready(url: str, timeout: float = 30.0) -> None:
    """Wait until the server answers (a fresh server takes a moment)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@asynccontextmanager
async def fresh_schema(url: str) -> AsyncIterator[str]:
    """A schema name no other test uses; dropped (with its tables) afterwards."""
    import anyio.to_thread
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:

        def drop() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(drop)
