"""A per-tool option that names no tool of the run is refused, saying the tools it has:
a typo would otherwise turn the option off without a word."""

from __future__ import annotations

import pytest

from toolloop.kernel import ChildRuns, RunOptions, as_tool
from toolloop.ratelimit import RateLimit
from toolloop.runner import Executor, SharedResults

pytestmark = pytest.mark.anyio


async def lookup(q: str) -> str:
    """Look it up.

    Args:
        q: what to look for.
    """
    return q


@pytest.mark.parametrize(
    ("option", "value"),
    [("rate_limits", {"lokup": RateLimit(5)}), ("shared_results", {"lokup": SharedResults()})],
)
def test_a_per_tool_option_naming_no_tool_is_refused(option: str, value: object) -> None:
    with pytest.raises(ValueError, match="'lokup', which is not a tool") as refused:
        Executor([lookup], **{option: value})  # type: ignore[arg-type]
    assert "did you mean 'lookup'?" in str(refused.value)
    assert "['lookup']" in str(refused.value)
    Executor([lookup], **{option: {"lookup": next(iter(value.values()))}})  # type: ignore[arg-type,attr-defined]


async def test_a_run_with_a_misspelt_shared_tool_does_not_start() -> None:
    from toolloop.agents import create_agent
    from toolloop.testing import ScriptedChatModel

    agent = create_agent(ScriptedChatModel(["hi"]), [lookup])
    with pytest.raises(ValueError, match="did you mean 'lookup'"):
        await agent.run("hello", shared_results={"lokup": SharedResults()})


@pytest.mark.parametrize("bound", ["max_depth", "max_children"])
def test_a_bool_is_no_depth_or_fan_out(bound: str) -> None:
    async def run(request: str, **options: object) -> object:
        raise AssertionError("never runs")

    runs = ChildRuns(run=run, defaults=RunOptions())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=bound):
        as_tool(runs, name="child", description="A child.", **{bound: True})
