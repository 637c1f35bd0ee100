"""A run called as a tool of another (a child run) in the live viewer, in a real headless
Chromium: drawn inside its parent's run, under the call that started it, its own calls and
its own child's under it."""

from __future__ import annotations

import anyio
import pytest
from child_run_tree import tree
from conftest import Browser

from toolloop.viewer import ViewerSink

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_viewer_draws_a_child_run_under_its_parent_s_call(
    chromium: Browser, backend: str
) -> None:
    with ViewerSink(meta={"request": "mail ada"}) as sink:
        assert sink.server is not None
        chromium.open(sink.url)
        assert sink.server.wait_for_pages(1, timeout=30)
        result = anyio.run(tree, sink, backend=backend)
        top = result.run_id
        chromium.wait_for(
            f"const r = document.querySelector('#runs > article.run[data-execution-id=\"{top}\"]');"
            " return !!r && r.dataset.state === 'finished' &&"
            " r.querySelectorAll('article.run[data-state=finished]').length === 2;",
            what="the run and its two children finished",
        )
        shown = chromium.js(
            """
            const top = document.querySelector(
              `#runs > article.run[data-execution-id="${arguments[0]}"]`);
            const record = top.querySelector(':scope .records > li.record[data-tool=helper]');
            const child = record.querySelector(':scope > .child-runs > article.run');
            const deeper = child.querySelector('li.record[data-tool=deeper]');
            const grandchild = deeper.querySelector(':scope > .child-runs > article.run');
            const calls = (run) => [
              ...run.querySelectorAll(':scope > .rounds > section > ol > li.record')
            ].map(r => r.dataset.tool);
            return {
              tops: [...document.querySelectorAll('#runs > article.run')].length,
              topCalls: calls(top),
              childCalls: calls(child),
              grandchildCalls: calls(grandchild),
              grandchildSent: grandchild.querySelector('li.record[data-tool=send] .result')
                .textContent,
            };
            """,
            top,
        )
    assert shown["tops"] == 1  # the children are inside their parent, not runs of their own
    assert shown["topCalls"] == ["helper"]
    assert shown["childCalls"] == ["deeper"]
    assert shown["grandchildCalls"] == ["send"]
    assert "sent to ada" in shown["grandchildSent"]
    _, errors = chromium.drain()
    assert not errors, errors
