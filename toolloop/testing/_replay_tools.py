"""The tools of a replay: each real tool's name, description and schema around a function
that asks the replay for the call's outcome (the recorded one, or the tool's own when it
runs live), and stand-ins for the tools of the recording that were not given."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from .._errors import ToolTimeoutError
from ..runner import READ_RESULT
from ..tools import RunContext, Tool, ToolRegistry
from ._recording import RecordedToolCall, Recording
from ._replay_model import recorded_exception

__all__ = ["recorded_outcome", "replay_tools"]


class _Referee(Protocol):
    async def tool_call(
        self, name: str, arguments: Mapping[str, Any], purpose: str | None
    ) -> Any: ...


def replay_tools(referee: _Referee, real: ToolRegistry, recording: Recording) -> list[Tool]:
    """A replayed tool for each of ``real`` (the same schema, so arguments are checked as
    they were; ``return_direct`` kept), and a stand-in that takes any arguments for each
    other tool the recording names (in its header, its requests, its calls)."""
    out = []
    for tool in real:
        function = _live_with_context(referee, tool) if tool.context_parameter else None
        out.append(
            Tool(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters,
                function=function or _replayed(referee, tool.name),
                return_direct=tool.return_direct,
            )
        )
    named = [str(name) for name in recording.meta.get("tools") or () if name]
    for model_call in recording.model_calls:  # the tools each request offered
        offered = (model_call.request or {}).get("tools")
        named += [str(name) for name in offered or ()]
    named += [call.tool_name for call in recording.tool_calls]
    for name in dict.fromkeys(named):
        if name in real.names or name == READ_RESULT:  # the built-in reads what the run kept
            continue
        try:
            out.append(
                Tool(
                    name=name,
                    description=f"A stand-in for {name}: its results come from the recording.",
                    parameters={"type": "object"},
                    function=_replayed(referee, name),
                )
            )
        except Exception:  # a name no tool can have (it was refused when recorded)
            continue
    return out


async def recorded_outcome(call: RecordedToolCall) -> Any:
    """What the tool of a recorded call returns now: its recorded result, or what it
    raised (the same type when it is a built-in or toolloop one, the same message, so
    that its record reads as it did); a timeout as a timeout; a call that was cancelled
    waits for the run's own cancellation to come again."""
    await anyio.lowlevel.checkpoint()
    if call.success:
        return copy.deepcopy(call.result)
    error = call.error or ""
    name = repr(call.tool_name)
    prefix = f"tool {name} raised {call.error_type}"
    if call.error_type and error.startswith(prefix):
        raise recorded_exception(call.error_type, error[len(prefix) :].removeprefix(": "))
    if error == f"tool {name} was cancelled before it finished":
        await anyio.sleep_forever()
    if error.startswith(f"tool {name} did not finish within"):
        raise ToolTimeoutError(error)
    raise recorded_exception("RecordedToolError", error)


def _replayed(referee: _Referee, name: str) -> Callable[..., Awaitable[Any]]:
    async def replayed(**arguments: Any) -> Any:
        return await referee.tool_call(name, arguments, None)

    replayed.__name__ = name
    return replayed


def _live_with_context(referee: _Referee, tool: Tool) -> Callable[..., Awaitable[Any]]:
    """A live tool that asks for the run's context gets it: the replayed tool asks too."""
    name = tool.name

    async def live(_replay_context: RunContext[Any], **arguments: Any) -> Any:
        return await referee.tool_call(name, arguments, _replay_context.purpose)

    live.__name__ = name
    return live
