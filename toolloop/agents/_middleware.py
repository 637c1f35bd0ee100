"""Middleware: code that runs around the agent's model and tool calls.

Subclass :class:`AgentMiddleware` and override the hooks you need (plain or ``async``)::

    before_agent(state, runtime)          once, as a run starts
    before_model(state, runtime)          before each model call (in registration order)
    wrap_model_call(request, handler)     around each model call (first registered outermost)
    after_model(state, runtime)           after each model call (in reverse order)
    wrap_tool_call(request, handler)      around each tool call (first registered outermost)
    after_agent(state, runtime)           once, as a run ends (in reverse order)

``before_*`` and ``after_*`` hooks return ``None``, an update dict (with an optional
``"jump_to"``: ``"model"``, ``"tools"`` or ``"end"``), a :class:`~toolloop.agents.Command`,
or, from ``before_model`` and ``after_model``, a :class:`Pause`: the run stops, is
snapshotted, and continues with :meth:`AgentMiddleware.resume` when
:meth:`~toolloop.agents.Agent.resume` is given an answer. A jump skips the hooks of the same
kind still to run (and, from ``before_model``, the model call).

Wrap hooks call ``await handler(request)`` zero or more times (to retry, or to answer
without calling) and may change the request with ``request.override(...)``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio

from .._errors import ExecutionTimeoutError
from ..flow import Context, FlowEvent
from ..models import ChatModel
from ..runner import CallTries
from ..tools import Tool
from ._errors import AgentDefinitionError
from ._messages import AssistantMessage, Message, ToolCall, ToolMessage
from ._state import AgentState, Command, JumpTo, check_jump

if TYPE_CHECKING:
    from ..kernel import ProviderStrategy, ToolStrategy

__all__ = [
    "AgentMiddleware",
    "HookResult",
    "ModelHandler",
    "ModelRequest",
    "ModelResponse",
    "Pause",
    "Runtime",
    "ToolCallRequest",
    "ToolHandler",
    "call_hook",
    "hook_outcome",
    "overrides",
]


@dataclass(frozen=True)
class Pause:
    """Returned by a ``before_model`` or ``after_model`` hook: stop the run and ask
    ``request`` (JSON-ready) of someone outside; the run goes on when an answer comes."""

    request: Any = None


HookResult: TypeAlias = "Mapping[str, Any] | Command | Pause | None"
"""What a ``before_*``/``after_*`` hook returns."""


class Runtime:
    """What a hook sees besides the state: the caller's deps and the run's event stream.

    Attributes:
        deps: what the caller passed as ``deps=`` (to the run, or to ``create_agent`` as
            the default): the same object the tools get as ``ctx.deps``. Not part of the
            state: give it again to a resume.
        run_id: the run's id (it stays the same across a pause).
    """

    __slots__ = ("_ctx", "_run", "deps", "run_id")

    def __init__(self, ctx: Context[Any], deps: Any, run: Any = None) -> None:
        self._ctx = ctx
        self._run = run  # the run's services (the agent's AgentDeps)
        self.deps = deps
        self.run_id = ctx.execution_id

    @property
    def observed(self) -> bool:
        """Whether anyone listens to the run's events."""
        return self._ctx.observed

    def publish(self, event: FlowEvent) -> None:
        """Hand an event of your own to the run's observers."""
        self._ctx.publish(event)

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self._ctx.elapsed()


@dataclass(frozen=True)
class ModelRequest:
    """One model call, as ``wrap_model_call`` hooks see (and may change) it.

    Attributes:
        model: the chat model to call.
        messages: the conversation (the system prompt apart).
        system_prompt: sent first, as a system message, when set.
        tools: the tools the model is offered.
        tool_choice: ``"auto"``, ``"required"``, ``"none"`` or the OpenAI object.
        response_format: the structured-output strategy, if any.
        settings: more request parameters (``max_tokens``, ``temperature``, provider extras).
        state: the run's state (read it; change it through hooks' updates).
        runtime: the run's runtime.
    """

    model: ChatModel
    messages: list[Message]
    system_prompt: str | None
    tools: list[Tool]
    tool_choice: Any
    response_format: ToolStrategy | ProviderStrategy | None
    settings: dict[str, Any]
    state: AgentState
    runtime: Runtime

    def override(self, **changes: Any) -> ModelRequest:
        """A copy with ``changes`` (e.g. ``system_prompt=...``, ``tools=[...]``)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ModelResponse:
    """What a model call gave: the assistant's message and, from a ``wrap_model_call``
    that answers tool calls itself (a cache, a mock, a guard), their answers.

    The calls answered in ``tool_results`` do not run: the run goes to the tools for the
    others only, or, when every call is answered, straight back to the model.
    """

    message: AssistantMessage
    tool_results: tuple[ToolMessage, ...] = ()


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call, as ``wrap_tool_call`` hooks see (and may change) it.

    Attributes:
        tool_call: the call (``id``, ``name``, ``args``).
        tool: the tool it names, or ``None`` when there is no such tool.
        state: the run's state.
        runtime: the run's runtime.
    """

    tool_call: ToolCall
    tool: Tool | None
    state: AgentState
    runtime: Runtime
    _tries: CallTries = dataclasses.field(default_factory=CallTries, repr=False, compare=False)
    """The tries the tool took, counted by the innermost handler (a copy shares it)."""

    def override(self, **changes: Any) -> ToolCallRequest:
        """A copy with ``changes`` (e.g. ``tool_call=call.model_copy(update=...)``)."""
        return dataclasses.replace(self, **changes)


