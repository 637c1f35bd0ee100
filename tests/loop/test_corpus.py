"""A corpus of hostile planner outputs and streams, through the loop: no crash, no tool run
with arguments that fail its schema, exactly one record per command, and the same outcome
however a stream is cut."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from toolloop import async_plan_and_execute
from toolloop.errors import PlannerError
from toolloop.loop import normalize_plan
from toolloop.planners import StructuredPlanner
from toolloop.testing import ScriptedChatModel, ScriptedPlanner
from toolloop.tools import Tool
from toolloop.tools._ecma import ECMAValidator

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$", "maxLength": 64},
        "count": {"type": "integer", "minimum": 0, "maximum": 10},
        "ratio": {"type": "number"},
    },
    "required": ["path"],
    "additionalProperties": False,
}
REFERENCE = ECMAValidator(SCHEMA)


class Recorder:
    """The one tool of the corpus: notes every call it really receives."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def tool(self) -> Tool:
        def read(**kwargs: Any) -> str:
            self.calls.append(kwargs)
            return f"read {kwargs.get('path')}"

        return Tool(name="read", description="Read a file.", parameters=SCHEMA, function=read)


class Exploding(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 2


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"k": [value]}
    return value


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["me"] = value
    return value


KWARGS: list[Any] = [
    {"path": "a/b.txt"},
    {"path": "etc/passwd\n"},
    {"path": "../../x y"},
    {"path": "a" * 65},
    {"path": 3},
    {"path": None},
    {},
    {"path": "ok", "count": 11},
    {"path": "ok", "count": -1},
    {"path": "ok", "count": 2.5},
    {"path": "ok", "count": True},
    {"path": "ok", "ratio": math.nan},
    {"path": "ok", "ratio": math.inf},
    {"path": "ok", "extra": 1},
    {"path": "ok", 1: "x"},
    {"path": deep(200)},
    {"path": cyclic()},
    {"path": "x" * 300_000},
    '{"path": "from/json.txt"}',
    '{"path": "broken',
    "path=x",
    ["path", "x"],
    None,
    42,
]
COMMAND_SHAPES: list[Any] = [
    lambda kw: {"purpose": "p", "tool_name": "read", "tool_kwargs": kw},
    lambda kw: {"tool_name": " read ", "tool_kwargs": kw, "todo_suggestion": 7},
    lambda kw: {"tool_name": "nope", "tool_kwargs": kw},
    lambda kw: {"purpose": ["odd"], "tool_kwargs": kw},
    lambda kw: {"tool_name": "read", "kwargs": kw},
]
PLAN_SHAPES: list[Any] = [
    lambda cmds: {"next_action": "execute", "execution_commands": cmds},
    lambda cmds: {"next_action": "EXECUTE", "tool_commands": cmds},
    lambda cmds: {"execution_commands": cmds},
    lambda cmds: {"next_action": "maybe", "execution_commands": cmds},
    lambda cmds: {"next_action": "execute", "tool_command": cmds[0] if cmds else None},
    lambda cmds: {"use_tool": "no", "execution_commands": cmds},
    lambda cmds: json.dumps({"next_action": "execute", "execution_commands": cmds}, default=str),
]
GARBAGE: list[Any] = [
    None,
    [],
    (),
    "",
    "not json",
    "[1, 2]",
    42,
    math.nan,
    b"\xff\xfe",
    Exploding(),
    {"execution_commands": Exploding()},
    {"execution_commands": "read"},
    {"execution_commands": 5},
    {"next_action": None, "execution_commands": None},
    deep(5_000),
    cyclic(),
    {"execution_commands": [cyclic()]},
    "[" * 50_000,
    {"next_action": "execute", "execution_commands": [{"tool_name": "read"}] * 100},
]


def corpus() -> list[Any]:
    outputs: list[Any] = list(GARBAGE)
    for plan, shape, kwargs in itertools.product(PLAN_SHAPES, COMMAND_SHAPES, KWARGS):
        if len(outputs) >= 400:
            break
        try:
            outputs.append(plan([shape(kwargs), shape({"path": "second.txt"})]))
        except (TypeError, ValueError):  # JSON text of a cycle: the Python value instead
            outputs.append({"execution_commands": [shape(kwargs)]})
    return outputs


