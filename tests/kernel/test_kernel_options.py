"""The run options, the approval spec and the decision applier of the kernel."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from toolloop.checkpoints import (
    Approve,
    Continue,
    DecisionError,
    Edit,
    HumanRequest,
    Reject,
    Replan,
    RequestedCall,
    Stop,
)
from toolloop.kernel import (
    Approval,
    Run,
    RunOptions,
    Skip,
    approval_rule,
    decide,
    rejected_error,
)
from toolloop.models import UsageLimits


def test_the_defaults_are_the_same_for_every_product() -> None:
    options = RunOptions()
    assert (options.concurrency, options.tool_timeout, options.model_timeout) == (4, None, None)
    assert (options.on_timeout, options.on_usage_limit, options.unknown_outcome) == (
        "raise",
        "raise",
        "fail",
    )
    assert options.turns(5) == 5 and RunOptions(max_turns=0).turns(5) == 0


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"tool_timeout": 0}, "tool_timeout must be a number of seconds above 0"),
        ({"on_timeout": "stop"}, "on_timeout must be 'raise' or 'finish'"),
        ({"on_usage_limit": "later"}, "on_usage_limit must be 'raise' or 'finish'"),
        ({"max_turns": -1}, "max_turns must be 0 or more"),
        ({"unknown_outcome": "guess"}, "unknown_outcome must be one of"),
        ({"usage_limits": {"max_requests": 1}}, "usage_limits must be a toolloop.models"),
        ({"idempotent_tools": "search"}, "not one str"),
        ({"limiter": 3}, "limiter must be an anyio.CapacityLimiter"),
    ],
)
def test_a_bad_option_is_refused_saying_what_was_expected(given: dict[str, Any], said: str) -> None:
    with pytest.raises((ValueError, TypeError), match=said):
        RunOptions(**given)


def test_a_call_s_options_override_an_agent_s_defaults() -> None:
    limiter = anyio.CapacityLimiter(2)
    defaults = RunOptions(concurrency=8, limiter=limiter, usage_limits=UsageLimits(max_requests=3))
    merged = defaults.merged(concurrency=2, timeout=None)
    assert (merged.concurrency, merged.limiter, merged.timeout) == (2, limiter, None)
    assert merged.usage_limits == UsageLimits(max_requests=3)
    with pytest.raises(TypeError, match="no run option named"):
        defaults.merged(concurency=2)


def test_plain_options_over_the_defaults_are_checked_once_and_shared() -> None:
    given = RunOptions.over_defaults
    once = given(concurrency=2, max_turns=3, timeout=None)
    assert given(concurrency=2, max_turns=3, timeout=None) is once
    assert (once.concurrency, once.max_turns, once.timeout) == (2, 3, None)
    # a value is its type too: True is no 1, and is still refused every time
    for _ in range(2):
        with pytest.raises(TypeError, match="concurrency must be an int"):
            given(concurrency=True)
    # objects, callables and a run's id are never shared
    limiter = anyio.CapacityLimiter(2)
    assert given(limiter=limiter) is not given(limiter=limiter)
    assert given(run_id="a") is not given(run_id="a")
    with pytest.raises(TypeError, match="no run option named"):
        given(concurency=2)
    # over other defaults than the kernel's own: a new one each time
    agent = RunOptions(concurrency=8)
    assert agent.merged(max_turns=3) is not agent.merged(max_turns=3)


def call(tool: str = "send", **arguments: Any) -> RequestedCall:
    return RequestedCall(call_id=f"0.{tool}", tool_name=tool, arguments=arguments)


def test_approval_by_names_a_mapping_a_rule_or_true() -> None:
    by_names = approval_rule(["send"], ["send", "read"])
    assert by_names is not None
    asked = by_names(call("send", to="ada"))
    assert asked is not None and asked.why == "send needs approval"
    assert asked.allowed == ["approve", "edit", "reject"]
    assert by_names(call("read")) is None
    mapping = approval_rule(
        {
            "send": Approval(allowed=("approve", "reject"), description="check the address"),
            "read": False,
        },
        ["send", "read"],
    )
    assert mapping is not None
    asked = mapping(call("send"))
    assert asked is not None and asked.allowed == ["approve", "reject"]
    assert "check the address" in asked.why
    assert mapping(call("read")) is None

    def rule(c: RequestedCall) -> str | None:
        return "over the limit" if c.arguments.get("amount", 0) > 100 else None

    ruled = approval_rule(rule)
    assert ruled is not None
    assert ruled(call("pay", amount=5)) is None
    big = ruled(call("pay", amount=500))
    assert big is not None and big.why == "over the limit"
    every = approval_rule(True)
    assert every is not None and every(call("read")) is not None
    assert approval_rule(()) is None and approval_rule(False) is None
    assert approval_rule({"send": False}, ["send"]) is None


def test_a_misspelt_name_or_a_bare_string_is_refused() -> None:
    with pytest.raises(ValueError, match=r"names \['sned'\], which are no tools of this run"):
        approval_rule(["sned"], ["send"])
    with pytest.raises(TypeError, match="not one str"):
        approval_rule("send", ["send"])
    with pytest.raises(ValueError, match="some of"):
        Approval(allowed=("approve", "ignore"))  # type: ignore[arg-type]


REQUEST = HumanRequest(
    kind="approve_tool_calls",
    reason="two calls need approval",
    tool_calls=[call("send", to="ada"), call("delete", path="/tmp/x")],
    allowed=["approve", "edit", "reject", "replan", "stop"],
)


def validate(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if tool == "send" and not isinstance(arguments.get("to"), str):
        raise ValueError("'to' must be a string")
    return arguments


def test_one_decision_for_every_call() -> None:
    approved = decide(REQUEST, Approve(), validate_arguments=validate)
    assert approved.calls == {
        "0.send": Run({"to": "ada"}),
        "0.delete": Run({"path": "/tmp/x"}),
    }
    rejected = decide(REQUEST, Reject(message="not today"))
    assert rejected.calls["0.send"] == Skip(rejected_error("send", "not today"), "rejected")
    assert rejected.calls["0.send"].error == (
        "a human rejected this call of 'send'; it did not run: not today"
    )
    edited = decide(REQUEST, Edit(arguments={"0.send": {"to": "bob"}}), validate_arguments=validate)
    assert edited.calls == {"0.send": Run({"to": "bob"}), "0.delete": Run({"path": "/tmp/x"})}
    replanned = decide(REQUEST, Replan(message="use the draft"))
    assert replanned.replans and all(isinstance(v, Skip) for v in replanned.calls.values())
    stopped = decide(REQUEST, "stop")
    assert stopped.stops and stopped.calls == {}


def test_one_decision_per_call_and_what_does_not_fit() -> None:
    decided = decide(REQUEST, {"0.send": "approve", "0.delete": {"kind": "reject"}})
    assert decided.kind == "per_call"
    assert decided.calls["0.send"] == Run({"to": "ada"})
    assert isinstance(decided.calls["0.delete"], Skip)
    with pytest.raises(DecisionError, match="does not fit it"):
        decide(REQUEST, Continue())
    with pytest.raises(DecisionError, match="do not fit tool 'send'"):
        decide(REQUEST, Edit(arguments={"0.send": {"to": 7}}), validate_arguments=validate)
    with pytest.raises(DecisionError, match="missing"):
        decide(REQUEST, {"0.send": "approve"})
    assert Stop().kind == "stop"


def test_an_agent_s_constructor_takes_the_run_options_as_its_runs_defaults() -> None:
    from toolloop.agents import create_agent
    from toolloop.status_agent import StatusAgent
    from toolloop.testing import ScriptedChatModel

    agent = create_agent(ScriptedChatModel(), timeout=5, max_turns=3)
    assert (agent.options.timeout, agent.options.max_turns) == (5, 3)
    assert create_agent(ScriptedChatModel()).options.max_turns == 100  # the product's bound
    assert StatusAgent(model=ScriptedChatModel()).options.max_turns == 50
    with pytest.raises(TypeError, match="takes no run_id"):
        create_agent(ScriptedChatModel(), run_id="r")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes no run_id"):
        StatusAgent(model=ScriptedChatModel(), run_id="r")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'max_rounds'; it is now 'max_turns'"):
        StatusAgent(model=ScriptedChatModel(), max_rounds=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        create_agent(ScriptedChatModel(), concurrency=0)


@pytest.mark.anyio
async def test_a_call_s_observer_is_told_after_the_default_and_none_means_none() -> None:
    from toolloop.agents import create_agent
    from toolloop.flow import FlowEvent
    from toolloop.kernel import RunFinished
    from toolloop.testing import ScriptedChatModel, ScriptedChatReply

    told: list[tuple[str, str]] = []

    def observer(name: str) -> Any:
        def on_event(event: FlowEvent) -> None:
            if isinstance(event, RunFinished):
                told.append((name, event.stop_reason))

        return on_event

    agent = create_agent(
        ScriptedChatModel([ScriptedChatReply("hi"), ScriptedChatReply("again")]),
        on_event=observer("default"),
    )
    await agent.run("hello", on_event=observer("call"))
    assert told == [("default", "answered"), ("call", "answered")]
    told.clear()
    await agent.run("hello", on_event=None)  # an explicit None: no observer for this call
    assert told == []
