"""mkdocs hooks: Mermaid pictures of flows, generated from the flow definitions at build time.

A line of its own in a page::

    <!-- flow-mermaid: toolloop.loop_flow -->

becomes a ``mermaid`` code block holding ``loop_flow.to_mermaid()``, so a picture cannot
drift from the code. The target is either an import path (``package.module.attribute``) or
``page:NAME``: a flow named ``NAME`` built by the page's own ``python`` blocks above the
marker (they run once, in order, in one namespace, as ``tests/test_docs_examples.py`` runs
them; blocks with a ``# docs: skip`` line are left out there too).

Anything that is not a :class:`toolloop.flow.Flow` stops the build with a message.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- flow-mermaid: (?P<target>[\w.:]+) -->[ \t]*$", re.M)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP = "# docs: skip"


def _import(target: str) -> Any:
    module_name, _, attribute = target.rpartition(".")
    if not module_name:
        raise PluginError(f"flow-mermaid: {target!r} is no import path (package.module.name)")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"flow-mermaid: cannot import {target!r}: {exc}") from exc


def _mermaid(flow: Any, target: str, where: str) -> str:
    from toolloop.flow import Flow

    if not isinstance(flow, Flow):
        raise PluginError(
            f"flow-mermaid in {where}: {target!r} is a {type(flow).__name__}, not a Flow"
        )
    return f"```mermaid\n{flow.to_mermaid().rstrip()}\n```"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace every ``flow-mermaid`` marker of the page with the flow's Mermaid."""
    markers = list(MARKER.finditer(markdown))
    if not markers:
        return markdown
    where = page.file.src_uri
    namespace: dict[str, Any] = {"__name__": f"docs_{page.file.name}"}
    blocks = iter(BLOCK.finditer(markdown))
    pending = next(blocks, None)
    pieces: list[str] = []
    last = 0
    for marker in markers:
        target = marker.group("target")
        if target.startswith("page:"):
            # run the page's examples up to this marker, in order, output swallowed
            while pending is not None and pending.start() < marker.start():
                code = pending.group(1)
                if SKIP not in code:
                    try:
                        with contextlib.redirect_stdout(io.StringIO()):
                            exec(compile(code, where, "exec"), namespace)
                    except Exception as exc:
                        raise PluginError(
                            f"flow-mermaid in {where}: an example above the marker failed: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                pending = next(blocks, None)
            name = target.removeprefix("page:")
            if name not in namespace:
                raise PluginError(
                    f"flow-mermaid in {where}: no example above the marker defines {name!r}"
                )
            flow = namespace[name]
        else:
            flow = _import(target)
        pieces.append(markdown[last : marker.start()])
        pieces.append(_mermaid(flow, target, where))
        last = marker.end()
    pieces.append(markdown[last:])
    return "".join(pieces)
