"""The examples of the Ray guide run (in order, one namespace) on the suite's cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
GUIDE = ROOT / "docs" / "guides" / "ray.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]


def test_the_ray_guide_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "docs_ray"}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)
    out = capsys.readouterr().out
    assert "{'length of the draft': {'words': 4}}" in out
    assert "[1, 2]" in out
    assert "'owls': {'owls': {'topic': 'owls', 'answer': 'OWLS'}}" in out
    approved = "{'look up': {'topic': 'tea', 'answer': 'TEA'}}, {'look up': {'topic': 'ink', '"
    assert approved in out  # paused on the pool, resumed there through the actors' store
