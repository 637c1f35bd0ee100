"""One vocabulary for every product: why a run stopped, and how a failure reads.

The loop, the middleware agent and the status agent stop for the same reasons under the same
names, and a call that a human rejected or that a crash cut off reads the same in each.
"""

from __future__ import annotations

from typing import Literal

from .._errors import ModelCallError
from ..checkpoints import interrupted_error as interrupted_error
from ..runner import ToolExecutionRecord, cancelled_error

__all__ = [
    "HUMAN_EVENT",
    "StopReason",
    "cut_off_error",
    "cut_off_record",
    "interrupted_error",
    "model_timeout_error",
    "rejected_error",
]

HUMAN_EVENT = "human_decision"
"""What a run paused for a human waits for (its ``ExecutionPaused.waiting_for``): the
event its human's decision resumes it with."""

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


_ENDED_BY = {
    "timeout": "the run's timeout ended the run",
    "usage_limit": "the run's budget (usage_limits) ended the run",
}


def cut_off_error(tool_name: str, stop: StopReason | None = None) -> str:
    """What a call says that the run's own end cut off while it ran (its record's error, the
    model's answer to the call), in every product: the runner's words for a cancelled call,
    and what ended the run (``stop``: ``"timeout"`` or ``"usage_limit"``, with
    ``"finish"``)."""
    said = cancelled_error(tool_name)
    why = _ENDED_BY.get(stop or "")
    return f"{said}: {why}" if why else said


def cut_off_record(record: ToolExecutionRecord, stop: StopReason) -> ToolExecutionRecord:
    """``record`` in the kernel's words when it is the runner's record of a call the run's
    own end cancelled (a run finished by its ``timeout`` or budget, with ``"finish"``: what
    the products' ``settle`` tell); any other record as it is."""
    if record.success or record.error != cancelled_error(record.tool_name):
        return record
    return record.model_copy(update={"error": cut_off_error(record.tool_name, stop)})


def model_timeout_error(what: str, timeout: float) -> ModelCallError:
    """The error of a model call (``what``: ``"the planner"``, ``"the model's answer"``,
    ``"the decide step"``...) that outlived the run's ``model_timeout``: it fails as a model
    call that failed does, in every product."""
    return ModelCallError(
        f"{what} did not finish within {timeout:g} s (model_timeout); it was cancelled: "
        "raise model_timeout if its model needs longer"
    )
