"""The layers of docs/architecture.md, checked on the code: no package imports another's
private module, and no layer imports one it must know nothing of."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import toolloop

ROOT = Path(toolloop.__file__).parent

# package -> the toolloop packages it must not import
KNOWS_NOTHING_OF = {
    "flow": {"tools", "runner", "models", "planners", "kernel", "loop", "agents", "status_agent"}
    | {"ray"},
    "tools": {"flow", "runner", "models", "planners", "kernel", "loop", "agents", "status_agent"}
    | {"ray"},
    "runner": {"models", "planners", "kernel", "loop", "agents", "status_agent", "checkpoints"}
    | {"ray"},
    "models": {"flow", "tools", "runner", "kernel", "loop", "agents", "status_agent", "ray"},
    "planners": {"flow", "kernel", "loop", "agents", "status_agent", "checkpoints", "ray"},
    "checkpoints": {"loop", "agents", "status_agent", "models", "planners", "ray", "kernel"},
    # the kernel: what every run has, under the three products (it knows none of them)
    "kernel": {"loop", "agents", "status_agent", "planners", "ray", "cli", "viewer", "mcp"},
    "loop": {"agents", "status_agent", "ray"},
    "agents": {"loop", "status_agent", "ray"},
    "status_agent": {"loop", "agents", "ray"},
    # reach: Ray runs the loop's runs and any job; it needs neither agent package
    "ray": {"agents", "status_agent", "checkpoints", "cli"},
    # rate limits and retries: used by the runner and the model layer alike, they know
    # only the errors
    "ratelimit": {
        "flow",
        "tools",
        "runner",
        "models",
        "planners",
        "checkpoints",
        "kernel",
        "loop",
        "agents",
        "status_agent",
        "mcp",
        "cli",
        "tracing",
        "viewer",
        "testing",
        "ray",
    },
    # MCP tools are tools: they know nothing of what runs them
    "mcp": {
        "flow",
        "runner",
        "models",
        "planners",
        "loop",
        "agents",
        "status_agent",
        "cli",
        "viewer",
        "ray",
    },
}


def _module_name(path: Path) -> str:
    """The dotted name of the module at ``path``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module or package of toolloop (not a name in one)."""
    where = ROOT.parent.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _imports(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """The toolloop modules ``path`` imports, as absolute dotted names.

    ``from X import y`` imports ``X`` and, when ``y`` is a submodule, ``X.y`` too: the
    ``from .. import status_agent`` of a package's ``__init__.py`` imports
    ``toolloop.status_agent``.
    """
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source if source is not None else path.read_text())):
        if isinstance(node, ast.ImportFrom):
            relative = "." * node.level + (node.module or "")
            name = importlib.util.resolve_name(relative, package) if node.level else relative
            if name.split(".")[0] != "toolloop":
                continue
            found.append((name, node.lineno))
            found += [
                (f"{name}.{a.name}", node.lineno)
                for a in node.names
                if _is_module(f"{name}.{a.name}")
            ]
        elif isinstance(node, ast.Import):
            found += [
                (a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "toolloop"
            ]
    return found


@pytest.mark.parametrize(
    ("path", "source", "imported"),
    [
        # in a package's __init__.py, "." is the package itself
        (
            "agents/__init__.py",
            "from . import _agent",
            ["toolloop.agents", "toolloop.agents._agent"],
        ),
        ("agents/__init__.py", "from ._state import Todo", ["toolloop.agents._state"]),
        (
            "agents/__init__.py",
            "from .. import status_agent",
            ["toolloop", "toolloop.status_agent"],
        ),
        ("agents/__init__.py", "from ..runner import ToolBatch", ["toolloop.runner"]),
        ("agents/middleware/__init__.py", "from .. import Todo", ["toolloop.agents"]),
        # in a module, "." is the package that holds it
        ("agents/_agent.py", "from . import _state", ["toolloop.agents", "toolloop.agents._state"]),
        ("agents/_agent.py", "from ._state import Todo", ["toolloop.agents._state"]),
        ("agents/_agent.py", "from .. import runner", ["toolloop", "toolloop.runner"]),
        ("agents/_agent.py", "from ..status_agent import StatusAgent", ["toolloop.status_agent"]),
        ("agents/middleware/_todos.py", "from .. import Todo", ["toolloop.agents"]),
        # absolute imports, and what is not toolloop's
        ("agents/_agent.py", "import toolloop.loop", ["toolloop.loop"]),
        ("agents/_agent.py", "from toolloop import loop", ["toolloop", "toolloop.loop"]),
        ("agents/_agent.py", "from anyio import sleep\nimport json", []),
    ],
)
def test_imports_resolve_relative_names_as_python_does(
    path: str, source: str, imported: list[str]
) -> None:
    assert [name for name, _ in _imports(ROOT / path, source)] == imported


def _package(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_of_another_package_is_imported(path: Path) -> None:
    mine = _module_name(path)
    for name, line in _imports(path):
        parts = name.split(".")
        private = [i for i, part in enumerate(parts) if part.startswith("_")]
        if not private or parts[1] in ("_errors", "_secrets"):
            continue  # the root's error hierarchy and secret registry are everyone's
        owner = ".".join(parts[: private[0]])
        assert mine.startswith(owner + ".") or mine == owner, (
            f"{path.relative_to(ROOT)}:{line} imports {name}, a private module of "
            f"{owner} (from {mine}); import its public name instead"
        )


@pytest.mark.parametrize("package", sorted(KNOWS_NOTHING_OF))
def test_each_layer_imports_only_what_it_may(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name, line in _imports(path):
            if _package(name) in KNOWS_NOTHING_OF[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []
