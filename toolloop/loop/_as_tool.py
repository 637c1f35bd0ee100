"""The loop as a tool of another run: :func:`as_tool`."""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from ..kernel import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH, ChildRuns, RunResult
from ..kernel import as_tool as kernel_as_tool
from ..planners import PlannerLike
from ..tools import Tool
from ._api import (
    LoopOptions,
    ToolsLike,
    _split,
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
)

__all__ = ["as_tool"]


def as_tool(
    *,
    planner: PlannerLike,
    tools: ToolsLike = (),
    name: str,
    description: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_children: int = DEFAULT_MAX_CHILDREN,
    **options: Unpack[LoopOptions],
) -> Tool:
    """The loop, with ``planner`` and ``tools``, as a tool of another run (of any product):
    each call is a run of the loop on the call's ``request``, a child of the calling run,
    sharing its budget, limits, events and cancellation; it answers the run's structured
    response or final text (see :func:`toolloop.kernel.as_tool`, whose arguments these
    are, and the guide *runs as tools*).

    Args:
        **options: the loop's options of every run of the tool (those of
            :func:`async_plan_and_execute`), e.g. ``answer_with=`` for a final answer.

    Raises:
        TypeError, ValueError: an option of the wrong kind or name.
    """
    defaults, _ = _split(options, "as_tool")
    given: dict[str, Any] = dict(options)

    async def run(request: str, **more: Any) -> RunResult:
        return await async_plan_and_execute(
            request, planner=planner, tools=tools, **{**given, **more}
        )

    async def resume(run_id: str, decision: object, **more: Any) -> RunResult:
        return await async_resume_plan_and_execute(
            run_id, decision, planner=planner, tools=tools, **{**given, **more}
        )

    async def recover(run_id: str, **more: Any) -> RunResult:
        return await async_recover_plan_and_execute(
            run_id, planner=planner, tools=tools, **{**given, **more}
        )

    runs = ChildRuns(run=run, defaults=defaults, resume=resume, recover=recover)
    return kernel_as_tool(
        runs,
        name=name,
        description=description,
        max_depth=max_depth,
        max_children=max_children,
    )
