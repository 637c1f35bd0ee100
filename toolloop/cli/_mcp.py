"""``toolloop run --mcp "COMMAND ARGS"`` / ``--mcp-url URL``: MCP servers' tools in the run."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from ._load import CLIError

__all__ = ["open_mcp_tools"]


async def open_mcp_tools(
    stack: AsyncExitStack, commands: Sequence[str], urls: Sequence[str]
) -> list[Any]:
    """Open a session with each server (closed when ``stack`` closes); all their tools.

    Raises:
        CLIError: the mcp extra is missing, or a command line or URL is malformed (exit
            status 2). A server that cannot be opened raises
            :class:`~toolloop.mcp.MCPConnectionError` (told in one line, status 1).
    """
    if not commands and not urls:
        return []
    try:
        from ..mcp import MCPConnection, MCPServerHTTP, MCPServerStdio
    except ImportError as exc:
        raise CLIError(f"--mcp/--mcp-url: {exc}", code=2) from exc
    servers: list[MCPConnection] = []
    for command in commands:
        try:
            servers.append(MCPServerStdio.from_command_line(command))
        except ValueError as exc:
            raise CLIError(f"--mcp {command!r}: {exc}", code=2) from exc
    for url in urls:
        try:
            servers.append(MCPServerHTTP(url))
        except ValueError as exc:
            raise CLIError(f"--mcp-url: {exc}", code=2) from exc
    tools: list[Any] = []
    for server in servers:
        tools.extend((await stack.enter_async_context(server)).tools)
    return tools
