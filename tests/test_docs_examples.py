"""Every ```python block in README.md and docs/ runs (each file's blocks in order, shared
namespace), so the docs cannot drift from the code."""

from __future__ import annotations

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
