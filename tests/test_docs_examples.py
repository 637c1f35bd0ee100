"""Every ```python block in README.md and docs/ runs (each file's blocks in order, shared
namespace), so the docs cannot drift from the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS_RAY = {ROOT / "docs" / "guides" / "ray.md"}
"""Pages whose examples need a Ray cluster: tests/ray/test_ray_docs.py runs them on the
suite's."""
FILES = [
    p for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] if p not in NEEDS_RAY
]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks(path: Path) -> list[str]:
    return [b for b in BLOCK.findall(path.read_text()) if "# docs: skip" not in b]


@pytest.mark.parametrize(
    "path", [p for p in FILES if _blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_examples_run(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for block in _blocks(path):
        exec(compile(block, str(path), "exec"), namespace)
    capsys.readouterr()


def _unclosed_models(source: str) -> list[int]:
    """Lines of ``source`` that make an ``OpenAIChatModel`` nothing closes: neither
    ``async with OpenAIChatModel(...)`` nor a name that is closed with ``await
    name.aclose()`` or entered with ``async with name``."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(source, "<example>", "exec", flags=flags)
    closed: set[str] = set()
    entered: set[int] = set()  # ids of the calls that are an `async with` item
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                entered.add(id(item.context_expr))
                if isinstance(item.context_expr, ast.Name):
                    closed.add(item.context_expr.id)
        elif (
            isinstance(node, ast.Await)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "aclose"
            and isinstance(node.value.func.value, ast.Name)
        ):
            closed.add(node.value.func.value.id)
    assigned: dict[int, list[ast.expr]] = {
        id(node.value): node.targets for node in ast.walk(tree) if isinstance(node, ast.Assign)
    }
    unclosed: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in entered:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name != "OpenAIChatModel":
            continue
        targets = assigned.get(id(node), [])
        if not any(isinstance(t, ast.Name) and t.id in closed for t in targets):
            unclosed.append(node.lineno)
    return sorted(set(unclosed))


def _all_blocks(path: Path) -> list[str]:
    return list(BLOCK.findall(path.read_text()))


@pytest.mark.parametrize(
    "path",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_examples_close_the_models_they_make(path: Path) -> None:
    """An ``OpenAIChatModel`` holds an HTTP client: an example that makes one closes it
    (``async with``, or ``await model.aclose()``), skipped examples included."""
    for block in _all_blocks(path):
        if "OpenAIChatModel(" not in block:
            continue  # (a skipped example need not even parse)
        lines = _unclosed_models(block)
        assert not lines, (
            f"{path.relative_to(ROOT)}: an example makes an OpenAIChatModel it never closes "
            f"(line {lines[0]} of the block):\n{block}"
        )


def test_the_check_of_closed_models_sees_each_way() -> None:
    unclosed = 'model = OpenAIChatModel("m")\n'
    assert _unclosed_models(unclosed) == [1]
    assert _unclosed_models('planner = StructuredPlanner(OpenAIChatModel("m"))\n') == [1]
    assert _unclosed_models(unclosed + "await model.aclose()\n") == []
    assert _unclosed_models(unclosed + "async with model:\n    pass\n") == []
    assert _unclosed_models('async with OpenAIChatModel("m") as model:\n    pass\n') == []
