"""The status-routed agent as a flow on the engine; routing reads only the status.

::

    start ─▶ analysis ─▶ planning ─┬─ conversation_ready ─▶ conversation
                                   └─ decision_ready (the default) ─▶ decision
    conversation ─┬─ conversation_completed ─▶ finish ─▶ end
                  └─ conversation_error ─▶ human_intervention
    decision ─┬─ waiting_for_human ─▶ human_intervention
              ├─ ready_for_execution (calls pending) ─▶ tool_execution
              └─ otherwise ─▶ reflection
    tool_execution ─ tools_completed | tool_execution_failed ─▶ reflection
    reflection ─┬─ needs_human (errors, repeated calls) ─▶ human_intervention
                ├─ replan ─▶ planning
                ├─ continue ─▶ decision
                ├─ conversation_ready (a structured answer to write) ─▶ conversation
                └─ otherwise ─▶ finish
    human_intervention ─┬─ waiting_for_human ─▶ await_human (pauses the run)
                        ├─ replan ─▶ planning
                        ├─ continue | ready_for_execution | plan_modified ─▶ decision
                        └─ otherwise ─▶ finish
    external "human_decision" ─▶ human_intervention
    external "recover" ─▶ the step after the node that wrote the last checkpoint

The routes are one table (:data:`ROUTES`), read by the flow's routers and by the recovery
router alike, so a recovered run goes exactly where the live one would have gone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, cast

from ..flow import Context, Flow, Step, Target
from ._human import HUMAN_EVENT
from ._nodes import (
    FLOW_NAME,
    RECOVER_EVENT,
    analysis,
    await_human,
    conversation,
    decision,
    finish,
    human_intervention,
    planning,
    reflection,
    tool_execution,
)
from ._state import NodeName, StatusAgentState

__all__ = ["ROUTES", "Route", "next_step", "status_agent_flow"]

finish_step = Step(finish, name="finish")
await_step = Step(await_human, name="await_human")


def _status(state: StatusAgentState) -> str:
    return state.status


def _after_decision(state: StatusAgentState) -> str:
    if state.status == "ready_for_execution" and not state.pending_calls:
        return "nothing pending"  # not a case: the default (reflection) takes it
    return state.status


class Route(NamedTuple):
    """Where a routed node goes: ``cases[key(state)]``, else ``default``."""

    cases: dict[str, Step]
    default: Step | None
    """``None``: a key that is no case routes nowhere (a bug: an error)."""
    key: Callable[[StatusAgentState], str] = _status
    """What of the state is routed on: its status, unless said."""


ROUTES: dict[NodeName, Route] = {
    "planning": Route({"conversation_ready": conversation, "decision_ready": decision}, decision),
    "conversation": Route(
        {"conversation_completed": finish_step, "conversation_error": human_intervention}, None
    ),
    "decision": Route(
        {"waiting_for_human": human_intervention, "ready_for_execution": tool_execution},
        reflection,
        key=_after_decision,
    ),
    "tool_execution": Route(
        {"tools_completed": reflection, "tool_execution_failed": reflection}, None
    ),
    "reflection": Route(
        {
            "needs_human": human_intervention,
            "replan": planning,
            "continue": decision,
            "conversation_ready": conversation,
        },
        finish_step,
    ),
    "human_intervention": Route(
        {
            "waiting_for_human": await_step,
            "replan": planning,
            "continue": decision,
            "ready_for_execution": decision,
            "plan_modified": decision,
        },
        finish_step,
    ),
}
"""After each routed node: its :class:`Route`."""


def next_step(state: StatusAgentState) -> str:
    """The step that follows the node that set ``state.status``."""
    node = state.node
    if node == "start":
        return analysis.name
    if node == "analysis":
        return planning.name
    route = ROUTES[node]
    target = route.cases.get(route.key(state), route.default)
    if target is None:
        raise ValueError(f"node {node!r} set status {state.status!r}, which routes nowhere")
    return target.name


def _router(key: Callable[[StatusAgentState], str]) -> Callable[[Any, Context[Any]], str]:
    def route(value: Any, ctx: Context[Any]) -> str:
        return key(ctx.state)

    return route


def _recover(value: Any, ctx: Context[Any]) -> str:
    return next_step(ctx.state)


def _build() -> Flow[StatusAgentState]:
    flow = Flow(FLOW_NAME, state=StatusAgentState)
    flow.start.to(analysis).to(planning)
    nodes = {
        "planning": planning,
        "conversation": conversation,
        "decision": decision,
        "tool_execution": tool_execution,
        "reflection": reflection,
        "human_intervention": human_intervention,
    }
    for name, route in ROUTES.items():
        targets = cast("dict[Hashable, Target]", route.cases)
        flow.step(nodes[name]).match(_router(route.key), targets, default=route.default)
    flow.step(finish_step).end()
    flow.when(HUMAN_EVENT, external=True).to(human_intervention)
    every = [analysis, *nodes.values(), finish_step, await_step]
    anywhere: dict[Hashable, Target] = {s.name: s for s in every}
    flow.when(RECOVER_EVENT, external=True).match(_recover, anywhere)
    flow.validate()
    return flow


status_agent_flow: Flow[StatusAgentState] = _build()
"""The status-routed agent's flow definition, shared by every run."""
