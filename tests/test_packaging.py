"""What a library user gets: a wheel and an sdist with the licence and full metadata, and a
README that says how to install them (after the two quick-start commands, which stay first)."""

from __future__ import annotations

import email
import importlib.util
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("needs hatchling (the dev extra has it)")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    return out


def _wheel(dist: Path) -> zipfile.ZipFile:
    (wheel,) = dist.glob("toolloop-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_licence_is_in_the_repository_the_wheel_and_the_sdist(dist: Path) -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    with _wheel(dist) as wheel:
        names = wheel.namelist()
        (inside,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert wheel.read(inside).decode() == licence
    (sdist,) = dist.glob("toolloop-*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/LICENSE")
        assert member is not None
        assert member.read().decode() == licence
        assert not [n for n in tar.getnames() if "/.cache/" in n or "/test-artefacts/" in n]


def test_the_wheel_metadata_has_licence_urls_python_versions_and_extras(dist: Path) -> None:
    with _wheel(dist) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(name))
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    classifiers = metadata.get_all("Classifier") or []
    versions = sorted(
        c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)
    )
    assert versions == ["3.10", "3.11", "3.12", "3.13"]
    assert metadata["Requires-Python"] == ">=3.10"  # the lowest classifier, as it says
    assert {"otel", "dev"} <= set(metadata.get_all("Provides-Extra") or [])


def _extras(dist: Path) -> list[str]:
    with _wheel(dist) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(wheel.read(name)).get_all("Provides-Extra") or []


def test_the_readme_starts_with_the_quick_start_then_says_how_to_install(dist: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[:2] == ["Quick start", "Install (as a library)"]
    assert (
        "```sh\n"
        "python3 dev.py demo   # sets everything up (.venv) and runs a live demo of the loop\n"
        "python3 dev.py test   # sets everything up and runs the whole suite: lint, types, tests\n"
        "```"
    ) in readme
    install = readme.split("## Install (as a library)", 1)[1].split("\n## ", 1)[0]
    assert "pip install /path/to/toolloop" in install
    for extra in _extras(dist):
        assert f"| `{extra}` |" in install, f"the extra {extra!r} is not in the Install table"


def test_the_viewer_page_ships_in_the_wheel(dist: Path) -> None:
    with _wheel(dist) as wheel:
        names = set(wheel.namelist())
        for asset in ("index.html", "viewer.js", "viewer.css"):
            name = f"toolloop/viewer/static/{asset}"
            assert name in names, name
            assert wheel.read(name) == (ROOT / name).read_bytes()
