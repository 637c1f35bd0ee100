"""``toolloop run`` end to end against FakeOpenAIServer: in-process, and as a subprocess."""

from __future__ import annotations

import io
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from toolloop import LoopResult, ModelCallError, PlannerError
from toolloop.cli import PlainDisplay, RunOptions, async_run, describe_error
from toolloop.runner import ToolCallFinished
from toolloop.testing import FakeOpenAIServer
from toolloop.tracing import read_trace

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

TOOLS_SOURCE = '''
import anyio


async def get_weather(city: str) -> dict:
    """The forecast for a city.

    Args:
        city: the city's name.
    """
    await anyio.sleep(0.05)
    return {"city": city, "sky": "sunny"}


def find_fare(destination: str) -> float:
    """The cheapest fare from Madrid, in EUR.

    Args:
        destination: where to.
    """
    return {"Lisbon": 89.0}[destination]


TOOLS = [get_weather, find_fare]
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
            },
            {
                "purpose": "fare to Faro",
                "tool_name": "find_fare",
                "tool_kwargs": {"destination": "Faro"},
                "todo_suggestion": "answer",
            },
        ],
    }
)
RESPONSE = '{"next_action": "response", "execution_commands": []}'
ANSWER = "Lisbon is sunny; pack sunglasses."


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "run_test_tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def script(server: FakeOpenAIServer) -> None:
    server.add_reply(PLAN, chunk_size=7)
    server.add_reply(chunks=['{"next_action": "r', 'esponse", "execution_commands": []}'])
    server.add_reply(ANSWER, chunk_size=5)


async def test_run_in_process_plain(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        script(server)
        out = io.StringIO()
        options = RunOptions(
            request="Sunglasses for Lisbon?",
            model="fake-model",
            tools=["run_test_tools:TOOLS"],
            base_url=server.base_url,
            api_key="sk-test-0123456789abcdefghijkl",
            max_retries=0,
            answer=True,
            trace=tools_module / "run.jsonl",
            timeline=tools_module / "run.svg",
        )
        result = await async_run(options, out=out)
        requests = list(server.requests)
    assert isinstance(result, LoopResult)  # the loop's, with its rounds
    assert result.stop_reason == "answered"
    assert result.rounds == 1
    assert [r.success for r in result.records] == [True, False]
    text = out.getvalue()
    assert "sk-test-0123456789abcdefghijkl" not in text
    lines = text.splitlines()
    assert lines[0] == "request: Sunglasses for Lisbon?"
    assert re.fullmatch(
        r"model fake-model at http://127\.0\.0\.1:\d+/v1/? · structured planner · "
        r"2 tools: get_weather, find_fare",
        lines[1],
    )
    events = [line for line in lines if re.match(r"^ +\d+\.\d{3}s  ", line)]
    words = [re.sub(r"^ +\d+\.\d{3}s  ", "", line) for line in events]
    assert words[0] == "round 0  planning"
    assert re.fullmatch(r"round 0  plan: execute 2 commands \(\d+ ms\)", words[1])
    assert 'round 0  start #0 get_weather city="Lisbon"' in words
    assert any(
        re.fullmatch(
            r'round 0  ok    #0 get_weather \d+ ms -> \{"city": "Lisbon", "sky": "sunny"\}', w
        )
        for w in words
    )
    assert any(
        re.fullmatch(r"round 0  FAIL  #1 find_fare \d+ ms: tool 'find_fare' raised KeyError.*", w)
        for w in words
    )
    assert re.fullmatch(
        r"round 1  plan: response, short-circuit: .* \(\d+ ms\)",
        next(w for w in words if w.startswith("round 1  plan:")),
    )
    assert words[-1] == "finished: answered after 1 round, 2 records"
    assert "action_results (injected into the final prompt), one line each:" in text
    assert f"\nanswer:\n{ANSWER}\n" in text
    assert "stop: answered · 1 round · 2 records (1 failed)" in text
    # the answer is the run's third model call, and the last line says so
    assert re.search(
        r"\nwith the answer: [\d,]+ tokens \([\d,]+ in, [\d,]+ out\) in 3 model calls", text
    )
    # the key went to the server, and nowhere else
    assert requests[0].headers["authorization"] == "Bearer sk-test-0123456789abcdefghijkl"
    trace = read_trace(tools_module / "run.jsonl")
    assert trace.meta["request"] == "Sunglasses for Lisbon?"
    assert trace.meta["tools"] == ["get_weather", "find_fare"]
    assert sum(isinstance(e, ToolCallFinished) for e in trace.events) == 2
    raw = (tools_module / "run.jsonl").read_text(encoding="utf-8")
    assert "sk-test-0123456789abcdefghijkl" not in raw
    root = ET.parse(tools_module / "run.svg").getroot()
    assert root.tag.endswith("svg")
    assert f"trace: {tools_module / 'run.jsonl'} (" in text
    assert f"timeline: {tools_module / 'run.svg'}" in text


async def test_run_with_the_tool_calling_planner(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_reply(
            tool_calls=[{"name": "get_weather", "arguments": '{"city": "Porto"}'}], chunk_size=5
        )
        server.add_reply("No more tools needed.")
        out = io.StringIO()
        result = await async_run(
            RunOptions(
                request="Porto?",
                model="fake-model",
                tools=["run_test_tools:TOOLS"],
                base_url=server.base_url,
                planner="tool-calling",
                max_retries=0,
                streaming_dispatch=True,
            ),
            out=out,
        )
    assert [r.tool_name for r in result.records] == ["get_weather"]
    assert "tool-calling planner" in out.getvalue()
    assert "finished: answered after 1 round, 1 record" in out.getvalue()


async def test_a_model_error_is_told_in_one_line(tools_module: Path) -> None:
    async with FakeOpenAIServer() as server:
        server.add_error(401, "Incorrect API key provided: sk-abc***xyz", code="invalid_api_key")
        out = io.StringIO()
        with pytest.raises(PlannerError) as caught:
            await async_run(
                RunOptions(
                    request="?",
                    model="fake-model",
                    tools=["run_test_tools:TOOLS"],
                    base_url=server.base_url,
                    structured_output="json_schema",
                    max_retries=0,
                    trace=tools_module / "failed.jsonl",
                ),
                out=out,
                display=PlainDisplay(out),
            )
    assert isinstance(caught.value.__cause__, ModelCallError)
    line = describe_error(caught.value)
    assert "\n" not in line
    assert line.startswith("the model server at http://127.0.0.1:")
    assert "answered HTTP 401" in line and line.endswith("(round 0)")
    # the trace of the failed run is written: it shows how far it got
    trace = read_trace(tools_module / "failed.jsonl")
    assert [e.kind for e in trace.events][-1] == "execution_failed"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_dash_m_toolloop_run(tmp_path: Path) -> None:
    """The real command in a subprocess against a server started here: plain mode (stdout is
    a pipe), an answer, a trace and a timeline, exit status 0."""
    (tmp_path / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    async with FakeOpenAIServer() as server:
        script(server)
        process = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "toolloop",
                "run",
                "Sunglasses for Lisbon?",
                "--tools",
                "tools:TOOLS",
                "--base-url",
                server.base_url,
                "--model",
                "fake-model",
                "--max-retries",
                "0",
                "--answer",
                "--trace",
                "out.jsonl",
                "--timeline",
                "out.svg",
            ],
            cwd=tmp_path,
            check=False,
        )
    stdout = process.stdout.decode()
    stderr = process.stderr.decode()
    assert process.returncode == 0, stderr
    assert stderr == ""
    assert "\x1b[" not in stdout  # no escapes when stdout is not a terminal
    assert re.search(r"^ +\d+\.\d{3}s  round 0  plan: execute 2 commands", stdout, re.M)
    assert "finished: answered after 1 round, 2 records" in stdout
    assert f"answer:\n{ANSWER}\nwith the answer: " in stdout  # and what the run cost in all
    assert read_trace(tmp_path / "out.jsonl").events
    ET.parse(tmp_path / "out.svg")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_dash_m_toolloop_run_server_down(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    async with FakeOpenAIServer() as server:
        base_url = server.base_url  # closed once the block is left
    command = [sys.executable, "-m", "toolloop", "run", "?", "--tools", "tools.py:TOOLS"]
    command += ["--base-url", base_url, "--model", "m", "--max-retries", "0"]
    process = await anyio.run_process(
        command,
        cwd=tmp_path,
        check=False,
    )
    stderr = process.stderr.decode()
    assert process.returncode == 1
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert stderr.startswith("toolloop: the connection to the model server at ")


async def test_a_run_that_times_out_keeps_its_results(tools_module: Path) -> None:
    (tools_module / "slow_tools.py").write_text(
        "import anyio\n"
        "async def get_weather(city: str) -> dict:\n"
        '    """Slow.\n\n    Args:\n        city: the city.\n    """\n'
        "    if city == 'Lisbon':\n"
        "        await anyio.sleep(10)\n"
        "    return {'city': city}\n",
        encoding="utf-8",
    )
    plan = json.dumps(
        {
            "next_action": "execute",
            "execution_commands": [
                {"purpose": city, "tool_name": "get_weather", "tool_kwargs": {"city": city}}
                for city in ("Lisbon", "Porto")
            ],
        }
    )
    async with FakeOpenAIServer() as server:
        server.add_reply(plan)
        out = io.StringIO()
        result = await async_run(
            RunOptions(
                request="?",
                model="fake-model",
                tools=["slow_tools:get_weather"],
                base_url=server.base_url,
                max_retries=0,
                timeout=0.5,
            ),
            out=out,
        )
    assert result.stop_reason == "timeout"
    assert [(r.purpose, r.success) for r in result.records] == [
        ("Lisbon", False),
        ("Porto", True),
    ]
    assert "stop: timeout · 1 round · 2 records (1 failed)" in out.getvalue()
