"""What a Ray actor runs for each item: a job.

A job is any picklable object with ``setup()`` and ``async run(item, host)``. Three come
with toolloop, one per product, taking their items and options alike:
:class:`LoopJob` runs :func:`~toolloop.async_plan_and_execute`, :class:`AgentJob` an agent
made by :func:`~toolloop.create_agent`, :class:`StatusAgentJob` a
:class:`~toolloop.StatusAgent`. A job is shipped to each actor once (by reference, through
the object store), and builds what it needs there, once per actor (:meth:`setup`): the
model client, the agent, the store are made in the actor, never pickled from the driver.

Their items are described in :mod:`toolloop.ray`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import anyio

from ..flow import FlowEvent
from ..loop import (
    LoopResult,
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
)
from ..planners import PlannerLike
from ..tools import Tool, ToolRegistry

__all__ = ["AgentJob", "Host", "LoopJob", "RunJob", "StatusAgentJob"]

Verb = Literal["run", "resume", "recover"]
_VERBS: tuple[Verb, ...] = ("resume", "recover")


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


class _Agent(Protocol):
    """The verbs both agents have (the middleware agent's and the status agent's)."""

    async def run(self, user_input: Any, /, **options: Any) -> Any: ...

    async def resume(self, run_id: str, decision: Any, /, **options: Any) -> Any: ...

    async def recover(self, run_id: str, /, **options: Any) -> Any: ...


@dataclass(frozen=True)
class _Call:
    """One item read: which verb, on what (the request or the run id), with what."""

    verb: Verb
    target: Any
    decision: Any
    options: dict[str, Any]


def _call(
    item: Any, options: Mapping[str, Any], host: Host, store: Any, *, messages: bool = False
) -> _Call:
    """What ``item`` asks for, with the run's options (the job's, the item's over them,
    then what the host and the job's store give); ``messages``: a request may be any
    messages (a mapping without the keys of an item is a message).

    Raises:
        ValueError: a mapping that names no request and no run to continue (unless it may
            be a message), or more than one.
    """
    chosen = dict(options)
    verb: Verb = "run"
    decision: Any = None
    if isinstance(item, Mapping) and ("user_input" in item or any(name in item for name in _VERBS)):
        given = dict(item)
        named = [name for name in ("user_input", *_VERBS) if name in given]
        if len(named) > 1:
            raise ValueError(
                f"an item is one call: a new run (user_input), resume or recover, got {named}"
            )
        (key,) = named
        target = given.pop(key)
        if key != "user_input":
            verb = "resume" if key == "resume" else "recover"
        if verb == "resume":
            if "decision" not in given:
                raise ValueError(
                    f"an item that resumes run {target!r} needs its decision: "
                    "{'resume': run_id, 'decision': Approve()}"
                )
            decision = given.pop("decision")
        chosen.update(given)
    elif isinstance(item, Mapping) and not messages:
        raise ValueError(
            "a mapping item names its call: user_input (a new run), resume (with its "
            f"decision) or recover; got the keys {sorted(str(key) for key in item)}"
        )
    else:
        target = item
    if host.limiter is not None:
        chosen.setdefault("limiter", host.limiter)
    if store is not None:
        chosen.setdefault("store", store)
    if host.on_event is not None:
        chosen["on_event"] = host.on_event
    return _Call(verb, target, decision, chosen)


class _Shipped:
    """A job sent to the actors without what it builds there (``_built``: its registry,
    agent, store), each built again where the job runs."""

    _built: ClassVar[tuple[str, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self._built:
            state[name] = None
        return state


@dataclass
class LoopJob(_Shipped):
    """Each item is one call of the loop: a new :func:`~toolloop.async_plan_and_execute`
    run, or a durable run resumed or recovered (the items: see :mod:`toolloop.ray`); the
    result is the :class:`~toolloop.LoopResult`.

    Args:
        planner: called in the actor with each item to make that run's planner (a
            planner holding a model client: cache the client per process, e.g. with
            ``functools.cache``, so each actor makes one).
        tools: the tools (picklable: typed functions and tools defined in modules); their
            registry is built once per actor.
        options: more keyword arguments for every run (any of
            :class:`~toolloop.loop.LoopOptions`: ``max_turns``, ``timeout``,
            ``usage_limits``, ``needs_approval``...).
        store: called once in each actor to make the runs' store (a
            :class:`~toolloop.checkpoints.CheckpointStore` that every actor reaches: a
            SQLite file on one machine, PostgreSQL on many), so that a run paused or cut
            off on one actor is resumed or recovered on any other; ``None``: the runs
            are not durable unless their options give a store.
    """

    planner: Callable[[Any], PlannerLike]
    tools: Sequence[Tool | Callable[..., Any]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    store: Callable[[], Any] | None = None
    _registry: ToolRegistry | None = field(default=None, init=False, repr=False, compare=False)
    _store: Any = field(default=None, init=False, repr=False, compare=False)

    _built: ClassVar[tuple[str, ...]] = ("_registry", "_store")

    def setup(self) -> None:
        """Build the tool registry and the store, once per actor."""
        if self._registry is None:
            self._registry = ToolRegistry(self.tools)
            self._store = self.store() if self.store is not None else None

    async def run(self, item: Any, host: Host) -> LoopResult:
        """Run one item's call of the loop under the actor's limiter."""
        self.setup()
        assert self._registry is not None
        call = _call(item, self.options, host, self._store)
        planner, tools = self.planner(item), self._registry
        if call.verb == "resume":
            return await async_resume_plan_and_execute(
                call.target, call.decision, planner=planner, tools=tools, **call.options
            )
        if call.verb == "recover":
            return await async_recover_plan_and_execute(
                call.target, planner=planner, tools=tools, **call.options
            )
        return await async_plan_and_execute(
            call.target, planner=planner, tools=tools, **call.options
        )


@dataclass
class _AgentJob(_Shipped):
    """What both agents' jobs are: the agent and the store built once per actor, each item
    a call of the agent's verbs."""

    agent: Callable[[], Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    store: Callable[[], Any] | None = None
    _agent: Any = field(default=None, init=False, repr=False, compare=False)
    _store: Any = field(default=None, init=False, repr=False, compare=False)
    _takes_messages = False

    _built: ClassVar[tuple[str, ...]] = ("_agent", "_store")

    def setup(self) -> None:
        """Build the actor's agent and store (once: they serve all the actor's runs)."""
        if self._agent is None:
            self._agent = self.agent()
            self._store = self.store() if self.store is not None else None

    async def run(self, item: Any, host: Host) -> Any:
        """Run one item's call of the agent under the actor's limiter."""
        self.setup()
        call = _call(item, self.options, host, self._store, messages=self._takes_messages)
        agent: _Agent = self._agent
        if call.verb == "resume":
            return await agent.resume(call.target, call.decision, **call.options)
        if call.verb == "recover":
            return await agent.recover(call.target, **call.options)
        return await agent.run(call.target, **call.options)


@dataclass
class AgentJob(_AgentJob):
    """Each item is one call of a middleware agent: ``agent.run``, ``agent.resume`` or
    ``agent.recover`` (the items: see :mod:`toolloop.ray`; a request may be any messages
    ``agent.run`` takes); the result is its :class:`~toolloop.agents.AgentResult`.

    Args:
        agent: called once in each actor to build the agent (``create_agent(model, tools,
            ...)``): the model client is made in the actor, never pickled from the driver.
        options: run options for every call (any of
            :class:`~toolloop.kernel.RunOverrides`: ``timeout``, ``usage_limits``,
            ``deps``...), over the agent's own.
        store: called once in each actor to make the runs' store, over the agent's (see
            :class:`LoopJob`); ``None``: the agent's own.
    """

    _takes_messages = True


@dataclass
class StatusAgentJob(_AgentJob):
    """Each item is one call of a status agent: ``agent.run``, ``agent.resume`` or
    ``agent.recover`` (the items: see :mod:`toolloop.ray`); the result is its
    :class:`~toolloop.status_agent.StatusAgentResult`.

    Args:
        agent: called once in each actor to build the agent (``StatusAgent(model=...,
            tools=...)``): the model client is made in the actor, never pickled from the
            driver.
        options: run options for every call (any of
            :class:`~toolloop.kernel.RunOverrides`: ``timeout``, ``usage_limits``,
            ``deps``...), over the agent's own.
        store: called once in each actor to make the runs' store, over the agent's (see
            :class:`LoopJob`); ``None``: the agent's own (in memory, the actor's alone,
            unless the agent was built with another).
    """
