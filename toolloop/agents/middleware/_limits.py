"""Limits on model calls and tool calls, per run and per thread.

A *run* is one ``agent.run(...)`` (with its resumes); a *thread* is a conversation carried
on over runs by passing the previous state back (``agent.run(..., state=result.state)``).
The counts live in ``state.values``, under keys named after the middleware, so they travel
with the state (and a paused run's snapshot).

When a limit is reached the run either ends gracefully (``exit_behavior="end"``: a last
assistant message says why, and every tool call still waiting is answered as not run) or
raises (``"error"``). The tool-call limit can also go on without the calls over the limit
(``"continue"``: they are answered with an error, the others run).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from .._errors import ModelCallLimitError, ToolCallLimitError
from .._messages import AssistantMessage, pending_tool_calls
from .._middleware import AgentMiddleware, Runtime
from .._state import AgentState
from .._tool_call import error_message

__all__ = ["ModelCallLimitMiddleware", "ToolCallLimitMiddleware"]


def _check_limit(name: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be an int >= 0 or None, got {value!r}")
    return value


def _room(limit: int | None, used: int) -> float:
    return math.inf if limit is None else max(limit - used, 0)


class _CallLimit(AgentMiddleware):
    """What both limits share: their limits checked, their name, their two counters (the
    thread's and the run's, under keys named after the middleware), and the run's counter
    reset as each run begins."""

    def __init__(
        self,
        kind: str,
        counted: str,
        exits: tuple[str, ...],
        *,
        thread_limit: int | None,
        run_limit: int | None,
        exit_behavior: str,
        name: str,
    ) -> None:
        if thread_limit is None and run_limit is None:
            raise ValueError(f"give {kind} a thread_limit, a run_limit or both")
        if exit_behavior not in exits:
            said = ", ".join(repr(e) for e in exits[:-1]) + f" or {exits[-1]!r}"
            raise ValueError(f"exit_behavior is {said}, got {exit_behavior!r}")
        self.thread_limit = _check_limit("thread_limit", thread_limit)
        self.run_limit = _check_limit("run_limit", run_limit)
        self.exit_behavior = exit_behavior
        self._name = name
        self.thread_key = f"{name}.thread_{counted}"
        self.run_key = f"{name}.run_{counted}"

    @property
    def name(self) -> str:
        return self._name

    def before_agent(self, state: AgentState, runtime: Runtime) -> dict[str, Any]:
        return {self.run_key: 0}


class ModelCallLimitMiddleware(_CallLimit):
    """Stop the agent after a number of model calls.

    Args:
        thread_limit: model calls over the whole thread (all runs sharing its state).
        run_limit: model calls in one run.
        exit_behavior: ``"end"``: end the run with an assistant message saying so;
            ``"error"``: raise :class:`~toolloop.agents.ModelCallLimitError`.
        name: the middleware's name (and its counters' keys in ``state.values``).
    """

    def __init__(
        self,
        *,
        thread_limit: int | None = None,
        run_limit: int | None = None,
        exit_behavior: Literal["end", "error"] = "end",
        name: str | None = None,
    ) -> None:
        super().__init__(
            "ModelCallLimitMiddleware",
            "model_calls",
            ("end", "error"),
            thread_limit=thread_limit,
            run_limit=run_limit,
            exit_behavior=exit_behavior,
            name=name or "ModelCallLimitMiddleware",
        )

    def before_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        thread = int(state.values.get(self.thread_key, 0))
        run = int(state.values.get(self.run_key, 0))
        if self.thread_limit is not None and thread >= self.thread_limit:
            reason = f"the thread has made {thread} model calls, its limit"
        elif self.run_limit is not None and run >= self.run_limit:
            reason = f"this run has made {run} model calls, its limit"
        else:
            return None
        if self.exit_behavior == "error":
            raise ModelCallLimitError(f"model call limit reached: {reason}", state=state)
        text = f"I stopped here: {reason}."
        return {"messages": [AssistantMessage(content=text)], "jump_to": "end"}

    def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any]:
        values = state.values
        return {
            self.thread_key: int(values.get(self.thread_key, 0)) + 1,
            self.run_key: int(values.get(self.run_key, 0)) + 1,
        }


class ToolCallLimitMiddleware(_CallLimit):
    """Limit tool calls: of every tool together, or of one tool (``tool_name``).

    The calls a model reply asks for are counted after the reply; calls past the limit
    never run.

    Args:
        tool_name: count only this tool's calls; ``None``: every call.
        thread_limit: calls over the whole thread (all runs sharing its state).
        run_limit: calls in one run.
        exit_behavior: ``"continue"``: answer the calls over the limit with an error and
            run the others; ``"end"``: run none of the reply's calls and end the run with an
            assistant message saying why; ``"error"``: raise
            :class:`~toolloop.agents.ToolCallLimitError`.
        name: the middleware's name (and its counters' keys); by default it names the tool,
            so that several limits can sit side by side.
    """

    def __init__(
        self,
        *,
        tool_name: str | None = None,
        thread_limit: int | None = None,
        run_limit: int | None = None,
        exit_behavior: Literal["continue", "end", "error"] = "continue",
        name: str | None = None,
    ) -> None:
        default = "ToolCallLimitMiddleware" + (f"[{tool_name}]" if tool_name else "")
        super().__init__(
            "ToolCallLimitMiddleware",
            "tool_calls",
            ("continue", "end", "error"),
            thread_limit=thread_limit,
            run_limit=run_limit,
            exit_behavior=exit_behavior,
            name=name or default,
        )
        self.tool_name = tool_name

    def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
        pending = pending_tool_calls(state.messages)
        counted = [c for c in pending if self.tool_name is None or c.name == self.tool_name]
        if not counted:
            return None
        thread = int(state.values.get(self.thread_key, 0))
        run = int(state.values.get(self.run_key, 0))
        room = min(_room(self.thread_limit, thread), _room(self.run_limit, run))
        if len(counted) <= room:
            return {self.thread_key: thread + len(counted), self.run_key: run + len(counted)}
        what = f"calls of {self.tool_name!r}" if self.tool_name else "tool calls"
        scope = "thread" if _room(self.thread_limit, thread) == room else "run"
        limit = self.thread_limit if scope == "thread" else self.run_limit
        reason = f"the {scope} limit of {limit} {what} is reached"
        if self.exit_behavior == "error":
            raise ToolCallLimitError(
                f"{reason}: the model asked for {len(counted)} more", state=state
            )
        if self.exit_behavior == "end":
            answers = [error_message(c, f"{reason}; this call did not run") for c in pending]
            text = f"I stopped here: {reason}."
            return {"messages": [*answers, AssistantMessage(content=text)], "jump_to": "end"}
        allowed = int(room)
        blocked = counted[allowed:]
        return {
            "messages": [
                error_message(c, f"{reason}; this call did not run. Do without it.")
                for c in blocked
            ],
            self.thread_key: thread + allowed,
            self.run_key: run + allowed,
        }
