"""Install toolloop and its peers in ``.venv-peers/`` and run ``run.py`` there.

    python3 dev.py peers [--quick] [--only NAME] [--no-write]
    .venv/bin/python benchmarks/peers/make_venv.py [run.py options]

The peers are not dependencies of toolloop, not even optional ones: they get a venv of their
own, ``.venv-peers/`` (made when missing; gitignored), with toolloop installed from this
checkout (``pip install -e .``) beside the versions of the peers below, which were checked to
install together with toolloop's own requirements (anyio, pydantic, openai>=1.40,
jsonschema). The install is redone only when this list or ``pyproject.toml`` changes.

If the peers cannot all be installed together, each is tried alone, pinned and then at its
latest version; one that still fails is reported, and ``run.py`` skips it with a message.
The exit status is ``run.py``'s (1 if toolloop itself could not be installed).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-peers"
PYTHON = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".peers-installed"
RUN = Path(__file__).resolve().parent / "run.py"

# The versions the figures in docs/benchmarks.md were measured with (checked to install
# together, and with toolloop's requirements, on Python 3.11). pydantic-ai-slim is
# pydantic-ai without the SDKs of every model provider; Agently's TriggerFlow ships in agently.
PEERS = (
    "langchain==1.4.7",
    "langgraph==1.2.22",
    "pydantic-ai-slim==2.68.0",
    "openai-agents==0.24.0",
    "llama-index-workflows==2.26.1",
    "agently==4.1.4.10",
)


def say(*parts: object) -> None:
    print("[peers]", *parts, flush=True)


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd[1:]), flush=True)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def _why(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    return lines[-1].strip() if lines else f"pip exited {done.returncode}"


def install() -> bool:
    """Install toolloop and the peers; False if toolloop itself could not be installed."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + repr(PEERS).encode())
    if STAMP.exists() and STAMP.read_text() == digest.hexdigest() and PYTHON.exists():
        say(f"{VENV.name}: toolloop and the peers are installed")
        return True
    if not PYTHON.exists():
        say(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    done = pip("-e", ".", *PEERS)
    if done.returncode == 0:
        STAMP.write_text(digest.hexdigest())
        return True
    say(f"toolloop and the peers do not install together: {_why(done)}")
    done = pip("-e", ".")
    if done.returncode != 0:
        say(f"toolloop itself could not be installed: {_why(done)}")
        return False
    for peer in PEERS:
        if pip(peer).returncode == 0:
            continue
        name = peer.split("==")[0]
        done = pip(name)
        if done.returncode == 0:
            say(f"{peer} could not be installed; {name} at its latest version was")
        else:
            say(f"{name} could not be installed, it will be skipped: {_why(done)}")
    return True


def main(argv: Sequence[str]) -> int:
    if not install():
        return 1
    cmd = [str(PYTHON), str(RUN), *argv]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
