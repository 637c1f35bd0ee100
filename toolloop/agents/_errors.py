"""The agent's own errors, in toolloop's one hierarchy (see ``toolloop/_errors.py``)::

    ToolloopError
    ├── DefinitionError
    │   └── AgentDefinitionError        an agent built wrong (names, hooks, response format)
    └── RunError
        └── ExecutionError              (carries trace and state)
            ├── AgentModelError         the model raised or timed out (cause chained)
            ├── ModelCallLimitError     a model-call limit was reached (exit_behavior="error")
            └── ToolCallLimitError      a tool-call limit was reached (exit_behavior="error")

Run failures are :class:`~toolloop.errors.ExecutionError` subclasses, so they leave the flow engine
as they were raised, with the run's trace and state (``.state.messages`` keeps the
conversation so far). A structured answer that still fails its schema after every retry
raises :class:`~toolloop.errors.StructuredOutputError`, every product's (re-exported here).
"""

from __future__ import annotations

from .._errors import DefinitionError, ExecutionError

__all__ = [
    "AgentDefinitionError",
    "AgentModelError",
    "ModelCallLimitError",
    "ToolCallLimitError",
]


class AgentDefinitionError(DefinitionError):
    """An agent that cannot run as built: two middleware with one name, a hook returning
    something unusable, a response format that is no schema."""


class AgentModelError(ExecutionError):
    """The model call raised or timed out (after the ``wrap_model_call`` middleware had their
    say); the original exception is the ``__cause__``."""


class ModelCallLimitError(ExecutionError):
    """A model-call limit was reached and the limit was set to raise."""


class ToolCallLimitError(ExecutionError):
    """A tool-call limit was reached and the limit was set to raise."""
