"""A tool: a named callable with a description and a JSON schema for its arguments.

Validation is kept apart from execution: :meth:`Tool.validate` checks (and, for typed
functions, converts) the arguments without running anything; :meth:`Tool.execute` runs
already-validated arguments under the tool's timeout. :func:`async_call_tool` does both.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, overload

import anyio
import anyio.to_thread

from .._errors import ToolArgumentsError, ToolDefinitionError, ToolTimeoutError
from ._compile import plain_properties
from ._context import run_context
from ._function import FunctionSignature, explicit_signature, inspect_function
from ._schema import ArgumentsSchema, describe_value

__all__ = ["Tool", "async_call_tool", "tool"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _check_timeout(owner: str, timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not timeout > 0
        or math.isnan(timeout)
    ):
        raise ToolDefinitionError(
            f"{owner}: timeout must be a positive number of seconds or None, got "
            f"{describe_value(timeout)}"
        )
    return float(timeout)


def _plain_arguments(
    parameters: Mapping[str, Any], signature: FunctionSignature
) -> tuple[dict[str, type] | None, tuple[str, ...]]:
    """The tool's arguments that :meth:`Tool.validate` takes in one pass: the properties of
    a schema that asks only for their plain types (:func:`plain_properties`) whose values of
    exactly that type the function is called with as they came (all, when nothing converts
    them); and the required names."""
    plain = plain_properties(parameters)
    if plain is None:
        return None, ()
    types, required = plain
    if signature.convert is not None:
        kept = signature.kept
        if kept is None:
            return None, ()
        types = {name: kind for name, kind in types.items() if kept.get(name) is kind}
    return types, required


def _min_timeout(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


class Tool:
    """A named callable with a description and a JSON schema for its arguments.

    Build one from a typed function with :meth:`Tool.from_function` or the :func:`tool`
    decorator, or explicitly::

        Tool(name="search", description="Search the web.",
             parameters={"type": "object", "properties": {"q": {"type": "string"}},
                         "required": ["q"]},
             function=search)            # called as search(**kwargs)

    An explicit tool's function receives the JSON arguments as they came, after the schema
    check; a typed function receives them converted by pydantic.

    Args:
        name: how the model calls it: 1-64 letters, digits, ``_`` or ``-``.
        description: what it does, for the model.
        parameters: a JSON schema (Draft 2020-12) of ``"type": "object"``; it is checked
            here and compiled once.
        function: sync or async, called with keyword arguments.
        timeout: seconds a call may take before it is cancelled; ``None``: no limit of its own.
        thread: where a sync function runs. ``None`` (the default): in a worker thread, so
            a sync tool that blocks (I/O, heavy CPU) neither stalls the event loop nor
            escapes its timeout (the record fails on time; the thread is abandoned, not
            killed, and holds no later call back). ``False``: inline on the event loop,
            cheapest, for quick pure functions (a timeout cannot interrupt them).
            ``True``: in a thread, said explicitly. Async functions always run on the loop.
        return_direct: for the agent (:func:`toolloop.agents.create_agent`): when every
            tool called in a turn has it, the run ends after them, without asking the model
            again (the tool's result is the answer).

    Raises:
        ToolDefinitionError: a bad name, schema, timeout, or ``thread=True`` for an async
            function.

    Calling the tool object calls the function directly (``tool(...)`` is ``function(...)``).

    A parameter annotated :class:`~toolloop.tools.RunContext` (``RunContext[MyDeps]``) is
    not an argument for the model: it is left out of the schema and filled in by the run
    with the call's context (``context_parameter`` names it).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    """The JSON schema of the arguments (shared, treat as read-only)."""
    function: Callable[..., Any]
    timeout: float | None
    thread: bool
    return_direct: bool
    __wrapped__: Callable[..., Any]
    _schema: ArgumentsSchema
    _convert: Callable[[dict[str, Any]], dict[str, Any]] | None
    _plain: dict[str, type] | None
    """Arguments whose values are all of exactly these types (and name every required one)
    fit the schema and are called with as they came (``None``: no such arguments)."""
    _required: tuple[str, ...]
    _is_async: bool
    context_parameter: str | None
    """The parameter the run fills in with a :class:`~toolloop.tools.RunContext`, if any."""
    resumes: bool = False
    """Whether a call cut off (its process died) may be made again because the tool
    resumes its own journaled work instead of doing it twice (a run as a tool of a durable
    run, :func:`toolloop.kernel.as_tool`): a durable run then makes it again, whatever its
    ``unknown_outcome``."""
    holds_limiter: bool = True
    """Whether a call holds a token of the run's ``limiter`` while it runs; ``False`` for
    a run as a tool (:func:`toolloop.kernel.as_tool`), which only waits for its own run,
    whose tool calls take the tokens (a call holding one would starve them)."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        function: Callable[..., Any],
        timeout: float | None = None,
        thread: bool | None = None,
        return_direct: bool = False,
    ) -> None:
        signature = explicit_signature(name, description, parameters, function)
        self._setup(signature, function, timeout, thread, return_direct, trusted=False)

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        thread: bool | None = None,
        return_direct: bool = False,
    ) -> Tool:
        """A tool from a typed function, sync or async.

        The name is the function's (unless given), the description the first paragraph of
        its docstring (unless given), and the parameter schema is generated by pydantic
        from the annotations; the ``Args:`` section of a Google-style docstring describes
        the parameters. Parameters with defaults are optional. Unknown arguments are
        rejected (``additionalProperties: false``).

        Raises:
            ToolDefinitionError: ``*args``/``**kwargs``, positional-only or un-annotated
                parameters, types without a JSON schema, or any reason ``Tool`` gives.
        """
        signature = inspect_function(function, name=name, description=description)
        self = cls.__new__(cls)
        self._setup(signature, function, timeout, thread, return_direct, trusted=True)
        return self

    def _setup(
        self,
        signature: FunctionSignature,
        function: Callable[..., Any],
        timeout: float | None,
        thread: bool | None,
        return_direct: bool,
        *,
        trusted: bool,
    ) -> None:
        """The tool of ``signature`` (read from a typed function, or given explicitly) and
        ``function``, checked; ``trusted``: the schema is the one pydantic generated."""
        name, description, parameters = signature.name, signature.description, signature.parameters
        is_async = signature.is_async
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolDefinitionError(
                f"tool name {name!r} is not usable: a tool name has 1-64 characters among "
                "letters, digits, '_' and '-'; pass name='...'"
            )
        owner = f"tool {name!r}"
        if not isinstance(description, str):
            raise ToolDefinitionError(
                f"{owner}: description must be a str, got {describe_value(description)}"
            )
        if not callable(function):
            raise ToolDefinitionError(
                f"{owner}: function must be callable, got {describe_value(function)}"
            )
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise ToolDefinitionError(
                f"{owner}: parameters must be a JSON schema of an object "
                f'({{"type": "object", "properties": {{...}}}}), got '
                f"{describe_value(parameters)}"
            )
        if thread and is_async:
            raise ToolDefinitionError(
                f"{owner}: thread=True runs a sync function in a worker thread, but its "
                "function is async; drop thread=True"
            )
        try:
            schema = ArgumentsSchema(parameters, owner=owner, trusted=trusted)
        except ValueError as exc:
            raise ToolDefinitionError(f"{owner}: {exc}") from exc
        self.name = name
        self.description = description
        self.parameters = dict(parameters)
        self.function = function
        self.timeout = _check_timeout(owner, timeout)
        self.thread = (not is_async) if thread is None else bool(thread)
        self.return_direct = bool(return_direct)
        self.__wrapped__ = function
        self._schema = schema
        self._convert = signature.convert
        self._plain, self._required = _plain_arguments(parameters, signature)
        self._is_async = is_async
        self.context_parameter = signature.context_parameter

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, without validation or timeout."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, timeout={self.timeout!r}, thread={self.thread!r})"

    def spec(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}``: how the planner sees the tool."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def openai_tool(self) -> dict[str, Any]:
        """The tool in the OpenAI Chat Completions ``tools`` format."""
        return {"type": "function", "function": self.spec()}

    def with_context(
        self, arguments: dict[str, Any], purpose: str, call_id: str = ""
    ) -> dict[str, Any]:
        """``arguments`` (from :meth:`validate`) with the run's context added for the
        parameter that asks for it (a new dict; the same one if the tool asks for none).

        Args:
            arguments: the checked arguments.
            purpose: why the tool is called (the command's ``purpose``).
            call_id: the call's id, as the run's events tell it.
        """
        name = self.context_parameter
        if name is None:
            return arguments
        return {**arguments, name: run_context(self.name, purpose, call_id)}

    def validate(self, kwargs: object) -> dict[str, Any]:
        """Check ``kwargs`` against the schema and return the arguments to call with.

        Nothing runs. For a typed function the arguments come back converted by pydantic
        (``int``, models, ...); for an explicit tool they come back as they are.

        Raises:
            ToolArgumentsError: ``kwargs`` is not a dict, or does not fit the schema (the
                message lists every violation: where, what was expected, what came).
        """
        plain = self._plain
        if plain is not None and type(kwargs) is dict:  # values of plain types: one pass
            for key, value in kwargs.items():
                if type(value) is not plain.get(key):
                    break
            else:
                for key in self._required:
                    if key not in kwargs:
                        break
                else:
                    return kwargs
        if type(kwargs) is not dict and not isinstance(kwargs, dict):
            raise ToolArgumentsError(
                f"arguments for tool {self.name!r} must be a JSON object (argument names to "
                f"values), got {describe_value(kwargs)}"
            )
        if not self._schema.is_valid(kwargs):
            violations = self._schema.violations(kwargs)
            if violations:  # jsonschema is the authority if the fast path disagrees
                raise ToolArgumentsError(
                    f"arguments for tool {self.name!r} do not fit its schema: "
                    + "; ".join(violations)
                )
        if self._convert is not None:
            return self._convert(kwargs)
        return kwargs

    def execute(self, arguments: dict[str, Any], *, timeout: float | None = None) -> Awaitable[Any]:
        """Run the function with already-validated ``arguments``: await the result.

        Args:
            arguments: what :meth:`validate` returned.
            timeout: seconds; the smaller of this and the tool's own timeout applies.

        Raises:
            ToolTimeoutError: the call did not finish in time and was cancelled.
            Exception: whatever the function raised, unchanged.
        """
        limit = timeout if self.timeout is None else _min_timeout(timeout, self.timeout)
        if limit is None:
            if self._is_async:  # the function's own coroutine: no frame of ours around it
                return self.function(**arguments)  # type: ignore[no-any-return]
            return self._invoke(arguments)
        return self._execute_within(arguments, limit)

    async def _execute_within(self, arguments: dict[str, Any], limit: float) -> Any:
        with anyio.CancelScope(deadline=anyio.current_time() + limit):
            return await self._invoke(arguments)
        raise ToolTimeoutError(
            f"tool {self.name!r} did not finish within {limit} s; it was cancelled"
        )

    async def _invoke(self, arguments: dict[str, Any]) -> Any:
        function = self.function
        if self._is_async:
            return await function(**arguments)
        if self.thread:
            # its own token, not the process-wide thread limiter's: a thread abandoned at its
            # timeout keeps its token until it ends, and must not hold later calls back
            (result,) = await anyio.to_thread.run_sync(
                functools.partial(_boxed, function, arguments),
                abandon_on_cancel=True,
                limiter=anyio.CapacityLimiter(1),
            )
        else:
            result = function(**arguments)
        if inspect.isawaitable(result):  # e.g. a lambda that returns a coroutine
            result = await result
        return result


def _boxed(function: Callable[..., Any], arguments: dict[str, Any]) -> tuple[Any]:
    """Call in a worker thread; the result boxed, so that one which is awaitable (a lambda
    that returns a coroutine) comes back to the event loop to be awaited there."""
    return (function(**arguments),)


async def async_call_tool(tool: Tool, kwargs: object, *, timeout: float | None = None) -> Any:
    """Validate ``kwargs`` and call the tool under the effective timeout.

    The effective timeout is the smaller of ``timeout`` and the tool's own.

    Raises:
        ToolArgumentsError: the arguments do not fit the schema; the tool did not run.
        ToolTimeoutError: the call ran out of time and was cancelled.
        Exception: whatever the tool raised, unchanged.
    """
    arguments = tool.validate(kwargs)
    if tool.context_parameter is not None:
        arguments = tool.with_context(arguments, tool.name)
    return await tool.execute(arguments, timeout=timeout)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    thread: bool | None = None,
    return_direct: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    thread: bool | None = None,
    return_direct: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a typed function: ``@tool`` or ``@tool(name=..., ...)``.

    The result is still callable like the function. See :meth:`Tool.from_function`.
    """

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn,
            name=name,
            description=description,
            timeout=timeout,
            thread=thread,
            return_direct=return_direct,
        )

    if function is not None:
        return decorate(function)
    return decorate
