"""An agent's configuration, checked and compiled once when it is built.

The hooks are sorted into the order they run in, and the ``wrap_*`` hooks are composed
into one handler each (the first registered is the outermost), so a run only walks lists.
The run options (:class:`~toolloop.kernel.RunOptions`) given to ``create_agent`` are the
defaults each run may override; what a run uses of them (its executor, its model timeout,
its approval rule) it finds through its runtime.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ResponseFormatError
from ..checkpoints import RequestedCall
from ..kernel import (
    ProviderStrategy,
    ResponseFormat,
    RunOptions,
    ToolStrategy,
    approval_rule,
    output_schema,
)
from ..models import ChatModel
from ..runner import Executor
from ..tools import Tool, ToolRegistry
from ._errors import AgentDefinitionError
from ._messages import AssistantMessage, ToolMessage
from ._middleware import (
    AgentMiddleware,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    Runtime,
    ToolCallRequest,
    ToolHandler,
    overrides,
)
from ._model_call import stream_model
from ._state import Command
from ._tool_call import execute_tool
from .middleware import HumanApprovalMiddleware

__all__ = ["AgentSpec", "ApprovalCheck", "RunApproval", "build_spec"]

ApprovalCheck = Callable[[RequestedCall], "RequestedCall | None"]


class RunApproval(HumanApprovalMiddleware):
    """The agent's own approval: the run's ``needs_approval`` option (``create_agent``'s,
    or a call's), first among the middleware so that it asks only about the calls left to
    run after every other ``after_model`` hook."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def name(self) -> str:
        return "needs_approval"

    def check_tools(self, tool_names: Collection[str]) -> None:
        """The run options are checked by the agent."""

    def _rule(self, runtime: Runtime) -> ApprovalCheck | None:
        run = runtime._run
        return None if run is None else run.approval


@dataclass(eq=False)
class AgentSpec:
    """Everything a run of one agent reads and never changes."""

    model: ChatModel
    system_prompt: str | None
    tools: list[Tool]
    """What the model is offered: the runnable tools, then the structured-output tool."""
    registry: ToolRegistry
    """The runnable tools: the agent's, then the middleware's."""
    strategy: ToolStrategy | ProviderStrategy | None
    structured_tools: frozenset[str]
    tool_choice: Any
    settings: dict[str, Any]
    hook_timeout: float | None
    options: RunOptions
    """The run options every run starts from (a call overrides them)."""
    approval: ApprovalCheck | None
    """``options.needs_approval`` compiled (checked against the tools)."""
    middleware: list[AgentMiddleware]
    """The middleware as given."""
    by_name: dict[str, AgentMiddleware]
    """Every middleware by name, the agent's own approval (``needs_approval``) included."""
    before_agent: list[AgentMiddleware]
    before_model: list[AgentMiddleware]
    after_model: list[AgentMiddleware]
    after_agent: list[AgentMiddleware]
    call_model: ModelHandler
    call_tool: ToolHandler
    openai_tools: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    executor: Executor | None = None
    """The executor of the runs under the default options (an executor holds only
    configuration, so they share it)."""
    approvers: list[HumanApprovalMiddleware] = field(default_factory=list)
    """The approval middleware (the agent's own ``needs_approval`` first): with
    ``streaming_dispatch``, a call one of them asks about waits for the whole turn."""
    streams_calls: bool = True
    """No middleware reads a whole model turn before its calls run (a ``wrap_model_call``,
    an ``after_model`` other than an approval's): with ``streaming_dispatch``, a turn's
    calls start while the model still writes the reply."""

    def executor_for(self, options: RunOptions) -> Executor:
        """The executor of a run with ``options``: its ``limiter``, ``tool_timeout``, rate
        limits and tool retries."""
        return options.tool_executor(self.registry, concurrency=False, reuse=self.executor)

    def approval_for(self, options: RunOptions) -> ApprovalCheck | None:
        """The approval rule of a run with ``options`` (compiled once for the defaults).

        Raises:
            ValueError, TypeError: a spec that names no tool of the agent, or of no shape.
        """
        if options.needs_approval is self.options.needs_approval:
            return self.approval
        return approval_rule(options.needs_approval, self.registry.names)


def _wrap_model(middleware: AgentMiddleware, inner: ModelHandler) -> ModelHandler:
    hook = middleware.wrap_model_call

    async def handler(request: ModelRequest) -> ModelResponse:
        result: Any = hook(request, inner)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, ModelResponse):
            return result
        if isinstance(result, AssistantMessage):
            return ModelResponse(result)
        if isinstance(result, (list, tuple)) and result:
            return _synthetic(middleware, list(result))
        raise AgentDefinitionError(
            f"{middleware.name}.wrap_model_call returned {type(result).__name__}; it returns "
            "what `await handler(request)` gave, another ModelResponse, an AssistantMessage, "
            "or a list: an AssistantMessage then ToolMessages answering its tool calls"
        )

    return handler


