"""MCP tools against a real MCP server (``mcp_server.py``, written with the official SDK),
over stdio (a subprocess per session) and Streamable HTTP (127.0.0.1), on asyncio and trio."""

from __future__ import annotations

import io
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_support import http_process, http_server, http_url, is_alive, stdio_server

from toolloop import ToolExecutionRecord, async_plan_and_execute
from toolloop.errors import ToolDefinitionError
from toolloop.mcp import MCPConnection, MCPConnectionError, MCPServerHTTP, MCPServerStdio
from toolloop.runner import Executor, ToolCommand
from toolloop.testing import ScriptedPlanner
from toolloop.tools import Tool, ToolRegistry

pytestmark = pytest.mark.anyio

__all__ = ["http_url"]  # the fixture, imported for the tests below

HANG_GUARD = 30.0
"""Seconds a wait for the server may take before the test fails (each is ~0.01-1 s)."""


def plan(*commands: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "next_action": "execute",
        "execution_commands": [
            {"purpose": f"call {name}", "tool_name": name, "tool_kwargs": kwargs}
            for name, kwargs in commands
        ],
    }


async def run(tools: Any, *rounds: dict[str, Any], **options: Any) -> list[ToolExecutionRecord]:
    result = await async_plan_and_execute(
        "use the server", tools=tools, planner=ScriptedPlanner(list(rounds)), **options
    )
    return list(result.records)


Opener = Callable[..., MCPConnection]


@pytest.fixture(params=["stdio", "http"])
def opener(request: pytest.FixtureRequest) -> Opener:
    """Makes a session with the test server, over one transport or the other."""
    if request.param == "stdio":
        return stdio_server
    url = request.getfixturevalue("http_url")
    return lambda **options: http_server(url, **options)


async def stats(server: MCPConnection) -> dict[str, Any]:
    value = await server.call_tool("stats", {})
    assert isinstance(value, dict)
    return value


# -- tools ------------------------------------------------------------------------------------


async def test_the_server_tools_are_toolloop_tools(opener: Opener) -> None:
    async with opener(prefix="t") as server:
        tools = server.tools
        assert all(isinstance(tool, Tool) for tool in tools)
        by_name = {tool.name: tool for tool in tools}
        for name in ("t_add", "t_greet", "t_fail", "t_wait", "t_grow", "t_files_read"):
            assert name in by_name
        add = by_name["t_add"]
        assert add.description == "Add two whole numbers."
        assert add.parameters["required"] == ["a", "b"]
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert add.timeout == 300.0
        # the tools are the server's, whatever its order, and a registry takes them
        assert ToolRegistry(tools).names == [tool.name for tool in tools]
        assert server.registry().names == [tool.name for tool in tools]
        assert "open" in repr(server)


