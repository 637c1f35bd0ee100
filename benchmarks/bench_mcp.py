"""MCP tools: what toolloop adds to a call of an MCP server's tool, against the SDK alone.

    python benchmarks/bench_mcp.py [--quick] [--backend asyncio|trio] [--protocol auto|legacy]

For each transport (stdio: a subprocess; Streamable HTTP: a server on 127.0.0.1) it times
sequential calls of the test server's ``add`` tool, made (a) with the SDK's
``Client.call_tool`` directly and (b) through toolloop (the ``Tool`` of
``MCPServerStdio``/``MCPServerHTTP`` run by the ``Executor``: schema check, record), on
the same open session, and prints the time per call and toolloop's overhead. It also
times opening a session (start or connect, negotiate, list the tools).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import median
from time import perf_counter
from typing import Any

import anyio

from toolloop.mcp import MCPConnection, MCPServerHTTP, MCPServerStdio, Protocol
from toolloop.runner import Executor, ToolCommand

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp" / "mcp_server.py"


async def _measure(server: MCPConnection, calls: int, repeats: int) -> tuple[float, float]:
    client: Any = server._client  # the SDK's client of the open session
    executor = Executor(server.tools)
    command = ToolCommand(purpose="add", tool_name="add", tool_kwargs={"a": 1, "b": 2})
    raw: list[float] = []
    ours: list[float] = []

    async def sdk() -> None:
        await client.call_tool("add", {"a": 1, "b": 2})

    async def toolloop() -> None:
        record = await executor.call(command)
        assert record.result == {"result": 3}

    for repeat in range(repeats):  # interleaved, each first in turn: load drifts cancel out
        order = [(sdk, raw), (toolloop, ours)]
        for call, times in order if repeat % 2 == 0 else order[::-1]:
            started = perf_counter()
            for _ in range(calls):
                await call()
            times.append((perf_counter() - started) / calls)
    return median(raw), median(ours)


async def _open_time(make: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = perf_counter()
        async with make():
            times.append(perf_counter() - started)
    return median(times)


async def main(url: str, quick: bool, protocol: Protocol) -> None:
    calls, repeats = (100, 3) if quick else (500, 5)
    makers: dict[str, Callable[[], MCPConnection]] = {
        "stdio": lambda: MCPServerStdio(sys.executable, [str(SERVER), "stdio"], protocol=protocol),
        "http": lambda: MCPServerHTTP(url, protocol=protocol),
    }
    print(f"{calls} sequential calls of `add`, median of {repeats}, protocol={protocol!r}")
    for name, make in makers.items():
        async with make() as server:
            raw, ours = await _measure(server, calls, repeats)
        opened = await _open_time(make, 3)
        print(
            f"  {name:5}  SDK {raw * 1e6:8.0f} µs/call   toolloop {ours * 1e6:8.0f} µs/call"
            f"   overhead {(ours - raw) * 1e6:+6.0f} µs ({ours / raw:.2f}x)"
            f"   open a session {opened * 1e3:6.0f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--protocol", choices=("auto", "legacy"), default="auto")
    args = parser.parse_args()
    command = [sys.executable, str(SERVER), "http"]
    http = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert http.stdout is not None
        url = f"http://127.0.0.1:{http.stdout.readline().strip()}/mcp"
        anyio.run(main, url, args.quick, args.protocol, backend=args.backend)
    finally:
        http.terminate()
        http.wait(timeout=10)
