"""An MCP server (the official SDK's) that starts a helper process, for the tests of closing a
stdio session: whatever the server started must end with the session.

    python helper_server.py HELPER_PID_FILE [--own-group] [--stubborn] [--linger SECONDS]

It starts a helper with ``subprocess.Popen`` (which inherits its stdin and stdout, the
session's pipes), waits until the helper has written its pid to ``HELPER_PID_FILE``, then
serves over stdio until its stdin closes, and exits.

``--own-group``: the helper makes a process group of its own (in the server's session).
``--stubborn``: the helper ignores SIGTERM (only SIGKILL ends it).
``--linger SECONDS``: after its stdin closed, the server waits that long before exiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("helper-starter", log_level="CRITICAL")

HELPER = """
import os, signal, sys, time
if {stubborn}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if {own_group}:
    os.setpgid(0, 0)
path = sys.argv[1]
with open(path + ".tmp", "w") as out:
    out.write(str(os.getpid()))
os.replace(path + ".tmp", path)
time.sleep(600)
"""


@server.tool(structured_output=False)
def ping() -> str:
    """Answer ``pong``."""
    return "pong"


def main(argv: list[str]) -> None:
    pid_file = Path(argv[0])
    code = HELPER.format(stubborn="--stubborn" in argv, own_group="--own-group" in argv)
    subprocess.Popen([sys.executable, "-c", code, str(pid_file)])
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    server.run("stdio")
    if "--linger" in argv:
        time.sleep(float(argv[argv.index("--linger") + 1]))
    os._exit(0)  # without waiting for the helper (Popen's child) at exit


if __name__ == "__main__":
    main(sys.argv[1:])
