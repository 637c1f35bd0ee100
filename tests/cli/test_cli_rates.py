"""``toolloop run``'s rate limits and retries (--model-rate, --model-concurrency,
--model-retries, --tool-rate, --tool-retries): bad values told in one line (exit status 2),
the run options they make, the words a trace's header and a ``resume`` command keep, and
each product, as a process of its own against a FakeOpenAIServer, through a model server
that answers 429 with a Retry-After and a tool that is refused once."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_runs import CALL, PRODUCTS, Model, calls, make_workdir, product_flags, toolloop

from toolloop.cli import RunOptions, build_parser, main
from toolloop.cli._app import _run_options as options_of_args
from toolloop.cli._run import _rate_options, continue_command
from toolloop.kernel import RetryScheduled
from toolloop.ratelimit import RateLimit, RetryPolicy
from toolloop.testing import FakeOpenAIServer
from toolloop.tracing import read_trace

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

RUN = ["run", "hi", "--model", "m"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--model-rate", "0"], "--model-rate: expected a rate above 0: N/s, N/min, or N"),
        (["--model-rate", "abc"], "got 'abc'"),
        (["--model-rate", "nan"], "got 'nan'"),
        (["--model-rate", "inf/s"], "got 'inf/s'"),
        (["--model-rate=-2/s"], "got '-2/s'"),
        (["--model-rate", "-1"], "got '-1'"),
        (["--model-rate", "5/h"], "got '5/h' (the unit is s or min)"),
        (["--model-rate", "/s"], "got '/s'"),
        (["--model-concurrency", "0"], "--model-concurrency: expected 1 or more, got 0"),
        (["--model-retries", "-1"], "--model-retries: expected 0 or more, got -1"),
        (["--model-retries", "many"], "--model-retries: expected a whole number"),
        (["--tool-rate", "search"], "--tool-rate: expected TOOL=RATE (e.g. search=2/s"),
        (["--tool-rate", "search="], "got 'search='"),
        (["--tool-rate", "=2/s"], "got '=2/s'"),
        (["--tool-rate", "search=0/min"], "--tool-rate: search: expected a rate above 0"),
        (["--tool-rate", "search=NaN"], "search: expected a rate above 0"),
        (["--tool-retries", "-3"], "--tool-retries: expected 0 or more, got -3"),
        (
            ["--tool-retries", "2"],
            "--tool-retries 2 retries only the calls of tools safe to run twice, and none "
            "was given: add --idempotent-tool TOOL",
        ),
        (
            ["--tool-rate", "search=2/s", "--tool-rate", "search=3/s"],
            "--tool-rate search: given twice",
        ),
        (
            ["--model-retries", "2", "--max-retries", "1"],
            "--model-retries 2 and --max-retries 1: toolloop makes the model's retries",
        ),
    ],
)
def test_bad_values_are_told_in_one_line(flags: list[str], words: str) -> None:
    code, out, err = run(*RUN, *flags)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0]
    assert "--help" in lines[0]


def test_resume_and_recover_check_them_too() -> None:
    for verb in (["resume", "r1", "--approve"], ["recover", "r1"]):
        code, _, err = run(*verb, "--model", "m", "--store", "x.db", "--tool-retries", "1")
        assert code == 2
        assert "add --idempotent-tool TOOL (see toolloop" in err


def parsed(*flags: str) -> RunOptions:
    return options_of_args(build_parser().parse_args([*RUN, *flags]))


def test_the_flags_make_the_run_options() -> None:
    options = parsed(
        "--model-rate",
        "30/min",
        "--model-concurrency",
        "8",
        "--model-retries",
        "3",
        "--tool-rate",
        "search=2/s",
        "--tool-rate",
        "fetch=5",
        "--idempotent-tool",
        "search",
        "--tool-retries",
        "2",
    )
    assert (options.model_rate, options.model_concurrency, options.model_retries) == (0.5, 8, 3)
    assert options.tool_rates == {"search": 2.0, "fetch": 5.0}
    assert options.tool_retries == 2
    given = _rate_options(options, ["search", "fetch"])
    limit = given["model_rate_limit"]
    assert isinstance(limit, RateLimit)
    assert (limit.rate, limit.concurrency, limit.name, limit.adaptive) == (0.5, 8, "model", True)
    assert given["model_retry"] == RetryPolicy(tries=4)  # 3 retries: 4 tries
    assert {name: limit.rate for name, limit in given["rate_limits"].items()} == {
        "search": 2.0,
        "fetch": 5.0,
    }
    assert given["rate_limits"]["search"] is not given["rate_limits"]["fetch"]  # one each
    assert given["tool_retry"] == RetryPolicy(tries=3)


def test_a_model_limiter_makes_the_tries_max_retries_says_how_many() -> None:
    # with a limiter toolloop makes the tries (it must see each answer); --max-retries
    # keeps its meaning: the retries of a failed request
    assert _rate_options(parsed("--model-rate", "5/s", "--max-retries", "0"), [])[
        "model_retry"
    ] == RetryPolicy(tries=1)
    # none given: the kernel's default policy for a limited model
    assert "model_retry" not in _rate_options(parsed("--model-concurrency", "2"), [])
    # no flag: no option, the client's own retries
    assert _rate_options(parsed(), []) == {}
    assert _rate_options(parsed("--model-retries", "0"), []) == {
        "model_retry": RetryPolicy(tries=1)
    }


def test_a_tool_rate_names_a_loaded_tool(tmp_path: Path) -> None:
    tools = make_workdir(tmp_path) / "tools.py"
    code, _, err = run(*RUN, "--tools", f"{tools}:TOOLS", "--tool-rate", "search=2/s")
    assert code == 2
    assert "--tool-rate search: no such tool (send_email)" in err


def test_the_resume_command_gives_them_again() -> None:
    flags = [
        "--model-rate",
        "100/min",
        "--model-concurrency",
        "3",
        "--model-retries",
        "0",
        "--tool-rate",
        "send_email=0.25",
        "--idempotent-tool",
        "send_email",
        "--tool-retries",
        "1",
    ]
    options = parsed("--store", "runs.db", *flags)
    words = continue_command(options, "r1")
    assert " ".join(words).endswith(
        "--idempotent-tool send_email --model-rate 100/min --model-concurrency 3 "
        "--model-retries 0 --tool-retries 1 --tool-rate send_email=15/min"
    )
    again = options_of_args(build_parser().parse_args([*words[1:], "--approve"]))
    for name in ("model_rate", "model_concurrency", "model_retries", "tool_rates", "tool_retries"):
        assert getattr(again, name) == getattr(options, name), name


# -- each product against a server that refuses for the rate -----------------------------------

FLAKY_TOOLS_SOURCE = '''
import json
import pathlib

from toolloop.errors import RateLimitedError

HERE = pathlib.Path(__file__).parent


def send_email(to: str, body: str) -> dict:
    """Send an email.

    Args:
        to: the address.
        body: the text.
    """
    with (HERE / "calls.log").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"to": to, "body": body}) + "\\n")
    refuse = HERE / "refuse_once"
    if refuse.exists():
        refuse.unlink()
        raise RateLimitedError("slow down", retry_after=0.05)
    return {"receipt": f"RCPT-{to}"}


TOOLS = [send_email]
'''


def own_retries(server: FakeOpenAIServer, product: str) -> list[str]:
    """The product's flags, without the client's retries (toolloop makes them here)."""
    flags = product_flags(server, product)
    at = flags.index("--max-retries")
    return flags[:at] + flags[at + 2 :]


RATE_FLAGS = {  # each product through another way of saying it: the same options for all
    "loop": ["--model-rate", "20/s", "--model-retries", "2"],
    "middleware": ["--model-rate", "1200/min"],  # the limiter's own default retries
    "status": ["--model-concurrency", "2", "--max-retries", "1"],
}


def retries(trace: Path) -> list[RetryScheduled]:
    return [e for e in read_trace(trace).events if isinstance(e, RetryScheduled)]


@pytest.mark.anyio
@pytest.mark.timeout(300)  # a hang guard: each test takes a few seconds
@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_429_with_retry_after_is_retried_and_the_run_succeeds(
    tmp_path: Path, anyio_backend: str, product: str
) -> None:
    workdir = make_workdir(tmp_path)
    async with FakeOpenAIServer(responder=Model(product)) as server:
        server.add_error(429, "too many requests", headers={"Retry-After": "0.1"})
        flags = [*own_retries(server, product), *RATE_FLAGS[product], "--trace", "run.jsonl"]
        code, out, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
        assert server.pending_replies == 0  # the 429 was answered
    assert (code, err) == (0, ""), out
    assert calls(workdir) == [CALL]
    assert "\nstop: answered · " in out
    [retry] = retries(workdir / "run.jsonl")
    assert (retry.target, retry.attempt, retry.status, retry.retry_after) == (
        "model",
        1,
        429,
        0.1,
    )
    assert retry.wait >= 0.1  # never sooner than the server asked
    meta = read_trace(workdir / "run.jsonl").meta
    told = {
        key: meta[key]
        for key in ("model_rate", "model_concurrency", "model_retries")
        if key in meta
    }
    expected = {
        "loop": {"model_rate": "20/s", "model_retries": 2},
        "middleware": {"model_rate": "20/s"},
    }
    assert told == expected.get(product, {"model_concurrency": 2})


@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_without_the_flags_the_429_fails_the_run(tmp_path: Path, anyio_backend: str) -> None:
    workdir = make_workdir(tmp_path)
    async with FakeOpenAIServer(responder=Model("middleware")) as server:
        server.add_error(429, "too many requests", headers={"Retry-After": "0.1"})
        flags = product_flags(server, "middleware")  # --max-retries 0
        code, _, err = await toolloop(workdir, anyio_backend, "run", "Mail Ann", *flags)
    assert code == 1
    assert "429" in err
    assert calls(workdir) == []


@pytest.mark.anyio
@pytest.mark.timeout(300)
@pytest.mark.parametrize("product", PRODUCTS)
async def test_an_idempotent_tool_refused_for_its_rate_is_retried(
    tmp_path: Path, anyio_backend: str, product: str
) -> None:
    (tmp_path / "tools.py").write_text(FLAKY_TOOLS_SOURCE, encoding="utf-8")
    (tmp_path / "refuse_once").touch()
    async with FakeOpenAIServer(responder=Model(product)) as server:
        flags = [*product_flags(server, product), "--trace", "run.jsonl"]
        flags += ["--idempotent-tool", "send_email", "--tool-retries", "1"]
        flags += ["--tool-rate", "send_email=50/s"]
        code, out, err = await toolloop(tmp_path, anyio_backend, "run", "Mail Ann", *flags)
    assert (code, err) == (0, ""), out
    assert calls(tmp_path) == [CALL, CALL]  # refused, then tried again
    assert "\nstop: answered · " in out
    [retry] = retries(tmp_path / "run.jsonl")
    assert (retry.target, retry.tool_name, retry.status, retry.retry_after) == (
        "tool",
        "send_email",
        429,
        0.05,
    )
    meta = read_trace(tmp_path / "run.jsonl").meta
    assert meta["tool_rates"] == {"send_email": "50/s"}
    assert meta["tool_retries"] == 1
    assert meta["idempotent_tools"] == ["send_email"]
    assert json.dumps(meta)  # the header is JSON
