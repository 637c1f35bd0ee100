"""What an MCP tool call returns, as a toolloop result: structured content, text, or
content blocks; an error result raises :class:`~toolloop.mcp.MCPToolError`."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ._errors import MCPToolError

__all__ = ["result_value"]

_MAX_ERROR_CHARS = 2000


def _block(block: Any) -> Any:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return block  # pragma: no cover - the SDK only gives pydantic models


def _content(blocks: list[Any]) -> Any:
    """All text: the text (blocks joined by a blank line); otherwise the blocks as JSON."""
    if all(isinstance(block, types.TextContent) for block in blocks):
        return "\n\n".join(block.text for block in blocks)
    return [_block(block) for block in blocks]


def result_value(result: types.CallToolResult, *, server: str, tool: str) -> Any:
    """The value of a tool call's result, for the record.

    - ``structured_content`` when the server gave it (a JSON object);
    - else the text, when every content block is text (several joined by a blank line);
    - else the content blocks as JSON objects (images and audio keep their base64 data).

    Raises:
        MCPToolError: the result has ``is_error`` set; the error says what the server said.
    """
    if result.is_error:
        value = _content(list(result.content))
        said = value if isinstance(value, str) else str(value)
        if len(said) > _MAX_ERROR_CHARS:
            said = f"{said[:_MAX_ERROR_CHARS]}… ({len(said)} chars)"
        raise MCPToolError(
            f"MCP server {server!r}: tool {tool!r} failed: {said or '(no message)'}",
            server=server,
            tool=tool,
            result=value,
        )
    if result.structured_content is not None:
        return result.structured_content
    return _content(list(result.content))
