"""Make ``docs/assets/viewer.png``, the live viewer's picture in the docs, from the viewer as
it is: ``python3 dev.py viewer-png`` (or ``python docs/_viewer_png.py [--out FILE]``).

The run is the one the picture's caption tells: the loop with streaming dispatch, round 0's
plan streaming while its three tool calls start (a slow lookup, a sensor that fails, an
echo), round 1's plan short-circuited. It is shown by a :class:`~toolloop.viewer.ViewerSink`
in Debian's headless ``chromium`` (with ``chromium-driver``, driven by selenium: what the
browser tests use), and the page is saved once the run has finished.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from toolloop import StructuredPlanner, async_plan_and_execute
from toolloop.testing import ScriptedChatModel
from toolloop.viewer import ViewerSink

HERE = Path(__file__).resolve().parent
OUT = HERE / "assets" / "viewer.png"
WINDOW = (1280, 900)  # the page's own height is cut to what it shows
REQUEST = "Where is it sunny?"
PLAN = {
    "next_action": "execute",
    "execution_commands": [
        {"purpose": "a slow lookup", "tool_name": "slow_lookup", "tool_kwargs": {"city": "Faro"}},
        {"purpose": "read the sensor", "tool_name": "read_sensor", "tool_kwargs": {}},
        {"purpose": "say hello", "tool_name": "echo", "tool_kwargs": {"text": "hello"}},
    ],
}
FINISHED = "return (document.querySelector('article.run') || {}).dataset?.state === 'finished'"


async def slow_lookup(city: str) -> dict[str, str]:
    """Look a city up, slowly.

    Args:
        city: the city.
    """
    await anyio.sleep(0.25)
    return {"city": city, "sky": "sunny"}


def read_sensor() -> float:
    """Read the sensor."""
    raise RuntimeError("the sensor is offline")


def echo(text: str) -> str:
    """Say it back.

    Args:
        text: what to say.
    """
    return text


async def run(sink: ViewerSink) -> None:
    model = ScriptedChatModel()
    usage = {"prompt_tokens": 412, "completion_tokens": 96, "total_tokens": 508}
    model.add_reply(json.dumps(PLAN), chunk_size=16, delay=0.01, usage=usage)  # it streams
    model.add_reply(  # round 1: "r" settles "response"; the rest is never read
        chunks=['{"next_action": "', "r", 'esponse", ', '"execution_commands": []}'], delay=0.05
    )
    await async_plan_and_execute(
        REQUEST,
        tools=[slow_lookup, read_sensor, echo],
        planner=StructuredPlanner(model),
        streaming_dispatch=True,
        timeout=60,
        on_event=sink,
    )


def browser() -> Any:
    """Debian's headless chromium, through chromium-driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if found is None or driver is None:
        sys.exit(
            "needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = found
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def wait_for(driver: Any, script: str, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not driver.execute_script(script):
        if time.monotonic() > deadline:
            sys.exit(f"the page never showed {what} in {timeout:g} s")
        time.sleep(0.05)


def screenshot(out: Path) -> None:
    """Run the loop into the viewer, open in the browser, and save the page to ``out``."""
    driver = browser()
    try:
        with ViewerSink(meta={"request": REQUEST}) as sink:
            driver.get(sink.url)
            wait_for(
                driver, "return document.getElementById('status').dataset.state === 'live'", "live"
            )
            thread = threading.Thread(target=anyio.run, args=(run, sink))
            thread.start()
            thread.join(60)
            wait_for(driver, FINISHED, "the run finished")
            bottom = driver.execute_script(  # the page's end, and a margin below it
                "return Math.ceil(document.querySelector('article.run')"
                ".getBoundingClientRect().bottom) + 24"
            )
            driver.execute_cdp_cmd(  # the viewport is exactly that high
                "Emulation.setDeviceMetricsOverride",
                {
                    "width": WINDOW[0],
                    "height": int(bottom),
                    "deviceScaleFactor": 1,
                    "mobile": False,
                },
            )
            shown = driver.execute_script(
                "return document.querySelector('.finished-line').textContent"
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(out))
            print(f"{out}: {shown}")
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the PNG (default: %(default)s)")
    screenshot(parser.parse_args().out)


if __name__ == "__main__":
    main()
