"""What a Ray actor runs for each item: a job.

A job is any picklable object with ``async run(item, host)``; :class:`LoopJob` runs
:func:`~toolloop.async_plan_and_execute` and :class:`AgentJob` an agent made by
:func:`~toolloop.create_agent`. A job is shipped to each actor once (by reference, through
the object store), and builds what it needs there, once per actor (:meth:`setup`): the
planner's model client is made in the actor, never pickled from the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio

from ..flow import FlowEvent
from ..loop import LoopResult, async_plan_and_execute
from ..planners import PlannerLike
from ..tools import Tool, ToolRegistry

__all__ = ["AgentJob", "Host", "LoopJob", "RunJob"]


@dataclass(frozen=True)
class Host:
    """What an actor gives each run it hosts.

    Attributes:
        limiter: the actor's limiter, shared by all its runs (tool calls at once across
            them), or ``None`` when unlimited.
        on_event: forwards an event of the run to the driver (``None`` when nobody listens).
        actor_index: which of the pool's actors runs this item.
    """

    limiter: anyio.CapacityLimiter | None
    on_event: Callable[[FlowEvent], None] | None
    actor_index: int


@runtime_checkable
class RunJob(Protocol):
    """What each actor of a :class:`~toolloop.ray.RayRunPool` runs, once per item."""

    def setup(self) -> None:
        """Called once in each actor before its first run (build clients, registries)."""

    async def run(self, item: Any, host: Host) -> Any:
        """Run one item; what it returns (picklable) is the run's result."""


@dataclass
class LoopJob:
    """Each item is one :func:`~toolloop.async_plan_and_execute` run.

    An item is the user's request (a ``str``) or a mapping of
    :func:`~toolloop.async_plan_and_execute`'s keyword arguments (``user_input`` required),
    which override ``options`` for that run. The result is the
    :class:`~toolloop.LoopResult`.

    Args:
        planner: called in the actor with each item to make that run's planner (a
            planner holding a model client: cache the client per process, e.g. with
            ``functools.cache``, so each actor makes one).
        tools: the tools (picklable: typed functions and tools defined in modules); their
            registry is built once per actor.
        options: more keyword arguments for every run (``max_turns``, ``concurrency``,
            ``timeout``, ``tool_timeout``...).
    """

    planner: Callable[[Any], PlannerLike]
    tools: Sequence[Tool | Callable[..., Any]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    _registry: ToolRegistry | None = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_registry"] = None  # built again where the job runs
        return state

    def setup(self) -> None:
        """Build the tool registry, once per actor."""
        if self._registry is None:
            self._registry = ToolRegistry(self.tools)

    async def run(self, item: Any, host: Host) -> LoopResult:
        """Plan and execute one item under the actor's limiter."""
        self.setup()
        assert self._registry is not None
        arguments = dict(self.options)
        if isinstance(item, Mapping):
            arguments.update(item)
        else:
            arguments["user_input"] = item
        user_input = arguments.pop("user_input")
        arguments.setdefault("limiter", host.limiter)
        if host.on_event is not None:
            arguments["on_event"] = host.on_event
        return await async_plan_and_execute(
            user_input, tools=self._registry, planner=self.planner(item), **arguments
        )


@dataclass
class AgentJob:
    """Each item is one agent run (``await agent.run(item, **options)``); the result is its
    :class:`~toolloop.agents.AgentResult`.

    Args:
        agent: called once in each actor to build the agent (``create_agent(model, tools,
            ...)``): the model client is made in the actor, never pickled from the driver.
        options: run options for every ``agent.run`` (any of
            :class:`~toolloop.kernel.RunOverrides`: ``timeout``, ``usage_limits``,
            ``deps``...), over the agent's own. Each run's ``limiter`` is the actor's, unless
            ``options`` give one; its ``on_event`` forwards its events to the driver.
    """

    agent: Callable[[], Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    _agent: Any = field(default=None, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_agent"] = None  # built again where the job runs
        return state

    def setup(self) -> None:
        """Build the actor's agent (once: it serves all the actor's runs)."""
        self._agent = self.agent()

    async def run(self, item: Any, host: Host) -> Any:
        """Run the agent on one item, under the actor's limiter."""
        if self._agent is None:
            self.setup()
        options = dict(self.options)
        if host.limiter is not None:
            options.setdefault("limiter", host.limiter)
        if host.on_event is not None:
            options["on_event"] = host.on_event
        return await self._agent.run(item, **options)
