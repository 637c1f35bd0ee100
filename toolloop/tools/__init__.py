"""Tools: typed functions with JSON schemas, a registry, and one validated call."""

from __future__ import annotations

from ._registry import ToolRegistry as ToolRegistry
from ._tool import Tool as Tool
from ._tool import async_call_tool as async_call_tool
from ._tool import tool as tool

__all__ = ["Tool", "ToolRegistry", "async_call_tool", "tool"]
