"""The documentation site builds with ``mkdocs build --strict`` (no warning at all), and its
pictures of the flows are the ones the code draws."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolloop.loop import loop_flow

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("material") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="the docs tools are not installed: pip install mkdocs mkdocs-material "
    "'mkdocstrings[python]' (the dev extra has them)",
)

MERMAID = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.S)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for page in (
        "index.html",
        "quickstart/index.html",
        "concepts/flows/index.html",
        "concepts/loop/index.html",
        "concepts/tools/index.html",
        "concepts/concurrency/index.html",
        "guides/testing/index.html",
        "architecture/index.html",
        "benchmarks/index.html",
        "reference/index.html",
        "reference/errors/index.html",
        "reference/flow/index.html",
        "changelog/index.html",
    ):
        assert (site / page).is_file(), page


def test_the_architecture_page_shows_the_loop_flow_as_the_code_draws_it(site: Path) -> None:
    page = (site / "architecture" / "index.html").read_text()
    pictures = [html.unescape(p).strip() for p in MERMAID.findall(page)]
    assert loop_flow.to_mermaid().strip() in pictures


def test_no_marker_is_left_unreplaced(site: Path) -> None:
    for page in site.rglob("*.html"):
        assert "flow-mermaid:" not in page.read_text(), page


def test_the_api_reference_documents_the_public_surface(site: Path) -> None:
    import toolloop

    page = (site / "reference" / "index.html").read_text()
    missing = [name for name in toolloop.__all__ if f'id="toolloop.{name}"' not in page]
    assert not missing, f"not in the API reference: {missing}"
