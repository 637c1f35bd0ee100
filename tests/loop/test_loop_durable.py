"""Durable loop runs: a checkpoint after every round, planner outputs and tool calls
journaled, and a run that continues after its process died (SIGKILL at every point, on
SQLite and PostgreSQL) without running a finished tool again."""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from toolloop import PlannerError
from toolloop.checkpoints import (
    CheckpointConflictError,
    CheckpointedRun,
    MemoryCheckpointStore,
    RunNotFoundError,
    RunNotResumableError,
)
from toolloop.flow import FlowSnapshot
from toolloop.loop import (
    async_plan_and_execute,
    async_recover_plan_and_execute,
    async_resume_plan_and_execute,
    plan_and_execute,
    recover_plan_and_execute,
)
from toolloop.planners import PlannerContext
from toolloop.testing import ScriptedPlanner
from toolloop.tools import RunContext

SUPPORT = Path(__file__).with_name("durable_support.py")


def cmd(tool: str, purpose: str, **kwargs: Any) -> dict[str, Any]:
    return {"purpose": purpose, "tool_name": tool, "tool_kwargs": kwargs}


def execute(*commands: dict[str, Any]) -> dict[str, Any]:
    return {"next_action": "execute", "execution_commands": list(commands)}


SCRIPT = [
    execute(cmd("effect", "first", key="a"), cmd("effect", "second", key="b")),
    execute(cmd("effect", "third", key="c")),
    {"next_action": "response"},
]


class Effects:
    """A tool whose every run is a side effect, counted; ``gate`` holds call ``hold``."""

    def __init__(self, hold: str | None = None) -> None:
        self.done: list[str] = []
        self.hold = hold
        self.started = anyio.Event()

    async def effect(self, key: str) -> str:
        """Do something once.

        Args:
            key: what to do.
        """
        self.done.append(key)
        if key == self.hold:
            self.started.set()
            await anyio.sleep_forever()
        return f"did {key}"