CORPUS = corpus()


def test_the_corpus_is_as_large_as_promised() -> None:
    assert len(CORPUS) >= 300


async def test_no_crash_no_invalid_call_one_record_per_command() -> None:
    recorder = Recorder()
    tool = recorder.tool()
    for output in CORPUS:
        plan = normalize_plan(output)
        expected = len(plan.items) if plan.next_action == "execute" else 0
        result = await async_plan_and_execute(
            "?", tools=[tool], planner=ScriptedPlanner([output]), max_turns=1
        )
        assert len(result.done_plans) == expected, output
        assert result.stop_reason in ("answered", "use_tool_false", "no_commands",
                                      "max_turns", "invalid_plan")  # fmt: skip
        json.dumps(result.action_results or {}, allow_nan=False)
    assert recorder.calls, "the corpus has valid calls too"
    for call in recorder.calls:
        assert REFERENCE.is_valid(call), call


PLANS = [
    '{"next_action": "execute", "execution_commands": [{"purpose": "a", "tool_name": "read", '
    '"tool_kwargs": {"path": "a.txt"}}, {"purpose": "b", "tool_name": "read", "tool_kwargs": '
    '{"path": "bad\\n"}}, {"tool_name": "nope"}, {"purpose": "c"}]}',
    '{"next_action": "response", "execution_commands": []}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": {"path": "x", "count": 1e400}}]}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", "tool_kwargs": '
    '{"path": "\\u0000\\ud83d\\ude00"}}]}',
    '{"next_action": "exe',  # cut off
    '{"next_action": "execute", "execution_commands": [' + "[" * 400 + "]",
    'Sure! {"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": {"path": "p"}}]}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", "tool_kwargs": '
    '{"path": "ok"}}, {"tool_name": "read", "tool_kwargs": {"path": "ok2"}}]} trailing',
    "null",
    '{"next_action": "execute", "execution_commands": {"tool_name": "read", '
    '"tool_kwargs": {"path": "single"}}}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": "{\\"path\\": \\"as text\\"}"}]}',
    '{"next_action": "execute" "execution_commands": []}',
    '["not", "an", "object"]',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": {"path": "a"}, "tool_kwargs": {"path": "b"}}]}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": {"path": NaN}}]}',
    '{"next_action": "execute", "execution_commands": [{"tool_name": "read", '
    '"tool_kwargs": {"path": "ok", "ratio": -0.0}}]}',
    '{"next_action": "execute", "execution_commands": ['
    + ", ".join(
        json.dumps({"tool_name": "read", "tool_kwargs": {"path": f"f{i}"}}) for i in range(70)
    )
    + "]}",
    "",
    "   ",
    '{"next_action": "response", "extra": "' + "x" * 5000 + '"}',
]
CHUNK_SIZES = [1, 3, 17, 10_000]


async def outcome(text: str, chunk_size: int, streaming: bool) -> Any:
    recorder = Recorder()
    model = ScriptedChatModel()
    model.add_reply(text, chunk_size=chunk_size)
    model.add_reply('{"next_action": "response"}')
    try:
        result = await async_plan_and_execute(
            "?",
            tools=[recorder.tool()],
            planner=StructuredPlanner(model),
            max_turns=2,
            streaming_dispatch=streaming,
        )
    except PlannerError as exc:
        return ("error", type(exc.__cause__).__name__, len(exc.done_plans))
    for call in recorder.calls:
        assert REFERENCE.is_valid(call), call
    return (
        result.stop_reason,
        tuple((r.tool_name, r.success, r.error) for r in result.done_plans),
        tuple(sorted(json.dumps(c, sort_keys=True) for c in recorder.calls)),
    )


@pytest.mark.parametrize("text", PLANS, ids=[f"plan{i}" for i in range(len(PLANS))])
async def test_a_stream_ends_the_same_however_it_is_cut(text: str) -> None:
    assert len(PLANS) * len(CHUNK_SIZES) >= 80
    for streaming in (False, True):
        seen = {await outcome(text, size, streaming) for size in CHUNK_SIZES}
        assert len(seen) == 1, (streaming, seen)