ModelHandler: TypeAlias = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler: TypeAlias = Callable[[ToolCallRequest], Awaitable["ToolMessage | Command"]]

_Maybe: TypeAlias = "HookResult | Awaitable[HookResult]"


class AgentMiddleware:
    """Base of agent middleware: override the hooks you need, plain or ``async``.

    Attributes:
        name: unique among an agent's middleware; the class name by default.
        tools: tools the middleware adds to the agent (e.g. ``write_todos``).
    """

    tools: Sequence[Tool] = ()

    @property
    def name(self) -> str:
        return type(self).__name__

    def before_agent(self, state: AgentState, runtime: Runtime) -> _Maybe:
        """Once per run, before anything else."""
        return None

    def before_model(self, state: AgentState, runtime: Runtime) -> _Maybe:
        """Before each model call."""
        return None

    def wrap_model_call(
        self, request: ModelRequest, handler: ModelHandler
    ) -> ModelResponse | AssistantMessage | Awaitable[ModelResponse | AssistantMessage]:
        """Around each model call: ``return await handler(request)`` to go on."""
        return handler(request)

    def after_model(self, state: AgentState, runtime: Runtime) -> _Maybe:
        """After each model call (the new assistant message is ``state.messages[-1]``)."""
        return None

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command | Awaitable[ToolMessage | Command]:
        """Around each tool call: ``return await handler(request)`` to go on."""
        return handler(request)

    def after_agent(self, state: AgentState, runtime: Runtime) -> _Maybe:
        """Once per run, as it ends."""
        return None

    def resume(self, answer: Any, state: AgentState, runtime: Runtime) -> _Maybe:
        """The answer to this middleware's :class:`Pause` came; the run goes on with what
        this returns (an update, a jump), then the hooks after the one that paused."""
        return None

    def check_answer(self, answer: Any, request: Any) -> Any:
        """Check (and convert) an answer before the paused run is resumed with it; raise
        :class:`~toolloop.errors.ResumeError` to refuse it (the snapshot stays usable).
        What this returns is what :meth:`resume` is given."""
        return answer


HOOKS = (
    "before_agent",
    "before_model",
    "wrap_model_call",
    "after_model",
    "wrap_tool_call",
    "after_agent",
)


def overrides(middleware: AgentMiddleware, hook: str) -> bool:
    """Whether ``middleware`` has its own ``hook`` (the base class's does nothing)."""
    return getattr(type(middleware), hook) is not getattr(AgentMiddleware, hook)


async def call_hook(
    middleware: AgentMiddleware,
    hook: str,
    args: tuple[Any, ...],
    timeout: float | None,
) -> Any:
    """Call a plain or async hook; an async one gets ``timeout`` seconds."""
    result = getattr(middleware, hook)(*args)
    if inspect.isawaitable(result):
        started = perf_counter()
        with anyio.move_on_after(timeout) as scope:
            return await result
        if scope.cancelled_caught:
            raise ExecutionTimeoutError(
                f"hook {middleware.name}.{hook} did not finish within {timeout} s (it ran "
                f"{perf_counter() - started:.3f} s); make it faster or raise hook_timeout",
                timeout=timeout or 0.0,
                step=f"{middleware.name}.{hook}",  # not the run's timeout: never a finish
                state=args[-2] if len(args) >= 2 else None,
            )
    return result


def hook_outcome(
    result: Any, middleware: AgentMiddleware, hook: str, *, may_pause: bool = False
) -> tuple[Mapping[str, Any] | None, JumpTo | None, Pause | None]:
    """``(update, jump_to, pause)`` of what a hook returned."""
    where = f"hook {middleware.name}.{hook}"
    if result is None:
        return None, None, None
    if isinstance(result, Command):
        return result.update, _jump(result.jump_to, where), None
    if isinstance(result, Mapping):
        return result, _jump(result.get("jump_to"), where), None
    if isinstance(result, Pause):
        if not may_pause:
            raise AgentDefinitionError(
                f"{where} returned a Pause; only before_model and after_model hooks can pause"
            )
        return None, None, result
    raise AgentDefinitionError(
        f"{where} returned {type(result).__name__}; a hook returns None, a dict of state "
        "updates (with an optional 'jump_to'), a Command or a Pause"
    )


def _jump(value: Any, where: str) -> JumpTo | None:
    try:
        return check_jump(value, where)
    except ValueError as exc:
        raise AgentDefinitionError(str(exc)) from None
