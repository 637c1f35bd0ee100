"""What every side shares: the loop benchmark's workload, its script of model turns, the check.

The workload is ``bench_loop.py``'s, imported from it: the same four typed async tools
(``make_tools``), the same three planner outputs (``PLANNER_OUTPUTS``: four tool calls, four
more, then a response). A side whose framework speaks in model turns with native tool calls
answers turn ``i`` with the calls of ``TURNS[i]`` (the last turn has none: the final answer).

Every run of every side is checked with :func:`check_results`: eight tool results that are
exactly what the tools return for the scripted arguments, so nothing is measured that did
not really happen.
"""

from __future__ import annotations

import ast
import importlib
import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from bench_loop import (
    COMMANDS_PER_RUN,
    CONCURRENCY,
    EXECUTING_ROUNDS,
    MAX_ROUNDS,
    PLANNER_OUTPUTS,
    USER_INPUT,
    W2_TOOL_SECONDS,
    W3_TOOL_SECONDS,
    CheckFailed,
    ToolFunction,
    make_tools,
)

__all__ = [
    "COMMANDS_PER_RUN",
    "CONCURRENCY",
    "EXECUTING_ROUNDS",
    "FINAL_ANSWER",
    "MAX_ROUNDS",
    "PLANNER_OUTPUTS",
    "TURNS",
    "USER_INPUT",
    "W2_TOOL_SECONDS",
    "W3_TOOL_SECONDS",
    "Builder",
    "CheckFailed",
    "RunFn",
    "ToolFunction",
    "calls_for_turn",
    "check_results",
    "load",
    "make_tools",
    "turn_after_calls",
]

RunFn = Callable[[], Coroutine[Any, Any, None]]
"""One checked run of a side: raises :class:`CheckFailed` if the work was not done."""

Builder = Callable[[float], RunFn]
"""Builds a side once for tools of a given delay (seconds); raises ImportError if missing."""

FINAL_ANSWER = "Lisbon: sunny, 89 EUR by train, Casa Azul at 95 EUR a night."

Call = tuple[str, dict[str, Any]]

TURNS: list[list[Call]] = [
    [(c["tool_name"], c["tool_kwargs"]) for c in output.get("execution_commands", [])]
    for output in PLANNER_OUTPUTS
]
"""The tool calls of each model turn: 4, 4, then none (the final answer)."""


def calls_for_turn(turn: int) -> list[Call]:
    """The tool calls the scripted model makes on its ``turn``-th answer (0-based)."""
    if turn >= len(TURNS):
        raise CheckFailed(f"the model was asked for turn {turn}; the script has {len(TURNS)}")
    return TURNS[turn]


def turn_after_calls(calls_made: int) -> int:
    """The model turn that follows ``calls_made`` tool calls (for a history of items)."""
    made = 0
    for turn, calls in enumerate(TURNS):
        if made == calls_made:
            return turn
        made += len(calls)
    raise CheckFailed(f"{calls_made} tool calls made; the script has {made}")


def load(module: str) -> Any:
    """Import a peer's module by name, typed loosely: the peers need not be installed."""
    return importlib.import_module(module)


def _result_now(tool: ToolFunction, kwargs: dict[str, Any]) -> Any:
    """A 0-ms tool's result, without an event loop (it returns before its first await)."""
    coroutine: Any = tool(**kwargs)
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError(f"{tool.__name__} awaited: not a 0-ms tool")


def _expected() -> list[Any]:
    by_name = {fn.__name__: fn for fn in make_tools(0.0)}
    return [_result_now(by_name[name], kwargs) for calls in TURNS for name, kwargs in calls]


EXPECTED: list[Any] = _expected()


def _normalize(value: Any) -> Any:
    """A tool result as the tool returned it: frameworks that send it on as text get parsed."""
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(value)
            except (ValueError, SyntaxError):
                continue
    return value


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


_EXPECTED_KEYS = sorted(_key(v) for v in EXPECTED)


def check_results(side: str, results: Sequence[Any]) -> None:
    """Raise :class:`CheckFailed` unless ``results`` are the eight expected tool results."""
    keys = sorted(_key(_normalize(r)) for r in results)
    if keys != _EXPECTED_KEYS:
        raise CheckFailed(
            f"{side}: {len(results)} tool results, expected {COMMANDS_PER_RUN} "
            f"({EXPECTED!r}); got {list(results)!r}"
        )
