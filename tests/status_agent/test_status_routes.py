"""Every route of the status-routed agent, taken by a real run (and the table behind them)."""

from __future__ import annotations

from typing import Any

import pytest
from status_support import Scripted, Tools, call, calls, finish, make_agent, path_of

from toolloop.checkpoints import Approve, Continue, DecisionError, Edit, Reject, Replan, Stop
from toolloop.kernel import Approval, rejected_error
from toolloop.status_agent._flow import ROUTES, next_step, status_agent_flow
from toolloop.status_agent._state import StatusAgentState, StatusToolCall

pytestmark = pytest.mark.anyio

START = ["analysis:analysis_completed", "planning:decision_ready"]

EXPECTED_ROUTES = {
    ("planning", "conversation_ready"): "conversation",
    ("planning", "decision_ready"): "decision",
    ("conversation", "conversation_completed"): "finish",
    ("conversation", "conversation_error"): "human_intervention",
    ("decision", "waiting_for_human"): "human_intervention",
    ("decision", "ready_for_execution"): "tool_execution",
    ("decision", "decision_completed"): "reflection",
    ("tool_execution", "tools_completed"): "reflection",
    ("tool_execution", "tool_execution_failed"): "reflection",
    ("reflection", "needs_human"): "human_intervention",
    ("reflection", "replan"): "planning",
    ("reflection", "continue"): "decision",
    ("reflection", "conversation_ready"): "conversation",  # a structured answer to write
    ("reflection", "reflection_completed"): "finish",
    ("human_intervention", "waiting_for_human"): "await_human",
    ("human_intervention", "replan"): "planning",
    ("human_intervention", "continue"): "decision",
    ("human_intervention", "ready_for_execution"): "decision",
    ("human_intervention", "plan_modified"): "decision",
    ("human_intervention", "human_stopped"): "finish",
}


@pytest.mark.parametrize(("node_status", "target"), list(EXPECTED_ROUTES.items()))
def test_the_route_table(node_status: tuple[Any, Any], target: str) -> None:
    node, status = node_status
    pending = [StatusToolCall(call_id="call-1", tool_name="search", approved=True)]
    state = StatusAgentState(node=node, status=status, pending_calls=pending)
    assert next_step(state) == target


def test_routers_read_only_statuses_their_node_sets() -> None:
    # every case is a status its node sets; the other statuses take the default
    keys = {(node, key) for node, route in ROUTES.items() for key in route.cases}
    assert keys < set(EXPECTED_ROUTES)
    defaults = set(EXPECTED_ROUTES) - keys
    assert {status for _, status in defaults} == {
        "decision_completed",
        "reflection_completed",
        "human_stopped",
    }
    assert next_step(StatusAgentState(node="start")) == "analysis"
    assert next_step(StatusAgentState(node="analysis")) == "planning"
    # ready_for_execution with nothing pending is not a tool execution
    assert (
        next_step(StatusAgentState(node="decision", status="ready_for_execution")) == "reflection"
    )
    with pytest.raises(ValueError, match="routes nowhere"):
        next_step(StatusAgentState(node="tool_execution", status="replan"))


def test_the_picture_shows_the_statuses() -> None:
    picture = status_agent_flow.to_mermaid()
    for _, status in EXPECTED_ROUTES:
        if status not in ("decision_completed", "reflection_completed", "human_stopped"):
            assert f'|"{status}"|' in picture
    assert "external event: human_decision" in picture
    assert "external event: recover" in picture


# -- planning ------------------------------------------------------------------------------


async def test_empty_plan_goes_to_conversation_and_ends() -> None:
    agent = make_agent(plan=Scripted([]), converse=Scripted("Hello, Ada!"))
    result = await agent.run("hi there")
    assert result.status == "completed"
    assert result.text == "Hello, Ada!"
    assert result.stop_reason == "answered"
    assert path_of(result) == [
        "analysis:analysis_completed",
        "planning:conversation_ready",
        "conversation:conversation_completed",
    ]


async def test_a_plan_goes_to_decision() -> None:
    result = await make_agent(decide=Scripted(finish("42"))).run("what is it?")
    assert path_of(result)[:3] == [*START, "decision:decision_completed"]
    assert result.text == "42"


# -- conversation --------------------------------------------------------------------------


