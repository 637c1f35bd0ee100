"""The errors of MCP tools, under the one hierarchy (``toolloop.errors``)::

    ToolCallError
    └── MCPToolError           the server answered a tool call with an error
    RunError
    └── MCPConnectionError     the server cannot be reached, or the connection is lost

Raised inside a tool call, both become the failed record of that call (the runner turns
every exception of a tool into a record); raised by ``async with`` or ``list_tools()``,
they reach the caller.
"""

from __future__ import annotations

from typing import Any

from .._errors import RunError, ToolCallError

__all__ = ["MCPConnectionError", "MCPToolError"]


class MCPToolError(ToolCallError):
    """The MCP server answered a tool call with an error: a result with ``is_error`` set
    (the tool failed on the server), or a JSON-RPC error (unknown tool, bad arguments).

    Attributes:
        server: which server (its label: the command or the URL).
        tool: the tool's name on the server.
        result: what the error result carried (its text, structured content or content
            blocks), ``None`` for a JSON-RPC error.
        code: the JSON-RPC error code, ``None`` for an ``is_error`` result.
    """

    def __init__(
        self,
        message: str,
        *,
        server: str,
        tool: str,
        result: Any = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.server = server
        self.tool = tool
        self.result = result
        self.code = code


class MCPConnectionError(RunError):
    """An MCP server cannot be used: it did not start or answer in time, the connection
    was lost (the process exited, the HTTP server went away), or the session is closed.

    Attributes:
        server: which server (its label: the command or the URL).
    """

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server
