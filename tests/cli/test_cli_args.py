"""The command line: bad arguments and failures are told in one line, with the exit status."""

from __future__ import annotations

import importlib
import io
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolloop.__main__ import main as module_main
from toolloop.cli import CLIError, load_object, load_tools, main
from toolloop.loop import loop_flow

TOOLS_SOURCE = '''
def get_weather(city: str) -> dict:
    """The forecast.

    Args:
        city: the city.
    """
    return {"city": city}


TOOLS = [get_weather]
NOT_TOOLS = 42
'''


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    assert "Traceback" not in err
    assert lines[0].startswith("toolloop")
    return lines[0]


def _forget_test_modules() -> None:
    """Each test writes its own ``cli_test_*`` modules: none may be found from another's."""
    for name in [m for m in sys.modules if m.startswith("cli_test_")]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "cli_test_tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_test_modules()
    yield tmp_path
    _forget_test_modules()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "a command is needed: demo, run, resume, recover, graph, trace"),
        (["fly"], "invalid choice: 'fly'"),
        (["run"], "required: REQUEST, --model"),
        (["run", "hi"], "required: --model"),
        (["run", "hi", "--model", "m", "--concurrency", "0"], "expected 1 or more, got 0"),
        (["run", "hi", "--model", "m", "--max-turns", "many"], "expected a whole number"),
        (["run", "hi", "--model", "m", "--timeout", "-1"], "expected more than 0 seconds"),
        (["run", "hi", "--model", "m", "--planner", "psychic"], "invalid choice: 'psychic'"),
        (["run", "hi", "--model", "m", "--structured-output", "xml"], "invalid choice: 'xml'"),
        (["demo", "--backend", "curio"], "invalid choice: 'curio'"),
        (["trace"], "required: ACTION"),
        (["trace", "show"], "required: FILE.jsonl"),
        (["graph", "a", "b"], "unrecognized arguments: b"),
        (["run", "hi", "--model", "m", "--max-rounds", "3"], "--max-rounds is now --max-turns"),
        (["run", "hi", "--model", "m", "--agent", "robot"], "invalid choice: 'robot'"),
        (["run", "hi", "--model", "m", "--usage-limit", "tokens=5"], "expected NAME=N[,NAME=N]"),
        (["run", "hi", "--model", "m", "--usage-limit", "requests=-1"], "expected 0 or more"),
        (["run", "hi", "--model", "m", "--usage-limit", "requests=x"], "a whole number"),
        (["run", "hi", "--model", "m", "--needs-approval", "t"], "--needs-approval needs --store"),
        (["run", "hi", "--model", "m", "--agent", "status", "--answer"], "--answer is the loop's"),
        (
            ["run", "hi", "--model", "m", "--agent", "middleware", "--planner", "tool-calling"],
            "--planner is the loop's",
        ),
        (["resume", "r1", "--model", "m", "--store", "x.db"], "one of the arguments --approve"),
        (["resume", "r1", "--model", "m", "--approve"], "resume needs --store"),
        (["recover", "r1", "--model", "m"], "recover needs --store"),
        (["resume", "r1", "--model", "m", "--approve", "--reject"], "not allowed with argument"),
        (
            ["resume", "r1", "--model", "m", "--store", "x.db", "--edit", "0.0=[1]"],
            "--edit 0.0: the arguments are a JSON object",
        ),
        (["resume", "r1", "--model", "m", "--store", "x.db", "--edit", "0.0"], "CALL_ID=JSON"),
    ],
)
def test_bad_arguments(argv: list[str], words: str) -> None:
    code, out, err = run(*argv)
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert words in line
    assert "--help" in line


def test_help_and_version() -> None:
    code, out, err = run("--help")
    assert code == 0 and err == ""
    assert "usage: toolloop" in out
    for command in ("demo", "run", "graph", "trace"):
        assert command in out
    code, out, _ = run("run", "--help")
    assert code == 0
    for option in ("--tools", "--base-url", "--model", "--planner", "--structured-output"):
        assert option in out
    for option in ("--streaming-dispatch", "--answer", "--trace", "--timeline", "--plain"):
        assert option in out
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("toolloop ")


@pytest.mark.parametrize(
    "argv", [["graph"], ["graph", "loop"], ["graph", "toolloop.loop:loop_flow"]]
)
def test_graph_prints_the_loop_flow(argv: list[str]) -> None:
    code, out, err = run(*argv)
    assert (code, err) == (0, "")
    assert out == loop_flow.to_mermaid()


def test_graph_of_any_flow(tools_dir: Path) -> None:
    (tools_dir / "cli_test_flows.py").write_text(
        "from toolloop.flow import Flow\n"
        "flow = Flow('greet')\n"
        "flow.start.to(str.strip).to(str.title).end()\n",
        encoding="utf-8",
    )
    from toolloop.flow import Flow

    code, out, _ = run("graph", "cli_test_flows:flow")
    assert code == 0
    assert out.startswith("flowchart TD")
    assert "strip" in out and "title" in out
    flow = load_object("cli_test_flows:flow", "graph")
    assert isinstance(flow, Flow) and out == flow.to_mermaid()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["graph", "nowhere"], "unknown flow 'nowhere'"),
        (["graph", "toolloop:__version__"], "is a str, not a toolloop Flow"),
        (["graph", "toolloop_no_such_module:flow"], "no module named 'toolloop_no_such_module'"),
    ],
)
def test_graph_errors(argv: list[str], words: str) -> None:
    code, _, err = run(*argv)
    assert code == 2
    assert words in one_line(err)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("cli_test_tools", "--tools takes MODULE:ATTRIBUTE"),
        ("cli_test_tools:", "--tools takes MODULE:ATTRIBUTE"),
        ("no_such_module_xyz:TOOLS", "no module named 'no_such_module_xyz'"),
        ("cli_test_tools:MISSING", "'cli_test_tools' has no attribute 'MISSING'"),
        ("cli_test_tools:NOT_TOOLS", "is a int; expected a list of tools"),
        ("missing_file.py:TOOLS", "no file 'missing_file.py'"),
    ],
)
def test_bad_tools(tools_dir: Path, spec: str, words: str) -> None:
    code, _, err = run("run", "hi", "--model", "m", "--tools", spec, "--plain")
    assert code == 2
    assert words in one_line(err)


def test_tools_load_from_a_module_a_file_a_registry_and_one_function(tools_dir: Path) -> None:
    (tools_dir / "cli_test_more.py").write_text(
        "from toolloop.tools import ToolRegistry\n"
        "def find_fare(destination: str) -> float:\n"
        '    """A fare.\n\n    Args:\n        destination: where to.\n    """\n'
        "    return 1.0\n"
        "REGISTRY = ToolRegistry([find_fare])\n",
        encoding="utf-8",
    )
    (tools_dir / "cli_test_broken.py").write_text("def broken(:\n", encoding="utf-8")
    registry = load_tools(["cli_test_more:REGISTRY", "cli_test_tools:get_weather"])
    assert registry.names == ["find_fare", "get_weather"]
    registry = load_tools([str(tools_dir / "cli_test_tools.py") + ":TOOLS"])
    assert registry.names == ["get_weather"]
    with pytest.raises(CLIError, match="raised SyntaxError") as caught:
        load_tools(["cli_test_broken:TOOLS"])
    assert caught.value.code == 2
    with pytest.raises(CLIError, match="two tools are named 'get_weather'"):
        load_tools(["cli_test_tools:TOOLS", "cli_test_tools:get_weather"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


def test_server_down_is_one_line_and_status_1(tools_dir: Path) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    code, out, err = run(
        "run",
        "Weather in Lisbon?",
        "--tools",
        "cli_test_tools:TOOLS",
        "--model",
        "m",
        "--base-url",
        base_url,
        "--max-retries",
        "0",
        "--plain",
    )
    assert code == 1
    line = one_line(err)
    assert "connection to the model server at" in line
    assert "is it running?" in line
    assert "(round 0)" in line
    assert "round 0  planning" in out  # the progress got that far


def test_trace_errors(tmp_path: Path) -> None:
    code, _, err = run("trace", "show", str(tmp_path / "none.jsonl"))
    assert code == 1
    assert "cannot read" in one_line(err)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n", encoding="utf-8")
    code, _, err = run("trace", "timeline", str(bad))
    assert code == 1
    assert "is not a toolloop trace: line 1 is not JSON" in one_line(err)


def test_python_dash_m_main_is_the_same_main(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert module_main(["graph"]) == 0
    assert out.getvalue() == loop_flow.to_mermaid()


def test_otel_without_the_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolloop.tracing import _otel

    monkeypatch.setattr(_otel, "otel_trace", None)
    code, out, err = run("run", "hi", "--model", "m", "--otel", "--plain")
    assert code == 2
    assert out == ""
    assert "pip install 'toolloop[otel]'" in one_line(err)
