"""Flow definitions: steps triggered by events, built with a small chaining vocabulary.

A :class:`Flow` is a reusable definition; each run is a cheap :class:`Execution`::

    flow = Flow("greet")
    flow.start.to(parse).to(answer).end()
    result = await flow.run("hello")

The vocabulary follows Agently's TriggerFlow where it reads well: ``to`` (chaining),
``when`` (an event starts a chain), ``if_/elif_/else_`` and ``match`` (branching),
``batch`` and ``for_each`` (fan-out with fan-in), ``collect`` (a join), ``emit`` and ``end``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, TypeAdapter

from .._errors import FlowDefinitionError, ResumeError
from ._execution import Execution
from ._nodes import (
    BatchNode,
    CollectNode,
    EmitNode,
    EndNode,
    EventNode,
    ForEachNode,
    IfNode,
    MatchNode,
    Node,
    StartNode,
    Step,
    StepNode,
    _bind_router,
)
from ._result import FlowResult
from ._snapshot import SNAPSHOT_VERSION, FlowSnapshot

__all__ = ["Branch", "Chain", "Flow", "Target"]

S = TypeVar("S")

Target = Callable[..., Any] | Step | str
"""A step: a function, a :class:`Step` with options, or the name of a step already added."""


class Chain:
    """A point in a flow to continue from: ``.to(step)`` runs ``step`` with its result."""

    __slots__ = ("_flow", "_node")

    def __init__(self, flow: Flow[Any], node: Node) -> None:
        self._flow = flow
        self._node = node

    def to(
        self,
        target: Target,
        *,
        name: str | None = None,
        timeout: float | None = None,
        emits: Sequence[str] = (),
        thread: bool = False,
    ) -> Chain:
        """Run ``target`` with this point's result; returns the point after it.

        A step already in the flow (the same function, or its name) is linked, not copied:
        ``flow.step(execute).to(plan)`` makes a loop. Options apply where a step first appears.
        """
        options = {"timeout": timeout, "emits": emits, "thread": thread}
        node = self._flow._step_node(target, name, options)
        self._link(node)
        return Chain(self._flow, node)

    def end(self) -> None:
        """The result here is the execution's result."""
        self._link(self._flow._end)

    def emit(self, event: str) -> None:
        """Turn the result here into ``event`` (for the ``flow.when(event)`` handlers)."""
        node = EmitNode(self._flow._unique(f"emit {event}"), event)
        self._flow._emitters.append(node)
        self._link(node)

    def if_(self, condition: Callable[..., Any], target: Target) -> Branch:
        """Route to ``target`` when ``condition(value, ctx)`` (or ``condition(value)``) holds.

        Continue with :meth:`Branch.elif_` and :meth:`Branch.else_`; the value is passed on
        unchanged. With no branch taken and no ``else_``, this path stops.
        """
        node = IfNode(self._flow._unique(f"{self._node.name}?"))
        self._link(node)
        return Branch(self._flow, node).elif_(condition, target)

    def match(
        self,
        key: Callable[..., Any],
        cases: Mapping[Hashable, Target],
        *,
        default: Target | None = None,
    ) -> None:
        """Route by ``key(value, ctx)``: to ``cases[key]``, else ``default``.

        ``key`` may return a list of keys to run several cases at once. A key that is no case,
        with no default, fails the execution with a message naming it.
        """
        flow = self._flow
        node = MatchNode(
            flow._unique(f"{self._node.name}?"),
            key,
            {k: flow._step_node(t) for k, t in cases.items()},
            flow._step_node(default) if default is not None else None,
        )
        self._link(node)

    def batch(self, *targets: Target, limit: int | None = None, name: str | None = None) -> Chain:
        """Run every target with the same value at once (at most ``limit`` at a time);
        continue with their results as a list, in the targets' order."""
        if not targets:
            raise FlowDefinitionError("batch() needs at least one step")
        flow = self._flow
        children = [flow._step_node(t) for t in targets]
        node = BatchNode(flow._unique(name or "batch"), children, limit)
        self._link(node)
        return Chain(flow, node)

    def for_each(
        self, target: Target, *, limit: int | None = None, name: str | None = None
    ) -> Chain:
        """Run ``target`` once per item of the value (at most ``limit`` at a time); continue
        with the results as a list, in item order."""
        flow = self._flow
        node = ForEachNode(flow._unique(name or "for_each"), flow._step_node(target), limit)
        self._link(node)
        return Chain(flow, node)

    def _link(self, node: Node) -> None:
        self._node.out.append(node)
        self._flow._changed()


