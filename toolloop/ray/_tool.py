"""Tools that run on a Ray cluster: as Ray tasks, or as methods of a named actor.

Each is a plain :class:`~toolloop.tools.Tool` whose function submits the work and awaits
its result, so everything a tool gets still holds: the arguments are checked against the
schema before anything is sent to the cluster, the call runs through the runner (limits,
per-call timeout, one record per call), and a timeout or a cancellation cancels the Ray
task (``ray.cancel``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, overload

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError
from typing_extensions import TypedDict, Unpack

from .._errors import ToolDefinitionError
from ..tools import Tool
from ..tools import tool as make_tool
from ._await import POLL_SECONDS, await_ref

__all__ = ["RayTaskOptions", "actor_tool", "ray_tool"]


class RayTaskOptions(TypedDict, total=False):
    """What a :func:`ray_tool`'s task asks of the cluster (each optional)."""

    num_cpus: float | None
    """CPUs the task needs (Ray's default: 1)."""
    num_gpus: float | None
    """GPUs the task needs."""
    memory: int | None
    """Bytes of memory the task needs, for Ray's scheduler."""
    resources: Mapping[str, float] | None
    """Custom resources, e.g. ``{"parser": 1}``."""
    runtime_env: Mapping[str, Any] | None
    """Ray's runtime environment for the task (pip packages, env vars...)."""
    max_retries: int
    """How many times Ray runs the task again when its worker dies. ``0`` (the default): a
    dead worker is a failed record, and the tool never runs twice; more only for tools that
    are safe to repeat."""
    options: Mapping[str, Any] | None
    """More Ray task options, as ``.options(...)`` takes them (e.g.
    ``scheduling_strategy``, ``label_selector``)."""


def _task_options(owner: str, task: RayTaskOptions) -> dict[str, Any]:
    unknown = sorted(set(task) - set(RayTaskOptions.__annotations__))
    if unknown:
        known = ", ".join(RayTaskOptions.__annotations__)
        raise ToolDefinitionError(f"{owner}: unknown {', '.join(unknown)}; the options are {known}")
    max_retries = task.get("max_retries", 0)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ToolDefinitionError(f"{owner}: max_retries must be an int >= 0, got {max_retries!r}")
    chosen: dict[str, Any] = {**(task.get("options") or {}), "max_retries": max_retries}
    chosen.setdefault("retry_exceptions", False)
    for key in ("num_cpus", "num_gpus", "memory"):
        value = task.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ToolDefinitionError(
                f"{owner}: {key} must be a number >= 0 or None, got {value!r}"
            )
        chosen[key] = value
    resources, runtime_env = task.get("resources"), task.get("runtime_env")
    if resources:
        chosen["resources"] = dict(resources)
    if runtime_env:
        chosen["runtime_env"] = dict(runtime_env)
    return chosen


@overload
def ray_tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def ray_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    poll: float = POLL_SECONDS,
    **task: Unpack[RayTaskOptions],
) -> Callable[[Callable[..., Any]], Tool]: ...


