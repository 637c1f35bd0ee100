"""Routing: if_/elif_/else_, match (one key or several), events (emit/when) and collect."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolloop.errors import ExecutionStalledError, FlowDefinitionError, StepFailedError
from toolloop.flow import Context, Flow, Step

pytestmark = pytest.mark.anyio


def tag(label: str) -> Step:
    def tagged(value: Any) -> str:
        return f"{label}:{value}"

    return Step(tagged, name=label)


def is_small(value: int) -> bool:
    return value < 10


def is_medium(value: int, ctx: Context[dict[str, Any]]) -> bool:
    return bool(value < ctx.deps["medium"])


def graded_flow() -> Flow[dict[str, Any]]:
    flow: Flow[dict[str, Any]] = Flow("graded")
    flow.start.to(Step(abs, name="measure")).if_(is_small, tag("small")).elif_(
        is_medium, tag("medium")
    ).elif_(lambda v: v < 1000, tag("large")).else_(tag("huge"))
    for label in ("small", "medium", "large", "huge"):
        flow.step(label).end()
    return flow


@pytest.mark.parametrize(
    ("value", "expected", "route"),
    [
        (3, "small:3", "is_small"),
        (-50, "medium:50", "is_medium"),
        (500, "large:500", "condition 3"),
        (5000, "huge:5000", "else"),
    ],
)
async def test_if_elif_else_takes_the_first_branch_that_holds(
    value: int, expected: str, route: str
) -> None:
    result = await graded_flow().run(value, deps={"medium": 100})
    assert result.value == expected
    router = [e for e in result.trace if e.outcome == "routed"]
    assert [(e.step, e.event, e.detail) for e in router] == [("measure?", "measure", route)]
    taken = [e.step for e in result.trace if e.outcome == "ok"]
    assert taken == ["measure", expected.split(":")[0]]
    # the branch target was triggered by the step before the router
    assert result.trace[2].event == "measure"


async def test_if_without_else_stops_that_path_and_a_run_with_nowhere_to_go_stalls() -> None:
    flow: Flow[dict[str, Any]] = Flow("no else")
    flow.start.to(Step(int, name="parse")).if_(is_small, tag("small"))
    flow.step("small").end()
    assert (await flow.run("3")).value == "small:3"
    with pytest.raises(ExecutionStalledError) as info:
        await flow.run("30")
    err = info.value
    assert "'no else' ran out of steps without reaching an end" in str(err)
    assert "last step: 'parse?'" in str(err)
    assert [(e.step, e.detail) for e in err.trace] == [("parse", None), ("parse?", "no branch")]
    assert err.state == {}


async def test_a_condition_that_raises_fails_the_execution_naming_the_router() -> None:
    def picky(value: Any) -> bool:
        raise KeyError("no such thing")

    flow: Flow[dict[str, Any]] = Flow("picky")
    flow.start.to(Step(str, name="read")).if_(picky, tag("yes")).else_(tag("no"))
    flow.step("yes").end()
    flow.step("no").end()
    with pytest.raises(StepFailedError) as info:
        await flow.run(1)
    assert info.value.step == "read?"
    assert "router 'read?' raised KeyError" in str(info.value)
    assert isinstance(info.value.__cause__, KeyError)
    assert [e.step for e in info.value.trace] == ["read"]


def kind_of(value: dict[str, Any]) -> Any:
    return value["kind"]


def routed_flow(*, default: bool) -> Flow[dict[str, Any]]:
    flow: Flow[dict[str, Any]] = Flow("routed")
    flow.start.to(Step(dict, name="classify")).match(
        kind_of,
        {"a": tag("alpha"), "b": tag("beta"), 3: tag("three")},
        default=tag("other") if default else None,
    )
    for label in ("alpha", "beta", "three", *(["other"] if default else [])):
        flow.step(label).end()
    return flow


async def test_match_routes_by_key() -> None:
    flow = routed_flow(default=True)
    for kind, label in [("a", "alpha"), ("b", "beta"), (3, "three"), ("zzz", "other")]:
        result = await flow.run({"kind": kind})
        assert result.value == f"{label}:{{'kind': {kind!r}}}"
        assert [e.detail for e in result.trace if e.outcome == "routed"] == [str(kind)]
    # an unhashable key goes to the default too
    assert (await flow.run({"kind": {"x": 1}})).value.startswith("other:")


async def test_match_unknown_key_without_default_fails_naming_the_router() -> None:
    flow = routed_flow(default=False)
    with pytest.raises(StepFailedError) as info:
        await flow.run({"kind": "zzz"})
    err = info.value
    assert err.step == "classify?"
    assert "router 'classify?' chose 'zzz'" in str(err)
    assert "['a', 'b', 3]" in str(err)
    assert "no default" in str(err)
    assert [e.step for e in err.trace] == ["classify"]


async def test_match_with_a_list_of_keys_fans_out_to_every_case() -> None:
    ran: list[str] = []

    def collect_into(label: str) -> Step:
        async def record(value: list[str], ctx: Context[dict[str, Any]]) -> None:
            await anyio.lowlevel.checkpoint()
            ran.append(label)
            ctx.state.setdefault("seen", []).append((label, tuple(value)))
            if len(ctx.state["seen"]) == len(value):
                ctx.end(sorted(x for x, _ in ctx.state["seen"]))

        return Step(record, name=label)

    flow: Flow[dict[str, Any]] = Flow("fan by keys")
    flow.start.match(
        lambda keys: keys,
        {k: collect_into(k) for k in ("search", "fetch", "compute")},
    )
    flow.step("search").end()  # an end, for the check; ctx.end decides the result here
    result = await flow.run(["fetch", "compute"])
    assert result.value == ["compute", "fetch"]
    assert sorted(ran) == ["compute", "fetch"]
    assert [e.detail for e in result.trace if e.outcome == "routed"] == ["fetch, compute"]


async def test_match_router_may_read_the_context() -> None:
    flow: Flow[dict[str, Any]] = Flow("ctx router")
    flow.start.match(lambda v, ctx: ctx.deps["mode"], {"up": Step(str.upper, name="up")})
    flow.step("up").end()
    assert (await flow.run("hi", deps={"mode": "up"})).value == "HI"


async def test_a_match_key_function_that_raises_names_the_router() -> None:
    flow: Flow[dict[str, Any]] = Flow("bad key")
    flow.start.to(Step(list, name="split")).match(lambda v: v[10], {"a": tag("a")})
    flow.step("a").end()
    with pytest.raises(StepFailedError, match="router 'split\\?' raised IndexError") as info:
        await flow.run("abc")
    assert isinstance(info.value.__cause__, IndexError)


TABLE = st.dictionaries(
    st.integers(0, 6), st.tuples(st.sampled_from(["add", "mul"]), st.integers(-3, 3)), max_size=7
)


@settings(max_examples=40, deadline=None)
@given(table=TABLE, modulus=st.integers(1, 7), start=st.integers(-50, 50))
async def test_random_branch_tables_route_as_plain_python_does(
    table: dict[int, tuple[str, int]], modulus: int, start: int
) -> None:
    """match on value % modulus, each case a different op, default = negate; then end."""

    def op(key: int, kind: str, k: int) -> Step:
        def apply(value: int) -> int:
            return value + k if kind == "add" else value * k

        return Step(apply, name=f"case {key}")

    def negate(value: int) -> int:
        return -value

    flow: Flow[dict[str, Any]] = Flow("table")
    flow.start.match(
        lambda v: v % modulus,
        {key: op(key, kind, k) for key, (kind, k) in table.items()},
        default=negate,
    )
    for name in flow.steps:
        flow.step(name).end()

    key = start % modulus
    if key in table:
        kind, k = table[key]
        expected = start + k if kind == "add" else start * k
    else:
        expected = -start
    result = await flow.run(start)
    assert result.value == expected
    assert result.trace[0].detail == str(key)


@settings(max_examples=30, deadline=None)
@given(
    thresholds=st.lists(st.integers(-20, 20), min_size=1, max_size=5, unique=True),
    value=st.integers(-30, 30),
)
async def test_random_if_chains_pick_the_first_condition_that_holds(
    thresholds: list[int], value: int
) -> None:
    flow: Flow[dict[str, Any]] = Flow("ifs")
    branch = None
    for i, t in enumerate(thresholds):

        def below(v: int, t: int = t) -> bool:
            return v < t

        target = tag(f"b{i}")
        branch = flow.start.if_(below, target) if branch is None else branch.elif_(below, target)
    assert branch is not None
    branch.else_(tag("rest"))
    for name in flow.steps:
        flow.step(name).end()

    label = next((f"b{i}" for i, t in enumerate(thresholds) if value < t), "rest")
    assert (await flow.run(value)).value == f"{label}:{value}"


async def test_a_step_emits_declared_events_and_when_handles_them() -> None:
    def review(value: int, ctx: Context[dict[str, Any]]) -> None:
        ctx.emit("approved" if value > 0 else "rejected", value)

    flow: Flow[dict[str, Any]] = Flow("review")
    flow.start.to(review, emits=["approved", "rejected"])
    flow.when("approved").to(tag("ship")).end()
    flow.when("rejected").to(tag("revise")).end()

    result = await flow.run(5)
    assert result.value == "ship:5"
    assert [(e.step, e.event) for e in result.trace] == [
        ("review", "start"),
        ("ship", "approved"),
        ("end", "ship"),
    ]
    assert (await flow.run(-1)).value == "revise:-1"


async def test_emit_returns_at_once_and_handlers_run_concurrently() -> None:
    order: list[str] = []

    async def announce(value: int, ctx: Context[dict[str, Any]]) -> None:
        ctx.emit("announced", value)
        order.append("announce returned from emit")
        await anyio.sleep_forever()  # the end cancels it
        order.append("announce done")

    async def listen(value: int) -> int:
        order.append("listener started")
        return value

    flow: Flow[dict[str, Any]] = Flow("announce")
    flow.start.to(announce, emits=["announced"])
    flow.when("announced").to(listen).end()
    result = await flow.run(7)
    assert result.value == 7
    assert order == ["announce returned from emit", "listener started"]
    assert result.trace[-1].step == "announce"
    assert result.trace[-1].outcome == "cancelled"  # the end cancelled the emitter


async def test_an_undeclared_emit_fails_the_step() -> None:
    def sneaky(value: Any, ctx: Context[dict[str, Any]]) -> None:
        ctx.emit("secret", value)

    flow: Flow[dict[str, Any]] = Flow("sneaky")
    flow.start.to(sneaky)
    flow.start.to(Step(str, name="other", emits=["secret"]))
    flow.when("secret").to(tag("handler")).end()
    with pytest.raises(StepFailedError) as info:
        await flow.run(1)
    assert info.value.step == "sneaky"
    assert isinstance(info.value.__cause__, FlowDefinitionError)
    assert "step 'sneaky' emitted 'secret' but does not declare it" in str(info.value.__cause__)


async def test_emitting_an_event_nobody_handles_fails_the_step() -> None:
    def stray(value: Any, ctx: Context[dict[str, Any]]) -> Any:
        ctx.emit("nowhere", value)
        return value

    flow: Flow[dict[str, Any]] = Flow("stray")
    flow.start.to(stray).end()
    with pytest.raises(StepFailedError) as info:
        await flow.run(1)
    assert "'nowhere', which no flow.when('nowhere') handles" in str(info.value.__cause__)


async def test_emit_in_a_chain_turns_the_value_into_an_event() -> None:
    def plan(value: int) -> int:
        return value + 1

    flow: Flow[dict[str, Any]] = Flow("chain emit")
    flow.start.to(plan).emit("planned")
    flow.when("planned").to(tag("act")).end()
    result = await flow.run(1)
    assert result.value == "act:2"
    assert [(e.step, e.event) for e in result.trace] == [
        ("plan", "start"),
        ("act", "planned"),
        ("end", "act"),
    ]


async def test_several_handlers_of_one_event_all_run() -> None:
    seen: list[str] = []
    left_done = anyio.Event()

    async def left(value: int) -> None:
        seen.append(f"left {value}")
        left_done.set()

    async def right(value: int) -> list[str]:
        with anyio.fail_after(10):  # a hang guard: both handlers run at once
            await left_done.wait()
        seen.append(f"right {value}")
        return sorted(seen)

    flow: Flow[dict[str, Any]] = Flow("two handlers")
    flow.start.emit("go")
    flow.when("go").to(left)
    flow.when("go").to(right).end()
    result = await flow.run(3)
    assert result.value == ["left 3", "right 3"]


async def test_collect_joins_steps_run_in_parallel() -> None:
    b_done = anyio.Event()

    async def fetch_a(value: int) -> str:
        with anyio.fail_after(10):  # a hang guard: in series, a would wait here for ever
            await b_done.wait()
        return f"a{value}"

    async def fetch_b(value: int) -> str:
        b_done.set()
        return f"b{value}"

    flow: Flow[dict[str, Any]] = Flow("join")
    flow.start.to(fetch_a)
    flow.start.to(fetch_b)
    flow.collect(fetch_a, fetch_b).end()
    result = await flow.run(1)
    # keys in the order of the sources, whatever order they finished in
    assert list(result.value.items()) == [("fetch_a", "a1"), ("fetch_b", "b1")]
    assert [e.step for e in result.trace] == ["fetch_b", "fetch_a", "end"]
    assert result.trace[-1].event == "collect"


async def test_collect_joins_events_and_steps_and_resets_for_the_next_round() -> None:
    def split(value: int, ctx: Context[dict[str, Any]]) -> int:
        ctx.emit("side", value * 10)
        return value

    def check(joined: dict[str, int], ctx: Context[dict[str, Any]]) -> int:
        ctx.state.setdefault("joins", []).append(joined)
        return joined["split"]

    flow: Flow[dict[str, Any]] = Flow("round join")
    flow.start.to(split, emits=["side"])
    flow.when("side")  # collect joins an event that has a flow.when(...)
    flow.collect("split", "side", name="both").to(check).if_(
        lambda v: v < 3, Step(lambda v: v + 1, name="next")
    ).else_(Step(str, name="done"))
    flow.step("next").to("split")
    flow.step("done").end()

    result = await flow.run(1)
    assert result.value == "3"
    assert result.state["joins"] == [
        {"split": 1, "side": 10},
        {"split": 2, "side": 20},
        {"split": 3, "side": 30},
    ]
