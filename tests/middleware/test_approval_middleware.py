"""Human approval: the run pauses before chosen tools run, is saved as JSON, and resumes
(in a new agent object, as another process would) with approve, edit or reject."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolloop.agents import (
    Agent,
    AgentMiddleware,
    AgentResult,
    AgentState,
    AssistantMessage,
    Pause,
    Runtime,
    ToolMessage,
    create_agent,
)
from toolloop.agents.middleware import HumanApprovalMiddleware
from toolloop.checkpoints import Approve, DecisionError, Edit, HumanRequest, Reject, Stop
from toolloop.errors import ResumeError
from toolloop.kernel import Approval
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio

log: list[str] = []


def send_email(to: str, body: str) -> str:
    """Send an email."""
    log.append(f"email {to}: {body}")
    return "sent"


def delete_file(path: str) -> str:
    """Delete a file."""
    log.append(f"delete {path}")
    return "deleted"


def read_file(path: str) -> str:
    """Read a file."""
    log.append(f"read {path}")
    return "contents"


def call(name: str, args: dict[str, Any], id: str) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args), "id": id}


def build(model: ScriptedChatModel) -> Agent:
    """Built by a function, so a paused run can be resumed by a new agent object."""
    approval = HumanApprovalMiddleware(
        {
            "send_email": True,
            "delete_file": Approval(allowed=("approve", "reject"), description="Careful."),
            "read_file": False,
        }
    )
    return create_agent(model, [send_email, delete_file, read_file], middleware=[approval])


def three_calls() -> ScriptedChatModel:
    model = ScriptedChatModel()
    model.add_reply(
        tool_calls=[
            call("send_email", {"to": "bob", "body": "hi"}, "c1"),
            call("delete_file", {"path": "/tmp/x"}, "c2"),
            call("read_file", {"path": "/etc/motd"}, "c3"),
        ]
    )
    model.add_reply("all done")
    return model


def saved(result: AgentResult) -> str:
    assert result.snapshot is not None
    return json.dumps(result.snapshot.model_dump(mode="json"))


async def test_the_run_pauses_before_any_tool_runs() -> None:
    log.clear()
    model = three_calls()
    result = await build(model).run("tidy up")
    assert result.status == "paused"
    assert result.paused_by == "HumanApprovalMiddleware"
    assert log == []  # nothing ran, not even the call that needs no approval
    request = result.request  # the protocol shared with the status agent
    assert isinstance(request, HumanRequest)
    assert request.kind == "approve_tool_calls"
    assert request.model_dump(mode="json") == result.pause_request  # JSON-ready
    calls = request.tool_calls
    assert [c.call_id for c in calls] == ["c1", "c2"]
    assert calls[0].allowed == ["approve", "edit", "reject"]
    assert calls[1].allowed == ["approve", "reject"]
    assert calls[1].why.endswith("Careful.")
    assert calls[0].arguments == {"to": "bob", "body": "hi"}
    assert request.allowed == ["approve", "edit", "reject"]
    assert "send_email" in request.describe()
    json.loads(saved(result))  # plain JSON


async def test_approve_edit_reject_after_a_json_round_trip_in_a_new_agent() -> None:
    log.clear()
    model = three_calls()
    paused = await build(model).run("tidy up")
    text = saved(paused)

    resumed = await build(model).resume(
        json.loads(text),
        {
            "c1": {"kind": "edit", "arguments": {"c1": {"to": "bob", "body": "hello, Bob"}}},
            "c2": Reject(message="keep that file"),
        },
    )
    assert resumed.status == "completed"
    assert resumed.run_id == paused.run_id
    assert sorted(log) == ["email bob: hello, Bob", "read /etc/motd"]
    answers = {m.tool_call_id: m for m in resumed.messages if isinstance(m, ToolMessage)}
    assert answers["c1"].content == "sent"
    assert answers["c2"].status == "error"
    assert answers["c2"].content == (
        "Error: a human rejected this call of 'delete_file'; it did not run: keep that file"
    )
    # one record per call: the rejected one with the kernel's wording
    records = {r.tool_name: r for r in resumed.records}
    assert records["delete_file"].error == (
        "a human rejected this call of 'delete_file'; it did not run: keep that file"
    )
    assert records["send_email"].kwargs == {"to": "bob", "body": "hello, Bob"}
    assert answers["c3"].content == "contents"
    # the edited arguments are what the conversation keeps
    ai = resumed.messages[1]
    assert isinstance(ai, AssistantMessage)
    assert ai.tool_calls[0].args == {"to": "bob", "body": "hello, Bob"}
    assert len([m for m in resumed.messages if isinstance(m, AssistantMessage)]) == 2
    assert resumed.text == "all done"
    assert [e.step for e in resumed.trace].count("wait_for_answer") == 1


async def test_approving_everything_runs_each_tool_once() -> None:
    log.clear()
    model = three_calls()
    paused = await build(model).run("tidy up")
    done = await build(model).resume(saved(paused), "approve")
    assert sorted(log) == ["delete /tmp/x", "email bob: hi", "read /etc/motd"]
    assert done.status == "completed"
    data = json.loads(saved(paused))
    data["waiting"] = []
    with pytest.raises(ResumeError, match="is not paused"):
        await build(model).resume(data, "approve")
    assert len(log) == 3


async def test_answers_that_do_not_fit_are_refused_and_the_snapshot_stays_usable() -> None:
    log.clear()
    model = three_calls()
    paused = await build(model).run("tidy up")
    text = saved(paused)
    agent = build(model)
    with pytest.raises(DecisionError, match=r"each call asked about.*missing: \['c2'\]"):
        await agent.resume(text, {"c1": Approve()})
    with pytest.raises(DecisionError, match="'edit' decision does not fit call 'c2'"):
        await agent.resume(
            text, {"c1": Approve(), "c2": Edit(arguments={"c2": {"path": "/tmp/y"}})}
        )
    with pytest.raises(DecisionError, match="the 'edit' decision is malformed"):
        await agent.resume(text, {"c1": {"kind": "edit"}, "c2": Approve()})
    with pytest.raises(DecisionError, match="a decision's kind is one of"):
        await agent.resume(text, {"c1": {"kind": "maybe"}, "c2": Approve()})
    with pytest.raises(DecisionError, match=r"unknown: \['c9'\]"):
        await agent.resume(text, {"c9": Approve(), "c1": Approve(), "c2": Approve()})
    with pytest.raises(DecisionError, match=r"gives its new arguments as \{'c1'"):
        await agent.resume(text, {"c1": Edit(arguments={"c2": {}}), "c2": Approve()})
    assert log == []
    done = await agent.resume(text, {"c1": "approve", "c2": {"kind": "reject"}})
    assert sorted(log) == ["email bob: hi", "read /etc/motd"]
    assert done.text == "all done"


async def test_edited_arguments_are_checked_against_the_tool_before_anything_runs() -> None:
    log.clear()
    model = three_calls()
    paused = await build(model).run("tidy up")
    text = saved(paused)
    with pytest.raises(DecisionError, match="the edited arguments of call 'c1' do not fit"):
        await build(model).resume(text, {"c1": Edit(arguments={"c1": {"to": 3}}), "c2": Approve()})
    assert log == []  # nothing ran; the snapshot is still good
    done = await build(model).resume(text, "approve")
    assert done.status == "completed" and len(log) == 3


async def test_resuming_with_another_agent_or_a_foreign_snapshot_is_refused() -> None:
    model = three_calls()
    paused = await build(model).run("tidy up")
    with pytest.raises(ResumeError, match="which this agent does not have"):
        await create_agent(model, [send_email]).resume(saved(paused), "approve")
    with pytest.raises(ResumeError, match="not a flow snapshot"):
        await build(model).resume({"nonsense": True}, "approve")


async def test_a_before_model_pause_resumes_with_the_next_hooks() -> None:
    order: list[str] = []

    class Ask(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> Pause | None:
            order.append("ask")
            if "topic" in state.values:
                return None
            return Pause({"question": "which topic?"})

        def resume(self, answer: Any, state: AgentState, runtime: Runtime) -> dict[str, Any]:
            order.append(f"answer {answer}")
            return {"topic": answer}

    class After(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> None:
            order.append("after")

    model = ScriptedChatModel(["about trains"])
    agent = create_agent(model, middleware=[Ask(), After()])
    paused = await agent.run("talk")
    assert paused.pause_request == {"question": "which topic?"}
    assert model.requests == []
    assert paused.snapshot is not None
    done = await agent.resume(paused.snapshot, "trains")
    assert done.text == "about trains"
    assert done.state.values == {"topic": "trains"}
    assert order == ["ask", "answer trains", "after"]


async def test_one_decision_answers_every_call() -> None:
    model = three_calls()
    text = saved(await build(model).run("tidy up"))
    agent = build(model)
    with pytest.raises(DecisionError, match="a 'stop' decision does not fit it"):
        await agent.resume(text, Stop())
    with pytest.raises(DecisionError, match="'edit' decision does not fit call 'c2'"):
        await agent.resume(text, Edit(arguments={"c2": {"path": "/tmp/y"}}))

    log.clear()
    await agent.resume(text, Edit(arguments={"c1": {"to": "eve", "body": "hi"}}))
    assert sorted(log) == ["delete /tmp/x", "email eve: hi", "read /etc/motd"]

    log.clear()
    model.add_reply(tool_calls=[call("delete_file", {"path": "/tmp/x"}, "c9")])
    model.add_reply("ok")
    paused = await agent.run("again")
    done = await agent.resume(saved(paused), Reject(message="no"))
    assert log == []
    rejected = done.messages[-2]
    assert isinstance(rejected, ToolMessage)
    assert "a human rejected this call of 'delete_file'; it did not run: no" in rejected.content

    log.clear()
    model.add_reply(tool_calls=[call("delete_file", {"path": "/tmp/z"}, "c7")])
    model.add_reply("ok")
    paused = await agent.run("once more")
    await agent.resume(saved(paused), {"kind": "approve"})
    assert log == ["delete /tmp/z"]
    log.clear()
    model.add_reply("ok")
    await agent.resume(saved(paused), Approve())  # the same paused moment, approved again
    assert log == ["delete /tmp/z"]


# -- needs_approval: the kernel's one spec, on create_agent and on each run ---------------


def tools3() -> list[Any]:
    return [send_email, delete_file, read_file]


@pytest.mark.parametrize(
    "spec",
    [
        ["send_email", "delete_file"],
        {"send_email": True, "delete_file": Approval(allowed=("approve", "reject"))},
        lambda call: f"{call.tool_name} writes" if call.tool_name != "read_file" else None,
        True,
    ],
    ids=["names", "mapping", "rule", "every"],
)
async def test_needs_approval_on_create_agent_pauses_before_those_calls(spec: Any) -> None:
    log.clear()
    events: list[Any] = []
    agent = create_agent(three_calls(), tools3(), needs_approval=spec)
    paused = await agent.run("tidy up", on_event=events.append)
    assert paused.paused and paused.paused_by == "needs_approval"
    assert log == []
    request = paused.request
    assert request is not None and request.kind == "approve_tool_calls"
    asked = [c.call_id for c in request.tool_calls]
    assert asked == (["c1", "c2", "c3"] if spec is True else ["c1", "c2"])
    if callable(spec) and not isinstance(spec, bool):
        assert request.tool_calls[0].why == "send_email writes"
    done = await agent.resume(saved(paused), "approve")
    assert sorted(log) == ["delete /tmp/x", "email bob: hi", "read /etc/motd"]
    started = [e.call_id for e in events if e.kind == "tool_call_started"]
    assert started == []  # nothing started before the answer
    assert [r.tool_name for r in done.records] == ["send_email", "delete_file", "read_file"]


async def test_the_request_s_call_ids_are_the_events_call_ids() -> None:
    events: list[Any] = []
    agent = create_agent(three_calls(), tools3(), needs_approval=["delete_file"])
    paused = await agent.run("tidy up")
    assert paused.request is not None
    (asked,) = paused.request.tool_calls
    await agent.resume(saved(paused), "approve", on_event=events.append)
    ids = {e.command.tool_name: e.call_id for e in events if e.kind == "tool_call_started"}
    assert ids["delete_file"] == asked.call_id == "c2"


def test_a_misspelt_or_bare_tool_name_is_refused() -> None:
    model = three_calls()
    with pytest.raises(ValueError, match=r"needs_approval names \['send_mail'\].*no tools"):
        create_agent(model, tools3(), needs_approval=["send_mail"])
    with pytest.raises(ValueError, match=r"\['delete'\]"):
        create_agent(model, tools3(), middleware=[HumanApprovalMiddleware({"delete": True})])
    with pytest.raises(TypeError, match="not one str"):
        create_agent(model, tools3(), needs_approval="send_email")
    with pytest.raises(TypeError, match="not one str"):
        HumanApprovalMiddleware("send_email")


async def test_a_run_gives_its_own_needs_approval_over_the_agent_s() -> None:
    log.clear()
    agent = create_agent(three_calls(), tools3(), needs_approval=["delete_file"])
    done = await agent.run("tidy up", needs_approval=())  # this run: none
    assert done.status == "completed" and len(log) == 3
    log.clear()
    plain = create_agent(three_calls(), tools3())  # no approval by default
    paused = await plain.run("tidy up", needs_approval={"read_file": True})
    assert paused.request is not None
    assert [c.tool_name for c in paused.request.tool_calls] == ["read_file"]
    with pytest.raises(ValueError, match="no tools of this run"):
        await plain.run("tidy up", needs_approval=["nope"])
    assert log == []
    done = await plain.resume(saved(paused), {"c3": Reject(message="not now")})
    assert sorted(log) == ["delete /tmp/x", "email bob: hi"]
    rejected, *ran = done.records  # in the order the calls were answered
    assert "a human rejected this call of 'read_file'" in str(rejected.error)
    assert [r.tool_name for r in ran] == ["send_email", "delete_file"]
