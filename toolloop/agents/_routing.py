"""Where the agent goes after the model and after the tools: the rules, in order.

After the model:

1. an explicit ``jump_to`` wins;
2. no assistant message, or one without tool calls → ``end``;
3. tool calls without a result yet → ``tools`` (each call its own task);
4. a structured response → ``end``;
5. otherwise → ``model`` (every call was answered already, e.g. by a middleware's
   synthetic result, so the model sees the answers).

After the tools:

1. an explicit ``jump_to`` (from a tool's ``Command``) wins;
2. every tool run in this step is ``return_direct`` → ``end``;
3. a structured-output tool was called and gave the structured response → ``end``;
4. otherwise → ``model``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal, TypeAlias

from ._messages import AssistantMessage, Message, last_assistant, pending_tool_calls
from ._state import AgentState, JumpTo

__all__ = ["Route", "route_after_model", "route_after_tools"]

Route: TypeAlias = Literal["model", "tools", "end", "pause"]


def route_after_model(state: AgentState, jump: JumpTo | None = None) -> Route:
    """The next step after a model call (see the module docs)."""
    if jump is not None:
        return jump
    messages = state.messages
    last = _last_assistant(messages)
    if last is None or not last.tool_calls:
        return "end"
    if pending_tool_calls(messages):
        return "tools"
    if state.structured_response is not None:
        return "end"
    return "model"


def route_after_tools(
    state: AgentState,
    return_direct: Sequence[bool],
    structured_tools: Collection[str] = (),
    jump: JumpTo | None = None,
) -> Route:
    """The next step after the tools ran: ``return_direct`` has one flag per call run."""
    if jump is not None:
        return jump
    if return_direct and all(return_direct):
        return "end"
    if structured_tools and state.structured_response is not None:
        last = _last_assistant(state.messages)
        if last is not None and any(call.name in structured_tools for call in last.tool_calls):
            return "end"
    return "model"


def _last_assistant(messages: Sequence[Message]) -> AssistantMessage | None:
    i = last_assistant(messages)
    if i < 0:
        return None
    message = messages[i]
    assert isinstance(message, AssistantMessage)
    return message
