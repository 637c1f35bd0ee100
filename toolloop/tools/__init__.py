"""Tools: typed functions with JSON schemas, a registry, and one validated call."""

from __future__ import annotations

from ._context import Progress as Progress
from ._context import RunContext as RunContext
from ._context import RunScope as RunScope
from ._context import call_id_of as call_id_of
from ._context import run_context as run_context
from ._function import describe_pydantic_error as describe_pydantic_error
from ._registry import ToolRegistry as ToolRegistry
from ._registry import register_builtin as register_builtin
from ._schema import ArgumentsSchema as ArgumentsSchema
from ._tool import Tool as Tool
from ._tool import async_call_tool as async_call_tool
from ._tool import tool as tool

__all__ = [
    "ArgumentsSchema",
    "Progress",
    "RunContext",
    "RunScope",
    "Tool",
    "ToolRegistry",
    "async_call_tool",
    "call_id_of",
    "describe_pydantic_error",
    "register_builtin",
    "run_context",
    "tool",
]