async def test_a_conversation_error_goes_to_the_human() -> None:
    agent = make_agent(plan=Scripted([]), converse=Scripted(RuntimeError("model down")))
    result = await agent.run("hi")
    assert result.status == "paused"
    assert path_of(result)[-2:] == [
        "conversation:conversation_error",
        "human_intervention:waiting_for_human",
    ]
    assert result.request is not None
    assert result.request.kind == "review"
    assert "RuntimeError: model down" in result.request.reason
    assert result.state.error == "RuntimeError: model down"


# -- decision ------------------------------------------------------------------------------


async def test_calls_needing_approval_go_to_the_human() -> None:
    decide = Scripted(calls(call("send_mail", to="ada", body="hi"), reason="Ada asked"))
    agent = make_agent(decide=decide, needs_approval=["send_mail"])
    result = await agent.run("mail Ada")
    assert path_of(result) == [
        *START,
        "decision:waiting_for_human",
        "human_intervention:waiting_for_human",
    ]
    request = result.request
    assert request is not None and request.kind == "approve_tool_calls"
    assert [(c.call_id, c.tool_name, c.arguments) for c in request.tool_calls] == [
        ("call-1", "send_mail", {"to": "ada", "body": "hi"})
    ]
    assert request.tool_calls[0].why == "send_mail needs approval"
    assert "the model's reason: Ada asked" in request.reason


async def test_the_decision_step_may_ask_for_a_human() -> None:
    agent = make_agent(decide=Scripted({"action": "ask_human", "reason": "which Ada?"}))
    result = await agent.run("mail Ada")
    assert path_of(result)[-2:] == [
        "decision:waiting_for_human",
        "human_intervention:waiting_for_human",
    ]
    assert result.request is not None and result.request.reason == "which Ada?"
    assert result.request.allowed == ["continue", "replan", "stop"]


async def test_calls_ready_go_to_tool_execution_then_reflection() -> None:
    tools = Tools()
    decide = Scripted(calls(call("search", query="ada")), finish("found"))
    reflect = Scripted({"verdict": "continue"}, {"verdict": "finish"})
    result = await make_agent(tools, decide=decide, reflect=reflect).run("find Ada")
    assert path_of(result) == [
        *START,
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:continue",
        "decision:decision_completed",
        "reflection:reflection_completed",
    ]
    assert tools.calls == [("search", {"query": "ada"})]
    assert result.records[0].result == "results for ada"
    assert result.state.records[0].source == "ran"


async def test_nothing_to_run_goes_to_reflection() -> None:
    reflect = Scripted({"verdict": "finish", "answer": "all good"})
    result = await make_agent(decide=Scripted(calls()), reflect=reflect).run("x")
    assert path_of(result)[-2:] == [
        "decision:decision_completed",
        "reflection:reflection_completed",
    ]
    assert result.text == "all good"
    assert result.stop_reason == "answered"  # the reflection finished


# -- tool execution and reflection ----------------------------------------------------------


async def test_a_failed_call_is_detected_by_reflection_and_goes_to_the_human() -> None:
    decide = Scripted(calls(call("fetch", url="http://broken"), call("search", query="q")))
    reflect = Scripted()  # never asked: the errors decide
    result = await make_agent(decide=decide, reflect=reflect).run("x")
    assert path_of(result)[-3:] == [
        "tool_execution:tool_execution_failed",
        "reflection:needs_human",
        "human_intervention:waiting_for_human",
    ]
    request = result.request
    assert request is not None
    assert request.reason.startswith("1 tool call(s) failed")
    assert request.details["failed"][0]["error"].endswith("http://broken is unreachable")
    assert reflect.views == []


async def test_a_repeated_call_is_detected_and_goes_to_the_human() -> None:
    decide = Scripted(calls(call("search", query="q")), calls(call("search", query="q")))
    reflect = Scripted({"verdict": "continue"})
    result = await make_agent(decide=decide, reflect=reflect).run("x")
    assert path_of(result)[-3:] == [
        "tool_execution:tools_completed",
        "reflection:needs_human",
        "human_intervention:waiting_for_human",
    ]
    assert result.request is not None
    assert "repeat an earlier call with the same arguments" in result.request.reason
    assert result.request.details["repeated"] == [
        {"call_id": "call-2", "tool_name": "search", "arguments": {"query": "q"}}
    ]


