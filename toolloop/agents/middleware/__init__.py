"""Built-in middleware for the agent (:func:`toolloop.agents.create_agent`).

- :class:`TodoListMiddleware`: a ``write_todos`` tool and ``state.todos``, with its
  instructions before every model call.
- :class:`ModelCallLimitMiddleware`, :class:`ToolCallLimitMiddleware`: stop after a number
  of calls, per run or per thread, gracefully or with an error.
- :class:`HumanApprovalMiddleware`: pause before chosen tools run (the kernel's one
  approval spec, as ``create_agent(needs_approval=...)``); resume with approve, edit or
  reject.
- :class:`ToolRetryMiddleware`: retry failing tool calls with backoff.
"""

from __future__ import annotations

from ._approval import HumanApprovalMiddleware as HumanApprovalMiddleware
from ._limits import ModelCallLimitMiddleware as ModelCallLimitMiddleware
from ._limits import ToolCallLimitMiddleware as ToolCallLimitMiddleware
from ._retry import ToolRetryMiddleware as ToolRetryMiddleware
from ._todos import TODO_SYSTEM_PROMPT as TODO_SYSTEM_PROMPT
from ._todos import WRITE_TODOS_DESCRIPTION as WRITE_TODOS_DESCRIPTION
from ._todos import TodoListMiddleware as TodoListMiddleware
from ._todos import write_todos as write_todos

__all__ = [
    "TODO_SYSTEM_PROMPT",
    "WRITE_TODOS_DESCRIPTION",
    "HumanApprovalMiddleware",
    "ModelCallLimitMiddleware",
    "TodoListMiddleware",
    "ToolCallLimitMiddleware",
    "ToolRetryMiddleware",
    "write_todos",
]