async def test_results_and_errors_become_records(opener: Opener) -> None:
    async with opener() as server:
        records = await run(
            server.tools,
            plan(
                ("add", {"a": 2, "b": 3}),
                ("greet", {"name": "Ada"}),
                ("mixed", {}),
                ("fail", {"message": "the disk is full"}),
                ("files_read", {"path": "notes.txt"}),
                ("no_such_tool", {}),
            ),
        )
    add, greet, mixed, fail, read, unknown = records
    assert (add.success, add.result) == (True, {"result": 5})  # structured content
    assert (greet.success, greet.result) == (True, "Hello, Ada!")  # text only
    assert mixed.success
    assert mixed.result == [
        {"type": "text", "text": "a picture:"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    ]
    assert not fail.success
    assert fail.error_type == "MCPToolError"
    assert fail.error is not None
    assert "tool 'fail' failed" in fail.error
    assert "the disk is full" in fail.error
    assert (read.success, read.result) == (True, {"result": "contents of notes.txt"})
    assert not unknown.success
    assert unknown.error is not None
    assert "no tool named 'no_such_tool'" in unknown.error


async def test_arguments_are_checked_before_the_call(opener: Opener) -> None:
    async with opener() as server:
        before = await stats(server)
        records = await run(
            server.tools,
            plan(("wait", {"seconds": "soon"}), ("wait", {}), ("add", {"a": 1.5, "b": 2})),
        )
        after = await stats(server)
    assert [r.success for r in records] == [False, False, False]
    errors = [r.error or "" for r in records]
    assert "do not fit its schema" in errors[0]
    assert "expected number, got 'soon'" in errors[0]
    assert "missing required argument 'seconds'" in errors[1]
    assert "at 'a': expected integer, got 1.5" in errors[2]
    assert all(r.error_type is None for r in records)  # refused here, never sent
    assert after["started"] == before["started"]  # the server's `wait` never ran


async def test_a_timeout_cancels_the_call_on_the_server(opener: Opener) -> None:
    tag = uuid.uuid4().hex
    async with opener(timeout=2.0) as server:
        before = await stats(server)
        (timed_out,) = await run(server.tools, plan(("wait", {"seconds": 60, "tag": tag})))
        assert not timed_out.success
        assert timed_out.error == "tool 'wait' did not finish within 2.0 s; it was cancelled"
        with anyio.fail_after(HANG_GUARD):
            # the server counts the cancellation in its own time: ask until it has
            while tag not in (now := await stats(server))["cancelled_tags"]:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert now["finished"] == before["finished"]
        # the session goes on
        (added,) = await run(server.tools, plan(("add", {"a": 1, "b": 1})))
    assert added.result == {"result": 2}


# -- the tool list ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_changed_tool_list_is_picked_up(opener: Opener, protocol: str) -> None:
    name = f"extra_{uuid.uuid4().hex[:8]}"
    async with opener(protocol=protocol, prefix="s") as server:
        assert f"s_{name}" not in [t.name for t in server.tools]
        seen = server.tool_changes
        (grown,) = await run(server.tools, plan(("s_grow", {"name": name})))
        assert grown.success
        with anyio.fail_after(HANG_GUARD):
            while f"s_{name}" not in [t.name for t in server.tools]:
                await server.wait_tools_changed(seen)
                seen = server.tool_changes
        (new,) = await run(server.tools, plan((f"s_{name}", {})))
        listed = [t.name for t in await server.list_tools()]
    assert new.result == {"result": "new"}
    assert f"s_{name}" in listed


# -- lifetime --------------------------------------------------------------------------------


async def test_closing_the_session_stops_the_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with stdio_server(pid_file) as server:
        pid = int(pid_file.read_text())
        assert is_alive(pid)
        tools = server.tools
    assert not is_alive(pid)
    assert "closed" in repr(server)
    # its tools now fail their records, quickly and clearly
    (record,) = await run(tools, plan(("add", {"a": 1, "b": 2})))
    assert not record.success
    assert record.error is not None
    assert "the session is closed" in record.error
    with pytest.raises(MCPConnectionError, match="the session is closed"):
        await server.list_tools()


async def test_cancelling_the_block_closes_the_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = anyio.Event()

    def on_event(event: Any) -> None:
        if getattr(event, "kind", "") == "tool_call_started":
            started.set()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:

            async def use_the_server() -> None:
                async with stdio_server(pid_file) as server:
                    await run(server.tools, plan(("wait", {"seconds": 600})), on_event=on_event)

            tg.start_soon(use_the_server)
            await started.wait()
            pid = int(pid_file.read_text())
            assert is_alive(pid)
            tg.cancel_scope.cancel()
    assert not is_alive(pid)


async def test_closing_while_a_call_runs_fails_its_record(opener: Opener) -> None:
    started = anyio.Event()
    records: list[ToolExecutionRecord] = []

    def on_event(event: Any) -> None:
        if getattr(event, "kind", "") == "tool_call_started":
            started.set()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            async with opener() as server:

                async def use_the_server() -> None:
                    records.extend(
                        await run(server.tools, plan(("wait", {"seconds": 600})), on_event=on_event)
                    )

                tg.start_soon(use_the_server)
                await started.wait()
            # the block has closed the session while the call was running
    (record,) = records
    assert not record.success
    assert record.error is not None
    assert "closed while the call ran" in record.error


async def test_a_run_timeout_cancels_the_call_and_the_session_still_closes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with stdio_server(pid_file) as server:
        result = await async_plan_and_execute(
            "wait",
            tools=server.tools,
            planner=ScriptedPlanner([plan(("wait", {"seconds": 600}))]),
            timeout=2.0,
            on_timeout="finish",
        )
        assert result.stop_reason == "timeout"
        (record,) = result.records
        assert not record.success
        # the server was told, and counts the cancelled call
        with anyio.fail_after(HANG_GUARD):
            while (await stats(server))["cancelled"] == 0:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        pid = int(pid_file.read_text())
    assert not is_alive(pid)


async def test_an_error_in_the_block_comes_out_as_it_is(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(LookupError, match="not here"):
        async with stdio_server(pid_file):
            raise LookupError("not here")
    assert not is_alive(int(pid_file.read_text()))


async def test_a_lost_connection_fails_records_not_the_run() -> None:
    async with stdio_server() as server:
        records = await run(server.tools, plan(("die", {})), plan(("add", {"a": 1, "b": 2})))
        with pytest.raises(MCPConnectionError, match="connection was lost"):
            await server.list_tools()
    died, after = records
    assert not died.success
    assert died.error_type == "MCPConnectionError"
    assert died.error is not None
    assert "connection was lost" in died.error
    assert not after.success
    assert after.error is not None
    assert "connection was lost" in after.error


async def test_a_lost_http_server_fails_records_not_the_run() -> None:
    with http_process() as (url, process):
        async with http_server(url) as server:
            (before,) = await run(server.tools, plan(("add", {"a": 1, "b": 2})))
            process.kill()
            process.wait()
            (after,) = await run(server.tools, plan(("add", {"a": 1, "b": 2})))
    assert before.success
    assert not after.success
    assert after.error_type == "MCPConnectionError"
    assert after.error is not None
    assert "connection was lost" in after.error


async def test_a_session_opens_once(opener: Opener) -> None:
    server = opener()
    async with server:
        pass
    with pytest.raises(RuntimeError, match="already opened"):
        async with server:
            pass  # pragma: no cover


# -- several servers, and the agents ---------------------------------------------------------


async def test_several_servers_in_one_run(http_url: str) -> None:
    async with stdio_server(prefix="a") as one, http_server(http_url, prefix="b") as two:
        records = await run(
            [*one.tools, *two.tools],
            plan(("a_add", {"a": 1, "b": 2}), ("b_add", {"a": 3, "b": 4})),
        )
    assert [r.result for r in records] == [{"result": 3}, {"result": 7}]


async def test_two_servers_without_prefix_clash(http_url: str) -> None:
    async with stdio_server() as one, http_server(http_url) as two:
        with pytest.raises(ToolDefinitionError, match="two tools are named 'add'"):
            ToolRegistry([*one.tools, *two.tools])


async def test_the_middleware_agent_uses_mcp_tools(opener: Opener) -> None:
    from toolloop.agents import create_agent
    from toolloop.testing import FakeToolCall, ScriptedChatModel, ScriptedChatReply

    def responder(request: Any) -> Any:
        answered = [m for m in request.messages if m["role"] == "tool"]
        if answered:
            return f"the sum: {answered[-1]['content']}"
        return ScriptedChatReply(tool_calls=(FakeToolCall("m_add", '{"a": 20, "b": 22}'),))

    async with opener(prefix="m") as server:
        agent = create_agent(ScriptedChatModel(responder=responder), server.tools)
        result = await agent.run("add them")
    (record,) = result.records
    assert record.result == {"result": 42}  # the tool's value as it came (the model: its text)
    assert result.text is not None
    assert "42" in result.text


async def test_the_status_agent_uses_mcp_tools(opener: Opener) -> None:
    from toolloop.status_agent import StatusAgent

    def decide(view: Any) -> dict[str, Any]:
        if not view.records:
            return {
                "action": "call_tools",
                "tool_calls": [{"tool_name": "greet", "arguments": {"name": "Ada"}}],
            }
        return {"action": "finish", "answer": str(view.records[-1].record.result)}

    async with opener() as server:
        agent = StatusAgent(
            tools=server.tools,
            analyze=lambda view: "greet Ada",
            plan=lambda view: ["greet"],
            decide=decide,
            reflect=lambda view: {"verdict": "finish", "answer": "done"},
            converse=lambda view: "-",
        )
        result = await agent.run("greet Ada")
    assert [r.result for r in result.records] == ["Hello, Ada!"]


async def test_calls_through_the_executor_run_concurrently(opener: Opener) -> None:
    async with opener() as server:
        executor = Executor(server.tools, concurrency=4)
        commands = [
            ToolCommand(purpose="sum", tool_name="add", tool_kwargs={"a": i, "b": i})
            for i in range(8)
        ]
        records = await executor.run(commands)
    assert [r.result for r in records] == [{"result": 2 * i} for i in range(8)]


# -- opening ---------------------------------------------------------------------------------


async def test_a_server_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MCPConnectionError, match="could not open MCP server"):
        async with MCPServerStdio(str(tmp_path / "no-such-program")):
            pass  # pragma: no cover


async def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    with anyio.fail_after(HANG_GUARD):
        with pytest.raises(MCPConnectionError, match=r"within 3\.0 s \(connect_timeout\)"):
            async with MCPServerStdio(sys.executable, ["-c", code], connect_timeout=3.0):
                pass  # pragma: no cover
    assert not is_alive(int(pid_file.read_text()))


async def test_an_unreachable_url_is_a_clear_error() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://user:pass-0123456789@127.0.0.1:{port}/mcp"
    server = MCPServerHTTP(url, headers={"Authorization": "Bearer tok-0123456789abcdef"})
    assert server.label == f"http://127.0.0.1:{port}/mcp"
    with anyio.fail_after(HANG_GUARD), pytest.raises(MCPConnectionError) as caught:
        async with server:
            pass  # pragma: no cover
    text = str(caught.value)
    assert "could not open MCP server" in text
    assert "pass-0123456789" not in text
    assert "tok-0123456789abcdef" not in text


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="prefix must be"):
        MCPServerStdio("python", prefix="a b")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        MCPServerStdio("python", timeout=0)
    with pytest.raises(ValueError, match="connect_timeout must be"):
        MCPServerStdio("python", connect_timeout=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from_command_line"):
        MCPServerStdio("python", "server.py")
    with pytest.raises(ValueError, match="http:// or https://"):
        MCPServerHTTP("127.0.0.1:8000/mcp")
    with pytest.raises(ValueError, match="protocol must be"):
        MCPServerHTTP("http://127.0.0.1:8000/mcp", protocol="2025")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stderr must be a file with a descriptor"):
        MCPServerStdio("python", stderr=io.StringIO())
    server = MCPServerStdio.from_command_line("python -m 'my server' --flag")
    assert (server.command, server.args) == ("python", ["-m", "my server", "--flag"])
    with pytest.raises(ValueError, match="empty"):
        MCPServerStdio.from_command_line("  ")


def test_without_the_sdk_the_import_says_what_to_install() -> None:
    import subprocess

    code = "import sys; sys.modules['mcp'] = None; import toolloop.mcp"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install 'toolloop[mcp]'" in done.stderr


def test_the_docs_show_the_example_server_as_it_is() -> None:
    root = Path(__file__).resolve().parents[2]
    server = (root / "docs/examples/weather_server.py").read_text(encoding="utf-8")
    page = (root / "docs/mcp.md").read_text(encoding="utf-8")
    assert server in page
