"""A small MCP server written with the official SDK, for the tests (and the docs' example).

    python mcp_server.py stdio [--pid-file FILE]   # over stdin/stdout
    python mcp_server.py http                       # Streamable HTTP on 127.0.0.1, a free
                                                    # port, printed on the first line

Its tools cover what a client meets: structured results, text, mixed content blocks, a
tool that fails, one that waits until cancelled (and counts it), one that changes the tool
list, one that kills the server, and a name a model cannot use as it is (``files.read``).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent

server = MCPServer("toolloop-tests", log_level="CRITICAL")
STATS = {"started": 0, "cancelled": 0, "finished": 0}
CANCELLED: list[str] = []


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool(structured_output=False)
def greet(name: str) -> str:
    """Say hello (a text result, no structured content)."""
    return f"Hello, {name}!"


@server.tool(structured_output=False)
def mixed() -> list[Any]:
    """Two content blocks: a text and a 1x1 PNG."""
    return [
        TextContent(type="text", text="a picture:"),
        ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
    ]


@server.tool()
def fail(message: str) -> str:
    """Fail with ``message`` (the server reports it as an error result)."""
    raise ToolError(message)


@server.tool()
async def wait(seconds: float, tag: str = "") -> str:
    """Wait ``seconds``; a cancelled wait is counted, with its ``tag`` (see ``stats``)."""
    STATS["started"] += 1
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        STATS["cancelled"] += 1
        CANCELLED.append(tag)
        raise
    STATS["finished"] += 1
    return "waited"


@server.tool()
def stats() -> dict[str, Any]:
    """How many ``wait`` calls started, were cancelled, finished; the cancelled ones' tags."""
    return {**STATS, "cancelled_tags": list(CANCELLED)}


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called ``name`` (it answers ``"new"``) and tell the clients."""

    def added() -> str:
        return "new"

    server.add_tool(added, name=name, description="A tool added while the server runs.")
    await ctx.notify_tools_changed()  # the 2026 protocol: subscriptions/listen streams
    await ctx.request_context.session.send_tool_list_changed()  # older protocols
    return "grown"


@server.tool()
def die() -> str:
    """End the server process at once (a lost connection)."""
    os._exit(3)


def _read(path: str) -> str:
    return f"contents of {path}"


server.add_tool(_read, name="files.read", description="Read a file (a dotted name).")


def _serve_http() -> None:
    import functools

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="critical", lifespan="on")
    serve = functools.partial(uvicorn.Server(config).serve, sockets=[sock])
    anyio.run(serve, backend="asyncio")  # uvicorn runs on asyncio


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        _serve_http()
        return
    if "--pid-file" in argv:
        with open(argv[argv.index("--pid-file") + 1], "w") as out:
            out.write(str(os.getpid()))
    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