async def test_reflection_asks_replans_and_continues() -> None:
    decide = Scripted(
        calls(call("search", query="a")), calls(call("search", query="b")), finish("ok")
    )
    reflect = Scripted(
        {"verdict": "replan", "note": "search b instead"},
        {"verdict": "ask_human", "note": "is b right?"},
    )
    plan = Scripted(["search a"], ["search b"])
    result = await make_agent(plan=plan, decide=decide, reflect=reflect).run("x")
    assert path_of(result) == [
        *START,
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:replan",
        "planning:decision_ready",
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:needs_human",
        "human_intervention:waiting_for_human",
    ]
    assert result.request is not None and result.request.reason == "is b right?"
    assert [n.text for n in result.state.notes] == ["search b instead", "is b right?"]
    assert plan.views[1].notes[0].text == "search b instead"


# -- human intervention ---------------------------------------------------------------------


async def _paused_for_approval(**options: Any) -> tuple[Any, Any, Tools]:
    tools = Tools()
    decide = options.pop("decide", None) or Scripted(
        calls(call("send_mail", to="ada", body="hi")), finish("mailed")
    )
    agent = make_agent(tools, decide=decide, needs_approval=["send_mail"], **options)
    paused = await agent.run("mail Ada")
    assert paused.paused
    return agent, paused, tools


async def test_human_approve_goes_to_decision_then_the_tools() -> None:
    agent, paused, tools = await _paused_for_approval()
    result = await agent.resume(paused.run_id, Approve())
    assert path_of(result)[len(path_of(paused)) :] == [
        "human_intervention:ready_for_execution",
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:reflection_completed",
    ]
    assert tools.calls == [("send_mail", {"to": "ada", "body": "hi"})]
    assert result.stop_reason == "answered"


async def test_human_edit_is_a_modified_plan() -> None:
    agent, paused, tools = await _paused_for_approval()
    edit = Edit(arguments={"call-1": {"to": "bob", "body": "hi"}}, message="Bob, not Ada")
    result = await agent.resume(paused.run_id, edit)
    assert path_of(result)[len(path_of(paused)) :][:2] == [
        "human_intervention:plan_modified",
        "decision:ready_for_execution",
    ]
    assert tools.calls == [("send_mail", {"to": "bob", "body": "hi"})]
    assert result.state.notes[-1].text == "Bob, not Ada"


async def test_human_reject_tells_the_model_and_goes_to_decision() -> None:
    decide = Scripted(calls(call("send_mail", to="ada", body="hi")), finish("not mailed"))
    agent, paused, tools = await _paused_for_approval(decide=decide)
    result = await agent.resume(paused.run_id, Reject(message="never mail Ada"))
    assert path_of(result)[len(path_of(paused)) :] == [
        "human_intervention:plan_modified",
        "decision:decision_completed",
        "reflection:reflection_completed",
    ]
    assert tools.calls == []
    rejected = result.state.records[0]
    assert rejected.source == "rejected"
    said = "a human rejected this call of 'send_mail'; it did not run: never mail Ada"
    assert rejected.record.error == said == rejected_error("send_mail", "never mail Ada")
    seen = decide.views[1]
    assert [n.text for n in seen.notes] == ["never mail Ada"]
    assert seen.records[0].record.error == said


async def test_human_replan_goes_to_planning() -> None:
    plan = Scripted(["mail"], [])
    agent, paused, tools = await _paused_for_approval(plan=plan, converse=Scripted("I won't"))
    result = await agent.resume(paused.run_id, Replan(message="just answer"))
    assert path_of(result)[len(path_of(paused)) :] == [
        "human_intervention:replan",
        "planning:conversation_ready",
        "conversation:conversation_completed",
    ]
    assert result.state.pending_calls == []
    assert tools.calls == []


async def test_human_continue_goes_to_decision() -> None:
    agent = make_agent(
        decide=Scripted({"action": "ask_human", "reason": "sure?"}, finish("went on"))
    )
    paused = await agent.run("x")
    result = await agent.resume(paused.run_id, Continue(message="yes"))
    assert path_of(result)[len(path_of(paused)) :] == [
        "human_intervention:continue",
        "decision:decision_completed",
        "reflection:reflection_completed",
    ]
    assert result.text == "went on"


