"""The model ↔ tools agent with middleware, as a flow on the engine.

``create_agent(model, tools, middleware=[...], response_format=...)`` builds a reusable
agent; ``await agent.run("...")`` calls the model, runs the tools it asks for (each call its
own task), shows it their results, and so on until it answers without a tool call.
Middleware (:class:`AgentMiddleware`) hook into every step; built-in ones are in
:mod:`toolloop.agents.middleware`. Everything around a run (its options, budget, timeout,
store, approvals, events, result) is the run kernel's (:mod:`toolloop.kernel`): a run tells
its model calls with the kernel's :class:`~toolloop.kernel.ModelCallStarted` /
:class:`~toolloop.kernel.ModelCallFinished` and its end with
:class:`~toolloop.kernel.RunFinished`.
"""

from __future__ import annotations

# structured output is every product's (the kernel's): its names stay here too
from .._errors import StructuredOutputError as StructuredOutputError
from ..kernel import ProviderStrategy as ProviderStrategy
from ..kernel import ResponseFormat as ResponseFormat
from ..kernel import ToolStrategy as ToolStrategy
from ._agent import Agent as Agent
from ._agent import create_agent as create_agent
from ._decorators import after_agent as after_agent
from ._decorators import after_model as after_model
from ._decorators import before_agent as before_agent
from ._decorators import before_model as before_model
from ._decorators import wrap_model_call as wrap_model_call
from ._decorators import wrap_tool_call as wrap_tool_call
from ._errors import AgentDefinitionError as AgentDefinitionError
from ._errors import AgentModelError as AgentModelError
from ._errors import ModelCallLimitError as ModelCallLimitError
from ._errors import ToolCallLimitError as ToolCallLimitError
from ._flow import agent_flow as agent_flow
from ._messages import AssistantMessage as AssistantMessage
from ._messages import Message as Message
from ._messages import MessageLike as MessageLike
from ._messages import SystemMessage as SystemMessage
from ._messages import ToolCall as ToolCall
from ._messages import ToolMessage as ToolMessage
from ._messages import UserMessage as UserMessage
from ._middleware import AgentMiddleware as AgentMiddleware
from ._middleware import HookResult as HookResult
from ._middleware import ModelHandler as ModelHandler
from ._middleware import ModelRequest as ModelRequest
from ._middleware import ModelResponse as ModelResponse
from ._middleware import Pause as Pause
from ._middleware import Runtime as Runtime
from ._middleware import ToolCallRequest as ToolCallRequest
from ._middleware import ToolHandler as ToolHandler
from ._result import AgentResult as AgentResult
from ._routing import Route as Route
from ._routing import route_after_model as route_after_model
from ._routing import route_after_tools as route_after_tools
from ._state import AgentState as AgentState
from ._state import Command as Command
from ._state import JumpTo as JumpTo
from ._state import Todo as Todo
from ._state import TodoStatus as TodoStatus

__all__ = [
    "Agent",
    "AgentDefinitionError",
    "AgentMiddleware",
    "AgentModelError",
    "AgentResult",
    "AgentState",
    "AssistantMessage",
    "Command",
    "HookResult",
    "JumpTo",
    "Message",
    "MessageLike",
    "ModelCallLimitError",
    "ModelHandler",
    "ModelRequest",
    "ModelResponse",
    "Pause",
    "ProviderStrategy",
    "ResponseFormat",
    "Route",
    "Runtime",
    "StructuredOutputError",
    "SystemMessage",
    "Todo",
    "TodoStatus",
    "ToolCall",
    "ToolCallLimitError",
    "ToolCallRequest",
    "ToolHandler",
    "ToolMessage",
    "ToolStrategy",
    "UserMessage",
    "after_agent",
    "after_model",
    "agent_flow",
    "before_agent",
    "before_model",
    "create_agent",
    "route_after_model",
    "route_after_tools",
    "wrap_model_call",
    "wrap_tool_call",
]