def ray_tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    poll: float = POLL_SECONDS,
    **task: Unpack[RayTaskOptions],
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a tool of a typed sync function that runs as a Ray task: ``@ray_tool`` or
    ``@ray_tool(num_cpus=2, ...)``.

    The schema comes from the function as for :func:`toolloop.tools.tool`; the arguments
    are checked (and converted) on the driver, then sent with the task as Ray objects (Ray
    puts large ones in its object store), and the result comes back once. The loop stays
    free while the task runs, on asyncio and on trio.

    Args:
        function: a typed sync function, importable by the Ray workers (defined in a
            module, or shipped with ``runtime_env``).
        name: the tool's name (the function's by default).
        description: for the model (the docstring's first paragraph by default).
        timeout: seconds a call may take; past it the task is cancelled (``ray.cancel``)
            and the record fails, as for any tool.
        poll: on trio, seconds a waiting thread blocks in ``ray.get`` before checking back.
        **task: what the task asks of the cluster (:class:`RayTaskOptions`): ``num_cpus``,
            ``num_gpus``, ``memory``, ``resources``, ``runtime_env``, ``max_retries``
            (``0`` by default: the tool never runs twice), ``options``; an unknown one is a
            :class:`~toolloop.errors.ToolDefinitionError`.

    Raises:
        ToolDefinitionError: an async function (run it on the loop as a plain tool), bad
            resources, or any reason :class:`~toolloop.tools.Tool` gives.
    """

    def decorate(fn: Callable[..., Any]) -> Tool:
        label = f"ray tool {name or getattr(fn, '__name__', fn)!r}"
        if inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(
                f"{label}: the function is async; a Ray task runs a sync function (CPU or GPU "
                "work). Run async I/O as a plain tool on the loop, or make it sync"
            )
        chosen = _task_options(label, task)
        remote = ray.remote(fn).options(**chosen)

        @functools.wraps(fn)
        async def submit(**arguments: Any) -> Any:
            return await await_ref(remote.remote(**arguments), poll=poll)

        return make_tool(name=name, description=description, timeout=timeout)(submit)

    if function is not None:
        return decorate(function)
    return decorate


def _method_signature(label: str, method: Callable[..., Any]) -> inspect.Signature:
    """The signature of an actor method as the model calls it: without ``self`` (nor the
    tracing parameter Ray adds to the class's methods when it makes an actor of it)."""
    try:
        signature = inspect.signature(method, eval_str=True)
    except (NameError, TypeError, SyntaxError, ValueError) as exc:
        raise ToolDefinitionError(f"cannot read the signature of {label}: {exc}") from exc
    params = list(signature.parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    params = [p for p in params if not p.name.startswith("_ray_")]
    return signature.replace(parameters=params)


def actor_tool(
    method: Callable[..., Any],
    *,
    actor: str | ActorHandle[Any],
    namespace: str | None = None,
    method_name: str | None = None,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    poll: float = POLL_SECONDS,
) -> Tool:
    """Make a tool of a method of a Ray actor, for stateful tools (a model kept loaded, a
    cache, a connection pool).

    The schema comes from ``method`` (the plain class's method, e.g. ``Embedder.embed``;
    ``self`` is left out); each call runs ``actor.<method>.remote(**arguments)`` and awaits
    it. A timeout or a cancellation cancels the actor task (an async actor's task is
    cancelled; a sync actor's sees ``ray.get_runtime_context().is_canceled()``).

    Args:
        method: the typed method, as defined on the class (``Class.method``).
        actor: the actor's handle, or the name it was created with (``.options(name=...)``);
            a name is looked up on first use, and again after the actor is lost.
        namespace: the Ray namespace of a named actor (the driver's by default).
        method_name: the actor's method to call (``method``'s name by default).
        name: the tool's name (``method``'s by default).
        description: for the model (the docstring's first paragraph by default).
        timeout: seconds a call may take; past it the actor task is cancelled.
        poll: on trio, seconds a waiting thread blocks in ``ray.get`` before checking back.

    Raises:
        ToolDefinitionError: an un-annotated or unusable signature, or any reason
            :class:`~toolloop.tools.Tool` gives.
    """
    target = method_name or getattr(method, "__name__", None)
    label = f"actor tool {name or target!r}"
    if not isinstance(target, str) or not target:
        raise ToolDefinitionError(f"{label}: cannot tell which method to call; pass method_name=")
    if not isinstance(actor, (str, ActorHandle)):
        raise ToolDefinitionError(
            f"{label}: actor must be an actor handle or the name of a named actor, got "
            f"{type(actor).__name__}"
        )
    signature = _method_signature(label, method)
    handles: list[ActorHandle[Any]] = [actor] if isinstance(actor, ActorHandle) else []

    def handle() -> ActorHandle[Any]:
        if not handles:
            handles.append(ray.get_actor(str(actor), namespace=namespace))
        return handles[0]

    @functools.wraps(method)
    async def call(**arguments: Any) -> Any:
        remote_method = getattr(handle(), target)
        try:
            return await await_ref(remote_method.remote(**arguments), poll=poll)
        except RayActorError:
            if isinstance(actor, str):
                handles.clear()  # a named actor restarted or re-created: look it up again
            raise

    call.__signature__ = signature  # type: ignore[attr-defined]
    del call.__wrapped__  # the signature is the one above, without self
    return make_tool(name=name or target, description=description, timeout=timeout)(call)
