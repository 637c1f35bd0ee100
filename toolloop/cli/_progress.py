"""Live progress in a terminal: what is done scrolls up, what is running stays at the bottom.

Finished things are printed once, for good (a plan decided, a tool call done with its time,
a round done, the short-circuit); below them a few lines are redrawn about ten times a
second: the planner call in progress and every tool call running, each with its own clock.
Only ANSI escapes are used (cursor up, clear below), no dependency; colours follow
``NO_COLOR``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import partialmethod
from time import perf_counter
from typing import TextIO

import anyio

from ..flow import ExecutionFailed, ExecutionPaused, FlowEvent
from ..kernel import RunFinished
from ..loop import (
    PlanDecided,
    RoundFinished,
    RoundStarted,
)
from ..runner import ToolCallFinished, ToolCallStarted, ToolProgress
from ..tracing import redact_text
from ._plain import format_kwargs, ms, plan_summary, preview, round_took

__all__ = ["LiveDisplay"]

_REFRESH = 0.1
_SPINNER_UTF8 = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPINNER_ASCII = "-\\|/"


@dataclass
class _Running:
    round_index: int
    index: int
    text: str
    since: float
    call_id: str = ""
    progress: str = ""
    """What the tool last reported (``ctx.report``)."""


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    dim = partialmethod(_wrap, "2")
    bold = partialmethod(_wrap, "1")
    green = partialmethod(_wrap, "32")
    red = partialmethod(_wrap, "31")
    yellow = partialmethod(_wrap, "33")
    cyan = partialmethod(_wrap, "36")


def _visible_cut(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` visible characters, keeping ANSI escapes whole."""
    out: list[str] = []
    seen = 0
    i = 0
    while i < len(text):
        if text[i] == "\x1b":
            end = text.find("m", i)
            if end == -1:
                break
            out.append(text[i : end + 1])
            i = end + 1
            continue
        if seen >= width:
            out.append("\x1b[0m" if "\x1b[" in text else "")
            break
        out.append(text[i])
        seen += 1
        i += 1
    return "".join(out)


