"""What a replay says when the code now does something else: the error, and the diff of
what was recorded and what happened, turn by turn."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import RunError
from ._recording import RecordedEnd, RecordedModelCall, RecordedToolCall, Recording

__all__ = ["ReplayError", "ReplayMismatch", "Transcript", "render_diff"]


class ReplayError(RunError):
    """A recording that cannot be replayed as asked: it lacks what the replay needs (a
    result the trace cut, a product it does not name), or the replay did not end in time."""


class ReplayMismatch(ReplayError, AssertionError):
    """The code now does something else than the recorded run did: another call, other
    arguments, another order, a missing call, another request to the model, another end.

    ``str(error)`` says where and what, then shows the diff (``-`` recorded, ``+`` now),
    turn by turn (turn ``i``: model call ``#i`` and the tool calls its reply led to).

    Attributes:
        turn: the first turn that differs (``None``: the end differs).
        reason: what differs, in a sentence.
        diff: the diff, recorded against now.
    """

    def __init__(self, reason: str, diff: str, *, turn: int | None, source: str) -> None:
        super().__init__(f"the replay of {source} diverged: {reason}\n\n{diff}")
        self.turn = turn
        self.reason = reason
        self.diff = diff


@dataclass
class Transcript:
    """One side of a diff: the model calls and tool calls of a run, and its end."""

    model_calls: Sequence[RecordedModelCall]
    tool_calls: Sequence[RecordedToolCall]
    end: RecordedEnd | None
    """``None``: the run was stopped before its end."""

    @classmethod
    def of(cls, recording: Recording) -> Transcript:
        return cls(recording.model_calls, recording.tool_calls, recording.end)

    def turns(self) -> list[int]:
        found = {call.turn for call in self.tool_calls} | {
            call.position for call in self.model_calls
        }
        return sorted(found)

    def block(self, turn: int, requests: bool) -> list[str]:
        """The lines of one turn."""
        lines = ["before the first model call" if turn < 0 else f"turn {turn}"]
        for call in self.model_calls:
            if call.position == turn:
                lines.append(f"    model call #{turn}: {call.said()}")
                if requests and call.request is not None:
                    lines.append(f"      request: {_request_words(call.request)}")
        calls = sorted(
            (c for c in self.tool_calls if c.turn == turn), key=lambda c: (c.round_index, c.index)
        )
        lines.extend(f"    {call.said()}" for call in calls)
        return lines


def render_diff(
    recorded: Transcript,
    now: Transcript,
    *,
    upto: int | None,
    request_turn: int | None = None,
    context: int = 2,
) -> str:
    """The diff of two transcripts, turn by turn (``-`` recorded, ``+`` now).

    Args:
        upto: the last turn to show of the recorded side (``None``: all, and the end);
            the turns after it are counted in one line.
        request_turn: the turn whose requests are shown (a request that differs).
        context: turns shown whole before the first turn that differs; earlier turns that
            are the same are said in one line.
    """
    mine = {t for t in recorded.turns() if upto is None or t <= upto}
    theirs = set(now.turns())
    shown = sorted(mine | theirs)

    def blocks(turn: int) -> tuple[list[str], list[str]]:
        asked = turn == request_turn
        return (
            recorded.block(turn, asked) if turn in mine else [],
            now.block(turn, asked) if turn in theirs else [],
        )

    out = ["--- recorded", "+++ now"]
    first = next((t for t in shown if blocks(t)[0] != blocks(t)[1]), None)
    quiet = [t for t in shown if first is not None and t < first - context]
    if quiet:
        out.append(
            f"  turns {quiet[0]} to {quiet[-1]}: as recorded"
            if len(quiet) > 1
            else f"  turn {quiet[0]}: as recorded"
        )
    for turn in shown:
        if turn not in quiet:
            out += _compared(*blocks(turn))
    left: list[str] = []
    right: list[str] = []
    if upto is not None:
        rest = [t for t in recorded.turns() if t > upto]
        if rest:
            left.append(f"({len(rest)} more turn{'s' * (len(rest) != 1)} recorded after it)")
        if recorded.end is not None:
            left.append(recorded.end.said())
        right.append("(stopped here)")
    else:
        if recorded.end is not None:
            left.append(recorded.end.said())
        if now.end is not None:
            right.append(now.end.said())
    out += _compared(left, right)
    return "\n".join(out)


def _compared(left: list[str], right: list[str]) -> list[str]:
    """The lines of one turn: the same lines once, else the lines that differ (``-``
    recorded, ``+`` now, ``?`` where in a line)."""
    if left == right:
        return [f"  {line}" for line in left]
    return [line.rstrip() for line in difflib.ndiff(left, right)]


def _request_words(summary: object) -> str:
    if not isinstance(summary, dict):
        return str(summary)
    parts = []
    for key in ("messages", "tools", "tool_choice", "structured_output", "settings"):
        if key in summary:
            value = summary[key]
            if key == "structured_output" and isinstance(value, dict):
                value = value.get("name")
            parts.append(f"{key}={value}")
    return ", ".join(parts)
