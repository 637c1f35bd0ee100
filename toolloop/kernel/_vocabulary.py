"""One vocabulary for every product: why a run stopped, and how a failure reads.

The loop, the middleware agent and the status agent stop for the same reasons under the same
names, and a call that a human rejected or that a crash cut off reads the same in each.
"""

from __future__ import annotations

from typing import Literal

from ..checkpoints import interrupted_error as interrupted_error

__all__ = ["StopReason", "interrupted_error", "rejected_error"]

StopReason = Literal[
    "answered",
    "max_turns",
    "timeout",
    "usage_limit",
    "refusal",
    "cut_off",
    "invalid_plan",
    "no_commands",
    "use_tool_false",
    "structured_response",
    "tools",
    "middleware",
    "stopped",
    "guard",
]
"""Why a completed run stopped. Every product uses the ones that can happen to it:

- ``answered``: the model (the loop: its planner) answered without asking for a tool;
- ``max_turns``: the run reached its iteration bound (``max_turns``: the loop's rounds, the
  middleware agent's model calls, the status agent's steps);
- ``timeout``: its ``timeout`` passed, with ``on_timeout="finish"``;
- ``usage_limit``: its budget was reached, with ``on_usage_limit="finish"``;
- ``refusal``: the model refused (its words are in the result);
- ``cut_off``: the model's last reply was cut off by its token limit (the agent);
- ``invalid_plan``, ``no_commands``, ``use_tool_false``: the loop's planner gave a plan that
  is no object, no command that can run, or ``use_tool`` false;
- ``structured_response``: the answer fits the run's ``response_format`` (the agent);
- ``tools``: the run ended after its tools (``return_direct``, a tool's jump: the agent);
- ``middleware``: a hook ended it (the agent);
- ``stopped``: a human answered ``Stop``;
- ``guard``: the status agent's loop guard ended a run that went in circles.
"""


def rejected_error(tool_name: str, message: str | None = None) -> str:
    """What a call a human rejected says, in every product (its record's error, the model's
    answer to the call)."""
    said = f"a human rejected this call of {tool_name!r}; it did not run"
    return f"{said}: {message}" if message else said
