"""A flow is checked before it runs; each mistake is a FlowDefinitionError naming the culprit."""

from __future__ import annotations

from typing import Any

import pytest

from toolloop.errors import DefinitionError, FlowDefinitionError
from toolloop.flow import Context, Flow, Step


def plan(value: Any) -> Any:
    return value


def act(value: Any) -> Any:
    return value


def report(value: Any) -> Any:
    return value


def new_flow(name: str = "checked") -> Flow[dict[str, Any]]:
    return Flow(name)


def test_a_valid_flow_validates_and_validation_is_cached() -> None:
    flow = new_flow()
    flow.start.to(plan).to(act).end()
    flow.validate()
    assert flow._valid
    flow.validate()  # cheap and quiet the second time
    flow.step(act).to(Step(report, name="report")).end()  # a change makes it check again
    assert not flow._valid
    flow.validate()
    assert flow._valid


def test_flow_definition_error_is_a_definition_error() -> None:
    assert issubclass(FlowDefinitionError, DefinitionError)


async def _run(flow: Flow[dict[str, Any]]) -> None:
    await flow.run(1)


@pytest.mark.anyio
async def test_running_an_invalid_flow_raises_before_any_step_runs() -> None:
    ran: list[Any] = []
    flow = new_flow("never runs")
    flow.start.to(ran.append)
    with pytest.raises(FlowDefinitionError, match="'never runs' has no end"):
        await flow.run(1)
    assert ran == []


def test_no_start() -> None:
    flow = new_flow("startless")
    flow.step(plan).end()
    with pytest.raises(FlowDefinitionError, match=r"'startless' has nothing after its start"):
        flow.validate()


def test_an_emitted_event_nobody_handles() -> None:
    flow = new_flow()
    flow.start.to(Step(plan, emits=["planned"])).end()
    with pytest.raises(FlowDefinitionError) as info:
        flow.validate()
    assert "step 'plan' emits 'planned'" in str(info.value)
    assert "flow.when('planned')" in str(info.value)


def test_an_emit_in_a_chain_nobody_handles() -> None:
    flow = new_flow()
    flow.start.to(plan).emit("planned")
    flow.start.to(act).end()
    with pytest.raises(FlowDefinitionError, match="'emit planned' emits 'planned'"):
        flow.validate()


def test_an_event_handled_but_never_emitted() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    flow.when("approved").to(act).end()
    with pytest.raises(FlowDefinitionError, match="handles 'approved', but no step emits it"):
        flow.validate()


def test_an_event_that_leads_nowhere() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    flow.when("answered", external=True)
    with pytest.raises(FlowDefinitionError, match=r"flow.when\('answered'\) leads nowhere"):
        flow.validate()


def test_an_unreachable_step() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    flow.step(act).to(report).end()
    with pytest.raises(FlowDefinitionError, match=r"nothing reaches step\(s\) \['act', 'report'\]"):
        flow.validate()


def test_an_unreachable_collect() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    flow.collect(act, report, name="join").end()
    with pytest.raises(FlowDefinitionError, match="nothing reaches"):
        flow.validate()


def test_no_end() -> None:
    flow = new_flow("endless")
    flow.start.to(plan).to(act)
    with pytest.raises(FlowDefinitionError, match="'endless' has no end"):
        flow.validate()


def test_a_flow_ending_only_by_ctx_end_still_needs_an_end() -> None:
    # ctx.end() is not seen by the check: such a flow is refused as having no end
    def finish(value: Any, ctx: Context[Any]) -> None:
        ctx.end(value)

    flow = new_flow("ends by ctx")
    flow.start.to(finish)
    with pytest.raises(FlowDefinitionError, match="has no end"):
        flow.validate()


def test_duplicate_step_names() -> None:
    flow = new_flow("dupes")
    chain = flow.start.to(plan)
    with pytest.raises(FlowDefinitionError, match="already has a step or event named 'plan'"):
        chain.to(Step(act, name="plan"))
    with pytest.raises(FlowDefinitionError, match="already has a step or event named '<lambda>'"):
        chain.to(lambda v: v).to(lambda v: v)


def test_an_event_and_a_step_cannot_share_a_name() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    with pytest.raises(FlowDefinitionError, match="event 'plan' has the name of a step"):
        flow.when("plan")
    flow.when("acted", external=True).to(report).end()
    with pytest.raises(FlowDefinitionError, match="named 'acted'"):
        flow.start.to(Step(act, name="acted"))


def test_bad_step_arity() -> None:
    def three(a: Any, b: Any, c: Any) -> None:
        return None

    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match="step 'three' takes 3 required positional"):
        flow.start.to(three)


def test_bad_router_arity_and_async_router() -> None:
    async def is_big(value: int) -> bool:
        return value > 3

    def too_many(a: Any, b: Any, c: Any) -> bool:
        return True

    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match="'is_big' is async"):
        flow.start.to(plan).if_(is_big, act)
    with pytest.raises(FlowDefinitionError, match="'too_many' takes 3"):
        flow.step(plan).match(too_many, {1: act})


def test_a_step_name_that_does_not_exist() -> None:
    flow = new_flow()
    flow.start.to(plan).end()
    with pytest.raises(FlowDefinitionError, match=r"no step named 'ghost'; its steps: \['plan'\]"):
        flow.step("ghost")


def test_options_belong_where_a_step_is_first_added() -> None:
    flow = new_flow()
    flow.start.to(plan, timeout=1.0).end()
    with pytest.raises(FlowDefinitionError, match="'plan' exists"):
        flow.step(plan).to(plan, timeout=2.0)
    with pytest.raises(FlowDefinitionError, match="'plan' exists"):
        flow.step(plan).to("plan", emits=["x"])


def test_options_of_a_step_object_go_in_step_not_in_to() -> None:
    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match=r"'act' is a Step: give its name and options"):
        flow.start.to(Step(act), emits=["acted"])
    with pytest.raises(FlowDefinitionError, match="is a Step"):
        flow.start.to(Step(act), name="other")


def test_a_non_callable_step() -> None:
    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match="got int"):
        flow.start.to(42)  # type: ignore[arg-type]


def test_thread_is_only_for_plain_functions() -> None:
    async def fetch(value: Any) -> Any:
        return value

    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match="step 'fetch' is async"):
        flow.start.to(fetch, thread=True)


def test_branch_mistakes() -> None:
    flow = new_flow()
    branch = flow.start.to(plan).if_(bool, act).else_(report)
    with pytest.raises(FlowDefinitionError, match=r"'plan\?': elif_ after else_"):
        branch.elif_(bool, act)
    with pytest.raises(FlowDefinitionError, match=r"'plan\?' already has an else_"):
        branch.else_(act)


def test_fan_out_mistakes() -> None:
    flow = new_flow()
    with pytest.raises(FlowDefinitionError, match="at least one step"):
        flow.start.batch()
    with pytest.raises(FlowDefinitionError, match="limit must be at least 1, got 0"):
        flow.start.for_each(plan, limit=0, name="each plan")
    with pytest.raises(FlowDefinitionError, match="two sources or more"):
        flow.collect(plan)
