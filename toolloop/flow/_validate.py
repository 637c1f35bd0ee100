"""Checks a flow definition before it runs; every message names the culprit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import FlowDefinitionError
from ._nodes import EmitNode, EndNode, Node, StepNode

if TYPE_CHECKING:
    from ._flow import Flow

__all__ = ["validate", "walk"]


def _successors(flow: Flow[Any], node: Node) -> list[Node]:
    nxt = node.targets()
    if isinstance(node, StepNode):
        nxt.extend(flow._events[e] for e in node.emits if e in flow._events)
    elif isinstance(node, EmitNode) and node.event in flow._events:
        nxt.append(flow._events[node.event])
    return nxt


def walk(flow: Flow[Any]) -> list[Node]:
    """Every node reachable from the start or from an external event, in visit order."""
    roots: list[Node] = [flow._start, *(e for e in flow._events.values() if e.external)]
    seen: dict[int, Node] = {}
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(reversed(_successors(flow, node)))
    return list(seen.values())


def validate(flow: Flow[Any]) -> None:
    name = flow.name
    if not flow._start.out:
        raise FlowDefinitionError(
            f"flow {name!r} has nothing after its start; begin it with flow.start.to(step)"
        )
    emitted: dict[str, str] = {}
    for step in flow._steps.values():
        for event in step.emits:
            emitted.setdefault(event, f"step {step.name!r}")
    for emitter in flow._emitters:
        emitted.setdefault(emitter.event, f"{emitter.name!r}")
    for event, who in emitted.items():
        node = flow._events.get(event)
        if node is None or not node.out:
            raise FlowDefinitionError(
                f"flow {name!r}: {who} emits {event!r}, but nothing handles it; add "
                f"flow.when({event!r}).to(step)"
            )
    for event, node in flow._events.items():
        if not node.out:
            raise FlowDefinitionError(
                f"flow {name!r}: flow.when({event!r}) leads nowhere; chain a step after it"
            )
        if event not in emitted and not node.external:
            raise FlowDefinitionError(
                f"flow {name!r} handles {event!r}, but no step emits it; declare "
                f"emits=[{event!r}] on the step that emits it, or external=True if it comes "
                "from outside"
            )
    reached = walk(flow)
    ids = {id(n) for n in reached}
    unreachable = [s for s in flow._steps if id(flow._steps[s]) not in ids]
    if unreachable:
        raise FlowDefinitionError(
            f"flow {name!r}: nothing reaches step(s) {unreachable}; chain them after the start, "
            "a step or an event"
        )
    for collect in flow._collects:
        if id(collect) not in ids:
            raise FlowDefinitionError(f"flow {name!r}: nothing reaches {collect.name!r}")
    if not any(isinstance(n, EndNode) for n in reached):
        raise FlowDefinitionError(
            f"flow {name!r} has no end: add .end() after the step whose result is the "
            "execution's result"
        )
