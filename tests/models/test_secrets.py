"""The key a caller gives, whatever its shape, never appears in an error, a trace, a
picture or the command line's output, even when a server echoes it back."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from toolloop import async_plan_and_execute
from toolloop.errors import ModelCallError, PlannerError
from toolloop.models import OpenAIChatModel
from toolloop.planners import StructuredPlanner
from toolloop.testing import FakeOpenAIServer
from toolloop.tracing import TraceRecorder, read_trace, redact_text, write_timeline

pytestmark = pytest.mark.anyio

# keys of shapes no pattern would catch: short, no prefix, with a space
KEYS = ["hunter2-pw", "my key 42", "Zq9"]


@pytest.mark.parametrize("key", KEYS)
async def test_a_key_echoed_by_the_server_is_not_in_the_error(key: str) -> None:
    async with FakeOpenAIServer() as server:
        server.add_error(401, f"Incorrect API key provided: {key}. Check it.")
        async with OpenAIChatModel(
            "m", base_url=server.base_url, api_key=key, max_retries=0
        ) as model:
            with pytest.raises(PlannerError) as info:
                await async_plan_and_execute("?", planner=StructuredPlanner(model))
    error = info.value
    cause = error.__cause__
    assert isinstance(cause, ModelCallError)
    assert cause.status == 401
    for text in (str(error), str(cause), repr(cause)):
        assert key not in text
    assert "Incorrect API key provided: [redacted]" in str(cause)


async def test_nor_in_the_trace_or_the_timeline(tmp_path: Path) -> None:
    key = "open sesame"
    recorder = TraceRecorder(meta={"note": f"the key is {key}"})
    async with FakeOpenAIServer() as server:
        server.add_error(401, f"bad key {key}")
        async with OpenAIChatModel(
            "m", base_url=server.base_url, api_key=key, max_retries=0
        ) as model:
            with pytest.raises(PlannerError):
                await async_plan_and_execute(
                    f"user says {key}", planner=StructuredPlanner(model), on_event=recorder
                )
    recorder.write(tmp_path / "run.jsonl")
    write_timeline(tmp_path / "run.svg", read_trace(tmp_path / "run.jsonl"))
    for path in ("run.jsonl", "run.svg"):
        assert key not in (tmp_path / path).read_text(), path
    assert redact_text(f"x {key} y") == "x [redacted] y"


TOOLS = """
def get_weather(city: str) -> dict:
    '''The forecast.

    Args:
        city: the city.
    '''
    return {"city": city}

TOOLS = [get_weather]
"""


async def test_nor_on_the_command_lines_stderr(tmp_path: Path) -> None:
    key = "swordfish 7"
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    async with FakeOpenAIServer() as server:
        server.add_error(401, f"Incorrect API key provided: {key}")
        with anyio.fail_after(120):  # a hang guard
            done = await anyio.run_process(
                [
                    sys.executable, "-m", "toolloop", "run", "?",
                    "--tools", "tools:TOOLS", "--base-url", server.base_url,
                    "--model", "m", "--max-retries", "0", "--api-key", key,
                ],
                cwd=tmp_path,
                check=False,
            )  # fmt: skip
    stderr, stdout = done.stderr.decode(), done.stdout.decode()
    assert done.returncode == 1, stderr
    assert "401" in stderr
    assert key not in stderr and key not in stdout
