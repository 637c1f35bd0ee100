"""An execution runs once, even when two runs of it are asked for before either starts."""

from __future__ import annotations

import anyio
import pytest

from toolloop.errors import ResumeError
from toolloop.flow import Flow

pytestmark = pytest.mark.anyio


async def test_a_second_run_is_refused_before_the_first_starts() -> None:
    ran: list[int] = []

    async def side_effect(value: int) -> int:
        ran.append(value)
        await anyio.lowlevel.checkpoint()
        return value

    flow: Flow[None] = Flow("once")
    flow.start.to(side_effect).end()
    execution = flow.execution()
    first = execution.run(1)
    with pytest.raises(ResumeError, match="runs once"):
        _ = execution.run(2)
    result = await first
    assert result.value == 1
    assert ran == [1]
    with pytest.raises(ResumeError, match="runs once"):
        await execution.run(3)
