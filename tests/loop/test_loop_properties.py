"""Random planner outputs, round after round: the loop never crashes and never runs a tool
with arguments that fail its schema."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolloop.loop import async_plan_and_execute, normalize_plan
from toolloop.testing import ScriptedPlanner
from toolloop.tools import Tool

scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=8,
)
kwargs = st.dictionaries(st.sampled_from(["n", "mode", "x"]), values, max_size=3) | values
command = st.fixed_dictionaries(
    {},
    optional={
        "purpose": values,
        "tool_name": st.sampled_from(["count", "missing", "", 3]) | values,
        "tool_kwargs": kwargs,
        "todo_suggestion": values,
    },
)
output = st.one_of(
    values,
    st.fixed_dictionaries(
        {},
        optional={
            "next_action": st.sampled_from(["execute", "response", "Execute", "other"]) | values,
            "execution_commands": st.lists(command, max_size=6) | values,
            "tool_commands": st.lists(command, max_size=3),
            "tool_command": command,
            "use_tool": st.booleans() | values,
        },
    ),
)

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "mode": {"enum": ["a", "b"]}},
    "required": ["n"],
    "additionalProperties": False,
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(output, min_size=1, max_size=4), st.sampled_from(["asyncio", "trio"]))
def test_random_planner_outputs(outputs: list[Any], backend: Literal["asyncio", "trio"]) -> None:
    seen: list[dict[str, Any]] = []

    def count(**kw: Any) -> int:
        jsonschema.validate(kw, SCHEMA)  # the loop must never let invalid arguments through
        seen.append(kw)
        return int(kw["n"])

    tool = Tool(name="count", description="count", parameters=SCHEMA, function=count)

    async def main() -> Any:
        return await async_plan_and_execute(
            "x", tools=[tool], planner=ScriptedPlanner(outputs), max_turns=3, concurrency=2
        )

    result = anyio.run(main, backend=backend)
    executed = 0
    expected_records = 0
    for out in outputs[: result.rounds]:
        plan = normalize_plan(out)
        assert plan.next_action == "execute"
        expected_records += len(plan.items)
        executed += 1
    assert executed == result.rounds
    assert len(result.done_plans) == expected_records
    assert len(seen) == sum(1 for r in result.done_plans if r.success)
    for record in result.done_plans:
        if record.success:
            assert record.tool_name == "count"
            assert record.result == record.kwargs["n"]
        else:
            assert record.error
