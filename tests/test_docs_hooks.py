"""The docs build serves Mermaid itself: the pinned package is checked before it is used, and
a machine without npm is told what to do."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="needs mkdocs (the dev extra has it)"
)


@pytest.fixture
def hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "MERMAID_CACHE", tmp_path / "cache")
    return module


def _fake_npm(folder: Path, payload: bytes) -> None:
    """An ``npm`` whose ``pack`` writes ``payload`` as the package."""
    folder.mkdir()
    (folder / "payload").write_bytes(payload)
    script = folder / "npm"
    script.write_text(
        "#!/bin/sh\n"
        '# npm pack mermaid@V --pack-destination DIR\ncp "$(dirname "$0")/payload" '
        '"$4/mermaid-11.17.2.tgz"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_a_package_that_is_not_the_pinned_one_is_refused(
    hooks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mkdocs.exceptions import PluginError

    _fake_npm(tmp_path / "bin", b"not mermaid at all")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin:/bin")
    with pytest.raises(PluginError, match=r"has integrity sha512-.*expected sha512-V6K3"):
        hooks._fetch_mermaid()
    assert not (tmp_path / "cache").exists()  # nothing kept


def test_without_npm_the_build_says_what_to_do(
    hooks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mkdocs.exceptions import PluginError

    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(PluginError, match=r"install Node.js's npm \(apt-get install npm\)"):
        hooks._fetch_mermaid()
