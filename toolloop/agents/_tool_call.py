"""One tool call of the agent: checked, run under the run's limits, answered, recorded.

The innermost handler (what ``wrap_tool_call`` middleware wrap) answers a call whose
arguments are unusable, or that names no tool, with an error message without running
anything; otherwise it validates the arguments against the tool's schema (the tool never
runs with arguments that fail it) and runs the tool through the run's executor (shared
limiter, timeout), raising what the tool raised so that middleware can retry. Around the
whole onion, an exception becomes an error message: a tool's failure never crashes the run.

Each call ends with its :class:`ToolOutcome`: the message the model sees and the call's
:class:`~toolloop.ToolExecutionRecord`, which holds the tool's value as it returned it (a
dict stays a dict; the message carries its JSON text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import ExecutionError, ToolArgumentsError, ToolCallError, ToolNotFoundError
from ..runner import Executor, ToolCommand, ToolExecutionRecord, tool_error_text
from ..tools import ToolRegistry
from ._messages import Message, ToolCall, ToolMessage, as_messages, content_text
from ._middleware import Runtime, ToolCallRequest, ToolHandler
from ._state import AgentState, Command, JumpTo, check_jump

__all__ = [
    "ToolOutcome",
    "command_of",
    "error_message",
    "execute_tool",
    "record_of",
    "run_tool_call",
]

_ERROR = "Error: "


def error_message(call: ToolCall, error: str) -> ToolMessage:
    """The error answer to ``call``."""
    return ToolMessage.model_construct(
        role="tool",
        tool_call_id=call.id,
        content=f"{_ERROR}{error}",
        name=call.name,
        status="error",
        id=None,
    )


def command_of(call: ToolCall) -> ToolCommand:
    """The call as the runner's events and records tell it."""
    kwargs = call.args if isinstance(call.args, dict) else {}
    return ToolCommand.model_construct(
        purpose=call.name, tool_name=call.name, tool_kwargs=kwargs, todo_suggestion=""
    )


def record_of(call: ToolCall, message: ToolMessage) -> ToolExecutionRecord:
    """The record of ``call`` answered by ``message``: the tool's value when the message
    carries it (the tool ran), else the message's text (or its error)."""
    command = command_of(call)
    if message.status == "success":
        kept = message._value
        return ToolExecutionRecord.succeeded(command, message.content if kept is None else kept[0])
    return ToolExecutionRecord.failed(command, message.content.removeprefix(_ERROR))


async def execute_tool(request: ToolCallRequest) -> ToolMessage | Command:
    """The innermost tool handler (see the module docs)."""
    call = request.tool_call
    if call.error is not None:
        return error_message(
            call,
            f"{call.error}; the tool did not run. Call {call.name or 'the tool'!r} again "
            "with a JSON object of its arguments.",
        )
    executor: Executor = request.runtime._run.executor  # the run's (its limits, timeout)
    tool = request.tool
    try:
        if tool is None:
            tool = executor.registry.get(call.name)
        arguments = tool.validate(call.args)
    except (ToolNotFoundError, ToolArgumentsError) as exc:
        return error_message(call, f"{exc}; the tool did not run.")
    if tool.context_parameter is not None:  # decided when the tool was built
        arguments = tool.with_context(arguments, call.name, call.id)
    result = await executor.execute(tool, arguments, tries=request._tries)
    if isinstance(result, Command):
        return result
    message = ToolMessage.model_construct(
        role="tool",
        tool_call_id=call.id,
        content=content_text(result),
        name=call.name,
        status="success",
        id=None,
    )
    message._value = (result,)
    return message


@dataclass
class ToolOutcome:
    """What one call came to: its message and record, a state update, a jump, and whether
    it ends the run as a ``return_direct`` tool (it is one, and it succeeded)."""

    message: ToolMessage
    record: ToolExecutionRecord
    update: Mapping[str, Any] | None = None
    jump: JumpTo | None = None
    return_direct: bool = False

    @classmethod
    def failed(cls, call: ToolCall, error: str) -> ToolOutcome:
        """A call answered with ``error`` (it did not run, or it failed)."""
        message = error_message(call, error)
        return cls(message, record_of(call, message))


def _from_command(call: ToolCall, command: Command) -> ToolOutcome:
    update = dict(command.update or {})
    message: ToolMessage | None = None
    if "messages" in update:
        rest: list[Message] = []
        for m in as_messages(update["messages"]):
            if message is None and isinstance(m, ToolMessage) and m.tool_call_id == call.id:
                message = m
            else:
                rest.append(m)
        update["messages"] = rest
    if message is None:
        content = "ok" if command.result is None else content_text(command.result)
        message = ToolMessage(tool_call_id=call.id, name=call.name, content=content)
        if command.result is not None:
            message._value = (command.result,)
    jump = check_jump(command.jump_to, f"tool {call.name!r}")
    return ToolOutcome(message, record_of(call, message), update or None, jump)


async def run_tool_call(
    call: ToolCall,
    handler: ToolHandler,
    registry: ToolRegistry,
    state: AgentState,
    runtime: Runtime,
) -> ToolOutcome:
    """Run one call through the ``wrap_tool_call`` onion; always an outcome, never a crash
    (but the run's own errors, e.g. a limit set to raise, and cancellation)."""
    tool = registry._tools.get(call.name)
    request = ToolCallRequest(call, tool, state, runtime)
    try:
        result: Any = await handler(request)
    except ExecutionError:
        raise
    except Exception as exc:
        error = tool_error_text(call.name, exc)
        record = ToolExecutionRecord.failed(command_of(call), error)
        if not isinstance(exc, ToolCallError):  # the tool raised: its type and traceback
            record = ToolExecutionRecord.raised(command_of(call), error, exc)
        return _tried(ToolOutcome(error_message(call, error), record), request)
    if isinstance(result, Command):
        try:
            outcome = _from_command(call, result)
        except ValueError as exc:
            outcome = ToolOutcome.failed(call, str(exc))
    elif isinstance(result, ToolMessage):
        if result.tool_call_id != call.id:
            result = result.model_copy(update={"tool_call_id": call.id})
        outcome = ToolOutcome(result, record_of(call, result))
    else:
        outcome = ToolOutcome.failed(
            call,
            f"a wrap_tool_call middleware returned {type(result).__name__}, not a "
            "ToolMessage or a Command",
        )
    outcome.return_direct = (
        tool is not None and tool.return_direct and outcome.message.status == "success"
    )
    return _tried(outcome, request)


def _tried(outcome: ToolOutcome, request: ToolCallRequest) -> ToolOutcome:
    """``outcome`` with the tries its tool took in its record (when more than one), and
    where its outcome came from when the tool did not run for it (``shared``)."""
    tries = request._tries
    if tries.count > 1:
        outcome.record.__dict__["attempts"] = tries.count
    if tries.shared is not None:
        outcome.record.__dict__["shared"] = tries.shared
    return outcome
