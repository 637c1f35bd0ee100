from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_cluster import start_cluster, wait_ready

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["toolloop.pytest_plugin"]  # the toolloop_replay fixture

DOCS_BUILD_TIMEOUT = 540
"""Seconds the docs build may take (about 10 quiet, a minute on a busy 2-core machine); the
tests that use it are marked with a pytest-timeout above it."""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on both backends; a missing trio fails instead of skipping."""
    return str(request.param)


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built once per test session with ``mkdocs build --strict``."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DOCS_BUILD_TIMEOUT,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


# -- a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium) --------

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # nothing but 127.0.0.1 resolves: a page that reaches out fails loudly instead of leaking
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--window-size=1280,900",
)


def _chromium_paths() -> tuple[str, str] | str:
    """The browser and its driver, or why they cannot be had."""
    import importlib.util
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        return (
            "needs Debian's chromium and chromium-driver (`python3 dev.py test` installs them "
            "with apt when run as root; else: apt-get install chromium chromium-driver)"
        )
    if importlib.util.find_spec("selenium") is None:
        return "needs selenium (the dev extra has it)"
    return browser, driver


class Browser:
    """A headless Chromium page: what it requested and what it logged are kept per page."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def open(self, url: str) -> None:
        self.drain()
        self.driver.get(url)

    def drain(self) -> tuple[list[str], list[str]]:
        """The URLs requested and the console errors since the last call."""
        import json

        requested: list[str] = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                requested.append(message["params"]["request"]["url"])
            elif message.get("method") == "Network.webSocketCreated":
                requested.append(message["params"]["url"])
        errors = [
            f"{entry['level']}: {entry['message']}"
            for entry in self.driver.get_log("browser")
            if entry["level"] == "SEVERE"
        ]
        return requested, errors

    def drawn(self, css_class: str) -> list[str | None]:
        """For each element of ``css_class``, the text of the SVG drawn in it (also inside a
        closed shadow root, where mkdocs-material draws Mermaid), or None when it has none."""
        tree = self.driver.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})
        found: list[str | None] = []

        def text(node: dict[str, Any]) -> str:
            own = node.get("nodeValue", "") if node.get("nodeType") == 3 else ""
            return own + "".join(text(c) for c in node.get("children", []))

        def svg_in(node: dict[str, Any]) -> dict[str, Any] | None:
            if node.get("nodeName", "").lower() == "svg":
                return node
            for child in [*node.get("shadowRoots", []), *node.get("children", [])]:
                hit = svg_in(child)
                if hit is not None:
                    return hit
            return None

        def walk(node: dict[str, Any]) -> None:
            attributes = node.get("attributes", [])
            classes = (
                dict(zip(attributes[::2], attributes[1::2], strict=True)).get("class", "").split()
            )
            if css_class in classes:
                svg = svg_in(node)
                found.append(None if svg is None else text(svg))
                return
            for child in [*node.get("shadowRoots", []), *node.get("children", [])]:
                walk(child)

        walk(tree["root"])
        return found

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(self, script: str, *, timeout: float = 30.0, what: str = "") -> Any:
        """Poll ``script`` until it returns something truthy (a hang guard, not a timing)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what or script!r} in {timeout} s")
            time.sleep(0.05)


def leaving_localhost(urls: list[str]) -> list[str]:
    """The URLs that would leave 127.0.0.1."""
    from urllib.parse import urlsplit

    local_schemes = {"data", "blob", "about", "chrome", "chrome-error", "devtools"}
    return [
        url
        for url in urls
        if urlsplit(url).scheme not in local_schemes and urlsplit(url).hostname != "127.0.0.1"
    ]


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """A real headless Chromium for the whole session (skipped, saying why, without one)."""
    found = _chromium_paths()
    if isinstance(found, str):
        pytest.skip(found)
    browser, driver_path = found
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield Browser(driver)
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def artefacts() -> Path:
    """Where tests leave files for people to look at (screenshots): ``test-artefacts/``."""
    folder = Path(os.environ.get("TOOLLOOP_TEST_ARTEFACTS", ROOT / "test-artefacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the tests: ``TOOLLOOP_POSTGRES_URL`` if set, else a
    throwaway cluster started once per test session (as ``nobody`` when run as root) and
    stopped at its end, whatever happened. Skips, saying how to get one, when no server
    binary is installed."""
    given = os.environ.get("TOOLLOOP_POSTGRES_URL")
    if given:
        yield given
        return
    try:
        cluster = start_cluster()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    try:
        wait_ready(cluster.url)
        yield cluster.url
    finally:
        cluster.stop()


RAY_SUPPORT = ROOT / "tests" / "ray"
RAY_ON_LOOPBACK = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
"""Keeps the suite's Ray clusters on 127.0.0.1 (the Ray guide says so too). On Linux Ray
puts a node on the machine's own address and listens on every interface, and turns a
node address of 127.0.0.1 into the machine's; with this setting it takes the loopback
address for everything, as on macOS and Windows. Ray reads it when it is imported: it is
set here, before any test module imports Ray."""
os.environ.setdefault(*RAY_ON_LOOPBACK)


class RayClusters:
    """The suite's Ray: one local cluster at a time, started on first use, kept for the
    session (``local``: one node, 2 CPUs; ``two_nodes``: a head and a worker node of one
    CPU each, by ``ray.cluster_utils.Cluster``), shut down at the end."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.cluster: object | None = None

    def use(self, kind: str) -> None:
        import ray

        if self.kind == kind and ray.is_initialized():
            return
        self.stop()
        # Ray's workers start from the raylet, which inherits this environment
        paths = [str(RAY_SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private test cluster
        quiet = {"log_to_driver": False, "configure_logging": False, "namespace": "toolloop"}
        if kind == "local":
            ray.init(
                address="local",  # a cluster of its own, whatever else runs on the machine
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=256 * 1024**2,
                **quiet,  # type: ignore[arg-type]
            )
        else:
            from ray.cluster_utils import Cluster

            store = 128 * 1024**2
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 1,
                    "object_store_memory": store,
                    "include_dashboard": False,
                },
            )
            cluster.add_node(num_cpus=1, object_store_memory=store)
            cluster.wait_for_nodes()
            self.cluster = cluster
            ray.init(address=cluster.address, **quiet)  # type: ignore[arg-type]
        self.kind = kind

    def stop(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()  # type: ignore[attr-defined]
            self.cluster = None
        self.kind = None


@pytest.fixture(scope="session")
def ray_clusters() -> Iterator[RayClusters]:
    """Started on first use by a Ray test; shut down when the session ends."""
    clusters = RayClusters()
    yield clusters
    clusters.stop()


@pytest.fixture
def ray_local(ray_clusters: RayClusters) -> RayClusters:
    """The suite's one-node Ray cluster (2 CPUs), connected."""
    ray_clusters.use("local")
    return ray_clusters


@pytest.fixture
def ray_two_nodes(ray_clusters: RayClusters) -> RayClusters:
    """The suite's two-node Ray cluster (1 CPU each), connected."""
    ray_clusters.use("two_nodes")
    return ray_clusters
