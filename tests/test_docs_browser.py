"""Every page of the built site, opened in a real headless Chromium: it asks nothing of the
network (every request stays on 127.0.0.1), every Mermaid picture is drawn as an SVG, and
the console shows no error."""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Browser, leaving_localhost

pytestmark = pytest.mark.timeout(900)  # the docs build (540 s at most) runs inside the first


LAYOUT = r"""
const problems = [];
for (const block of document.querySelectorAll('.md-content pre > code')) {
  const picture = /[─│└┘┌┐▶▲]/.test(block.textContent);  // drawn with box characters
  if (picture && block.scrollWidth > block.clientWidth + 1) {
    problems.push('a text picture is cut at ' + block.clientWidth + ' px (it needs '
                  + block.scrollWidth + ' px): ' + block.textContent.slice(0, 60));
  }
}
for (const cell of document.querySelectorAll('.md-content table td')) {
  if (cell.textContent.includes('\\|')) {
    problems.push('a table cell shows a literal backslash: ' + cell.textContent.slice(0, 80));
  }
}
return problems;
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served_site(docs_site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(docs_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _pages(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html"))


def test_every_page_works_offline_in_a_real_browser(
    chromium: Browser, docs_site: Path, served_site: str
) -> None:
    pages = _pages(docs_site)
    assert len(pages) >= 30, pages
    problems: list[str] = []
    diagrams = 0
    for page in pages:
        expected = (docs_site / page).read_text().count('<pre class="mermaid">')
        url = served_site + page.removesuffix("index.html")
        chromium.open(url)
        chromium.wait_for("return document.readyState === 'complete'", what="the page loaded")
        if expected:
            drawn = chromium.drawn("mermaid")
            deadline = time.monotonic() + 30  # a hang guard
            while (len(drawn) != expected or None in drawn) and time.monotonic() < deadline:
                time.sleep(0.1)
                drawn = chromium.drawn("mermaid")
            if len(drawn) != expected or None in drawn:
                problems.append(f"{page}: {expected} Mermaid diagrams, drawn as SVG: {drawn}")
            diagrams += sum(svg is not None for svg in drawn)
            problems += [
                f"{page}: diagram {i} is Mermaid's error picture"
                for i, svg in enumerate(drawn)
                if svg is not None and "Syntax error" in svg
            ]
        problems += [f"{page}: {problem}" for problem in chromium.js(LAYOUT)]
        requested, errors = chromium.drain()
        problems += [
            f"{page}: requested {url} (not 127.0.0.1)" for url in leaving_localhost(requested)
        ]
        problems += [f"{page}: console {error}" for error in errors]
        assert requested, f"{page}: no request seen at all: the log is not working"
    assert not problems, "\n".join(problems)
    assert diagrams >= 5  # the architecture page alone draws the flows


def test_the_benchmarks_page_shows_figures_before_the_method(
    chromium: Browser, served_site: str
) -> None:
    chromium.open(served_site + "benchmarks/")
    headings = chromium.js("return [...document.querySelectorAll('.md-content h2')].map(h => h.id)")
    assert headings.index("figures") == 0, headings
    assert headings.index("figures") < headings.index("how-they-are-measured"), headings
    first_table = chromium.js(
        "const t = document.querySelector('.md-content table'); "
        "return t.getBoundingClientRect().top + window.scrollY;"
    )
    assert first_table < 900, f"the first figure is {first_table} px down the page"


def test_without_chromium_the_browser_tests_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from conftest import _chromium_paths

    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = _chromium_paths()
    assert isinstance(reason, str)
    assert "apt-get install chromium chromium-driver" in reason
