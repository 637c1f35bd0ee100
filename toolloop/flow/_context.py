"""What a step sees of its execution."""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any, Generic

from typing_extensions import TypeVar

from ._events import FlowEvent

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ._execution import Execution

__all__ = ["Context"]

S = TypeVar("S")
D = TypeVar("D", default=Any)


class Context(Generic[S, D]):
    """What a step sees of its execution: the state, the deps, and ways to act on the run.

    ``Context[S, D]``: ``S`` the state's type, ``D`` the deps' (``Any`` when not given), so
    a step typed ``ctx: Context[MyState, MyDeps]`` reads ``ctx.deps`` as ``MyDeps``.

    One is made per step call (it is two references), so ``ctx.step`` names the caller.
    """

    __slots__ = ("_ex", "step")

    def __init__(self, ex: Execution[S], step: str) -> None:
        self._ex = ex
        self.step = step

    @property
    def state(self) -> S:
        """The execution's own mutable state (isolated from other executions)."""
        return self._ex.state

    @property
    def deps(self) -> D:
        """Services and configuration given to the execution (not part of its snapshot)."""
        deps: D = self._ex.deps
        return deps

    @property
    def execution_id(self) -> str:
        return self._ex.id

    def emit(self, event: str, value: Any = None) -> None:
        """Start the handlers of ``event`` with ``value``, concurrently; returns at once.

        The event must be declared in the emitting step's ``emits=`` and handled by a
        ``flow.when(event)``. Emitting never waits for the handlers, so a loop of steps never
        nests deeper per round.
        """
        self._ex._emit(event, value, by=self.step)

    def end(self, value: Any = None) -> None:
        """End the execution now with ``value`` as its result; everything else is cancelled."""
        self._ex._finish(value)

    def pause(self, event: str, request: Any = None) -> None:
        """Wait for the external ``event``: when nothing else is left to run, the execution
        pauses and can be snapshotted; :meth:`Execution.resume` continues it."""
        self._ex._pause(event, request, self.step)

    @property
    def task_group(self) -> TaskGroup:
        """The execution's own task group, open while it runs.

        Work started in it is cancelled with the execution (its timeout, its end, a
        failure), and the execution does not return before it ended, so start there only
        work that ends by itself or that you cancel (the runner starts the workers of a
        batch of tool calls there, and awaits them).
        """
        task_group = self._ex._tg
        if task_group is None:
            raise RuntimeError(f"execution {self._ex.id} is not running")
        return task_group

    @property
    def observed(self) -> bool:
        """Whether anyone listens to this execution's events (skip building them if not)."""
        return bool(self._ex._observers)

    def publish(self, event: FlowEvent) -> None:
        """Hand an event of your own to the execution's observers."""
        if self._ex._observers:
            self._ex._publish(event)

    def elapsed(self) -> float:
        """Seconds since the execution started."""
        return self._ex._at(perf_counter())