def without_id(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = result.model_dump(mode="json")
    data.pop("run_id")
    return data


@pytest.mark.anyio
async def test_a_durable_run_gives_what_a_plain_run_gives_and_keeps_its_journal() -> None:
    plain = Effects()
    expected = await async_plan_and_execute(
        "go", tools=[plain.effect], planner=ScriptedPlanner(SCRIPT)
    )
    store = MemoryCheckpointStore()
    durable = Effects()
    result = await async_plan_and_execute(
        "go", tools=[durable.effect], planner=ScriptedPlanner(SCRIPT), store=store, run_id="r"
    )
    assert result.run_id == "r"
    assert without_id(result) == without_id(expected)
    assert sorted(durable.done) == sorted(plain.done) == ["a", "b", "c"]
    stored = await store.get("r")
    assert stored is not None
    assert stored.status == "completed" and stored.owner is None
    assert stored.result == result.model_dump(mode="json")
    assert stored.metadata["user_input"] == "go"
    kinds = Counter(entry.tool_name for entry in stored.journal)
    assert kinds == {"<planner>": 3, "effect": 3}  # (a store made to keep replies keeps more)
    assert all(entry.state == "finished" for entry in stored.journal)
    # a round of state was checkpointed after each round: revisions 1 (begin), 2 and 3
    # (after rounds 0 and 1), 4 (completed)
    assert stored.revision == 4
    # the run id is taken
    with pytest.raises(
        CheckpointConflictError,
        match=r"already has a run .*: to continue it, call async_recover_plan_and_execute",
    ):
        await async_plan_and_execute(
            "go", tools=[durable.effect], planner=ScriptedPlanner(SCRIPT), store=store, run_id="r"
        )
    # resuming a completed run gives its result and runs nothing
    again = await async_recover_plan_and_execute(
        "r", store=store, tools=[durable.effect], planner=ScriptedPlanner([])
    )
    assert again == result
    assert sorted(durable.done) == ["a", "b", "c"]


@pytest.mark.anyio
async def test_durable_needs_a_store_and_a_run_of_the_loop() -> None:
    named = await async_plan_and_execute("go", planner=ScriptedPlanner([]), run_id="r")
    assert named.run_id == "r"  # without a store, run_id only names the run
    with pytest.raises(ValueError, match="needs store="):
        await async_plan_and_execute("go", planner=ScriptedPlanner([]), needs_approval=["x"])
    store = MemoryCheckpointStore()
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        await async_recover_plan_and_execute("nope", store=store, planner=ScriptedPlanner([]))
    snapshot = FlowSnapshot(flow="agent", execution_id="x", state={})
    run = await CheckpointedRun.begin(store, run_id="x", flow="agent", snapshot=snapshot)
    await run.fail("boom")
    with pytest.raises(RunNotResumableError, match="not a run of plan_and_execute"):
        await async_recover_plan_and_execute("x", store=store, planner=ScriptedPlanner([]))
    result = await async_plan_and_execute("go", planner=ScriptedPlanner([]), store=store)
    assert len(result.run_id) == 32  # a fresh id when none is given
    assert await store.get(result.run_id) is not None


@pytest.mark.anyio
@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_a_call_cut_off_mid_tool_is_never_silently_run_again(policy: Any) -> None:
    store = MemoryCheckpointStore()
    first = Effects(hold="c")
    with anyio.move_on_after(30):  # a hang guard: cancelled below, once c has started
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await async_plan_and_execute(
                    "go",
                    tools=[first.effect],
                    planner=ScriptedPlanner(SCRIPT),
                    store=store,
                    run_id="r",
                )

            tg.start_soon(run)
            await first.started.wait()
            tg.cancel_scope.cancel()
    assert first.done.count("c") == 1
    cut = await store.get("r")
    assert cut is not None and cut.status == "running"
    assert [e.state for e in cut.journal if e.arguments == {"key": "c"}] == ["started"]

    second = Effects()
    result = await async_recover_plan_and_execute(
        "r",
        store=store,
        tools=[second.effect],
        planner=ScriptedPlanner(SCRIPT),
        unknown_outcome=policy,
        idempotent_tools=["effect"] if policy == "retry" else [],
    )
    records = {r.purpose: r for r in result.done_plans}
    assert [r.purpose for r in result.done_plans] == ["first", "second", "third"]
    assert "a" not in second.done and "b" not in second.done  # round 0 was replayed
    if policy == "fail":
        assert "c" not in second.done
        assert records["third"].success is False
        assert "was interrupted: the run's cancellation ended it while it ran" in str(
            records["third"].error
        )
    else:
        assert second.done.count("c") == 1
        assert records["third"].result == "did c"
    stored = await store.get("r")
    assert stored is not None and stored.status == "completed"


@pytest.mark.anyio
async def test_a_failed_run_resumes_from_its_last_round() -> None:
    store = MemoryCheckpointStore()
    tools = Effects()
    broken = ScriptedPlanner([SCRIPT[0], RuntimeError("model down")])
    with pytest.raises(PlannerError, match="model down"):
        await async_plan_and_execute(
            "go", tools=[tools.effect], planner=broken, store=store, run_id="r"
        )
    failed = await store.get("r")
    assert failed is not None and failed.status == "failed"
    assert "model down" in str(failed.error)
    assert failed.snapshot.state["round_index"] == 1  # round 0 was checkpointed
    seen: list[int] = []

    async def planner(context: PlannerContext) -> Any:
        seen.append(context.round_index)
        assert [r.purpose for r in context.done_plans][:2] == ["first", "second"]
        return SCRIPT[context.round_index]

    result = await async_recover_plan_and_execute(
        "r", store=store, tools=[tools.effect], planner=planner
    )
    assert seen == [1, 2]  # round 0 was not planned again
    assert sorted(tools.done) == ["a", "b", "c"]  # nor run again
    assert result.rounds == 2 and result.stop_reason == "answered"


def test_the_sync_twins_run_and_resume(store_spec: str) -> None:
    from toolloop.checkpoints import PostgresCheckpointStore, SQLiteCheckpointStore

    tools = Effects()
    url, _, schema = store_spec.partition("#")
    store: Any = (
        PostgresCheckpointStore(url, schema=schema) if schema else SQLiteCheckpointStore(store_spec)
    )
    result = plan_and_execute(
        "go", tools=[tools.effect], planner=ScriptedPlanner(SCRIPT), store=store, run_id="s"
    )
    again = recover_plan_and_execute(
        "s", store=store, tools=[tools.effect], planner=ScriptedPlanner([]), backend="trio"
    )
    assert again == result
    assert sorted(tools.done) == ["a", "b", "c"]
    anyio.run(store.aclose)


# -- SIGKILL at every point, on SQLite and PostgreSQL -------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    url = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield f"{url}#{name}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def support(*args: str) -> dict[str, Any] | None:
    """Run ``durable_support.py``: its result, or ``None`` if it was killed."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(SUPPORT), *args], capture_output=True, text=True, timeout=120
    )
    if done.returncode == -9:
        return None
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str]]:
    """The result and side effects of the run nobody kills."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    effects = folder / "effects"
    result = support("run", str(folder / "runs.db"), str(effects), "r")
    assert result is not None
    return result, sorted(effects.read_text().split())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "crash", ["planning", "between_rounds", "final_checkpoint", "after_final_checkpoint"]
)
def test_killed_anywhere_the_resumed_run_is_the_uninterrupted_one(
    crash: str,
    store_spec: str,
    tmp_path: Path,
    uninterrupted: tuple[dict[str, Any], list[str]],
) -> None:
    effects = tmp_path / "effects"
    assert support("run", store_spec, str(effects), "r", "--crash", crash) is None
    before = effects.read_text().split() if effects.exists() else []
    assert len(before) == len(set(before))
    # resumed on the other backend: trio (the run was on asyncio)
    resumed = support("resume", store_spec, str(effects), "r", "--backend", "trio")
    expected, effects_expected = uninterrupted
    assert resumed == expected
    # no side effect twice, none lost
    assert sorted(effects.read_text().split()) == effects_expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["fail", "retry"])
def test_killed_mid_tool_the_unknown_call_follows_the_policy(
    policy: str,
    store_spec: str,
    tmp_path: Path,
    uninterrupted: tuple[dict[str, Any], list[str]],
) -> None:
    effects = tmp_path / "effects"
    assert support("run", store_spec, str(effects), "r", "--crash", "mid_tool") is None
    assert effects.read_text().split().count("c") == 1  # c took effect, unrecorded
    resumed = support("resume", store_spec, str(effects), "r", "--policy", policy)
    assert resumed is not None
    expected, _ = uninterrupted
    done = Counter(effects.read_text().split())
    assert done["a"] == done["b"] == 1  # finished calls were not run again
    third = resumed["done_plans"][2]
    if policy == "fail":  # not run again: the planner is told it was interrupted
        assert done["c"] == 1
        assert third["success"] is False
        assert "was interrupted: its process stopped after the call started" in third["error"]
        assert resumed["stop_reason"] == "answered"
    else:  # an idempotent tool: run again, and the run ends as if nothing happened
        assert done["c"] == 2
        assert resumed == expected


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_killed_mid_tool_the_unknown_call_is_put_to_a_human_when_asked(
    decision: str, tmp_path: Path, uninterrupted: tuple[dict[str, Any], list[str]]
) -> None:
    """``unknown_outcome="ask"``: the recovered run pauses before round 1 runs again and asks
    about call ``1.0`` (the id its events gave it); approved, it runs once more; rejected,
    it never does and the planner is told."""
    from toolloop.checkpoints import HumanRequest

    store, effects = str(tmp_path / "runs.db"), tmp_path / "effects"
    assert support("run", store, str(effects), "r", "--crash", "mid_tool") is None
    paused = support("resume", store, str(effects), "r", "--policy", "ask")
    assert paused is not None and paused["status"] == "paused"
    request = HumanRequest.model_validate(paused["request"])
    assert request.kind == "interrupted_tool_calls"
    assert [(c.call_id, c.tool_name, c.arguments) for c in request.tool_calls] == [
        ("1.0", "effect", {"key": "c"})
    ]
    assert "its process stopped" in request.tool_calls[0].why
    assert effects.read_text().split().count("c") == 1  # asked first: not run again yet
    done = support("decide", store, str(effects), "r", "--decision", decision)
    assert done is not None and done["stop_reason"] == "answered"
    counts = Counter(effects.read_text().split())
    assert counts["a"] == counts["b"] == 1
    third = done["done_plans"][2]
    if decision == "approve":
        assert counts["c"] == 2 and third["success"] is True
        assert done["done_plans"] == uninterrupted[0]["done_plans"]
    else:
        assert counts["c"] == 1 and third["success"] is False
        assert third["error"].startswith("a human rejected this call of 'effect'; it did not run")


# -- pausing for a human ------------------------------------------------------------------


class Mail:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, to: str) -> str:
        """Send a mail.

        Args:
            to: who gets it.
        """
        self.sent.append(to)
        return f"sent to {to}"


MAIL_SCRIPT = [
    execute(cmd("effect", "look", key="a"), cmd("send", "tell ada", to="ada")),
    {"next_action": "response"},
]


async def paused_run(store: MemoryCheckpointStore, tools: list[Any]) -> Any:
    result = await async_plan_and_execute(
        "mail ada",
        tools=tools,
        planner=ScriptedPlanner(MAIL_SCRIPT),
        store=store,
        run_id="m",
        needs_approval=["send"],
    )
    assert result.paused and result.status == "paused" and result.stop_reason is None
    return result


@pytest.mark.anyio
async def test_a_tool_that_needs_approval_pauses_the_run_until_a_human_decides() -> None:
    from toolloop.checkpoints import Approve, DecisionError, HumanRequest

    store = MemoryCheckpointStore()
    mail, effects = Mail(), Effects()
    tools = [mail.send, effects.effect]
    result = await paused_run(store, tools)
    request = HumanRequest.model_validate(result.request)
    assert request.kind == "approve_tool_calls"
    assert [(c.tool_name, c.arguments) for c in request.tool_calls] == [("send", {"to": "ada"})]
    assert mail.sent == [] and effects.done == []  # the whole round waits
    stored = await store.get("m")
    assert (
        stored is not None
        and stored.status == "paused"
        and stored.request == result.request.model_dump(mode="json")
    )
    planner = ScriptedPlanner(MAIL_SCRIPT)
    with pytest.raises(RunNotResumableError, match="paused for a human: resume it with a decision"):
        await async_recover_plan_and_execute("m", store=store, tools=tools, planner=planner)
    with pytest.raises(DecisionError, match="does not fit it"):
        await async_resume_plan_and_execute(
            "m",
            "replan",
            store=store,
            tools=tools,
            planner=planner,
        )
    done = await async_resume_plan_and_execute(
        "m",
        Approve(),
        store=store,
        tools=tools,
        planner=planner,
    )
    assert done.stop_reason == "answered" and done.request is None
    assert mail.sent == ["ada"] and effects.done == ["a"]
    assert [r.result for r in done.done_plans] == ["did a", "sent to ada"]
    assert [c.round_index for c in planner.calls] == [1]  # round 0: from the journal
    # answered once: the run is done, a second answer has nothing to answer
    with pytest.raises(RunNotResumableError, match="not paused"):
        await async_resume_plan_and_execute(
            "m",
            Approve(),
            store=store,
            tools=tools,
            planner=planner,
        )
    again = await async_recover_plan_and_execute("m", store=store, tools=tools, planner=planner)
    assert again == done and mail.sent == ["ada"]


@pytest.mark.anyio
async def test_a_resume_with_a_bad_approval_spec_leaves_the_run_paused() -> None:
    from toolloop.checkpoints import Approve

    store = MemoryCheckpointStore()
    mail, effects = Mail(), Effects()
    tools = [mail.send, effects.effect]
    await paused_run(store, tools)
    planner = ScriptedPlanner(MAIL_SCRIPT)
    with pytest.raises(ValueError, match=r"needs_approval names \['sned'\], which are no"):
        await async_resume_plan_and_execute(
            "m", Approve(), store=store, tools=tools, planner=planner, needs_approval=["sned"]
        )
    stored = await store.get("m")
    assert stored is not None and stored.status == "paused"  # not claimed, nothing ran
    assert mail.sent == [] and effects.done == [] and planner.calls == []
    done = await async_resume_plan_and_execute(
        "m", Approve(), store=store, tools=tools, planner=planner, needs_approval=["send"]
    )
    assert done.stop_reason == "answered" and mail.sent == ["ada"]


@pytest.mark.anyio
async def test_a_rejected_call_never_runs_and_an_edited_one_runs_as_edited() -> None:
    from toolloop.checkpoints import DecisionError, Edit, HumanRequest, Reject

    store = MemoryCheckpointStore()
    mail, effects = Mail(), Effects()
    tools = [mail.send, effects.effect]
    result = await paused_run(store, tools)
    call_id = HumanRequest.model_validate(result.request).tool_calls[0].call_id
    rejected = await async_resume_plan_and_execute(
        "m",
        Reject(message="not now"),
        store=store,
        tools=tools,
        planner=ScriptedPlanner(MAIL_SCRIPT),
    )
    send = rejected.done_plans[1]
    assert send.success is False and "rejected" in str(send.error) and "not now" in str(send.error)
    assert mail.sent == []

    await store.delete("m")
    await paused_run(store, tools)
    with pytest.raises(DecisionError, match="do not fit tool 'send'"):
        await async_resume_plan_and_execute(
            "m",
            Edit(arguments={call_id: {"to": 7}}),
            store=store,
            tools=tools,
            planner=ScriptedPlanner(MAIL_SCRIPT),
        )
    edited = await async_resume_plan_and_execute(
        "m",
        {call_id: Edit(arguments={call_id: {"to": "bob"}})},
        store=store,
        tools=tools,
        planner=ScriptedPlanner(MAIL_SCRIPT),
    )
    assert mail.sent == ["bob"]
    assert edited.done_plans[1].result == "sent to bob"


@pytest.mark.anyio
async def test_an_approved_call_cut_off_is_not_run_again_on_recovery() -> None:
    from toolloop.checkpoints import Approve

    store = MemoryCheckpointStore()
    effects = Effects(hold="a")
    mail = Mail()
    tools = [mail.send, effects.effect]
    await paused_run(store, tools)
    with anyio.move_on_after(30):  # a hang guard: cancelled once the approved round runs
        async with anyio.create_task_group() as tg:

            async def resume() -> None:
                await async_resume_plan_and_execute(
                    "m",
                    Approve(),
                    store=store,
                    tools=tools,
                    planner=ScriptedPlanner(MAIL_SCRIPT),
                )

            tg.start_soon(resume)
            await effects.started.wait()
            tg.cancel_scope.cancel()
    cut = await store.get("m")
    assert cut is not None and cut.status == "running"
    recovered = await async_recover_plan_and_execute(
        "m", store=store, tools=[mail.send, Effects().effect], planner=ScriptedPlanner([])
    )
    # the approval was journaled: recovery does not ask again, and runs nothing twice
    assert recovered.stop_reason == "answered"
    assert "was interrupted" in str(recovered.done_plans[0].error)
    send = recovered.done_plans[1]
    assert len(mail.sent) <= 1  # once at most (cut off after it started: maybe not recorded)
    if send.success:
        assert mail.sent == ["ada"]
    else:
        assert "was interrupted" in str(send.error)


def test_approval_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs_approval= pauses a durable run, which needs"):
        plan_and_execute("go", planner=ScriptedPlanner([]), needs_approval=["send"])


@pytest.mark.anyio
async def test_a_resumed_run_hands_its_tools_the_deps_and_keeps_its_run_id() -> None:
    """RunContext tools of a resumed durable run get the deps given to the resume, and the
    run's own id (not a new one)."""
    store = MemoryCheckpointStore()
    seen: list[tuple[str, str, int]] = []

    async def lookup(key: str, ctx: RunContext[dict[str, str]]) -> str:
        """Look a key up.

        Args:
            key: the key.
        """
        assert ctx.deps is not None
        seen.append((ctx.deps[key], ctx.run_id, ctx.round_index))
        return ctx.deps[key]

    script = [
        execute(cmd("lookup", "first", key="a")),
        execute(cmd("lookup", "second", key="b")),
        {"next_action": "response"},
    ]
    broken = ScriptedPlanner([script[0], RuntimeError("model down")])
    with pytest.raises(PlannerError, match="model down"):
        await async_plan_and_execute(
            "go", tools=[lookup], planner=broken, store=store, run_id="r", deps={"a": "A"}
        )

    async def planner(context: PlannerContext) -> Any:
        return script[context.round_index]

    result = await async_recover_plan_and_execute(
        "r", store=store, tools=[lookup], planner=planner, deps={"a": "A2", "b": "B"}
    )
    assert seen == [("A", "r", 0), ("B", "r", 1)]
    assert [r.result for r in result.done_plans] == ["A", "B"]


@pytest.mark.anyio
async def test_needs_approval_refuses_a_name_that_is_no_tool() -> None:
    """A misspelt name would let the real tool run unapproved: refused before anything runs."""
    tools = Effects()
    planner = ScriptedPlanner(SCRIPT)
    with pytest.raises(ValueError, match=r"needs_approval names \['efect'\], which are no"):
        await async_plan_and_execute(
            "go",
            tools=[tools.effect],
            planner=planner,
            store=MemoryCheckpointStore(),
            needs_approval=["efect"],
        )
    with pytest.raises(TypeError, match=r"not one str: needs_approval=\['effect'\]"):
        await async_plan_and_execute(
            "go",
            tools=[tools.effect],
            planner=planner,
            store=MemoryCheckpointStore(),
            needs_approval="effect",
        )
    assert tools.done == []


# -- the budget across resumes: every model call made before counts -----------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_killed_mid_tool_the_model_calls_made_before_count_after_resume(
    backend: str, tmp_path: Path
) -> None:
    """Killed inside round 1's tool, after 2 planner calls (one model call each): a resume
    with ``max_requests=2`` makes no model call, and its usage says 2; a resume without a
    budget makes one (round 2's plan), and its usage says 3."""
    db = str(tmp_path / "runs.db")
    for run_id in ("capped", "free"):
        killed = ("run", db, str(tmp_path / run_id), run_id, "--crash", "mid_tool")
        assert support(*killed, "--metered", "--backend", backend) is None
    capped = support(
        "resume", db, str(tmp_path / "capped"), "capped", "--metered", "--max-requests", "2",
        "--backend", backend,
    )  # fmt: skip
    assert capped is not None
    assert capped["model_requests"] == 0  # the budget was spent before the kill
    assert capped["stop_reason"] == "usage_limit"
    assert (capped["usage"]["requests"], capped["usage"]["total_tokens"]) == (2, 20)
    free = support("resume", db, str(tmp_path / "free"), "free", "--metered", "--backend", backend)
    assert free is not None and free["stop_reason"] == "answered"
    assert free["model_requests"] == 1
    assert (free["usage"]["requests"], free["usage"]["total_tokens"]) == (3, 30)


class PayingPlanner:
    """Plans from a script (an exception in it is raised); every call first makes one
    model call of 10 tokens, counted by the run."""

    def __init__(self, script: list[Any]) -> None:
        from toolloop.testing import ScriptedChatModel, ScriptedChatReply

        self.script = script
        self.model = ScriptedChatModel(
            responder=lambda request: ScriptedChatReply("planning", usage={"total_tokens": 10})
        )

    async def plan(self, context: PlannerContext) -> Any:
        from toolloop.models import ChatRequest, stream_chat

        request = ChatRequest(messages=[{"role": "user", "content": "plan"}])
        async with stream_chat(self.model, request) as deltas:
            async for _ in deltas:
                pass
        item = self.script[context.round_index]
        if isinstance(item, BaseException):
            raise item
        return item


@pytest.mark.anyio
async def test_a_planner_call_that_failed_after_its_model_call_counts_after_resume() -> None:
    from toolloop.models import UsageLimits

    store = MemoryCheckpointStore()
    tools = Effects()
    failing = PayingPlanner([SCRIPT[0], RuntimeError("model output unusable")])
    with pytest.raises(PlannerError, match="model output unusable"):
        await async_plan_and_execute(
            "go", tools=[tools.effect], planner=failing, store=store, run_id="r"
        )
    planner = PayingPlanner(SCRIPT)
    result = await async_recover_plan_and_execute(
        "r",
        store=store,
        tools=[tools.effect],
        planner=planner,
        usage_limits=UsageLimits(max_requests=2),
        on_usage_limit="finish",
    )
    assert planner.model.requests == []  # two calls were made: round 1 is not planned again
    assert result.stop_reason == "usage_limit"
    assert (result.usage.requests, result.usage.total_tokens) == (2, 20)


@pytest.mark.anyio
async def test_a_paused_run_reports_its_usage_and_its_budget_holds_after_the_decision() -> None:
    from toolloop.checkpoints import Approve
    from toolloop.models import UsageLimits

    store = MemoryCheckpointStore()
    mail, effects = Mail(), Effects()
    tools = [mail.send, effects.effect]
    paused = await async_plan_and_execute(
        "mail ada",
        tools=tools,
        planner=PayingPlanner(MAIL_SCRIPT),
        store=store,
        run_id="m",
        needs_approval=["send"],
    )
    assert paused.paused and paused.usage.requests == 1
    planner = PayingPlanner(MAIL_SCRIPT)
    done = await async_resume_plan_and_execute(
        "m",
        Approve(),
        store=store,
        tools=tools,
        planner=planner,
        usage_limits=UsageLimits(max_requests=1),
        on_usage_limit="finish",
    )
    assert mail.sent == ["ada"]  # the approved round ran, from its journaled plan
    assert planner.model.requests == []  # and round 1 was not planned: the budget was spent
    assert done.stop_reason == "usage_limit" and done.usage.requests == 1


@pytest.mark.anyio
async def test_model_calls_made_by_tools_count_after_resume() -> None:
    """A tool's model calls are counted by the run; the checkpoint of the next round keeps
    them, so a run cut off in that round counts them when it resumes."""
    from toolloop.models import ChatRequest, stream_chat
    from toolloop.testing import ScriptedChatModel, ScriptedChatReply

    model = ScriptedChatModel(
        responder=lambda request: ScriptedChatReply("summary", usage={"total_tokens": 7})
    )
    gate = Effects(hold="c")

    async def summarize(key: str) -> str:
        """Summarize with a model.

        Args:
            key: what to summarize.
        """
        request = ChatRequest(messages=[{"role": "user", "content": key}])
        async with stream_chat(model, request) as deltas:
            async for _ in deltas:
                pass
        return await gate.effect(key)

    script = [
        execute(cmd("summarize", "first", key="a")),
        execute(cmd("summarize", "second", key="c")),
        {"next_action": "response"},
    ]
    store = MemoryCheckpointStore()
    with anyio.move_on_after(30):  # a hang guard: cancelled below, once c has started
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await async_plan_and_execute(
                    "go",
                    tools=[summarize],
                    planner=ScriptedPlanner(script),
                    store=store,
                    run_id="r",
                )

            tg.start_soon(run)
            await gate.started.wait()
            tg.cancel_scope.cancel()
    assert len(model.requests) == 2  # round 0's tool, and round 1's before it was cut off
    result = await async_recover_plan_and_execute(
        "r", store=store, tools=[summarize], planner=ScriptedPlanner(script)
    )
    # round 0's call is in the checkpoint of round 1; round 1's was cut off with its round
    # and is not known to the journal (see the durability guide's limits)
    assert (result.usage.requests, result.usage.total_tokens) == (1, 7)