def _synthetic(middleware: AgentMiddleware, messages: list[Any]) -> ModelResponse:
    """A reply a ``wrap_model_call`` made up: the assistant's message, then answers to some
    or all of its tool calls (those do not run)."""
    where = f"{middleware.name}.wrap_model_call"
    first, rest = messages[0], messages[1:]
    if not isinstance(first, AssistantMessage):
        raise AgentDefinitionError(
            f"{where} returned a list that starts with {type(first).__name__}; it starts with "
            "the AssistantMessage, then the ToolMessages that answer its tool calls"
        )
    asked = {call.id for call in first.tool_calls}
    answered: set[str] = set()
    for message in rest:
        if not isinstance(message, ToolMessage):
            raise AgentDefinitionError(
                f"{where} returned a list with a {type(message).__name__} after the "
                "AssistantMessage; only ToolMessages answering its tool calls may follow"
            )
        if message.tool_call_id not in asked or message.tool_call_id in answered:
            raise AgentDefinitionError(
                f"{where} answered the tool call {message.tool_call_id!r}, which the message "
                f"does not ask for (or answered it twice); its calls are {sorted(asked)}"
            )
        answered.add(message.tool_call_id)
    return ModelResponse(first, tuple(rest))


def _wrap_tool(middleware: AgentMiddleware, inner: ToolHandler) -> ToolHandler:
    hook = middleware.wrap_tool_call

    async def handler(request: ToolCallRequest) -> ToolMessage | Command:
        result: Any = hook(request, inner)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]  # checked by run_tool_call

    return handler


def _check_timeout(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be > 0 seconds or None, got {value!r}")
    return value


def build_spec(
    model: ChatModel,
    tools: ToolRegistry | Sequence[Tool | Callable[..., Any]],
    *,
    system_prompt: str | None,
    middleware: Sequence[AgentMiddleware],
    response_format: ResponseFormat | None,
    tool_choice: Any,
    hook_timeout: float | None,
    settings: dict[str, Any],
    options: RunOptions,
) -> AgentSpec:
    """Check the arguments of ``create_agent`` and compile them (see the module docs)."""
    if not callable(getattr(model, "stream", None)):
        raise AgentDefinitionError(
            f"model must be a ChatModel (an object with stream(request)), got "
            f"{type(model).__name__}"
        )
    middleware = list(middleware)
    by_name: dict[str, AgentMiddleware] = {}
    for mw in [RunApproval(), *middleware]:
        if not isinstance(mw, AgentMiddleware):
            raise AgentDefinitionError(
                f"middleware must be AgentMiddleware instances, got {type(mw).__name__} "
                "(a class? instantiate it)"
            )
        if mw.name in by_name:
            raise AgentDefinitionError(
                f"two middleware are named {mw.name!r}; names must be unique (they key a "
                "paused run's answer): give one another name"
            )
        by_name[mw.name] = mw
    runnable: list[Tool | Callable[..., Any]] = [
        *tools,
        *(t for mw in middleware for t in mw.tools),
    ]
    registry = ToolRegistry(runnable)
    names = registry.names
    approval = approval_rule(options.needs_approval, names)
    for mw in middleware:
        if isinstance(mw, HumanApprovalMiddleware):
            mw.check_tools(names)
    try:
        strategy = output_schema(response_format)
    except ResponseFormatError as exc:  # the agent's own words for an agent built wrong
        raise AgentDefinitionError(str(exc)) from exc
    offered = list(registry)
    structured: frozenset[str] = frozenset()
    if isinstance(strategy, ToolStrategy):
        if strategy.tool.name in registry:
            raise AgentDefinitionError(
                f"the structured-output tool {strategy.tool.name!r} has the name of a tool; "
                "give ToolStrategy(schema, tool_name=...) another name"
            )
        offered.append(strategy.tool)
        structured = frozenset({strategy.tool.name})
        if tool_choice is None:
            tool_choice = "required"  # the answer is a tool call too
    elif tool_choice is None and offered:
        tool_choice = "auto"
    call_model: ModelHandler

    async def innermost_model(request: ModelRequest) -> ModelResponse:
        timeout = request.runtime._run.options.model_timeout  # the run's
        return await stream_model(request, timeout=timeout, cache=spec.openai_tools)

    call_model = innermost_model
    call_tool: ToolHandler = execute_tool
    for mw in reversed(middleware):  # the first registered ends up outermost
        if overrides(mw, "wrap_model_call"):
            call_model = _wrap_model(mw, call_model)
        if overrides(mw, "wrap_tool_call"):
            call_tool = _wrap_tool(mw, call_tool)

    hooked = list(by_name.values())  # the agent's approval first: its after_model runs last
    approvers = [
        mw
        for mw in hooked
        if isinstance(mw, HumanApprovalMiddleware)
        and type(mw).after_model is HumanApprovalMiddleware.after_model
    ]
    readers = [
        mw
        for mw in middleware
        if overrides(mw, "wrap_model_call")
        or (overrides(mw, "after_model") and mw not in approvers)
    ]

    def having(hook: str) -> list[AgentMiddleware]:
        return [mw for mw in hooked if overrides(mw, hook)]

    spec = AgentSpec(
        model=model,
        system_prompt=system_prompt,
        tools=offered,
        registry=registry,
        strategy=strategy,
        structured_tools=structured,
        tool_choice=tool_choice,
        settings=settings,
        hook_timeout=_check_timeout("hook_timeout", hook_timeout),
        options=options,
        approval=approval,
        middleware=middleware,
        by_name=by_name,
        before_agent=having("before_agent"),
        before_model=having("before_model"),
        after_model=having("after_model")[::-1],
        after_agent=having("after_agent")[::-1],
        call_model=call_model,
        call_tool=call_tool,
        executor=options.tool_executor(registry, concurrency=False),
        approvers=approvers,
        streams_calls=not readers,
    )
    spec.openai_tools[id(offered)] = [t.openai_tool() for t in offered]
    return spec
