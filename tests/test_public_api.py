"""The public surface: complete, sorted, importable, typed."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import toolloop

PUBLIC_MODULES = [
    "toolloop",
    "toolloop.agents",
    "toolloop.checkpoints",
    "toolloop.cli",
    "toolloop.flow",
    "toolloop.loop",
    "toolloop.middleware",
    "toolloop.models",
    "toolloop.planners",
    "toolloop.testing",
    "toolloop.tools",
    "toolloop.tracing",
]

# what the top level re-exports in full
FULLY_REEXPORTED = ["toolloop.loop", "toolloop.planners", "toolloop.tools", "toolloop._errors"]


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_importable(name: str) -> None:
    module = importlib.import_module(name)
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_key), f"{name}.__all__ is not sorted"
    assert len(names) == len(set(names))
    for attr in names:
        assert hasattr(module, attr), f"{name}.{attr} is in __all__ but missing"


@pytest.mark.parametrize("name", FULLY_REEXPORTED)
def test_top_level_reexports(name: str) -> None:
    module = importlib.import_module(name)
    missing = sorted(set(module.__all__) - set(toolloop.__all__))
    assert not missing, f"toolloop does not re-export {missing} from {name}"
    for attr in module.__all__:
        assert getattr(toolloop, attr) is getattr(module, attr)


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
