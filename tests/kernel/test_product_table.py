"""The tables of what every product has, kept true.

Two tables say it, and this module holds both to the code:

- the kernel's capabilities, in docs/architecture.md ("What every product has from the
  kernel"): each row is held by named tests of ``test_every_product.py`` (the kernel's
  matrix: each test parametrized over the three products), listed here per row;
- the surfaces around the runs, in docs/guides/one-task-each-product.md: each cell is "yes"
  or "no"; each "yes" is checked here by a small scripted run of that product through its
  public API (a row the kernel's table has too is checked by the kernel matrix's own tests,
  so the two tables cannot tell two stories), and a "no" whose surface is found on the
  product fails until the cell says yes.

A row or a product missing from a table, a row no test or check backs, or a "yes" whose
check fails, each fails here. To turn a cell to "yes": edit the table, and add the cell's
check to ``CHECKS`` below.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import test_every_product as matrix
from cli_runs import CALL, Model, calls, make_workdir, printed_command, product_flags, toolloop
from product_runs import Driven

from toolloop.agents import Agent, create_agent
from toolloop.flow import FlowEvent
from toolloop.kernel import RunFinished
from toolloop.loop import async_plan_and_execute
from toolloop.planners import StructuredPlanner
from toolloop.status_agent import LLMStatusSteps, StatusAgent, StatusAgentState, StatusView
from toolloop.testing import FakeOpenAIServer, ScriptedChatModel, ScriptedChatReply
from toolloop.tracing import TraceRecorder, render_timeline
from toolloop.viewer import ViewerSink

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(300),  # a hang guard: the command line's checks start processes
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

ROOT = Path(__file__).resolve().parent.parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
GUIDE = ROOT / "docs" / "guides" / "one-task-each-product.md"
COLUMNS = {"the loop": "loop", "the middleware agent": "agent", "the status agent": "status"}
"""Each table's product columns, in order, and the products' names here."""
MAKE = {product.name: product for product in matrix.PRODUCTS}
"""The kernel matrix's adapter of each product."""
CLI_NAME = {"loop": "loop", "agent": "middleware", "status": "status"}
"""Each product's ``--agent``."""

Table = dict[str, dict[str, str]]
"""A table: row (its first cell) -> product -> cell."""


def read_table(path: Path, after: str) -> Table:
    """The first Markdown table after the line ``after`` in ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(after)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, rule, *body = rows
    assert set(rule) == {"---"}, f"{path.name}: no table after {after!r}"
    assert header[1:] == list(COLUMNS), f"{path.name}: the product columns are {header[1:]}"
    table: Table = {}
    for row in body:
        assert len(row) == len(header), f"{path.name}: row {row[0]!r} has {len(row)} cells"
        assert row[0] not in table, f"{path.name}: row {row[0]!r} twice"
        table[row[0]] = dict(zip(COLUMNS.values(), row[1:], strict=True))
    return table


def kernel_table() -> Table:
    return read_table(ARCHITECTURE, "### What every product has from the kernel")


def surface_table() -> Table:
    return read_table(
        GUIDE, "<!-- product-surfaces: kept true by tests/kernel/test_product_table.py -->"
    )


def says_yes(cell: str) -> bool:
    """A surface cell: ``yes`` (maybe ``yes: how``) or ``no`` (maybe ``no (why)``)."""
    said = re.match(r"(yes|no)\b", cell)
    assert said, f"a cell of the surfaces' table says yes or no first, got {cell!r}"
    return said.group(1) == "yes"


# -- the kernel's table: each row and the kernel matrix's tests that hold it ------------------

KERNEL_ROWS: dict[str, tuple[str, ...]] = {
    "the run options (`concurrency` ... `on_event`), same defaults": (
        "test_the_options_are_the_kernel_s_with_its_checks",
        "test_the_sync_twins_take_the_same_options_on_either_backend",
    ),
    "`max_turns` (a turn is)": ("test_max_turns_0_runs_no_tool",),
    "budgets: `usage_limits`, `on_usage_limit`, across resumes": (
        "test_a_spent_budget_raises_by_default",
        "test_a_spent_budget_finishes_the_run_when_asked",
        "test_the_budget_holds_across_a_pause",
    ),
    '`timeout`, `on_timeout="finish"`': (
        "test_a_timeout_finishes_the_run_and_keeps_the_call_it_cut_off",
        "test_a_timeout_raises_by_default",
    ),
    "`model_timeout`": (
        "test_model_timeout_fails_the_run_with_the_product_s_model_error",
        "test_a_model_call_past_model_timeout_fails_as_a_model_call_error",
    ),
    "durable: `store`, `run_id`, journaled tool calls": (
        "test_a_durable_run_pauses_for_approval_and_resumes_by_the_request_s_call_ids",
        "test_a_durable_run_keeps_a_tool_value_json_cannot_hold",
        "test_unknown_outcome_fail_does_not_run_the_call_again",
    ),
    "`streaming_dispatch`: a call starts while the model still writes (default `False`)": (
        "test_streaming_dispatch_starts_a_call_while_the_model_still_writes",
    ),
    "resume with a decision / recover": (
        "test_a_durable_run_pauses_for_approval_and_resumes_by_the_request_s_call_ids",
        "test_a_rejected_call_never_runs_and_says_so_in_the_kernel_s_words",
        "test_recovering_a_completed_run_gives_its_result_and_runs_nothing",
    ),
    "sync twins": ("test_the_sync_twins_take_the_same_options_on_either_backend",),
    (
        "streaming API: the stream twins (an `async with` block of the run's events as they "
        "happen, then its `result`; `engine_events=False`; leaving early cancels the run)"
    ): (
        "test_a_stream_tells_the_events_while_the_run_is_in_progress",
        "test_a_stream_s_result_is_what_run_returns",
        "test_leaving_a_stream_early_cancels_the_run",
        "test_a_stream_raises_the_run_s_error_as_its_block_exits",
        "test_a_paused_run_streams_its_pause_and_its_resume_streams_the_rest",
        "test_a_recovered_run_streams_too",
    ),
    "`needs_approval` (the one spec)": (
        "test_needs_approval_takes_a_mapping_with_the_decisions_allowed",
        "test_needs_approval_takes_a_rule_on_the_arguments",
        "test_an_approval_rule_that_raises_puts_the_call_to_a_human",
    ),
    "`unknown_outcome` fail / retry / ask": (
        "test_unknown_outcome_fail_does_not_run_the_call_again",
        "test_unknown_outcome_retry_runs_an_idempotent_call_again",
        "test_unknown_outcome_ask_puts_the_call_to_a_human",
    ),
    "`deps` (tools' `ctx.deps`)": ("test_deps_reach_a_tool_s_run_context",),
    (
        "rate limits and retries: `model_rate_limit`, `model_retry` (every model call, each try "
        "told with its `attempt`), `rate_limits`, `tool_retry` (for `idempotent_tools`; a "
        "record's `attempts`), `RetryScheduled` and `RateLimitChanged` events "
        "([guide](guides/real-apis-at-scale.md))"
    ): (
        "test_a_model_call_refused_for_its_rate_is_tried_again_every_try_told",
        "test_model_retries_stop_at_the_run_s_budget",
        "test_model_retries_never_wait_past_the_run_s_timeout",
        "test_an_idempotent_tool_is_retried_and_its_record_keeps_its_tries",
        "test_a_tool_that_is_not_idempotent_is_never_retried",
    ),
    (
        "shared results: `shared_results` (identical calls in flight at once, in any runs given "
        "the same `SharedResults`, run once; a `ttl` caches successes, in memory or a store; a "
        "record's `shared`) ([guide](guides/real-apis-at-scale.md#shared-results))"
    ): (
        "test_identical_calls_of_two_runs_at_once_run_the_tool_once",
        "test_a_cached_result_serves_a_later_run_and_a_failure_is_never_cached",
    ),
    (
        "big results kept whole: `max_result_chars` (a longer result is shown cut, with a "
        "handle), the built-in `read_result` (offered once a result is cut; a resumed run reads "
        "what it kept before), `ResultKept` events "
        "([guide](guides/real-apis-at-scale.md#big-results-kept-whole))"
    ): (
        "test_a_long_result_is_kept_whole_and_read_by_slices",
        "test_the_model_is_shown_the_head_and_offered_read_result_once_a_result_is_cut",
        "test_a_resumed_run_reads_the_results_kept_before_its_pause",
        "test_a_slice_out_of_range_is_a_failed_call_that_says_why",
        "test_a_tool_of_the_built_in_s_name_is_refused_unless_nothing_is_cut",
    ),
    (
        "structured output: `response_format` (`ToolStrategy`, `ProviderStrategy`), retried, "
        "`structured_response`, `StructuredOutputError`"
    ): ("test_a_structured_answer_is_retried_counted_and_kept",),
    (
        "events: `ModelCallStarted`/`Finished`, `CheckpointSaved` (the last before a pause "
        "too), `RunFinished`, a pause's `ExecutionPaused` (waiting for `HUMAN_EVENT`), a "
        "tool's `ToolProgress` with its `call_id`; one event per fact (a status once per "
        "change); a resumed run's `at` goes on from its pause"
    ): (
        "test_a_completed_run_tells_its_model_calls_tool_calls_checkpoints_and_end",
        "test_a_tool_s_report_is_a_progress_event_of_its_call",
        "test_a_paused_run_ends_its_events_with_the_pause",
        "test_the_pause_event_carries_what_the_run_asks",
        "test_a_pause_the_store_keeps_is_told_as_a_checkpoint",
        "test_a_change_of_status_is_told_once",
        "test_a_resumed_run_s_clock_goes_on_from_its_pause",
    ),
    "the result: a `RunResult`": ("test_the_result_is_the_kernel_s_run_result",),
    "a recorded run replayed (`toolloop.testing.replay`, `toolloop replay`)": (
        "test_a_recorded_run_replays_through_the_code_as_it_is",
    ),
    (
        "a run as a tool ([guide](guides/runs-as-tools.md)): a child run sharing its parent's "
        "budget, limits, events and store; a child's pause for a human pauses a durable "
        "parent, whose resume resumes the child"
    ): ("test_a_run_as_a_tool_answers_its_parent_and_pauses_it_for_a_human",),
}

SHARED = {
    "sync twins": "sync twins",
    "streaming dispatch: a tool starts while the model still writes": (
        "`streaming_dispatch`: a call starts while the model still writes (default `False`)"
    ),
    "streaming API: the run's events as an async iterator": (
        "streaming API: the stream twins (an `async with` block of the run's events as they "
        "happen, then its `result`; `engine_events=False`; leaving early cancels the run)"
    ),
    "structured final output: `response_format`": (
        "structured output: `response_format` (`ToolStrategy`, `ProviderStrategy`), retried, "
        "`structured_response`, `StructuredOutputError`"
    ),
}
"""Rows of the surfaces' table that the kernel's table has too (surface row -> kernel row):
their cells are checked by the kernel matrix's tests of that row."""


def products_of(test: Callable[..., Any]) -> set[str]:
    """The products a test of the kernel matrix is parametrized over."""
    found: set[str] = set()
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize" and mark.args[0] == "make":
            found |= {param.values[0].name for param in mark.args[1]}
    return found


def test_every_row_of_the_kernel_table_is_held_by_the_kernel_matrix_for_every_product() -> None:
    table = kernel_table()
    assert list(table) == list(KERNEL_ROWS), "the kernel table's rows changed: update KERNEL_ROWS"
    for row, tests in KERNEL_ROWS.items():
        for product, cell in table[row].items():
            assert cell and cell not in ("no", "—"), f"{row!r}: {product} has it, the table says"
        for name in tests:
            test = getattr(matrix, name, None)
            assert callable(test), f"{row!r}: test_every_product.py has no {name}"
            assert products_of(test) == set(COLUMNS.values()), f"{name} runs on every product"


def test_the_two_tables_agree_where_both_tell() -> None:
    kernel, surfaces = kernel_table(), surface_table()
    for surface, row in SHARED.items():
        assert row in kernel and surface in surfaces, (surface, row)
        for product in COLUMNS.values():
            has = kernel[row][product] not in ("", "no", "—")
            assert says_yes(surfaces[surface][product]) == has, (surface, product)


# -- the surfaces' table: a check per "yes" ----------------------------------------------------

Check = Callable[[str, Path, str], Awaitable[None]]
"""``check(product, tmp_path, backend)``: a small run of ``product`` that uses the surface
through its public API, and fails if the product does not have it."""

CHECKS: dict[tuple[str, str], Check] = {}


def backs(row: str, *products: str) -> Callable[[Check], Check]:
    """Register a check of ``row`` for ``products``."""

    def register(check: Check) -> Check:
        for product in products:
            CHECKS[row, product] = check
        return check

    return register


EVERY = tuple(COLUMNS.values())


def mailer_run(product: str) -> tuple[matrix.Product, matrix.Mailer]:
    """The kernel matrix's product, scripted to mail Ada and answer, and its mailer."""
    made, mailer = MAKE[product](), matrix.Mailer()
    made.script_tool_call("send", to="ada")
    made.script_answer("sent")
    return made, mailer


