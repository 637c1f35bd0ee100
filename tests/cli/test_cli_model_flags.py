"""``toolloop run``'s model flags (--max-tokens, --tool-choice, --temperature, --seed) and the
cut-offs it says out loud, against FakeOpenAIServer."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from toolloop import PlannerError
from toolloop.cli import PlainDisplay, RunOptions, async_run, build_parser, describe_error, main
from toolloop.errors import AnswerError
from toolloop.testing import FakeOpenAIServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

TOOLS_SOURCE = '''
async def get_weather(city: str) -> dict:
    """The forecast for a city.

    Args:
        city: the city's name.
    """
    return {"city": city, "sky": "sunny"}


TOOLS = [get_weather]
'''

PLAN = json.dumps(
    {
        "next_action": "execute",
        "execution_commands": [
            {
                "purpose": "weather in Lisbon",
                "tool_name": "get_weather",
                "tool_kwargs": {"city": "Lisbon"},
                "todo_suggestion": "answer",
            }
        ],
    }
)
RESPONSE = '{"next_action": "response", "execution_commands": []}'


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "flag_test_tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def options(server: FakeOpenAIServer, **kwargs: object) -> RunOptions:
    base: dict[str, object] = {
        "request": "Sunglasses for Lisbon?",
        "model": "fake-model",
        "tools": ["flag_test_tools:TOOLS"],
        "base_url": server.base_url,
        "max_retries": 0,
    }
    return RunOptions(**{**base, **kwargs})  # type: ignore[arg-type]


def test_the_flags_parse() -> None:
    argv = "run x --model m --max-tokens 300 --tool-choice required --temperature 0.7 --seed 42"
    args = build_parser().parse_args(argv.split())
    assert (args.max_tokens, args.tool_choice, args.temperature, args.seed) == (
        300,
        "required",
        0.7,
        42,
    )


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--max-tokens", "0", "expected 1 or more"),
        ("--max-tokens", "many", "expected a whole number"),
        ("--temperature", "3", "expected a number from 0 to 2"),
        ("--seed", "x", "expected a whole number"),
    ],
)
def test_bad_flag_values_are_told_in_one_line(flag: str, value: str, said: str) -> None:
    err = io.StringIO()
    code = main(["run", "x", "--model", "m", flag, value], stdout=io.StringIO(), stderr=err)
    assert code == 2
    assert said in err.getvalue() and err.getvalue().count("\n") == 1


async def test_max_tokens_temperature_and_seed_reach_every_request(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(PLAN, chunk_size=9)
        server.add_reply(RESPONSE)
        server.add_reply("Pack them.")
        out = io.StringIO()
        result = await async_run(
            options(server, max_tokens=300, temperature=0.5, seed=42, answer=True),
            out=out,
            display=PlainDisplay(out),
        )
        bodies = [r.body for r in server.requests]
    assert result.stop_reason == "answered"
    assert len(bodies) == 3  # two plans and the answer
    for body in bodies:
        assert (body["max_tokens"], body["temperature"], body["seed"]) == (300, 0.5, 42)
    assert "note: the answer was cut off" not in out.getvalue()


async def test_without_flags_the_planner_keeps_its_defaults(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(RESPONSE)
        await async_run(options(server), out=io.StringIO(), display=PlainDisplay(io.StringIO()))
        body = server.requests[0].body
    assert (body["max_tokens"], body["temperature"]) == (1024, 0.0)
    assert "seed" not in body


async def test_tool_choice_required_reaches_the_tool_calling_planner(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        for _ in range(2):
            server.add_reply(tool_calls=[{"name": "get_weather", "arguments": '{"city": "Porto"}'}])
        out = io.StringIO()
        result = await async_run(
            options(server, planner="tool-calling", tool_choice="required", max_turns=2),
            out=out,
            display=PlainDisplay(out),
        )
        choices = [r.body["tool_choice"] for r in server.requests]
    assert choices == ["required", "required"]
    assert result.stop_reason == "max_turns"  # required forces a call every round
    assert [r.success for r in result.records] == [True, True]


async def test_tool_choice_names_a_tool(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(tool_calls=[{"name": "get_weather", "arguments": '{"city": "Oslo"}'}])
        await async_run(
            options(server, planner="tool-calling", tool_choice="get_weather", max_turns=1),
            out=io.StringIO(),
            display=PlainDisplay(io.StringIO()),
        )
        choice = server.requests[0].body["tool_choice"]
    assert choice == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("planner", "choice", "said"),
    [
        ("structured", "required", "works with --planner tool-calling"),
        ("tool-calling", "sometimes", "neither auto, required, none nor a tool's name"),
    ],
)
async def test_a_tool_choice_that_cannot_work_is_refused_before_any_request(
    tools_module: Path, planner: str, choice: str, said: str
) -> None:
    from toolloop.cli import CLIError

    async with FakeOpenAIServer() as server:
        with pytest.raises(CLIError, match=said) as caught:
            await async_run(options(server, planner=planner, tool_choice=choice), out=io.StringIO())
        assert server.requests == []
    assert caught.value.code == 2


async def test_an_answer_cut_off_by_the_token_limit_gets_a_notice(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(RESPONSE)
        server.add_reply("Pack sunglasses, because the sun in Lis", finish_reason="length")
        out = io.StringIO()
        await async_run(
            options(server, answer=True, max_tokens=12), out=out, display=PlainDisplay(out)
        )
    text = out.getvalue()
    assert "Pack sunglasses, because the sun in Lis\n" in text
    notices = [line for line in text.splitlines() if line.startswith("note: the answer")]
    assert notices == [
        "note: the answer was cut off by the token limit (12 tokens); raise --max-tokens"
    ]


async def test_the_error_line_names_the_round_of_a_streamed_round_that_failed(
    tools_module: Path,
) -> None:
    """A streamed round whose tools ran is kept before the error is told: the line must
    still name the round the planner failed in (round 0), not the next one."""
    async with FakeOpenAIServer() as server:
        end = PLAN.index('"answer"}') + len('"answer"}')
        cut = PLAN[:end]  # the first command is whole, then the stream drops
        server.add_reply(chunks=[cut, ', {"pur'], disconnect_after=3)
        out = io.StringIO()
        with pytest.raises(PlannerError) as caught:
            await async_run(
                options(server, streaming_dispatch=True), out=out, display=PlainDisplay(out)
            )
    error = caught.value
    assert [r.tool_name for r in error.done_plans] == ["get_weather"]  # it ran, and is kept
    assert error.round_index == 0
    assert describe_error(error).endswith("(round 0)")


async def test_the_run_line_tells_the_tokens_used(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(PLAN, usage={"prompt_tokens": 1000, "completion_tokens": 200})
        server.add_reply(RESPONSE, usage=False)  # this server says nothing for this one
        out = io.StringIO()
        await async_run(options(server), out=out, display=PlainDisplay(out))
    (line,) = [text for text in out.getvalue().splitlines() if text.startswith("stop: ")]
    assert (
        " · 1,200 tokens (1,000 in, 200 out) in 2 model calls, 1 not reported (at least "
        "that many) · " in line
    )


def test_a_tool_progress_report_is_one_plain_line() -> None:
    from toolloop.runner import ToolProgress

    event = ToolProgress(
        execution_id="r",
        at=1.5,
        round_index=2,
        tool_name="fetch",
        purpose="read",
        call_id="2.0",
        message="3 of 10\npages",
        data={"done": 3},
    )
    out = io.StringIO()
    PlainDisplay(out)(event)
    assert out.getvalue() == "   1.500s  round 2  ...   fetch: 3 of 10 pages done=3\n"


async def test_the_model_timeout_bounds_the_answer_too(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(RESPONSE)
        # the answer's first words come, then it stalls past --model-timeout (120x slack)
        server.add_reply(chunks=["Pack ", "sunglasses."], delay=60)
        out = io.StringIO()
        with pytest.raises(AnswerError) as caught:
            await async_run(
                options(server, answer=True, model_timeout=0.5), out=out, display=PlainDisplay(out)
            )
    assert "did not finish within 0.5 s (--model-timeout)" in describe_error(caught.value)
    assert caught.value.done_plans == []
