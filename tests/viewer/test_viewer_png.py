"""The docs' picture of the live viewer is made by a script from the viewer as it is
(``python3 dev.py viewer-png``): the script runs, in the headless Chromium the browser tests
use, and makes a picture of the finished run."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, _chromium_paths

pytestmark = pytest.mark.timeout(300)

SCRIPT = ROOT / "docs" / "_viewer_png.py"


def test_the_docs_picture_of_the_viewer_is_made_by_its_script(tmp_path: Path) -> None:
    found = _chromium_paths()
    if isinstance(found, str):
        pytest.skip(found)
    out = tmp_path / "viewer.png"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width == 1280 and 300 < height < 900
    assert done.stdout.splitlines()[-1] == f"{out}: answered after 1 round, 3 records"