@backs("short-circuit: the model is cut off once the answer is settled", "loop")
async def short_circuited(product: str, tmp_path: Path, backend: str) -> None:
    model = ScriptedChatModel()
    model.add_reply(
        chunks=['{"next_action": "', "r", 'esponse", ', '"execution_commands": []}', " " * 64]
    )
    result = await async_plan_and_execute(
        matrix.REQUEST, planner=StructuredPlanner(model), tools=matrix.Mailer().tools
    )
    assert result.stop_reason == "answered"
    (stream,) = model.streams
    assert stream.closed_early  # hung up once "r" settled "response"


@backs("short-circuit: the model is cut off once the answer is settled", "status")
async def decision_short_circuited(product: str, tmp_path: Path, backend: str) -> None:
    reflection = {"verdict": "continue", "note": "mail next", "answer": "nobody reads this"}
    text = json.dumps(reflection) + " " * 64
    model = ScriptedChatModel([ScriptedChatReply(content=text, chunk_size=6)])
    view = StatusView.of(StatusAgentState(user_input=matrix.REQUEST), [])
    read = await LLMStatusSteps(model).reflect(view)
    assert (read.verdict, read.note, read.answer) == ("continue", "mail next", None)
    (stream,) = model.streams
    assert stream.closed_early  # hung up once the verdict and its note were whole


@backs("CLI", *EVERY)
async def on_the_command_line(product: str, tmp_path: Path, backend: str) -> None:
    workdir = make_workdir(tmp_path)
    async with FakeOpenAIServer(responder=Model(CLI_NAME[product])) as server:
        flags = product_flags(server, CLI_NAME[product])
        code, out, err = await toolloop(workdir, backend, "run", "Mail Ann", *flags)
    assert (code, err) == (0, ""), out
    assert "\nstop: answered · " in out and calls(workdir) == [CALL]


@backs("CLI: store, approvals, resume, recover, budgets", *EVERY)
async def durable_on_the_command_line(product: str, tmp_path: Path, backend: str) -> None:
    workdir = make_workdir(tmp_path)
    async with FakeOpenAIServer(responder=Model(CLI_NAME[product])) as server:
        flags = [*product_flags(server, CLI_NAME[product]), "--store", "runs.db"]
        argv = ["run", "Mail Ann", "--run-id", "r1", "--needs-approval", "send_email", *flags]
        code, out, err = await toolloop(workdir, backend, *argv)
        assert (code, err, calls(workdir)) == (3, "", []), out  # paused: nothing ran
        resume = printed_command(out, "to continue: ")
        # approved, with a budget spent before the pause already: the call runs, and the
        # model call after it is refused
        budget = ["--usage-limit", "requests=1"]
        code, out, err = await toolloop(workdir, backend, *resume, *budget)
        assert code == 1 and "\nstop: usage_limit · " in out, out + err
        assert calls(workdir) == [CALL]
        code, out, err = await toolloop(workdir, backend, "recover", "r1", *flags)
    assert "\nstop: usage_limit · " in out, out + err  # the stored result: nothing ran
    assert calls(workdir) == [CALL]


def served_events(url: str, run_id: str) -> list[dict[str, Any]]:
    """The events the viewer at ``url`` serves, up to the end of run ``run_id`` (a stalled
    stream ends by the read timeout; the module's timeout mark guards the rest)."""
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(url + "events", timeout=60) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
                last = events[-1]
                if last.get("kind") == "run_finished" and last.get("execution_id") == run_id:
                    return events
    raise AssertionError("the viewer's stream ended before the run's end")


@backs("live viewer", *EVERY)
async def in_the_viewer(product: str, tmp_path: Path, backend: str) -> None:
    with ViewerSink(meta={"request": "mail ada"}) as sink:
        result = await Driven(product).run(sink)
        served = await anyio.to_thread.run_sync(served_events, sink.url, result.run_id)
    kinds = [event["kind"] for event in served if event.get("execution_id") == result.run_id]
    assert {"run_meta", "tool_call_started", "tool_call_finished", "run_finished"} <= set(kinds)


@backs("SVG timeline", *EVERY)
async def on_a_timeline(product: str, tmp_path: Path, backend: str) -> None:
    recorder = TraceRecorder()
    result = await Driven(product).run(recorder)
    assert result.stop_reason == "answered"
    svg = render_timeline(recorder.trace)
    assert "<svg" in svg and "send" in svg and "answered" in svg


@backs("OpenTelemetry spans", *EVERY)
async def as_spans(product: str, tmp_path: Path, backend: str) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolloop.tracing import OpenTelemetrySpans

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = await Driven(product).run(OpenTelemetrySpans(provider.get_tracer("table")))
    names = [span.name for span in exporter.get_finished_spans()]
    assert "toolloop.run" in names and "execute_tool send" in names and "chat" in names
    assert result.stop_reason == "answered"


