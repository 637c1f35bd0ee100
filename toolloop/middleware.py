"""The agent's built-in middleware, under a short name: the same objects as
:mod:`toolloop.agents.middleware`.

    from toolloop.middleware import TodoListMiddleware
"""

from __future__ import annotations

from .agents.middleware import TODO_SYSTEM_PROMPT as TODO_SYSTEM_PROMPT
from .agents.middleware import WRITE_TODOS_DESCRIPTION as WRITE_TODOS_DESCRIPTION
from .agents.middleware import ApprovalPolicy as ApprovalPolicy
from .agents.middleware import HumanApprovalMiddleware as HumanApprovalMiddleware
from .agents.middleware import ModelCallLimitMiddleware as ModelCallLimitMiddleware
from .agents.middleware import TodoListMiddleware as TodoListMiddleware
from .agents.middleware import ToolCallLimitMiddleware as ToolCallLimitMiddleware
from .agents.middleware import ToolRetryMiddleware as ToolRetryMiddleware
from .agents.middleware import write_todos as write_todos

__all__ = [
    "TODO_SYSTEM_PROMPT",
    "WRITE_TODOS_DESCRIPTION",
    "ApprovalPolicy",
    "HumanApprovalMiddleware",
    "ModelCallLimitMiddleware",
    "TodoListMiddleware",
    "ToolCallLimitMiddleware",
    "ToolRetryMiddleware",
    "write_todos",
]
