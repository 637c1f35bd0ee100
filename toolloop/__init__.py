"""toolloop: an async plan/execute tool loop on a small event-triggered flow engine.

The top level is a menu of what most programs need; everything else lives in its
subpackage:

- :mod:`toolloop.loop`: the plan/execute loop, its events and results;
- :mod:`toolloop.tools`: tools from typed functions or JSON schemas, and the registry;
- :mod:`toolloop.runner`: the one way tool calls run (limits, timeouts, one record each);
- :mod:`toolloop.planners`, :mod:`toolloop.models`: planners and model adapters;
- :mod:`toolloop.agents` (with :mod:`toolloop.agents.middleware`) and
  :mod:`toolloop.status_agent`: the two agents;
- :mod:`toolloop.checkpoints`: durable runs and human decisions;
- :mod:`toolloop.flow`: the engine; :mod:`toolloop.tracing`: traces and pictures;
  :mod:`toolloop.testing`: public test doubles.

Names are imported on first use, so ``import toolloop`` stays light (no ``openai``, no
``sqlite3``, no agents until you use them).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from ._errors import ExecutionTimeoutError as ExecutionTimeoutError
from ._errors import ModelCallError as ModelCallError
from ._errors import ModelOutputError as ModelOutputError
from ._errors import PlannerError as PlannerError
from ._errors import ToolCallError as ToolCallError
from ._errors import ToolloopError as ToolloopError

if TYPE_CHECKING:
    from .agents import create_agent as create_agent
    from .agents.middleware import HumanApprovalMiddleware as HumanApprovalMiddleware
    from .agents.middleware import TodoListMiddleware as TodoListMiddleware
    from .checkpoints import Approve as Approve
    from .checkpoints import Edit as Edit
    from .checkpoints import MemoryCheckpointStore as MemoryCheckpointStore
    from .checkpoints import Reject as Reject
    from .checkpoints import SQLiteCheckpointStore as SQLiteCheckpointStore
    from .loop import LoopResult as LoopResult
    from .loop import async_plan_and_execute as async_plan_and_execute
    from .loop import final_answer as final_answer
    from .loop import plan_and_execute as plan_and_execute
    from .loop import stream_final_answer as stream_final_answer
    from .loop import stream_plan_and_execute as stream_plan_and_execute
    from .models import OpenAIChatModel as OpenAIChatModel
    from .planners import PlannerContext as PlannerContext
    from .planners import StructuredPlanner as StructuredPlanner
    from .planners import ToolCallingPlanner as ToolCallingPlanner
    from .runner import ToolCommand as ToolCommand
    from .runner import ToolExecutionRecord as ToolExecutionRecord
    from .status_agent import StatusAgent as StatusAgent
    from .testing import ScriptedPlanner as ScriptedPlanner
    from .tools import Tool as Tool
    from .tools import tool as tool

__version__ = "0.1.0"

# toolloop logs (tool failures, observers that raise) to the "toolloop" logger and leaves
# handlers to the application: nothing is printed unless it configures logging.
logging.getLogger("toolloop").addHandler(logging.NullHandler())

# fmt: off
__all__ = [  # noqa: RUF022  (grouped by purpose, sorted within each group)
    # the main calls
    "LoopResult", "async_plan_and_execute", "final_answer", "plan_and_execute",
    "stream_final_answer", "stream_plan_and_execute",
    # tools and what comes of them
    "Tool", "ToolCommand", "ToolExecutionRecord", "tool",
    # planners and models
    "OpenAIChatModel", "PlannerContext", "ScriptedPlanner", "StructuredPlanner",
    "ToolCallingPlanner",
    # agents
    "HumanApprovalMiddleware", "StatusAgent", "TodoListMiddleware", "create_agent",
    # checkpoints and human decisions
    "Approve", "Edit", "MemoryCheckpointStore", "Reject", "SQLiteCheckpointStore",
    # errors
    "ExecutionTimeoutError", "ModelCallError", "ModelOutputError", "PlannerError",
    "ToolCallError", "ToolloopError",
]
# fmt: on

_HOME = {
    "LoopResult": "loop",
    "async_plan_and_execute": "loop",
    "plan_and_execute": "loop",
    "stream_plan_and_execute": "loop",
    "final_answer": "loop",
    "stream_final_answer": "loop",
    "Tool": "tools",
    "tool": "tools",
    "ToolCommand": "runner",
    "ToolExecutionRecord": "runner",
    "OpenAIChatModel": "models",
    "PlannerContext": "planners",
    "ScriptedPlanner": "testing",
    "StructuredPlanner": "planners",
    "ToolCallingPlanner": "planners",
    "HumanApprovalMiddleware": "agents.middleware",
    "TodoListMiddleware": "agents.middleware",
    "create_agent": "agents",
    "StatusAgent": "status_agent",
    "Approve": "checkpoints",
    "Edit": "checkpoints",
    "MemoryCheckpointStore": "checkpoints",
    "Reject": "checkpoints",
    "SQLiteCheckpointStore": "checkpoints",
}


def __getattr__(name: str) -> Any:
    # The menu's names are imported on first use; nothing else is served here.
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'toolloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
