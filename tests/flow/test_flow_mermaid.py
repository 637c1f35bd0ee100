"""Mermaid pictures of flows, made from the definition itself."""

from __future__ import annotations

import re
from typing import Any

from toolloop.flow import Context, Flow, Step

NODE = re.compile(r'^    (n\d+)(?:\(\[(\w+)\]\)|[\[{>(]+"(.*?)"[\]})]+)$')
EDGE = re.compile(r'^    (n\d+) (-->|-\.->)(?:\|"?(.*?)"?\|)? (n\d+)$')


def parse(chart: str) -> tuple[dict[str, str], set[tuple[str, str, str, str]]]:
    """Node labels by id, and edges as (from label, arrow, edge label, to label)."""
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD"
    labels: dict[str, str] = {}
    raw_edges: list[tuple[str, str, str, str]] = []
    for line in lines[1:]:
        if m := NODE.match(line):
            labels[m[1]] = m[2] or m[3]
        elif m := EDGE.match(line):
            raw_edges.append((m[1], m[2], m[3] or "", m[4]))
        else:
            raise AssertionError(f"not a node or an edge: {line!r}")
    edges = {(labels[a], arrow, label, labels[b]) for a, arrow, label, b in raw_edges}
    return labels, edges


def plan(value: Any) -> Any:
    return value


def execute(value: Any) -> Any:
    return value


def finish(value: Any) -> Any:
    return value


def fetch(value: Any) -> Any:
    return value


def search(value: Any) -> Any:
    return value


def summarize(value: Any) -> Any:
    return value


def ask(value: Any, ctx: Context[Any]) -> None:
    ctx.pause("answer")


def has_commands(value: Any) -> bool:
    return bool(value)


def demo_flow() -> Flow[dict[str, Any]]:
    flow: Flow[dict[str, Any]] = Flow("demo")
    flow.start.to(plan).if_(has_commands, execute).elif_(lambda v: v == 0, "plan").else_(finish)
    flow.step(execute).match(lambda v: v, {"fetch": fetch, "search": search}, default=summarize)
    flow.step(fetch).batch(Step(str, name="as_text"), Step(repr, name="as_repr"), limit=2).to(
        "plan"
    )
    flow.step(search).for_each(Step(len, name="measure")).emit("searched")
    flow.when("searched").to(ask)
    flow.when("answer", external=True).to("plan")
    flow.collect(summarize, "finish", name="join").end()
    return flow


def test_every_step_and_every_labelled_branch_is_drawn() -> None:
    flow = demo_flow()
    chart = flow.to_mermaid()
    labels, edges = parse(chart)

    for step in flow.steps:
        assert step in labels.values(), step
    assert {"start", "end", "plan?", "execute?", "batch", "for_each", "join"} <= set(
        labels.values()
    )
    assert "event: searched" in labels.values()
    assert "external event: answer" in labels.values()
    assert "emit searched" in labels.values()

    assert {
        ("start", "-->", "", "plan"),
        ("plan", "-->", "", "plan?"),
        ("plan?", "-->", "has_commands", "execute"),
        ("plan?", "-->", "condition 2", "plan"),
        ("plan?", "-->", "else", "finish"),
        ("execute", "-->", "", "execute?"),
        ("execute?", "-->", "fetch", "fetch"),
        ("execute?", "-->", "search", "search"),
        ("execute?", "-->", "default", "summarize"),
        ("batch", "-.->", "", "as_text"),
        ("batch", "-.->", "", "as_repr"),
        ("batch", "-->", "", "plan"),
        ("for_each", "-.->", "each", "measure"),
        ("for_each", "-->", "", "emit searched"),
        ("emit searched", "-.->", "", "event: searched"),
        ("event: searched", "-->", "", "ask"),
        ("external event: answer", "-->", "", "plan"),
        ("summarize", "-->", "", "join"),
        ("finish", "-->", "", "join"),
        ("join", "-->", "", "end"),
    } <= edges
    assert chart.endswith("\n")


def test_declared_emits_are_dotted_edges_to_their_events() -> None:
    flow: Flow[dict[str, Any]] = Flow("emits")
    flow.start.to(plan, emits=["planned", "failed"])
    flow.when("planned").to(execute).end()
    flow.when("failed").to(finish).end()
    _, edges = parse(flow.to_mermaid())
    assert ("plan", "-.->", "emit", "event: planned") in edges
    assert ("plan", "-.->", "emit", "event: failed") in edges


def test_a_broken_flow_still_draws_its_unreachable_steps() -> None:
    flow: Flow[dict[str, Any]] = Flow("broken")
    flow.start.to(plan).end()
    flow.step(execute).to(finish)
    labels, edges = parse(flow.to_mermaid())
    assert {"plan", "execute", "finish"} <= set(labels.values())
    assert ("execute", "-->", "", "finish") in edges


def test_quotes_in_names_are_escaped() -> None:
    flow: Flow[dict[str, Any]] = Flow("quotes")
    flow.start.to(Step(plan, name='say "hi"')).end()
    chart = flow.to_mermaid()
    assert '"say #quot;hi#quot;"' in chart
    assert 'say "hi"' not in chart


def test_the_picture_is_stable() -> None:
    assert demo_flow().to_mermaid() == demo_flow().to_mermaid()
