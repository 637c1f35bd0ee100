"""A flow definition as a Mermaid flowchart, generated from the definition itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _nodes as kinds
from ._validate import walk

if TYPE_CHECKING:
    from ._flow import Flow

__all__ = ["to_mermaid"]


def _label(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def to_mermaid(flow: Flow[Any]) -> str:
    nodes = walk(flow)
    # steps nothing reaches still show, so a picture of a broken flow helps to fix it
    known = {id(n) for n in nodes}
    nodes += [n for n in flow._steps.values() if id(n) not in known]
    ids: dict[int, str] = {}

    def nid(node: kinds.Node) -> str:
        key = id(node)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
        return ids[key]

    lines = ["flowchart TD"]
    edges: list[str] = []
    for node in nodes:
        i = nid(node)
        if isinstance(node, kinds.StartNode):
            lines.append(f"    {i}([start])")
        elif isinstance(node, kinds.EndNode):
            lines.append(f"    {i}([end])")
        elif isinstance(node, kinds.EventNode):
            shape = "external event" if node.external else "event"
            lines.append(f"    {i}>{_label(f'{shape}: {node.name}')}]")
        elif isinstance(node, (kinds.IfNode, kinds.MatchNode)):
            lines.append(f"    {i}{{{_label(node.name)}}}")
        elif isinstance(node, (kinds.BatchNode, kinds.ForEachNode)):
            lines.append(f"    {i}[[{_label(node.name)}]]")
        elif isinstance(node, kinds.CollectNode):
            lines.append(f"    {i}(({_label(node.name)}))")
        elif isinstance(node, kinds.EmitNode):
            lines.append(f"    {i}>{_label(f'emit {node.event}')}]")
        else:
            lines.append(f"    {i}[{_label(node.name)}]")
        if isinstance(node, kinds.IfNode):
            for _, label, target in node.branches:
                edges.append(f"    {i} -->|{_label(label)}| {nid(target)}")
            if node.otherwise is not None:
                edges.append(f"    {i} -->|else| {nid(node.otherwise)}")
        elif isinstance(node, kinds.MatchNode):
            for key, target in node.cases.items():
                edges.append(f"    {i} -->|{_label(str(key))}| {nid(target)}")
            if node.default is not None:
                edges.append(f"    {i} -->|default| {nid(node.default)}")
        elif isinstance(node, kinds.BatchNode):
            for child in node.children:
                edges.append(f"    {i} -.-> {nid(child)}")
        elif isinstance(node, kinds.ForEachNode):
            edges.append(f"    {i} -.->|each| {nid(node.child)}")
        for target in node.out:
            edges.append(f"    {i} --> {nid(target)}")
        if isinstance(node, kinds.StepNode):
            for event in node.emits:
                if event in flow._events:
                    edges.append(f"    {i} -.->|emit| {nid(flow._events[event])}")
        elif isinstance(node, kinds.EmitNode) and node.event in flow._events:
            edges.append(f"    {i} -.-> {nid(flow._events[node.event])}")
    return "\n".join(lines + edges) + "\n"
