"""The layers of docs/architecture.md, checked on the code: no package imports another's
private module, and no layer imports one it must know nothing of."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import toolloop

ROOT = Path(toolloop.__file__).parent

# package -> the toolloop packages it must not import
KNOWS_NOTHING_OF = {
    "flow": {"tools", "runner", "models", "planners", "loop", "agents", "status_agent", "ray"},
    "tools": {"flow", "runner", "models", "planners", "loop", "agents", "status_agent", "ray"},
    "runner": {"models", "planners", "loop", "agents", "status_agent", "checkpoints", "ray"},
    "models": {"flow", "tools", "runner", "loop", "agents", "status_agent", "ray"},
    "planners": {"flow", "loop", "agents", "status_agent", "checkpoints", "ray"},
    "checkpoints": {"loop", "agents", "status_agent", "models", "planners", "ray"},
    "loop": {"agents", "status_agent", "ray"},
    "agents": {"loop", "status_agent", "ray"},
    "status_agent": {"loop", "agents", "ray"},
    # reach: Ray runs the loop's runs and any job; it needs neither agent package
    "ray": {"agents", "status_agent", "checkpoints", "cli"},
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


def _imports(path: Path) -> list[tuple[str, int]]:
    """The toolloop modules ``path`` imports, as absolute dotted names."""
    module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("toolloop"):
                found.append((name, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("toolloop")]
    return found


def _package(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_of_another_package_is_imported(path: Path) -> None:
    own = _package(".".join(path.relative_to(ROOT.parent).parts))
    for name, line in _imports(path):
        parts = name.split(".")
        private = [i for i, part in enumerate(parts) if part.startswith("_")]
        if not private or parts[1] in ("_errors", "_secrets"):
            continue  # the root's error hierarchy and secret registry are everyone's
        owner = ".".join(parts[: private[0]])
        mine = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        assert mine.startswith(owner + ".") or mine == owner, (
            f"{path.relative_to(ROOT)}:{line} imports {name}, a private module of "
            f"{owner} (own package: toolloop.{own}); import its public name instead"
        )


@pytest.mark.parametrize("package", sorted(KNOWS_NOTHING_OF))
def test_each_layer_imports_only_what_it_may(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name, line in _imports(path):
            if _package(name) in KNOWS_NOTHING_OF[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []
