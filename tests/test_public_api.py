"""The public surface: complete, sorted, importable, typed."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import toolloop

PUBLIC_MODULES = [
    "toolloop",
    "toolloop.agents",
    "toolloop.agents.middleware",
    "toolloop.checkpoints",
    "toolloop.cli",
    "toolloop.errors",
    "toolloop.flow",
    "toolloop.kernel",
    "toolloop.loop",
    "toolloop.mcp",
    "toolloop.models",
    "toolloop.planners",
    "toolloop.pytest_plugin",
    "toolloop.ray",
    "toolloop.ratelimit",
    "toolloop.runner",
    "toolloop.status_agent",
    "toolloop.testing",
    "toolloop.tools",
    "toolloop.tracing",
    "toolloop.viewer",
]

MENU_GROUPS = [
    "# the main calls",
    "# tools and what comes of them",
    "# planners and models",
    "# agents",
    "# checkpoints and human decisions",
    "# errors",
]


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("name", [m for m in PUBLIC_MODULES if m != "toolloop"])
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_key), f"{name}.__all__ is not sorted"
    assert len(names) == len(set(names))
    for attr in names:
        assert hasattr(module, attr), f"{name}.{attr} is in __all__ but missing"


def _menu() -> list[list[str]]:
    """The top level's ``__all__`` as written: its groups, in order."""
    source = Path(toolloop.__file__).read_text()
    body = source[source.index("__all__ = [") : source.index("]\n", source.index("__all__ = ["))]
    groups: list[list[str]] = []
    for line in body.splitlines()[1:]:
        line = line.strip()
        if line.startswith("#"):
            groups.append([])
            assert line in MENU_GROUPS, line
        elif line:
            groups[-1].extend(n.strip().strip('"') for n in line.split(",") if n.strip())
    return groups


def test_the_top_level_is_a_short_grouped_menu() -> None:
    groups = _menu()
    assert len(groups) == len(MENU_GROUPS)
    for group in groups:
        assert group == sorted(group, key=_isort_key), group
    names = [n for group in groups for n in group]
    assert names == list(toolloop.__all__)
    assert 25 <= len(names) <= 35, len(names)
    for name in names:
        value = getattr(toolloop, name)
        assert value is not None


def test_the_top_level_names_are_the_subpackages_objects() -> None:
    from toolloop import agents, checkpoints, errors, loop, planners, runner, tools

    for name in ("async_plan_and_execute", "plan_and_execute", "LoopResult"):
        assert getattr(toolloop, name) is getattr(loop, name)
    assert toolloop.Tool is tools.Tool
    assert toolloop.ToolExecutionRecord is runner.ToolExecutionRecord
    assert toolloop.StructuredPlanner is planners.StructuredPlanner
    assert toolloop.create_agent is agents.create_agent
    assert toolloop.SQLiteCheckpointStore is checkpoints.SQLiteCheckpointStore
    assert toolloop.ToolloopError is errors.ToolloopError


def test_import_toolloop_is_light() -> None:
    code = (
        "import sys, toolloop; "
        "heavy = [m for m in ('openai', 'sqlite3', 'toolloop.agents', 'toolloop.status_agent',"
        " 'toolloop.loop', 'jsonschema', 'mcp') if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("toolloop", "Flow"),  # toolloop.flow
        ("toolloop", "PlanDecided"),  # toolloop.loop
        ("toolloop", "ToolDefinitionError"),  # toolloop.errors
        ("toolloop", "CommandStarted"),  # toolloop.runner.ToolCallStarted
        ("toolloop.agents", "ToolCallFinished"),  # toolloop.runner
        ("toolloop.agents", "StatusAgent"),  # toolloop.status_agent
        ("toolloop.agents", "ApprovalPolicy"),  # toolloop.status_agent.RequireApproval
        ("toolloop.agents", "ModelCallFinished"),  # toolloop.kernel
        ("toolloop.agents", "AgentFinished"),  # toolloop.kernel.RunFinished
        ("toolloop.agents.middleware", "ApprovalPolicy"),  # toolloop.kernel.Approval
    ],
)
def test_a_name_has_one_path(module: str, name: str) -> None:
    with pytest.raises(AttributeError, match=f"no attribute {name!r}"):
        getattr(importlib.import_module(module), name)


def test_the_middleware_have_one_module() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("toolloop.middleware")  # toolloop.agents.middleware


def test_only_menu_names_are_imported_on_first_use() -> None:
    """A module-level ``__getattr__`` keeps an import light; it serves no other path."""
    root = Path(toolloop.__file__).parent
    lazy = {
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
            for node in ast.parse(p.read_text()).body
        )
    }
    assert lazy == {"__init__.py", "models/__init__.py"}  # the menu; OpenAIChatModel
    assert set(toolloop._HOME) <= set(toolloop.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        toolloop.nothing_here  # noqa: B018


def test_every_public_module_is_listed() -> None:
    found = {"toolloop"}
    for info in pkgutil.walk_packages(toolloop.__path__, "toolloop."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    assert found == set(PUBLIC_MODULES)


def test_package_is_typed() -> None:
    assert (Path(toolloop.__file__).parent / "py.typed").exists()


def test_no_asyncio_import_in_the_library() -> None:
    root = Path(toolloop.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(
            line.strip().startswith(("import asyncio", "from asyncio"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []
