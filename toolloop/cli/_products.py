"""The three products behind ``toolloop run``, ``resume`` and ``recover``, built alike.

Each is made from the command line's tools and model, and takes the same run options
(:class:`toolloop.kernel.RunOptions`): a :class:`Product` runs a request, resumes a paused
run with a decision and recovers a run that failed or whose process died.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..checkpoints import HumanAnswer
from ..kernel import RunResult
from ..tools import ToolRegistry

if TYPE_CHECKING:
    from ..planners import StructuredPlanner, ToolCallingPlanner

__all__ = ["AGENTS", "AgentKind", "Product", "make_product"]

AgentKind = Literal["loop", "middleware", "status"]
AGENTS: tuple[AgentKind, ...] = ("loop", "middleware", "status")
"""What ``--agent`` picks: the plan/execute loop, the middleware agent, the status agent."""


class Product(Protocol):
    """One product, with the run options every call of it takes."""

    async def run(self, request: str, options: dict[str, Any]) -> RunResult: ...

    async def resume(
        self, run_id: str, decision: HumanAnswer, options: dict[str, Any]
    ) -> RunResult: ...

    async def recover(self, run_id: str, force: bool, options: dict[str, Any]) -> RunResult: ...


class _Loop:
    def __init__(
        self,
        planner: StructuredPlanner | ToolCallingPlanner,
        registry: ToolRegistry,
        own: dict[str, Any],
    ) -> None:
        self.planner = planner
        self.registry = registry
        self.own = own

    async def run(self, request: str, options: dict[str, Any]) -> RunResult:
        from ..loop import async_plan_and_execute

        return await async_plan_and_execute(
            request, planner=self.planner, tools=self.registry, **self.own, **options
        )

    async def resume(
        self, run_id: str, decision: HumanAnswer, options: dict[str, Any]
    ) -> RunResult:
        from ..loop import async_resume_plan_and_execute

        return await async_resume_plan_and_execute(
            run_id, decision, planner=self.planner, tools=self.registry, **self.own, **options
        )

    async def recover(self, run_id: str, force: bool, options: dict[str, Any]) -> RunResult:
        from ..loop import async_recover_plan_and_execute

        return await async_recover_plan_and_execute(
            run_id, planner=self.planner, tools=self.registry, force=force, **self.own, **options
        )


class _Agent:
    """Either agent: both have ``run``, ``resume(run_id, decision)`` and ``recover``."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    async def run(self, request: str, options: dict[str, Any]) -> RunResult:
        result: RunResult = await self.agent.run(request, **options)
        return result

    async def resume(
        self, run_id: str, decision: HumanAnswer, options: dict[str, Any]
    ) -> RunResult:
        result: RunResult = await self.agent.resume(run_id, decision, **options)
        return result

    async def recover(self, run_id: str, force: bool, options: dict[str, Any]) -> RunResult:
        result: RunResult = await self.agent.recover(run_id, force=force, **options)
        return result


def make_product(
    kind: AgentKind,
    *,
    model: Any,
    registry: ToolRegistry,
    planner: StructuredPlanner | ToolCallingPlanner | None = None,
    loop_options: dict[str, Any] | None = None,
    system_prompt: str | None = None,
    tool_choice: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    settings: dict[str, Any] | None = None,
) -> Product:
    """The product ``kind`` on ``model`` and the tools of ``registry``.

    The loop plans with ``planner`` and takes its own ``loop_options``
    (``user_extra_requirement``); the middleware agent takes the
    model's settings and ``system_prompt``; the status agent's five steps call ``model``
    with ``max_tokens``, ``temperature`` and ``system_prompt`` (when given).
    """
    if kind == "loop":
        assert planner is not None
        return _Loop(planner, registry, dict(loop_options or {}))
    if kind == "middleware":
        from ..agents import create_agent

        given: dict[str, Any] = {
            "system_prompt": system_prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if tool_choice is not None:
            given["tool_choice"] = tool_choice
        if settings:
            given["settings"] = settings
        return _Agent(create_agent(model, registry, **given))
    from ..status_agent import STATUS_SYSTEM_PROMPT, LLMStatusSteps, StatusAgent

    step_options: dict[str, Any] = {}
    if system_prompt is not None:
        step_options["system_prompt"] = f"{STATUS_SYSTEM_PROMPT}\n\n{system_prompt}"
    if max_tokens is not None:
        step_options["max_tokens"] = max_tokens
    if temperature is not None:
        step_options["temperature"] = temperature
    steps = LLMStatusSteps(model, **step_options)
    return _Agent(
        StatusAgent(
            tools=registry,
            model=model,
            analyze=steps.analyze,
            plan=steps.plan,
            decide=steps.decide,
            reflect=steps.reflect,
            converse=steps.converse,
        )
    )
