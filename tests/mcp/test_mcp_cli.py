"""``toolloop run --mcp "COMMAND ARGS"`` / ``--mcp-url URL``: MCP servers' tools in a run."""

from __future__ import annotations

import io
import json
import shlex
import sys

import pytest
from mcp_support import SERVER, http_url

from toolloop.cli import RunOptions, async_run, build_parser, main
from toolloop.testing import FakeOpenAIServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

__all__ = ["http_url"]  # the fixture, imported for the tests below

STDIO = shlex.join([sys.executable, str(SERVER), "stdio"])
RESPONSE = '{"next_action": "response", "execution_commands": []}'


def plan(tool_name: str, **kwargs: object) -> str:
    command = {"purpose": f"use {tool_name}", "tool_name": tool_name, "tool_kwargs": kwargs}
    return json.dumps({"next_action": "execute", "execution_commands": [command]})


def test_the_options_repeat() -> None:
    url = "http://127.0.0.1:1/mcp"
    argv = ["run", "hi", "--model", "m", "--mcp", "python a.py", "--mcp", "npx b"]
    args = build_parser().parse_args([*argv, "--mcp-url", url])
    assert args.mcp == ["python a.py", "npx b"]
    assert args.mcp_url == [url]


async def test_run_with_an_mcp_server_over_stdio_and_one_over_http(http_url: str) -> None:
    async with FakeOpenAIServer() as model_server:
        model_server.add_reply(plan("add", a=2, b=40))
        model_server.add_reply(RESPONSE)
        out = io.StringIO()
        result = await async_run(
            RunOptions(
                request="2 + 40?",
                model="fake-model",
                mcp=[STDIO],
                base_url=model_server.base_url,
                max_retries=0,
                plain=True,
            ),
            out=out,
        )
        model_server.add_reply(plan("greet", name="Ada"))
        model_server.add_reply(RESPONSE)
        over_http = await async_run(
            RunOptions(
                request="greet Ada",
                model="fake-model",
                mcp_urls=[http_url],
                base_url=model_server.base_url,
                max_retries=0,
                plain=True,
            ),
            out=io.StringIO(),
        )
    (record,) = result.records
    assert (record.tool_name, record.result) == ("add", {"result": 42})
    text = out.getvalue()
    assert "tools: add, greet, mixed, fail, wait, stats, grow, die, files_read" in text
    assert [(r.tool_name, r.result) for r in over_http.records] == [("greet", "Hello, Ada!")]


def test_a_bad_command_line_is_one_line_and_status_2() -> None:
    err = io.StringIO()
    code = main(["run", "hi", "--model", "m", "--mcp", "python 'unclosed"], stderr=err)
    assert code == 2
    assert err.getvalue().startswith('toolloop: --mcp "python \'unclosed": cannot split')
    assert len(err.getvalue().splitlines()) == 1


def test_a_server_that_cannot_start_is_one_line_and_status_1() -> None:
    err = io.StringIO()
    code = main(["run", "hi", "--model", "m", "--mcp", "/no/such/mcp-server"], stderr=err)
    assert code == 1
    line = err.getvalue()
    assert line.startswith("toolloop: could not open MCP server '/no/such/mcp-server'")
    assert len(line.splitlines()) == 1


def test_two_servers_with_the_same_tools_clash_in_one_line() -> None:
    err = io.StringIO()
    argv = ["run", "hi", "--model", "m", "--mcp", STDIO, "--mcp", STDIO]
    assert main(argv, stderr=err) == 2
    assert "two tools are named 'add'" in err.getvalue()
