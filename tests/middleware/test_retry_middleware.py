"""Tool retry with backoff, for chosen exceptions only."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from toolloop.agents import ToolMessage, create_agent
from toolloop.agents.middleware import ToolRetryMiddleware
from toolloop.testing import ScriptedChatModel

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args or {})}


def model_calling(*calls: dict[str, str]) -> ScriptedChatModel:
    model = ScriptedChatModel()
    model.add_reply(tool_calls=list(calls))
    model.add_reply("done")
    return model


def answers(result: Any) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


class Flaky:
    """A tool that fails ``failures`` times with ``error``, then answers."""

    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0
        self.times: list[float] = []

    async def fetch(self, url: str) -> str:
        """Fetch a page."""
        self.calls += 1
        self.times.append(anyio.current_time())
        if self.calls <= self.failures:
            raise self.error(f"attempt {self.calls} failed")
        return f"page at {url}"


async def test_a_failing_tool_is_retried_with_growing_waits() -> None:
    flaky = Flaky(2)
    retry = ToolRetryMiddleware(
        max_retries=3, retry_on=(ConnectionError,), initial_delay=0.02, jitter=False
    )
    model = model_calling(call("fetch", {"url": "u"}))
    result = await create_agent(model, [flaky.fetch], middleware=[retry]).run("go")
    assert flaky.calls == 3
    assert answers(result)[0].content == "page at u"
    first_wait = flaky.times[1] - flaky.times[0]
    second_wait = flaky.times[2] - flaky.times[1]
    assert first_wait >= 0.02
    assert second_wait >= 0.04  # the backoff doubles


async def test_retries_run_out_into_an_error_answer() -> None:
    flaky = Flaky(10)
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    model = model_calling(call("fetch", {"url": "u"}))
    result = await create_agent(model, [flaky.fetch], middleware=[retry]).run("go")
    assert flaky.calls == 3
    (answer,) = answers(result)
    assert answer.status == "error"
    assert answer.content == (
        "Error: tool 'fetch' raised ConnectionError: attempt 3 failed "
        "(attempt 3 of 3, no retry left)"
    )
    assert result.text == "done"

    flaky = Flaky(10)
    retry = ToolRetryMiddleware(
        max_retries=1, initial_delay=0, on_failure=lambda e: f"gave up: {e}"
    )
    result = await create_agent(
        model_calling(call("fetch", {"url": "u"})), [flaky.fetch], middleware=[retry]
    ).run("go")
    assert answers(result)[0].content == "Error: gave up: attempt 2 failed"


async def test_only_chosen_exceptions_and_tools_are_retried() -> None:
    flaky = Flaky(1, error=ValueError)
    retry = ToolRetryMiddleware(retry_on=(ConnectionError,), initial_delay=0)
    await create_agent(
        model_calling(call("fetch", {"url": "u"})), [flaky.fetch], middleware=[retry]
    ).run("go")
    assert flaky.calls == 1  # a ValueError is not retried

    flaky = Flaky(1)
    retry = ToolRetryMiddleware(retry_on=lambda e: "attempt" in str(e), initial_delay=0)
    await create_agent(
        model_calling(call("fetch", {"url": "u"})), [flaky.fetch], middleware=[retry]
    ).run("go")
    assert flaky.calls == 2

    flaky = Flaky(1)
    retry = ToolRetryMiddleware(tool_names=["other"], initial_delay=0)
    await create_agent(
        model_calling(call("fetch", {"url": "u"})), [flaky.fetch], middleware=[retry]
    ).run("go")
    assert flaky.calls == 1


async def test_bad_arguments_are_not_retried() -> None:
    flaky = Flaky(0)
    retry = ToolRetryMiddleware(initial_delay=10)  # a retry would hang the test
    model = model_calling(call("fetch", {"link": "u"}), call("nope"))
    with anyio.fail_after(2):
        result = await create_agent(model, [flaky.fetch], middleware=[retry]).run("go")
    assert flaky.calls == 0
    assert [a.status for a in answers(result)] == ["error", "error"]


async def test_timeouts_can_be_retried() -> None:
    calls = 0

    async def slow_once() -> str:
        """Slow the first time."""
        nonlocal calls
        calls += 1
        if calls == 1:
            await anyio.sleep(5)
        return "fast now"

    retry = ToolRetryMiddleware(retry_on=(TimeoutError,), initial_delay=0)
    agent = create_agent(
        model_calling(call("slow_once")), [slow_once], middleware=[retry], tool_timeout=0.05
    )
    with anyio.fail_after(2):
        result = await agent.run("go")
    assert answers(result)[0].content == "fast now"


def test_backoff_and_checks() -> None:
    retry = ToolRetryMiddleware(initial_delay=1, backoff_factor=3, max_delay=5, jitter=False)
    assert [retry.delay(i) for i in range(4)] == [1, 3, 5, 5]
    jittery = ToolRetryMiddleware(initial_delay=1, jitter=True)
    assert all(0.75 <= jittery.delay(0) <= 1.25 for _ in range(50))
    with pytest.raises(ValueError, match="max_retries"):
        ToolRetryMiddleware(max_retries=-1)
    with pytest.raises(ValueError, match="backoff_factor >= 1"):
        ToolRetryMiddleware(backoff_factor=0.5)
