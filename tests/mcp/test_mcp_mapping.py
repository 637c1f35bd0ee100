"""How an MCP server's tool list and results map into toolloop, without a server."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
import pytest

from toolloop.mcp import MCPToolError
from toolloop.mcp._results import result_value
from toolloop.mcp._tools import make_tools

OBJECT = {"type": "object", "properties": {"x": {"type": "integer"}}}


def spec(name: str, schema: dict[str, Any] | None = None, **fields: Any) -> types.Tool:
    return types.Tool(name=name, input_schema=schema or OBJECT, **fields)


async def never(name: str, arguments: dict[str, Any]) -> Any:  # pragma: no cover
    raise AssertionError("no call in these tests")


def test_names_are_made_usable_prefixed_and_bad_tools_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    specs = [
        spec("files.read", description="Read."),
        spec("files_read"),  # the same name once made usable
        spec("x" * 70),  # too long
        spec("broken", {"type": "object", "properties": {"x": {"type": "nonsense"}}}),
        spec("titled", title="A title, no description"),
    ]
    with caplog.at_level(logging.WARNING, logger="toolloop"):
        tools = make_tools(specs, prefix="fs", call=never, timeout=5.0, server="srv")
    assert [t.name for t in tools] == ["fs_files_read", "fs_titled"]
    assert tools[0].description == "Read."
    assert tools[1].description == "A title, no description"
    assert tools[0].parameters == OBJECT
    assert tools[0].timeout == 5.0
    warned = caplog.text
    assert "tool 'files_read' is left out: another tool of the server is also named" in warned
    assert "is longer than 64 characters" in warned
    assert "tool 'broken' is left out" in warned
    assert "not a valid JSON schema" in warned


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def test_results() -> None:
    def result(**fields: Any) -> types.CallToolResult:
        return types.CallToolResult(**fields)

    assert result_value(result(content=[]), server="s", tool="t") == ""
    two = result(content=[text("one"), text("two")])
    assert result_value(two, server="s", tool="t") == "one\n\ntwo"
    both = result(content=[text("42")], structured_content={"answer": 42})
    assert result_value(both, server="s", tool="t") == {"answer": 42}
    image = types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    failed = result(content=[text("no way"), image], is_error=True)
    with pytest.raises(MCPToolError, match=r"tool 't' failed: \[\{'type': 'text'") as caught:
        result_value(failed, server="s", tool="t")
    assert caught.value.result == [
        {"type": "text", "text": "no way"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
    ]
    assert (caught.value.server, caught.value.tool, caught.value.code) == ("s", "t", None)
    silent = result(content=[], is_error=True)
    with pytest.raises(MCPToolError, match=r"failed: \(no message\)"):
        result_value(silent, server="s", tool="t")
