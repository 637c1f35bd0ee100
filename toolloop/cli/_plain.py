"""Plain mode: one line per event, for logs, pipes and CI (stdout is not a terminal).

Each line starts with the seconds since the run started, then the round::

       0.000s  round 0  planning
       0.201s  round 0  plan: execute 5 commands (201 ms)
       0.201s  round 0  start #0 get_weather city="Lisbon"
       0.502s  round 0  ok    #0 get_weather 301 ms -> {"city": "Lisbon", "sky": "sunny"}
       0.502s  round 0  FAIL  #3 book_hotel 0 ms: no tool named 'book_hotel'
       0.903s  round 0  done: 5 records, 3 ok, 2 failed (round 903 ms, tools 702 ms)
       1.105s  round 2  plan: response, short-circuit (12 ms)
       1.105s  finished: answered after 2 rounds, 9 records

The same words serve the live display and ``toolloop trace show``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from ..flow import ExecutionFailed, ExecutionPaused, FlowEvent
from ..kernel import RunFinished
from ..loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ..models import Usage
from ..runner import ToolCallFinished, ToolCallStarted, ToolProgress, json_safe
from ..tracing import redact

__all__ = [
    "PlainDisplay",
    "describe",
    "format_kwargs",
    "ms",
    "preview",
    "round_took",
    "usage_summary",
]


def usage_summary(usage: Usage | None) -> str:
    """``1,240 tokens (1,100 in, 140 out) in 3 model calls``; what is unknown said so;
    ``""`` when no model call was counted."""
    if usage is None or not usage.requests:
        return ""
    n = usage.requests
    calls = f"{n} model call{'s' * (n != 1)}"
    if usage.total_tokens is None:
        return f"{calls}, usage not reported"
    text = f"{usage.total_tokens:,} tokens"
    if usage.input_tokens is not None and usage.output_tokens is not None:
        text += f" ({usage.input_tokens:,} in, {usage.output_tokens:,} out)"
    text += f" in {calls}"
    if usage.unreported_requests:
        text += f", {usage.unreported_requests} not reported (at least that many)"
    return text


def ms(seconds: float) -> str:
    """A duration for people: ``301 ms``, ``1.25 s``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def preview(value: Any, limit: int = 100) -> str:
    """A value as one short line of JSON (scrubbed of secrets)."""
    safe = json_safe(value, max_string=limit * 4)  # cut before redacting: a 20 MB result
    text = json.dumps(redact(safe), ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_kwargs(kwargs: Mapping[str, Any], limit: int = 120) -> str:
    """``city="Lisbon" days=3`` (scrubbed of secrets)."""
    parts = [
        f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
        for key, value in redact(dict(kwargs)).items()
    ]
    text = " ".join(" ".join(parts).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(redact(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plan_summary(event: PlanDecided) -> str:
    """``execute 5 commands`` / ``response, short-circuit`` / ``response (max_turns)``."""
    if event.next_action == "execute":
        n = len(event.commands)
        text = f"execute {n} command{'s' * (n != 1)}"
    else:
        text = "response"
        if event.stop_reason not in (None, "answered"):
            text += f" ({event.stop_reason})"
    if event.short_circuited:
        text += ", short-circuit: the stream was closed as soon as 'response' was settled"
    return text


def round_took(event: RoundFinished, started: float | None) -> str:
    """``round 883 ms, tools 544 ms``: the round from its planner call on, and its tools
    (from the first call's start); just the tools when the round's start is not known."""
    tools = f"tools {ms(event.duration)}"
    return tools if started is None else f"round {ms(event.at - started)}, {tools}"


def describe(
    event: FlowEvent, round_started: Mapping[int, float] | None = None, turn: str = "round"
) -> str | None:
    """The words of a plain line for ``event`` (without its time); ``None`` for events that
    are not shown (the flow engine's steps). ``round_started`` has when each round started
    (``RoundStarted.at``), for the time a round took in all; ``turn`` names the product's
    turn (the loop's round, the middleware agent's model call, the status agent's step)."""
    if isinstance(event, RoundStarted):
        return f"round {event.round_index}  planning"
    if isinstance(event, PlanDecided):
        text = f"round {event.round_index}  plan: {plan_summary(event)} ({ms(event.duration)})"
        for note in event.notes:
            text += f"\n{'':10}round {event.round_index}  note: {_one_line(note)}"
        return text
    if isinstance(event, ToolCallStarted):
        c = event.command
        return (
            f"round {event.round_index}  start #{event.index} {c.tool_name} "
            f"{format_kwargs(c.tool_kwargs)}"
        ).rstrip()
    if isinstance(event, ToolCallFinished):
        r = event.record
        head = f"round {event.round_index}  "
        took = ms(event.duration)
        if r.success:
            return f"{head}ok    #{event.index} {r.tool_name} {took} -> {preview(r.result)}"
        return f"{head}FAIL  #{event.index} {r.tool_name} {took}: {_one_line(r.error or '')}"
    if isinstance(event, ToolProgress):
        data = f" {format_kwargs(event.data)}" if event.data else ""
        return (
            f"round {event.round_index}  ...   {event.tool_name}: {_one_line(event.message)}{data}"
        )
    if isinstance(event, RoundFinished):
        ok = sum(1 for r in event.records if r.success)
        failed = len(event.records) - ok
        n = len(event.records)
        return (
            f"round {event.round_index}  done: {n} record{'s' * (n != 1)}, {ok} ok, "
            f"{failed} failed ({round_took(event, (round_started or {}).get(event.round_index))})"
        )
    if isinstance(event, RunFinished):
        return (
            f"finished: {event.stop_reason} after {event.turns} {turn}"
            f"{'s' * (event.turns != 1)}, {event.records} record{'s' * (event.records != 1)}"
        )
    if isinstance(event, ExecutionFailed):
        return f"failed: {_one_line(event.error)}"
    if isinstance(event, ExecutionPaused):
        return "paused: the run waits for a human"
    return None


def line(
    event: FlowEvent, round_started: Mapping[int, float] | None = None, turn: str = "round"
) -> str | None:
    """The whole plain line of ``event``, with its time."""
    words = describe(event, round_started, turn)
    return None if words is None else f"{event.at:8.3f}s  {words}"


class PlainDisplay:
    """Writes one line per event as it happens, and flushes it (so ``| tee`` shows it live)."""

    live = False

    def __init__(self, out: TextIO, *, turn: str = "round") -> None:
        self.out = out
        self.turn = turn
        """What a turn of the run is called (the loop's round)."""
        self._round_started: dict[int, float] = {}

    def __call__(self, event: FlowEvent) -> None:
        if isinstance(event, RoundStarted):
            self._round_started[event.round_index] = event.at
        text = line(event, self._round_started, self.turn)
        if text is not None:
            self.out.write(text + "\n")
            self.out.flush()

    def message(self, text: str = "") -> None:
        """A line of output between or after events."""
        self.out.write(text + "\n")
        self.out.flush()

    def write(self, text: str) -> None:
        """Text as it comes (a streamed answer)."""
        self.out.write(text)
        self.out.flush()

    async def refresh_forever(self) -> None:
        """Nothing to refresh in plain mode."""

    def close(self) -> None:
        self.out.flush()
