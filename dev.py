#!/usr/bin/env python3
"""Set up the development environment and run a job: ``python3 dev.py demo | test | bench``.

Needs only Python 3.10+. The first call creates ``.venv`` and installs toolloop with its
``dev`` extra into it; later calls reinstall only when ``pyproject.toml`` changed.

- ``demo``: the main job, a real run of the plan/execute loop.
- ``test``: the whole suite: ruff (lint and format), mypy (strict), pytest on asyncio and trio.
  The browser tests (every docs page, the live viewer) drive Debian's ``chromium`` with
  ``chromium-driver``, and the docs build fetches Mermaid once with ``npm``: when missing
  and this runs as root with apt, they are installed first; otherwise the browser tests are
  skipped, saying why. The PostgreSQL tests start a throwaway server of their own from
  Debian's ``postgresql`` binaries, installed the same way (or set ``TOOLLOOP_POSTGRES_URL``).
- ``bench``: the benchmarks, printing their figures.
- ``docs``: build the documentation site into ``site/`` (``mkdocs build --strict``);
  ``serve`` to browse it live; ``viewer-png``: make the docs' picture of the live viewer
  (``docs/assets/viewer.png``) from the viewer as it is, in the headless ``chromium``.
- ``peers``: the loop's workload in toolloop and in its peers (LangGraph, pydantic-ai, ...),
  installed in ``.venv-peers`` of their own; writes the table into ``docs/benchmarks.md``.
- ``real-model``: the opt-in suite against a real small model served on 127.0.0.1 (the first
  run compiles llama.cpp, ~30 minutes; see the README).
- anything else is run inside the venv, e.g. ``python3 dev.py pytest -k flow``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # a theme banner, not a problem of ours
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".toolloop-installed"


def _run(*cmd: str | Path) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    code = subprocess.call([str(c) for c in cmd], cwd=ROOT)
    if code:
        sys.exit(code)


def setup() -> None:
    """Create the venv and install the project, unless it is already up to date."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest and PY.exists():
        return
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    _run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    _run(PY, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(digest)


def _has_postgres() -> bool:
    """Whether the PostgreSQL tests have a server: given, or binaries to start one."""
    return bool(
        os.environ.get("TOOLLOOP_POSTGRES_URL")
        or shutil.which("pg_ctl")
        or glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
    )


def ensure_system_packages(job: str = "test") -> None:
    """Install, with apt, the Debian packages the suite uses when they are missing and that
    is possible (root, apt): chromium and chromium-driver for the browser tests (without them
    those tests skip, saying why), npm, with which the docs build fetches Mermaid once, and
    (for ``test``) postgresql, whose binaries the PostgreSQL tests start a throwaway server
    from (installed without a cluster of its own). Never fails the job by itself."""
    wanted = []
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        wanted += ["chromium", "chromium-driver"]
    if not shutil.which("npm"):
        wanted.append("npm")
    if job == "test" and not _has_postgres():
        wanted.append("postgresql")
    if not wanted:
        return
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(
            f"note: {', '.join(wanted)} missing, and no root apt to install them: the browser "
            "(and PostgreSQL) tests will be skipped, and the docs need npm once to fetch "
            "Mermaid",
            flush=True,
        )
        return
    conf = Path("/etc/postgresql-common/createcluster.conf")
    if "postgresql" in wanted and not conf.exists():
        # the package would otherwise make and start a cluster of its own
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("create_main_cluster = false\n")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *wanted],
    ):
        print("+", " ".join(cmd), flush=True)
        try:
            code = subprocess.call(cmd, env=env, timeout=1200)
        except subprocess.TimeoutExpired:
            code = -1
        if code:
            print(f"note: {cmd[1]} failed ({code}); see above", flush=True)
            return


JOBS: dict[str, list[list[str]]] = {
    "demo": [["python", "-m", "toolloop", "demo"]],
    "test": [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
        ["python", "-m", "pytest"],
    ],
    "bench": [["python", "benchmarks/run_all.py"]],
    "docs": [["mkdocs", "build", "--strict"]],
    "serve": [["mkdocs", "serve"]],
    "viewer-png": [["python", "docs/_viewer_png.py"]],
    # opt-in: installs llama-cpp-python (its first build takes ~30 min) and a small model
    # into .venv-model, serves it, runs the real_model tests against it, stops the server
    "real-model": [["python", "tests/real_model/run.py"]],
    # toolloop next to LangGraph, pydantic-ai, the OpenAI Agents SDK, LlamaIndex and Agently:
    # installs them into .venv-peers (never into .venv), then runs benchmarks/peers/run.py there
    "peers": [["python", "benchmarks/peers/make_venv.py"]],
}


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    setup()
    job, *rest = argv
    if job in ("test", "docs", "serve", "viewer-png"):
        ensure_system_packages(job)
    steps = JOBS.get(job, [[job]])
    for i, step in enumerate(steps):
        tool = PY if step[0] == "python" else BIN / step[0]
        extra = rest if i == len(steps) - 1 else []
        _run(tool, *step[1:], *extra)


if __name__ == "__main__":
    main(sys.argv[1:])
