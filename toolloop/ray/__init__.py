"""Beyond one machine, on Ray: tools as Ray tasks or actor methods, and many runs spread
over Ray actors (the ``ray`` extra: ``pip install 'toolloop[ray]'``).

- :func:`ray_tool` and :func:`actor_tool` make plain :class:`~toolloop.tools.Tool` objects
  whose calls run on the cluster; the schema check runs first, on the driver, and a
  timeout or a cancellation cancels the Ray task.
- :class:`RayRunPool` runs a job over many items on actors that host many runs each, and
  streams back a :class:`RunOutcome` per item as it finishes: a :class:`LoopJob`, an
  :class:`AgentJob` or a :class:`StatusAgentJob` (one per product, alike: an item is a
  new run, or a durable run resumed or recovered), or a :class:`RunJob` of your own.
- :func:`await_ref` awaits any Ray object without blocking the event loop, on asyncio and
  on trio, and cancels its task when the wait is cut short.

An item of the products' jobs is one call of the product's verbs:

- the request (a ``str``; for the middleware agent, any messages its ``run`` takes): a new
  run;
- a mapping with ``user_input`` (the request) and run options for that run (``run_id``,
  ``deps``, ``max_turns``...): a new run;
- a mapping with ``resume`` (a run id) and ``decision``, and run options: the paused run
  resumed with the human's decision;
- a mapping with ``recover`` (a run id), and run options (``force``, ``unknown_outcome``...):
  the run continued after its process (or its actor) died.

An item's options go over the job's ``options``; each run's ``limiter`` is the actor's
unless they give one, its ``store`` the job's (made once in each actor by the job's
``store`` function) unless they give one, and its ``on_event`` forwards its events to the
driver when the driver listens.
"""

# ruff: noqa: E402  (the extra is checked before the modules that import it)
from __future__ import annotations

from .._extras import require

require("ray", needs="toolloop.ray needs Ray, which is not installed", extra="ray")

from ._await import await_ref as await_ref
from ._jobs import AgentJob as AgentJob
from ._jobs import Host as Host
from ._jobs import LoopJob as LoopJob
from ._jobs import RunJob as RunJob
from ._jobs import StatusAgentJob as StatusAgentJob
from ._pool import RayRunPool as RayRunPool
from ._pool import RunOutcome as RunOutcome
from ._tool import RayTaskOptions as RayTaskOptions
from ._tool import actor_tool as actor_tool
from ._tool import ray_tool as ray_tool

__all__ = [
    "AgentJob",
    "Host",
    "LoopJob",
    "RayRunPool",
    "RayTaskOptions",
    "RunJob",
    "RunOutcome",
    "StatusAgentJob",
    "actor_tool",
    "await_ref",
    "ray_tool",
]