@backs("progress from tools: `ctx.report`", *EVERY)
async def reported(product: str, tmp_path: Path, backend: str) -> None:
    await matrix.test_a_tool_s_report_is_a_progress_event_of_its_call(MAKE[product])


@backs("Ray job: many runs over Ray actors", *EVERY)
async def as_a_ray_job(product: str, tmp_path: Path, backend: str) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed")
    from toolloop.ray import AgentJob, Host, LoopJob, RunJob, StatusAgentJob

    made, mailer = mailer_run(product)
    job: RunJob
    if isinstance(made, matrix.Loop):
        job = LoopJob(planner=lambda item: made.planner(), tools=mailer.tools)
    elif isinstance(made, matrix.Status):
        job = StatusAgentJob(agent=lambda: made.agent(mailer.tools))
    else:
        job = AgentJob(agent=lambda: create_agent(made.model, mailer.tools))
    events: list[FlowEvent] = []
    job.setup()  # as an actor does
    result = await job.run(
        {"user_input": matrix.REQUEST, "run_id": "on-ray"}, Host(None, events.append, 0)
    )
    assert (result.run_id, result.stop_reason, mailer.sent) == ("on-ray", "answered", ["ada"])
    assert [e.stop_reason for e in events if isinstance(e, RunFinished)] == ["answered"]


def kernel_check(row: str) -> Check:
    """The check of a row the kernel's table has too: its tests in the kernel matrix."""

    async def check(product: str, tmp_path: Path, backend: str) -> None:
        for name in KERNEL_ROWS[row]:
            test = getattr(matrix, name)
            if "backend" in test.__code__.co_varnames[: test.__code__.co_argcount]:
                await anyio.to_thread.run_sync(test, MAKE[product], backend)  # a sync twin
            else:
                for more in other_params(test):
                    await test(MAKE[product], **more)

    return check


def other_params(test: Callable[..., Any]) -> list[dict[str, Any]]:
    """Each combination of a kernel matrix test's parameters other than its product."""
    combinations: list[dict[str, Any]] = [{}]
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize" and mark.args[0] not in ("make", "backend"):
            combinations = [
                {**c, mark.args[0]: value} for c in combinations for value in mark.args[1]
            ]
    return combinations


for _surface, _row in SHARED.items():
    backs(_surface, *EVERY)(kernel_check(_row))

PROBES: dict[tuple[str, str], Callable[[], bool]] = {
    ("streaming API: the run's events as an async iterator", "agent"): lambda: hasattr(
        Agent, "stream"
    ),
    ("streaming API: the run's events as an async iterator", "status"): lambda: hasattr(
        StatusAgent, "stream"
    ),
}
"""For a "no", whether the product has the surface after all (then the cell must say yes)."""

CLI_ROWS = {"CLI", "CLI: store, approvals, resume, recover, budgets"}
"""Rows checked through processes of the command line: on one backend (the command line's
own tests run both)."""


def cells() -> list[Any]:
    params = []
    for row, by_product in surface_table().items():
        for product, cell in by_product.items():
            for backend in ["asyncio"] if row in CLI_ROWS else ["asyncio", "trio"]:
                params.append(
                    pytest.param(row, product, cell, backend, id=f"{row[:24]}-{product}-{backend}")
                )
    return params


def test_the_surfaces_table_has_every_surface_and_every_product() -> None:
    table = surface_table()
    rows = {row for row, _ in CHECKS} | {row for row, _ in PROBES}
    assert set(table) == rows, (
        f"rows without a check: {sorted(set(table) - rows)}; checks of no row: "
        f"{sorted(rows - set(table))}"
    )
    for row, by_product in table.items():
        assert list(by_product) == list(COLUMNS.values()), row


@pytest.mark.parametrize(("row", "product", "cell", "anyio_backend"), cells())
async def test_each_cell_of_the_surfaces_table_is_true(
    row: str, product: str, cell: str, anyio_backend: str, tmp_path: Path
) -> None:
    if says_yes(cell):
        check = CHECKS.get((row, product))
        assert check is not None, f"{row!r} says yes for {product}: add its check to CHECKS"
        await check(product, tmp_path, anyio_backend)
    else:
        assert (row, product) not in CHECKS, (
            f"{row!r} says no for {product}, but a check of it is there: the cell says yes"
        )
        probe = PROBES.get((row, product))
        assert probe is None or not probe(), (
            f"{product} has {row!r} now: make its cell yes, and add its check to CHECKS"
        )
