"""The documentation site builds with ``mkdocs build --strict`` (no warning at all), and its
pictures of the flows are the ones the code draws."""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

import pytest

from toolloop.loop import loop_flow

ROOT = Path(__file__).resolve().parent.parent

_NO_DOCS_TOOLS = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("material") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="the docs tools are not installed: pip install mkdocs mkdocs-material "
    "'mkdocstrings[python]' (the dev extra has them)",
)

MERMAID = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.S)


# The build (conftest.py's session fixture docs_site, bounded at 540 s) can take a minute on
# a busy 2-core machine: it runs inside the first test that asks for it, so every test that
# uses it may wait for it, under a timeout above the build's own.
pytestmark = [_NO_DOCS_TOOLS, pytest.mark.timeout(600)]


@pytest.fixture
def site(docs_site: Path) -> Path:
    return docs_site


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
