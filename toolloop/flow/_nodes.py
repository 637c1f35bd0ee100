"""The nodes a flow is made of, and how each one runs.

A node receives a value and answers with the nodes to run next and the value they get. The
execution drives that answer in a loop (a trampoline): a chain of steps runs in one task, with
no task spawned and no recursion per step; only fan-out spawns tasks. A node that decides at
once (``sync``: entry points, routers, joins, emits, ends) answers from :meth:`Node.advance`,
called by the driver; one that awaits (a step, a fan-out) from its coroutine
:meth:`Node.run`. Node kinds:

- ``StartNode`` / ``EventNode``: where values enter (the start value, an emitted event).
- ``StepNode``: calls the user's function; its result goes to the steps chained after it.
- ``IfNode`` / ``MatchNode``: routers; they pass the value on, unchanged, to the chosen targets.
- ``BatchNode`` / ``ForEachNode``: fan-out and fan-in under a concurrency limit.
- ``CollectNode``: a join that waits for all of its sources.
- ``EmitNode``: turns the value into an event; ``EndNode``: ends the execution with it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import anyio.to_thread

from .._errors import ExecutionError, ExecutionTimeoutError, FlowDefinitionError, StepFailedError
from ._context import Context
from ._events import StepFailed, StepFinished, StepStarted

if TYPE_CHECKING:
    from ._execution import Execution

__all__ = [
    "BatchNode",
    "CollectNode",
    "EmitNode",
    "EndNode",
    "EventNode",
    "ForEachNode",
    "IfNode",
    "MatchNode",
    "Node",
    "StartNode",
    "Step",
    "StepNode",
]

_NOTHING: tuple[Node, ...] = ()


class Node:
    """A place in a flow. ``out`` are the nodes that get this node's result."""

    __slots__ = ("name", "out")
    passthrough: ClassVar[bool] = False
    """Routers and entry points pass the trigger of their input on to their targets."""
    direct: bool = False
    """A step the chain driver runs in its parts (see :class:`StepNode`), not whole."""
    sync: ClassVar[bool] = False
    """The node decides at once, without awaiting anything: the driver calls :meth:`advance`
    (no coroutine of its own), instead of awaiting :meth:`run`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.out: list[Node] = []

    async def run(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        """The next nodes and the value they get, once the node's work is done."""
        raise NotImplementedError

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        """The next nodes and the value they get, from a ``sync`` node."""
        raise NotImplementedError

    def targets(self) -> list[Node]:
        """Every node this one can hand a value to (for checks and pictures)."""
        return list(self.out)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class StartNode(Node):
    __slots__ = ()
    passthrough = True
    sync = True

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        return self.out, value


class EventNode(Node):
    """The handlers of one event, from ``flow.when(event)``."""

    __slots__ = ("external",)
    passthrough = True
    sync = True

    def __init__(self, name: str, *, external: bool = False) -> None:
        super().__init__(name)
        self.external = external

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        return self.out, value


class Step:
    """A step's function with its options, for when a plain function is not enough.

    Args:
        fn: ``fn(value, ctx)``, ``fn(value)`` or ``fn()``; async or plain.
        name: unique in the flow; the function's ``__name__`` by default.
        timeout: seconds; a step that runs longer is cancelled and the execution fails
            with :class:`~toolloop.ExecutionTimeoutError` naming it.
        emits: the events the step may emit with ``ctx.emit`` (checked when the flow is built).
        thread: run a plain function in a worker thread (for blocking code).
    """

    __slots__ = ("emits", "fn", "name", "thread", "timeout")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        timeout: float | None = None,
        emits: Sequence[str] = (),
        thread: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.timeout = timeout
        self.emits = tuple(emits)
        self.thread = thread


def _positional_arity(fn: Callable[..., Any], name: str) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: give them the value
        return 1
    count = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if p.default is p.empty:
                count += 1
        elif p.kind is p.VAR_POSITIONAL:
            return 2
    if count > 2:
        raise FlowDefinitionError(
            f"step {name!r} takes {count} required positional parameters; a step takes "
            "(value, ctx), (value) or nothing"
        )
    return count


def _is_async(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    )


class StepNode(Node):
    """Calls a user function; traced, timed, observable.

    A step runs in parts: :meth:`begin` (the step starts: its event), :meth:`_start` (the
    function called: what to await when ``awaits``), then :meth:`_succeeded` or
    :meth:`failure` (its trace, its event, the error to raise). :meth:`run` is the step
    whole, one coroutine; the execution's chain driver runs a step without a timeout in
    its parts itself, awaiting the function's own awaitable, so that a running step has no
    coroutine of the engine's between the driver and the function (a timeout's cancel
    scope is :meth:`run`'s). Both come to the same (``tests/flow/test_flow_step_paths.py``:
    a step in a chain and in a fan-out, with and without a timeout).
    """

    __slots__ = ("arity", "awaits", "direct", "emits", "fn", "thread", "timeout")

    def __init__(self, step: Step) -> None:
        super().__init__(step.name)
        self.fn = step.fn
        self.timeout = step.timeout
        self.emits = step.emits
        self.thread = step.thread
        is_async = _is_async(step.fn)
        if self.thread and is_async:
            raise FlowDefinitionError(
                f"step {self.name!r} is async; thread=True is only for plain functions"
            )
        self.awaits = is_async or self.thread  # what _start returns is awaited
        self.arity = _positional_arity(step.fn, self.name)
        self.direct = self.timeout is None  # the chain driver runs it in its parts

    async def run(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        """Run the function once: trace it, time it, turn failures into execution errors."""
        started = self.begin(ex, trigger)
        try:
            if self.timeout is None:
                result = self._start(ex, value)
                if self.awaits:
                    result = await result
            else:
                with anyio.move_on_after(self.timeout) as scope:
                    result = self._start(ex, value)
                    if self.awaits:
                        result = await result
                # a thread step cannot be interrupted: past its deadline, it still timed out
                if scope.cancelled_caught or scope.cancel_called:
                    raise _StepTimedOut
        except BaseException as exc:
            error = self.failure(ex, started, trigger, exc)
            if error is None:
                raise
            raise error from error.__cause__
        self._succeeded(ex, started, trigger)
        return self.out, result

    def begin(self, ex: Execution[Any], trigger: str) -> float:
        """The step starts (its event, if observed): when, for its trace."""
        started = perf_counter()
        if ex._observers:
            ex._publish(
                StepStarted(execution_id=ex.id, at=ex._at(started), step=self.name, event=trigger)
            )
        return started

    def failure(
        self, ex: Execution[Any], started: float, trigger: str, exc: BaseException
    ) -> BaseException | None:
        """The step raised ``exc``: noted in the trace (and told); what to raise instead,
        from its ``__cause__``, or ``None`` to raise ``exc`` itself (an execution's error, a
        cancellation)."""
        if isinstance(exc, _StepTimedOut):
            err = f"step {self.name!r} did not finish within {self.timeout} s and was cancelled"
            self._failed(ex, started, trigger, "timeout", err)
            return ExecutionTimeoutError(  # (raised from None)
                err, timeout=self.timeout or 0.0, step=self.name, trace=ex.trace, state=ex.state
            )
        if isinstance(exc, ExecutionError):
            return None
        if isinstance(exc, Exception):
            failed = self._raised(ex, started, trigger, exc)
            failed.__cause__ = exc  # (raised from exc)
            return failed
        self._cancelled(ex, started, trigger)  # cancelled: note it in the trace, never swallow it
        return None

    def _start(self, ex: Execution[Any], value: Any) -> Any:
        """Call the function: what it returned, or what to await for it (``awaits``)."""
        fn = self.fn
        if self.thread:
            args = (value, Context(ex, self.name))[: self.arity]
            return anyio.to_thread.run_sync(functools.partial(fn, *args))
        arity = self.arity
        if arity == 2:
            return fn(value, Context(ex, self.name))
        if arity == 1:
            return fn(value)
        return fn()

    def _succeeded(self, ex: Execution[Any], started: float, trigger: str) -> None:
        ended = perf_counter()
        t0 = ex._t0
        ex._trace.append((self.name, trigger, started - t0, ended - t0, "ok", None))
        if ex._observers:
            ex._publish(
                StepFinished(
                    execution_id=ex.id, at=ex._at(ended), step=self.name, duration=ended - started
                )
            )

    def _raised(
        self, ex: Execution[Any], started: float, trigger: str, exc: Exception
    ) -> StepFailedError:
        err = f"{type(exc).__name__}: {exc}"
        self._failed(ex, started, trigger, "failed", err)
        return StepFailedError(
            f"step {self.name!r} raised {err}", step=self.name, trace=ex.trace, state=ex.state
        )

    def _cancelled(self, ex: Execution[Any], started: float, trigger: str) -> None:
        ex._trace.append(
            (self.name, trigger, ex._at(started), ex._at(perf_counter()), "cancelled", None)
        )

    def _failed(
        self, ex: Execution[Any], started: float, trigger: str, outcome: Any, err: str
    ) -> None:
        ended = perf_counter()
        ex._trace.append((self.name, trigger, ex._at(started), ex._at(ended), outcome, err))
        if ex._observers:
            ex._publish(
                StepFailed(
                    execution_id=ex.id,
                    at=ex._at(ended),
                    step=self.name,
                    duration=ended - started,
                    error=err,
                )
            )


class _StepTimedOut(Exception):
    pass


Condition = Callable[..., Any]


def _router_call(fn: Callable[..., Any], what: str) -> tuple[Callable[..., Any], bool]:
    """Routers take ``(value, ctx)``, ``(value)`` or nothing: the function to call, and
    whether it takes the context (else it takes the value alone)."""
    if _is_async(fn):
        raise FlowDefinitionError(
            f"{what} {getattr(fn, '__name__', fn)!r} is async; conditions and routers are "
            "plain functions of (value, ctx) that decide from what they are given"
        )
    arity = _positional_arity(fn, getattr(fn, "__name__", what))
    if arity == 2:
        return fn, True
    if arity == 1:
        return fn, False
    return (lambda value: fn()), False


def _bind_router(fn: Callable[..., Any], what: str) -> Callable[[Any, Any], Any]:
    """A router's function as one of two arguments ``(value, ctx)``."""
    call, with_ctx = _router_call(fn, what)
    return call if with_ctx else lambda value, ctx: call(value)


class _RouterNode(Node):
    __slots__ = ()
    passthrough = True
    sync = True

    def _routed(self, ex: Execution[Any], trigger: str, started: float, route: str) -> None:
        t0 = ex._t0
        ex._trace.append((self.name, trigger, started - t0, perf_counter() - t0, "routed", route))

    def _fail(self, ex: Execution[Any], exc: Exception) -> StepFailedError:
        return ex.step_failed(self.name, f"router {self.name!r} raised", exc)


class IfNode(_RouterNode):
    """``if_/elif_/else_``: the first condition that holds picks the target."""

    __slots__ = ("branches", "otherwise")

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.branches: list[tuple[Callable[[Any, Any], Any], str, Node]] = []
        self.otherwise: Node | None = None

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        started = perf_counter()
        ctx = Context(ex, self.name)
        try:
            for cond, label, target in self.branches:
                if cond(value, ctx):
                    self._routed(ex, trigger, started, label)
                    return (target,), value
        except Exception as exc:
            raise self._fail(ex, exc) from exc
        if self.otherwise is not None:
            self._routed(ex, trigger, started, "else")
            return (self.otherwise,), value
        self._routed(ex, trigger, started, "no branch")
        return _NOTHING, value

    def targets(self) -> list[Node]:
        nodes = [t for _, _, t in self.branches]
        if self.otherwise is not None:
            nodes.append(self.otherwise)
        return nodes


class MatchNode(_RouterNode):
    """``match``: a key function picks the case(s); a list of keys fans out to several."""

    __slots__ = ("cases", "default", "key", "with_ctx")

    def __init__(
        self,
        name: str,
        key: Callable[..., Any],
        cases: dict[Hashable, Node],
        default: Node | None,
    ) -> None:
        super().__init__(name)
        self.key, self.with_ctx = _router_call(key, "match key")
        self.cases = cases
        self.default = default

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        started = perf_counter()
        try:
            if self.with_ctx:
                key = self.key(value, Context(ex, self.name))
            else:  # a key of the value alone: no context to make
                key = self.key(value)
        except Exception as exc:
            raise self._fail(ex, exc) from exc
        if type(key) is str:  # the common route: one case by name
            node = self.cases.get(key, self.default)
            if node is not None:
                self._routed(ex, trigger, started, key)
                return (node,), value
        keys = key if isinstance(key, (list, tuple)) else (key,)
        chosen: list[Node] = []
        for k in keys:
            try:
                node = self.cases.get(k, self.default)
            except TypeError:  # an unhashable key
                node = self.default
            if node is None:
                raise StepFailedError(
                    f"router {self.name!r} chose {k!r}, which is not one of its cases "
                    f"{list(self.cases)!r} and it has no default",
                    step=self.name,
                    trace=ex.trace,
                    state=ex.state,
                )
            chosen.append(node)
        self._routed(ex, trigger, started, ", ".join(map(str, keys)))
        return chosen, value

    def targets(self) -> list[Node]:
        nodes = list(self.cases.values())
        if self.default is not None:
            nodes.append(self.default)
        return nodes


class _FanNode(Node):
    """Runs step calls concurrently under a limit and collects their results in order."""

    __slots__ = ("limit",)

    def __init__(self, name: str, limit: int | None) -> None:
        super().__init__(name)
        if limit is not None and limit < 1:
            raise FlowDefinitionError(f"{name!r}: limit must be at least 1, got {limit!r}")
        self.limit = limit

    async def _gather(
        self, ex: Execution[Any], calls: Sequence[tuple[StepNode, Any]], trigger: str
    ) -> list[Any]:
        results: list[Any] = [None] * len(calls)
        failure: list[ExecutionError] = []
        limiter = anyio.Semaphore(self.limit) if self.limit else None

        async def one(i: int, node: StepNode, value: Any) -> None:
            try:
                results[i] = (await node.run(ex, value, trigger))[1]
            except ExecutionError as err:
                if not failure:
                    failure.append(err)
                tg.cancel_scope.cancel()

        async def limited(i: int, node: StepNode, value: Any) -> None:
            assert limiter is not None
            async with limiter:  # a failure cancels the others before it frees its slot
                await one(i, node, value)

        async with anyio.create_task_group() as tg:
            for i, (node, value) in enumerate(calls):
                tg.start_soon(one if limiter is None else limited, i, node, value)
        if failure:
            raise failure[0]
        return results


class BatchNode(_FanNode):
    """``batch``: the same value to several steps at once; their results as a list."""

    __slots__ = ("children",)

    def __init__(self, name: str, children: list[StepNode], limit: int | None) -> None:
        super().__init__(name, limit)
        self.children = children

    async def run(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        return self.out, await self._gather(ex, [(c, value) for c in self.children], trigger)

    def targets(self) -> list[Node]:
        return [*self.children, *self.out]


class ForEachNode(_FanNode):
    """``for_each``: one step per item of the value; the results as a list, in item order."""

    __slots__ = ("child",)

    def __init__(self, name: str, child: StepNode, limit: int | None) -> None:
        super().__init__(name, limit)
        self.child = child

    async def run(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        try:
            items = list(value)
        except TypeError as exc:
            raise StepFailedError(
                f"for_each {self.name!r} expected an iterable value, got {type(value).__name__}",
                step=self.name,
                trace=ex.trace,
                state=ex.state,
            ) from exc
        return self.out, await self._gather(ex, [(self.child, v) for v in items], trigger)

    def targets(self) -> list[Node]:
        return [self.child, *self.out]


class CollectNode(Node):
    """``collect``: waits until every source has delivered, then passes ``{source: value}``."""

    __slots__ = ("sources",)
    sync = True

    def __init__(self, name: str, sources: list[str]) -> None:
        super().__init__(name)
        self.sources = sources

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        if ex._collected is None:
            ex._collected = {}
        got = ex._collected.setdefault(self.name, {})
        got[trigger] = value
        if len(got) < len(self.sources):
            return _NOTHING, None
        del ex._collected[self.name]
        return self.out, {s: got[s] for s in self.sources}


class EmitNode(Node):
    """``.emit(event)`` in a chain: the value becomes that event."""

    __slots__ = ("event",)
    sync = True

    def __init__(self, name: str, event: str) -> None:
        super().__init__(name)
        self.event = event

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        ex._emit(self.event, value, by=trigger, declared=True)  # declared by .emit() itself
        return _NOTHING, None


class EndNode(Node):
    """``.end()``: the value that reaches it is the execution's result."""

    __slots__ = ()
    sync = True

    def advance(self, ex: Execution[Any], value: Any, trigger: str) -> tuple[Sequence[Node], Any]:
        at = perf_counter() - ex._t0
        ex._trace.append(("end", trigger, at, at, "ended", None))
        ex._finish(value, alone=True)
        return _NOTHING, None