# -- what cut a call off, said truthfully ------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_a_call_the_runs_timeout_ended_says_so_after_resume(policy: Any) -> None:
    from toolloop import ExecutionTimeoutError

    store = MemoryCheckpointStore()
    first = Effects(hold="c")
    with pytest.raises(ExecutionTimeoutError):
        await async_plan_and_execute(
            "go",
            tools=[first.effect],
            planner=ScriptedPlanner(SCRIPT),
            store=store,
            run_id="r",
            timeout=0.5,
        )
    assert first.done.count("c") == 1
    second = Effects()
    result = await async_recover_plan_and_execute(
        "r",
        store=store,
        tools=[second.effect],
        planner=ScriptedPlanner(SCRIPT),
        unknown_outcome=policy,
        idempotent_tools=["effect"],
    )
    third = result.done_plans[2]
    if policy == "fail":  # the outcome is unknown all the same: not run again
        assert "c" not in second.done and third.success is False
        error = str(third.error)
        assert "was interrupted: the run's timeout of 0.5 s ended it while it ran" in error
        assert "process stopped" not in error
    else:  # an idempotent tool: run again
        assert second.done == ["c"] and third.result == "did c"


@pytest.mark.anyio
async def test_a_call_its_tools_timeout_ended_says_so() -> None:
    tools = Effects(hold="c")
    store = MemoryCheckpointStore()
    result = await async_plan_and_execute(
        "go",
        tools=[tools.effect],
        planner=ScriptedPlanner(SCRIPT),
        store=store,
        run_id="r",
        tool_timeout=0.2,
    )
    third = result.done_plans[2]
    assert third.success is False
    assert str(third.error) == "tool 'effect' did not finish within 0.2 s; it was cancelled"
    stored = await store.get("r")
    assert stored is not None and stored.status == "completed"


@pytest.mark.anyio
async def test_a_resumed_run_sends_the_journaled_reply_back_with_its_reasoning() -> None:
    """DeepSeek's thinking mode answers HTTP 400 to a tool-call turn sent back without its
    reasoning: the reply of a round planned before the pause is journaled whole, so the
    round after the resume sends it back as it was (reasoning, call ids)."""
    from toolloop.checkpoints import Approve
    from toolloop.models import OpenAIChatModel
    from toolloop.planners import ToolCallingPlanner
    from toolloop.testing import FakeOpenAIServer

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    call = {"index": 0, "id": "call_7", "type": "function",
            "function": {"name": "send", "arguments": '{"to": "ada"}'}}  # fmt: skip
    store = MemoryCheckpointStore()
    mail = Mail()
    async with FakeOpenAIServer() as server:
        server.add_raw(
            [
                chunk({"role": "assistant", "reasoning_content": "Ada must be told."}),
                chunk({"tool_calls": [call]}, "tool_calls"),
                "data: [DONE]\n\n",
            ]
        )
        server.add_reply("Ada is told.")
        async with OpenAIChatModel("m", base_url=server.base_url, api_key="k") as model:
            planner = ToolCallingPlanner(model)
            paused = await async_plan_and_execute(
                "mail ada",
                tools=[mail.send],
                planner=planner,
                store=store,
                run_id="r",
                needs_approval=["send"],
            )
            assert paused.paused and mail.sent == []
            done = await async_resume_plan_and_execute(
                "r",
                Approve(),
                store=store,
                tools=[mail.send],
                planner=planner,
            )
        bodies = [r.body for r in server.requests if r.path == "/v1/chat/completions"]
    assert done.stop_reason == "answered" and mail.sent == ["ada"]
    assert len(bodies) == 2  # round 0 planned once, before the pause
    sent = bodies[1]["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "Ada must be told."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_7"]
    answer = next(m for m in sent if m["role"] == "tool")
    assert answer["tool_call_id"] == "call_7" and "sent to ada" in answer["content"]
