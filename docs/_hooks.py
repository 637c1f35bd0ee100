"""mkdocs hooks: Mermaid pictures of flows, generated from the flow definitions at build time.

A line of its own in a page::

    <!-- flow-mermaid: toolloop.loop.loop_flow -->

becomes a ``mermaid`` code block holding ``loop_flow.to_mermaid()``, so a picture cannot
drift from the code. The target is either an import path (``package.module.attribute``) or
``page:NAME``: a flow named ``NAME`` built by the page's own ``python`` blocks above the
marker (they run once, in order, in one namespace, as ``tests/test_docs_examples.py`` runs
them; blocks with a ``# docs: skip`` line are left out there too).

Anything that is not a :class:`toolloop.flow.Flow` stops the build with a message.

Mermaid itself is served by the site, never by a CDN, so the pictures draw offline: the
pinned ``mermaid`` package is fetched once from the npm registry (``npm pack``), checked
against its pinned integrity, kept in ``.cache/`` and copied into the built site as
``assets/vendor/mermaid.min.js`` (with its licence), which ``mkdocs.yml`` loads before the
theme's script looks for Mermaid.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
MERMAID_VERSION = "11.17.2"
"""The Mermaid the site serves (the 11 line is the one mkdocs-material drives)."""
MERMAID_INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
)  # fmt: skip
"""The npm registry's ``dist.integrity`` of that version's package."""
MERMAID_CACHE = ROOT / ".cache" / f"mermaid-{MERMAID_VERSION}"
MERMAID_SCRIPT = "assets/vendor/mermaid.min.js"
MERMAID_LICENSE = "assets/vendor/mermaid.LICENSE.txt"
NPM_TIMEOUT = 300

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


def _fetch_mermaid() -> None:
    """Fetch the pinned Mermaid package with npm, check it, and keep its script and licence."""
    npm = shutil.which("npm")
    if npm is None:
        raise PluginError(
            f"the docs serve Mermaid {MERMAID_VERSION} from the site itself and fetch it once "
            "with npm, which is not installed: install Node.js's npm (apt-get install npm), "
            f"or put that version's dist/mermaid.min.js and LICENSE in {MERMAID_CACHE}/"
        )
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                [npm, "pack", f"mermaid@{MERMAID_VERSION}", "--pack-destination", tmp],
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired as exc:
            raise PluginError(
                f"npm pack mermaid@{MERMAID_VERSION} did not finish within {NPM_TIMEOUT} s; "
                "is the npm registry reachable?"
            ) from exc
        packed = sorted(Path(tmp).glob("mermaid-*.tgz"))
        if done.returncode != 0 or not packed:
            raise PluginError(
                f"npm pack mermaid@{MERMAID_VERSION} failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-500:]}; the docs need it once to serve Mermaid offline"
            )
        data = packed[0].read_bytes()
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        if integrity != MERMAID_INTEGRITY:
            raise PluginError(
                f"mermaid@{MERMAID_VERSION} from npm has integrity {integrity}, expected "
                f"{MERMAID_INTEGRITY}: not using it"
            )
        staging = Path(tmp) / "out"
        staging.mkdir()
        with tarfile.open(packed[0]) as tar:
            for member, name in (
                ("package/dist/mermaid.min.js", "mermaid.min.js"),
                ("package/LICENSE", "LICENSE"),
            ):
                source = tar.extractfile(member)
                if source is None:
                    raise PluginError(f"mermaid@{MERMAID_VERSION} has no {member}")
                (staging / name).write_bytes(source.read())
        MERMAID_CACHE.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError, OSError):
            staging.replace(MERMAID_CACHE)  # another build may have won the race: fine
    if not (MERMAID_CACHE / "mermaid.min.js").is_file():
        raise PluginError(f"could not keep Mermaid in {MERMAID_CACHE}")


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    """Add the pinned Mermaid script (fetched once, see the module docs) to the site."""
    if not (MERMAID_CACHE / "mermaid.min.js").is_file():
        _fetch_mermaid()
    for uri, name in ((MERMAID_SCRIPT, "mermaid.min.js"), (MERMAID_LICENSE, "LICENSE")):
        files.append(File.generated(config, uri, abs_src_path=str(MERMAID_CACHE / name)))
    return files
