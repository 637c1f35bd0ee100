"""Middleware from a single function: ``@before_model``, ``@wrap_tool_call``, ...

::

    @before_model
    def trim(state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        ...

    agent = create_agent(model, tools, middleware=[trim])

Each decorator returns an :class:`~toolloop.agents.AgentMiddleware` named after the
function (``name=`` to choose another), whose one hook is the function (plain or async).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from ._middleware import HOOKS, AgentMiddleware

__all__ = [
    "HookDecorator",
    "after_agent",
    "after_model",
    "before_agent",
    "before_model",
    "middleware_from",
    "wrap_model_call",
    "wrap_tool_call",
]

Hook = Callable[..., Any]


def middleware_from(hook: str, function: Hook, *, name: str | None = None) -> AgentMiddleware:
    """A middleware whose ``hook`` (one of the six hook names) is ``function``."""
    if hook not in HOOKS:
        raise ValueError(f"{hook!r} is no middleware hook; the hooks are {list(HOOKS)}")
    label = name or getattr(function, "__name__", None) or hook

    def method(self: AgentMiddleware, *args: Any) -> Any:
        return function(*args)

    cls = type(label, (AgentMiddleware,), {hook: method, "__doc__": function.__doc__})
    middleware: AgentMiddleware = cls()
    return middleware


class HookDecorator:
    """``@before_model`` and its kin: the function becomes a one-hook middleware."""

    __slots__ = ("hook",)

    def __init__(self, hook: str) -> None:
        self.hook = hook

    @overload
    def __call__(self, function: Hook, /) -> AgentMiddleware: ...

    @overload
    def __call__(self, /, *, name: str | None = None) -> Callable[[Hook], AgentMiddleware]: ...

    def __call__(
        self, function: Hook | None = None, /, *, name: str | None = None
    ) -> AgentMiddleware | Callable[[Hook], AgentMiddleware]:
        hook = self.hook
        if function is not None:
            return middleware_from(hook, function, name=name)
        return lambda fn: middleware_from(hook, fn, name=name)

    def __repr__(self) -> str:
        return f"<middleware decorator {self.hook}>"


before_agent = HookDecorator("before_agent")
before_model = HookDecorator("before_model")
wrap_model_call = HookDecorator("wrap_model_call")
after_model = HookDecorator("after_model")
wrap_tool_call = HookDecorator("wrap_tool_call")
after_agent = HookDecorator("after_agent")