class Branch:
    """The ``if_ / elif_ / else_`` being built; each branch names the step it routes to."""

    __slots__ = ("_flow", "_node")

    def __init__(self, flow: Flow[Any], node: IfNode) -> None:
        self._flow = flow
        self._node = node

    def elif_(self, condition: Callable[..., Any], target: Target) -> Branch:
        """Another condition, tried when the earlier ones did not hold."""
        if self._node.otherwise is not None:
            raise FlowDefinitionError(f"{self._node.name!r}: elif_ after else_")
        label = getattr(condition, "__name__", "condition")
        if label == "<lambda>":
            label = f"condition {len(self._node.branches) + 1}"
        bound = _bind_router(condition, "condition")
        self._node.branches.append((bound, label, self._flow._step_node(target)))
        self._flow._changed()
        return self

    def else_(self, target: Target) -> Branch:
        """Where the value goes when no condition held."""
        if self._node.otherwise is not None:
            raise FlowDefinitionError(f"{self._node.name!r} already has an else_")
        self._node.otherwise = self._flow._step_node(target)
        self._flow._changed()
        return self


class Flow(Generic[S]):
    """A reusable flow definition: steps triggered by events.

    Args:
        name: names the flow in errors, traces, snapshots and pictures.
        state: the type of each execution's state, made fresh (``state()``) per execution;
            a ``dict``, a pydantic model or a dataclass, so that a snapshot can save it.
    """

    def __init__(self, name: str = "flow", *, state: Callable[[], S] = dict) -> None:  # type: ignore[assignment]
        self.name = name
        self._state_type = state
        self._start = StartNode("start")
        self._end = EndNode("end")
        self._steps: dict[str, StepNode] = {}
        self._by_fn: dict[Any, StepNode] = {}
        self._events: dict[str, EventNode] = {}
        self._emitters: list[EmitNode] = []
        self._collects: list[CollectNode] = []
        self._names: set[str] = {"start", "end"}
        self._valid = False
        self._emits: dict[str, frozenset[str]] = {}
        self._state_adapter: TypeAdapter[Any] | None = None

    # -- building -----------------------------------------------------------------------

    @property
    def start(self) -> Chain:
        """Where every execution begins; its value is what :meth:`run` was given."""
        return Chain(self, self._start)

    def step(self, target: Target) -> Chain:
        """The point after ``target`` (added if new): what its result goes to."""
        return Chain(self, self._step_node(target))

    def when(self, event: str, *, external: bool = False) -> Chain:
        """The point where ``event`` arrives.

        Args:
            event: emitted by a step that declares it (``emits=[event]``) or by ``.emit()``.
            external: the event comes from outside (``execution.emit``, or ``resume`` of a
                paused execution); ``ctx.pause(event)`` waits for such events only.
        """
        node = self._events.get(event)
        if node is None:
            if event in self._names:
                raise FlowDefinitionError(
                    f"event {event!r} has the name of a step; give events and steps different names"
                )
            node = EventNode(event, external=external)
            self._events[event] = node
            self._names.add(event)
            self._changed()
        elif external and not node.external:
            node.external = True
            self._changed()
        return Chain(self, node)

    def collect(self, *sources: Target | str, name: str | None = None) -> Chain:
        """A join: continues once every source (a step, or an event name) has delivered,
        with ``{source name: value}``. It then resets, so it can join again in a loop."""
        if len(sources) < 2:
            raise FlowDefinitionError("collect() joins two sources or more")
        nodes: list[Node] = []
        for s in sources:
            if isinstance(s, str) and s in self._events:
                nodes.append(self._events[s])
            else:
                nodes.append(self._step_node(s))
        node = CollectNode(self._unique(name or "collect"), [n.name for n in nodes])
        for n in nodes:
            n.out.append(node)
        self._collects.append(node)
        self._changed()
        return Chain(self, node)

    # -- running ------------------------------------------------------------------------

    def execution(self, *, state: S | None = None, deps: Any = None) -> Execution[S]:
        """A new execution (not started): ``await flow.execution().run(value)``.

        Args:
            state: the execution's state; a fresh ``state()`` of the flow's type by default.
            deps: services and configuration the steps read as ``ctx.deps``.
        """
        return Execution(self, self._state_type() if state is None else state, deps)

    async def run(
        self,
        value: Any = None,
        *,
        state: S | None = None,
        deps: Any = None,
        timeout: float | None = None,
    ) -> FlowResult[S]:
        """Make an execution and run it: see :meth:`Execution.run`."""
        return await self.execution(state=state, deps=deps).run(value, timeout=timeout)

    def restore(
        self, snapshot: FlowSnapshot | Mapping[str, Any] | str | bytes, *, deps: Any = None
    ) -> Execution[S]:
        """A paused execution, back from its snapshot (an object, its JSON data or JSON text)."""
        try:
            if isinstance(snapshot, FlowSnapshot):
                snap = snapshot
            elif isinstance(snapshot, (str, bytes)):
                snap = FlowSnapshot.model_validate_json(snapshot)
            else:
                snap = FlowSnapshot.model_validate(snapshot)
        except ValueError as exc:
            raise ResumeError(f"not a flow snapshot: {exc}") from exc
        if snap.version != SNAPSHOT_VERSION:
            raise ResumeError(
                f"snapshot version {snap.version} is not {SNAPSHOT_VERSION}, the one this "
                "toolloop reads"
            )
        if snap.flow != self.name:
            raise ResumeError(f"snapshot is of flow {snap.flow!r}, not of {self.name!r}")
        self.validate()
        for wait in snap.waiting:
            node = self._events.get(wait.event)
            if node is None or not node.external:
                raise ResumeError(
                    f"snapshot waits for {wait.event!r}, which is no external event of flow "
                    f"{self.name!r}"
                )
        try:
            state = self._load_state(snap.state)
        except ValueError as exc:
            raise ResumeError(f"snapshot state does not fit flow {self.name!r}: {exc}") from exc
        ex = Execution(self, state, deps, id=snap.execution_id, elapsed=snap.elapsed)
        ex._trace = [(t.step, t.event, t.started, t.ended, t.outcome, t.detail) for t in snap.trace]
        ex._waits = list(snap.waiting)
        ex.status = "paused" if snap.waiting else "completed"
        return ex

    # -- inspecting ---------------------------------------------------------------------

    @property
    def steps(self) -> list[str]:
        """The names of the steps, in the order they were added."""
        return list(self._steps)

    def to_mermaid(self) -> str:
        """The flow as a Mermaid flowchart."""
        from ._mermaid import to_mermaid

        return to_mermaid(self)

    def validate(self) -> None:
        """Check the definition; raises :class:`~toolloop.errors.FlowDefinitionError` naming the
        culprit. Called before the first execution runs; cheap afterwards."""
        if self._valid:
            return
        from ._validate import validate

        validate(self)
        self._emits = {name: frozenset(node.emits) for name, node in self._steps.items()}
        self._valid = True

    # -- internals ----------------------------------------------------------------------

    def _changed(self) -> None:
        self._valid = False

    def _unique(self, base: str) -> str:
        name, i = base, 2
        while name in self._names:
            name = f"{base} {i}"
            i += 1
        self._names.add(name)
        return name

    def _step_node(
        self, target: Target, name: str | None = None, given: dict[str, Any] | None = None
    ) -> StepNode:
        """The node of ``target`` (added, or the one already in the flow); ``given``: the
        step options of :meth:`Chain.to` (``timeout``, ``emits``, ``thread``)."""
        given = given or {}
        options = (
            given.get("timeout") is not None or bool(given.get("emits")) or given.get("thread")
        )
        if isinstance(target, str):
            found = self._steps.get(target)
            if found is None:
                raise FlowDefinitionError(
                    f"flow {self.name!r} has no step named {target!r}; its steps: "
                    f"{list(self._steps)}"
                )
            if options or name is not None:
                raise FlowDefinitionError(f"step {target!r} exists; give options where it is added")
            return found
        if isinstance(target, Step):
            if options or name is not None:
                raise FlowDefinitionError(
                    f"step {target.name!r} is a Step: give its name and options in Step(...), "
                    "not in to()"
                )
            step = target
            found = self._steps.get(step.name)
            if found is not None and found.fn is step.fn:
                return found
        else:
            if not callable(target):
                raise FlowDefinitionError(
                    f"a step is a function, a Step or a step's name; got {type(target).__name__}"
                )
            found = self._by_fn.get(target) if name is None else self._steps.get(name)
            if found is not None and found.fn is target:
                if options:
                    raise FlowDefinitionError(
                        f"step {found.name!r} exists; give its options where it is first added"
                    )
                return found
            step = Step(target, name=name, **given)
        if step.name in self._names:
            raise FlowDefinitionError(
                f"flow {self.name!r} already has a step or event named {step.name!r}; give the "
                "new step another name (Step(fn, name=...) or to(fn, name=...))"
            )
        node = StepNode(step)
        self._names.add(step.name)
        self._steps[step.name] = node
        self._by_fn.setdefault(step.fn, node)
        self._changed()
        return node

    def _may_emit(self, step: str, event: str) -> bool:
        return event in self._emits.get(step, ())

    def _adapter(self) -> TypeAdapter[Any]:
        if self._state_adapter is None:
            self._state_adapter = TypeAdapter(cast(Any, self._state_type))
        return self._state_adapter

    def _dump_state(self, state: Any) -> Any:
        if isinstance(state, BaseModel):
            return state.model_dump(mode="json")
        return self._adapter().dump_python(state, mode="json")

    def _load_state(self, data: Any) -> S:
        st = self._state_type
        if isinstance(st, type) and issubclass(st, BaseModel):
            return cast(S, st.model_validate(data))
        return cast(S, self._adapter().validate_python(data))