async def test_human_stop_ends_the_run() -> None:
    agent, paused, tools = await _paused_for_approval()
    result = await agent.resume(paused.run_id, Stop(message="cancelled by Ada"))
    assert path_of(result)[-1] == "human_intervention:human_stopped"
    assert result.status == "completed"
    assert result.text == "cancelled by Ada"
    assert result.stop_reason == "stopped"
    assert result.state.stop_detail == "a human stopped the run: cancelled by Ada"
    assert tools.calls == []


@pytest.mark.parametrize(
    ("policy", "waiting"),
    [
        (True, {"call-1": "every call needs approval (search)", "call-2": ""}),
        (False, {}),
        ((), {}),
        (["fetch"], {"call-2": "fetch needs approval"}),
        ({"fetch": True, "search": False}, {"call-2": "fetch needs approval"}),
        (
            {"fetch": Approval(description="it reads the bank")},
            {"call-2": "fetch needs approval\nit reads the bank"},
        ),
        (
            {"fetch": lambda c: c.arguments.get("url") == "http://bank" and "it moves money"},
            {"call-2": "it moves money"},
        ),
        (
            lambda c: c.arguments.get("url") == "http://bank" and "it moves money",
            {"call-2": "it moves money"},
        ),
    ],
)
async def test_approval_policies(policy: Any, waiting: dict[str, str]) -> None:
    decide = Scripted(calls(call("search", query="q"), call("fetch", url="http://bank")))
    result = await make_agent(
        decide=decide, needs_approval=policy, reflect=Scripted({"verdict": "finish"})
    ).run("x")
    if not waiting:
        assert result.status == "completed"
        return
    assert result.request is not None
    asked = {c.call_id: c.why for c in result.request.tool_calls}
    expected = {k: v or "every call needs approval (fetch)" for k, v in waiting.items()}
    assert asked == expected


async def test_an_approval_may_allow_fewer_decisions_and_a_call_may_override_it() -> None:
    tools = Tools()
    mail = calls(call("send_mail", to="ada", body="hi"))
    decide = Scripted(mail, finish("not sent"), mail, finish("sent"))
    agent = make_agent(
        tools, decide=decide, needs_approval={"send_mail": Approval(allowed=("approve", "reject"))}
    )
    paused = await agent.run("mail Ada")
    assert paused.request is not None
    assert paused.request.tool_calls[0].allowed == ["approve", "reject"]
    with pytest.raises(DecisionError, match="allows \\['approve', 'reject'\\]"):
        await agent.resume(paused.run_id, Edit(arguments={"call-1": {"to": "bob", "body": "x"}}))
    done = await agent.resume(paused.run_id, "reject")
    assert done.status == "completed" and tools.calls == []
    # this call's own spec over the agent's: nothing waits
    done = await agent.run("mail Ada", needs_approval=False)
    assert done.status == "completed" and tools.calls == [
        ("send_mail", {"to": "ada", "body": "hi"})
    ]


@pytest.mark.parametrize(
    ("spec", "error", "said"),
    [
        (["send_mial"], ValueError, r"names \['send_mial'\], which are no tools of this run"),
        ({"serch": True}, ValueError, "a misspelt name would let the real tool run unapproved"),
        ("send_mail", TypeError, r"not one str: needs_approval=\['send_mail'\]"),
        ({"send_mail": "yes"}, TypeError, r"needs_approval\['send_mail'\] must be True"),
    ],
)
async def test_a_misspelt_or_malformed_approval_is_refused(
    spec: Any, error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=said):
        make_agent(needs_approval=spec)
    tools = Tools()
    agent = make_agent(tools, decide=Scripted(calls(call("send_mail", to="ada", body="hi"))))
    with pytest.raises(error, match=said):
        await agent.run("mail Ada", run_id="r", needs_approval=spec)
    assert await agent.store.get("r") is None  # refused before anything was written
    assert tools.calls == []


def test_agent_options_are_checked() -> None:
    with pytest.raises(ValueError, match="max_idle_visits must be 2 or more, got 1"):
        make_agent(max_idle_visits=1)
    with pytest.raises(ValueError, match="on_timeout must be 'raise' or 'finish', got 'stop'"):
        make_agent(on_timeout="stop")
    with pytest.raises(ValueError, match="unknown_outcome must be one of"):
        make_agent(unknown_outcome="guess")
    with pytest.raises(ValueError, match="max_turns must be 0 or more"):
        make_agent(max_turns=-1)