class LiveDisplay:
    """The terminal display of a run (see the module docs).

    Args:
        out: a terminal.
        color: use colours (default: unless ``NO_COLOR`` is set).
        width: the terminal's width (default: asked of the terminal).
    """

    live = True

    def __init__(
        self,
        out: TextIO,
        *,
        color: bool | None = None,
        width: int | None = None,
        turn: str = "round",
    ):
        self.out = out
        self.turn = turn
        self.style = _Style(("NO_COLOR" not in os.environ) if color is None else color)
        self._width = width
        encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
        self._utf8 = encoding in ("utf8", "utf8sig")
        self._spinner = _SPINNER_UTF8 if self._utf8 else _SPINNER_ASCII
        self._ok = "✓" if self._utf8 else "+"
        self._fail = "✗" if self._utf8 else "x"
        self._bolt = "⚡" if self._utf8 else "!"
        self._footer = 0  # lines drawn below the permanent output
        self._planning: tuple[int, float] | None = None
        self._running: dict[tuple[int, int], _Running] = {}
        self._round_started: dict[int, float] = {}
        self._frame = 0
        self._closed = False
        self._cursor_hidden = False

    # -- the terminal ---------------------------------------------------------------------

    @property
    def width(self) -> int:
        if self._width is not None:
            return self._width
        return shutil.get_terminal_size((100, 24)).columns

    def _clear_footer(self) -> str:
        if not self._footer:
            return ""
        text = f"\x1b[{self._footer}A\x1b[J"
        self._footer = 0
        return text

    def _footer_lines(self) -> list[str]:
        now = perf_counter()
        spin = self._spinner[self._frame % len(self._spinner)]
        s = self.style
        lines: list[str] = []
        if self._planning is not None:
            index, since = self._planning
            lines.append(f"    {s.cyan(spin)} round {index}: planning {s.dim(ms(now - since))}")
        running = sorted(self._running.values(), key=lambda r: (r.round_index, r.index))
        height = shutil.get_terminal_size((100, 24)).lines
        room = max(height - 4, 3)
        for item in running[:room]:
            said = f" {s.cyan(item.progress)}" if item.progress else ""
            lines.append(f"    {s.cyan(spin)} {item.text}{said} {s.dim(ms(now - item.since))}")
        if len(running) > room:
            lines.append(s.dim(f"    ... and {len(running) - room} more running"))
        return lines

    def _render(self, permanent: list[str]) -> None:
        if self._closed:
            return
        width = max(self.width - 1, 20)
        parts = [self._clear_footer()]
        for text in permanent:
            for piece in text.split("\n"):
                parts.append(_visible_cut(piece, width) + "\n")
        footer = self._footer_lines()
        if footer and not self._cursor_hidden:  # a clock ticks below: hide the cursor
            parts.append("\x1b[?25l")
            self._cursor_hidden = True
        for text in footer:
            parts.append(_visible_cut(text, width) + "\n")
        self._footer = len(footer)
        self.out.write("".join(parts))
        self.out.flush()

    # -- events ---------------------------------------------------------------------------

    def __call__(self, event: FlowEvent) -> None:
        s = self.style
        now = perf_counter()
        t = s.dim(f"{event.at:7.2f}s")
        permanent: list[str] = []
        if isinstance(event, RoundStarted):
            self._planning = (event.round_index, now)
            self._round_started[event.round_index] = event.at
            permanent.append(f"{t}  {s.bold(f'round {event.round_index}')}")
        elif isinstance(event, PlanDecided):
            self._planning = None
            words = plan_summary(event)
            if event.short_circuited:
                words = s.yellow(f"{self._bolt} {words}")
            elif event.next_action == "execute":
                words = s.bold(words)
            permanent.append(f"{t}    plan: {words} {s.dim(f'({ms(event.duration)})')}")
            permanent.extend(f"{t}    {s.dim('note: ' + note)}" for note in event.notes)
        elif isinstance(event, ToolCallStarted):
            c = event.command
            text = f"#{event.index} {c.tool_name} {s.dim(format_kwargs(c.tool_kwargs, 80))}"
            self._running[(event.round_index, event.index)] = _Running(
                event.round_index, event.index, text, now, event.call_id
            )
        elif isinstance(event, ToolCallFinished):
            self._running.pop((event.round_index, event.index), None)
            r = event.record
            took = ms(event.duration)
            if r.success:
                permanent.append(
                    f"{t}    {s.green(self._ok)} #{event.index} {r.tool_name} {s.dim(took)}"
                    f"  {s.dim('-> ' + preview(r.result, 80))}"
                )
            else:
                error = " ".join((r.error or "failed").split())
                permanent.append(
                    f"{t}    {s.red(self._fail)} #{event.index} {r.tool_name} {s.dim(took)}"
                    f"  {s.red(error)}"
                )
        elif isinstance(event, ToolProgress):
            for running in self._running.values():
                if running.round_index == event.round_index and running.call_id == event.call_id:
                    said = " ".join(redact_text(event.message[:240]).split())
                    running.progress = said if len(said) <= 60 else said[:57] + "..."
                    break
            return  # shown on the running line, redrawn by the refresh
        elif isinstance(event, RoundFinished):
            ok = sum(1 for r in event.records if r.success)
            failed = len(event.records) - ok
            tally = s.green(f"{ok} ok") + (f", {s.red(f'{failed} failed')}" if failed else "")
            took = round_took(event, self._round_started.get(event.round_index))
            permanent.append(f"{t}    done: {tally} {s.dim(f'({took})')}")
        elif isinstance(event, RunFinished):
            self._planning = None
            permanent.append(
                f"{t}  {s.bold('finished')}: {event.stop_reason} after {event.turns} "
                f"{self.turn}{'s' * (event.turns != 1)}, {event.records} "
                f"record{'s' * (event.records != 1)}"
            )
        elif isinstance(event, ExecutionFailed):
            self._planning = None
            self._running.clear()
            permanent.append(f"{t}  {s.red('failed')}: {' '.join(event.error.split())}")
        elif isinstance(event, ExecutionPaused):
            self._planning = None
            permanent.append(f"{t}  {s.yellow('paused')}: the run waits for a human")
        else:
            return
        self._render(permanent)

    def message(self, text: str = "") -> None:
        """A line of output between or after events (printed above the running lines)."""
        if self._closed:
            self.out.write(text + "\n")
            self.out.flush()
            return
        self._render([text])

    def write(self, text: str) -> None:
        """Text as it comes (a streamed answer): the running lines are cleared for good."""
        self.close()
        self.out.write(text)
        self.out.flush()

    async def refresh_forever(self) -> None:
        """Redraw the running lines (their clocks, the spinner) until cancelled."""
        while not self._closed:
            await anyio.sleep(_REFRESH)
            self._frame += 1
            if self._planning is not None or self._running:
                self._render([])

    def close(self) -> None:
        """Clear the running lines and give the cursor back (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        text = self._clear_footer()
        if self._cursor_hidden:
            text += "\x1b[?25h"
            self._cursor_hidden = False
        self.out.write(text)
        self.out.flush()
