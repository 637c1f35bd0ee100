"""The key a caller gives, whatever its shape, never appears in an error, a trace, a
picture or the command line's output, even when a server echoes it back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception it is chained to (cause and context), once each."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        exc = todo.pop()
        if exc is None or any(exc is s for s in seen):
            continue
        seen.append(exc)
        todo += [exc.__cause__, exc.__context__]
    return seen


def _texts(error: BaseException) -> list[str]:
    """Everything a log or a traceback can show of ``error`` and its chain."""
    import logging
    import traceback

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.said: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.said.append(self.format(record))

    handler = Keep()
    log = logging.getLogger("toolloop.tests.secrets")
    log.addHandler(handler)
    try:
        log.error("failed", exc_info=error)
    finally:
        log.removeHandler(handler)
    texts = ["".join(traceback.format_exception(error)), *handler.said]
    for exc in _chain(error):
        texts += [str(exc), repr(exc), repr(exc.args), repr(vars(exc))]
    return texts


async def _fails(run: Any) -> BaseException:
    try:
        await run()
    except Exception as exc:
        return exc
    raise AssertionError("the run did not fail")


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("where", ["at_open", "inside_the_stream"])
async def test_nor_anywhere_in_the_exception_chain_of_any_product(key: str, where: str) -> None:
    """The client's own exception keeps what the server echoed (``str``, ``args``,
    ``.message``, ``.body``): it is never chained to what toolloop raises, so neither
    ``traceback.format_exception`` nor ``logging.exception`` can print the key."""
    from toolloop.agents import create_agent
    from toolloop.loop import LoopResult, final_answer
    from toolloop.planners import ToolCallingPlanner
    from toolloop.status_agent import StatusAgent

    def queue(server: FakeOpenAIServer) -> None:
        said = f"Incorrect API key provided: {key}. Check it."
        if where == "at_open":
            server.add_error(401, said, body={"error": {"message": said, "key": key}})
        else:
            server.add_raw(
                [
                    'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
                    'data: {"error":{"message":"' + said + '","code":401}}\n\n',
                ]
            )

    def get_weather(city: str) -> str:
        """The forecast.

        Args:
            city: the city.
        """
        return "sunny"

    async with FakeOpenAIServer() as server:
        async with OpenAIChatModel(
            "m", base_url=server.base_url, api_key=key, max_retries=0
        ) as model:
            runs = {
                "loop": lambda: async_plan_and_execute(
                    "?", tools=[get_weather], planner=ToolCallingPlanner(model)
                ),
                "agent": lambda: create_agent(model, tools=[get_weather]).run("?"),
                "status agent": lambda: StatusAgent(model=model, tools=[get_weather]).run("?"),
                "final answer": lambda: final_answer(
                    model, LoopResult(user_input="?", rounds=0, stop_reason="answered")
                ),
            }
            for name, run in runs.items():
                queue(server)
                error = await _fails(run)
                assert any(isinstance(e, ModelCallError) for e in _chain(error)), name
                for text in _texts(error):
                    assert key not in text, (name, text)
