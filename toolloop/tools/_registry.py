"""The tools of a run, by name."""

from __future__ import annotations

import difflib
import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._errors import ToolDefinitionError, ToolNotFoundError
from ._tool import Tool

__all__ = ["ToolRegistry", "register_builtin"]

_MAX_NAMES = 20
_BUILTIN: dict[str, Tool] = {}
"""Tools every registry runs besides its own, by name (a tool of the registry's own of the
same name wins): the run kernel's ``read_result``. Never in a registry's ``names`` or
``specs``: a run offers them itself, when they help."""


def register_builtin(tool: Tool) -> None:
    """Make every registry run ``tool`` when it has no tool of that name (see the run
    kernel's ``read_result``)."""
    _BUILTIN[tool.name] = tool


class ToolRegistry:
    """An immutable set of tools with unique names.

    Args:
        tools: :class:`Tool` objects and/or plain typed functions (made tools with
            :meth:`Tool.from_function`), in the order the model should see them.

    Raises:
        ToolDefinitionError: two tools share a name, or a function cannot be a tool.
    """

    __slots__ = ("__weakref__", "_specs", "_tools", "takes_context")

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            tool = item if isinstance(item, Tool) else _tool_for(item)
            if tool.name in self._tools:
                raise ToolDefinitionError(
                    f"two tools are named {tool.name!r}; tool names must be unique: rename "
                    "one (Tool.from_function(fn, name='...') or @tool(name='...'))"
                )
            self._tools[tool.name] = tool
        self._specs = [tool.spec() for tool in self._tools.values()]
        self.takes_context = any(t.context_parameter is not None for t in self._tools.values())
        """Whether a tool here asks for the run's :class:`~toolloop.tools.RunContext`."""

    def get(self, name: str) -> Tool:
        """The tool called ``name``.

        Raises:
            ToolNotFoundError: no such tool; the message lists the available ones.
        """
        try:
            return self._tools[name]
        except KeyError:
            builtin = _BUILTIN.get(name)
            if builtin is not None:
                return builtin
            raise ToolNotFoundError(self._not_found(name)) from None

    def accepts(self, name: str, arguments: object) -> bool:
        """Whether a call of ``name`` with ``arguments`` can run: the tool exists and the
        arguments fit its schema (nothing runs)."""
        tool = self._tools.get(name)
        if tool is None:
            tool = _BUILTIN.get(name)
        if tool is None:
            return False
        try:
            tool.validate(arguments)
        except Exception:
            return False
        return True

    def _not_found(self, name: str) -> str:
        names = list(self._tools)
        if not names:
            return f"no tool named {name!r}: no tools are available"
        shown = ", ".join(repr(n) for n in names[:_MAX_NAMES])
        if len(names) > _MAX_NAMES:
            shown += f", … ({len(names) - _MAX_NAMES} more)"
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"no tool named {name!r}; available tools: {shown}{hint}"

    @property
    def names(self) -> list[str]:
        """The tool names, in registration order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"

    def specs(self) -> list[dict[str, Any]]:
        """``[{"name", "description", "parameters"}, ...]``: the planner's ``available_tools``.

        The ``parameters`` schemas are the tools' own: treat them as read-only.
        """
        return list(self._specs)

    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI Chat Completions ``tools`` format."""
        return [tool.openai_tool() for tool in self._tools.values()]


_FUNCTION_TOOLS: weakref.WeakKeyDictionary[Callable[..., Any], Tool] = weakref.WeakKeyDictionary()


def _tool_for(function: Callable[..., Any]) -> Tool:
    """The tool of a plain function, made once: ``tools=[fn]`` on every run costs nothing
    after the first."""
    if not inspect.isfunction(function):  # bound methods, partials, callables: not cached
        return Tool.from_function(function)
    tool = _FUNCTION_TOOLS.get(function)
    if tool is None:
        tool = _FUNCTION_TOOLS[function] = Tool.from_function(function)
    return tool
