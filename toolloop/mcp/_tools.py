"""An MCP server's tool list as toolloop :class:`~toolloop.Tool` objects: names made
usable (and prefixed), the server's input schemas kept as each tool's schema."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types

from .._errors import ToolDefinitionError
from ..tools import Tool

__all__ = ["CallTool", "check_prefix", "make_tools"]

CallTool = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``call(name_on_the_server, arguments)``: the session's call of one tool."""

_LOG = logging.getLogger("toolloop")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNUSABLE = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def check_prefix(prefix: str | None) -> str | None:
    """``prefix`` if usable in a tool name (1-32 letters, digits, ``_``, ``-``).

    Raises:
        ValueError: it is not.
    """
    if prefix is None:
        return None
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(
            f"prefix must be 1-32 letters, digits, '_' or '-' (it starts every tool name of "
            f"the server: prefix_name), got {prefix!r}"
        )
    return prefix


def _local_name(name: str, prefix: str | None) -> str:
    """The toolloop name of the server's tool ``name``: characters a model's function name
    cannot hold (``.``, ``/``, spaces) become ``_``; the prefix and ``_`` go first."""
    local = _UNUSABLE.sub("_", name)
    return f"{prefix}_{local}" if prefix else local


def _tool(spec: types.Tool, name: str, call: CallTool, timeout: float | None) -> Tool:
    remote = spec.name

    async def call_remote(**arguments: Any) -> Any:
        return await call(remote, arguments)

    call_remote.__name__ = name
    call_remote.__qualname__ = name
    return Tool(
        name=name,
        description=spec.description or spec.title or "",
        parameters=spec.input_schema,
        function=call_remote,
        timeout=timeout,
    )


def make_tools(
    specs: Sequence[types.Tool],
    *,
    prefix: str | None,
    call: CallTool,
    timeout: float | None,
    server: str,
) -> list[Tool]:
    """The usable tools of ``specs``, in the server's order.

    A tool that cannot be a toolloop tool (a name too long once made usable, a name
    shared with another tool, an input schema that is not a valid JSON schema of an
    object) is left out with a warning on the ``toolloop`` logger: one bad tool does not
    make the server's other tools unusable.
    """
    tools: list[Tool] = []
    seen: set[str] = set()
    for spec in specs:
        name = _local_name(spec.name, prefix)
        why = None
        if not _NAME.match(name):
            why = f"its name {name!r} is longer than 64 characters"
        elif name in seen:
            why = f"another tool of the server is also named {name!r} here"
        else:
            try:
                tools.append(_tool(spec, name, call, timeout))
            except ToolDefinitionError as exc:
                why = str(exc)
        if why is not None:
            _LOG.warning("MCP server %s: tool %r is left out: %s", server, spec.name, why)
            continue
        seen.add(name)
    return tools
