"""A planner that follows a script: for tests, demos and benchmarks."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio

from ..planners import PlannerContext

__all__ = ["ScriptedPlanner"]


class ScriptedPlanner:
    """Answers round ``i`` with ``outputs[i]``: stateless, so one planner serves many runs.

    Each output is returned as is (a dict, a model, JSON text, even garbage, to test the
    loop's normalization), called with the context if it is callable (sync or async), or
    raised if it is an exception.

    Args:
        outputs: one planner output per round.
        delay: seconds each call takes, to stand in for a model's latency.
        then: past the script, answer ``{"next_action": "response"}`` or raise.
        record: keep every context received in ``calls`` (turn off for big benchmarks).
    """

    def __init__(
        self,
        outputs: Sequence[Any],
        *,
        delay: float = 0.0,
        then: Literal["response", "raise"] = "response",
        record: bool = True,
    ) -> None:
        self.outputs = list(outputs)
        self.delay = delay
        self.then = then
        self.record = record
        self.calls: list[PlannerContext] = []

    async def plan(self, context: PlannerContext) -> Any:
        if self.record:
            self.calls.append(context)
        if self.delay:
            await anyio.sleep(self.delay)
        i = context.round_index
        if i >= len(self.outputs):
            if self.then == "raise":
                raise LookupError(
                    f"ScriptedPlanner has {len(self.outputs)} outputs; round {i} asked for one more"
                )
            return {"next_action": "response"}
        output = self.outputs[i]
        if isinstance(output, BaseException):
            raise output
        if callable(output):
            fn: Callable[[PlannerContext], Any] = output
            output = fn(context)
            if inspect.isawaitable(output):
                output = await output
        return output
