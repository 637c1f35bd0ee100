"""MCP tools: the tools of Model Context Protocol servers as toolloop tools.

Needs the ``mcp`` extra (``pip install 'toolloop[mcp]'``: the official ``mcp`` SDK, 2.x).
Open a session with a server over stdio (:class:`MCPServerStdio`, a subprocess) or
Streamable HTTP (:class:`MCPServerHTTP`) in ``async with``; inside, its tools
(:attr:`MCPConnection.tools`) are plain :class:`~toolloop.Tool` objects for the loop and
both agents. The guide: "MCP servers" in the documentation.
"""

# ruff: noqa: E402  (the extra is checked before the modules that import it)
from __future__ import annotations

from .._extras import require

require("mcp", needs="toolloop.mcp needs the official MCP SDK (mcp 2.x)", extra="mcp")

from ._errors import MCPConnectionError as MCPConnectionError
from ._errors import MCPToolError as MCPToolError
from ._session import MCPConnection as MCPConnection
from ._session import MCPServerHTTP as MCPServerHTTP
from ._session import MCPServerStdio as MCPServerStdio
from ._session import Protocol as Protocol

__all__ = [
    "MCPConnection",
    "MCPConnectionError",
    "MCPServerHTTP",
    "MCPServerStdio",
    "MCPToolError",
    "Protocol",
]
