"""How a replay compares what the code does now with what was recorded: a call's
arguments (as a trace keeps them), a model request, the tool calls of a turn, the end."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from ..runner import json_safe
from ..tracing import redact
from ._recording import RecordedToolCall, Recording

__all__ = [
    "CompareRequests",
    "calls_difference",
    "end_difference",
    "normal",
    "request_difference",
    "shown",
]

CompareRequests = Literal["off", "shape", "exact"]
"""How much of each model request a replay checks against the recorded one:

- ``"shape"`` (the default): what the model is offered and asked for — the number of
  messages, the tools (names), ``tool_choice``, the structured output (its name), the
  settings (``max_tokens``, ``temperature``, ...);
- ``"exact"``: the messages and the schemas too (their digests): any change of a prompt,
  a tool's schema or a tool result's text is a divergence (a result whose secrets the
  trace scrubbed reads otherwise now: compare the shape of such a run);
- ``"off"``: only the number and order of the model calls.
"""

_SAID = {
    "tools": "the tools offered",
    "tool_choice": "tool_choice",
    "structured_output": "the structured output",
    "settings": "the settings",
    "messages": "the number of messages",
    "schemas": "the tools' schemas",
    "digest": "the messages",
}


def normal(value: Any) -> Any:
    """Arguments as a trace keeps them (JSON data, secrets scrubbed), to compare a call
    made now with a recorded one."""
    return json.loads(json.dumps(redact(json_safe(value)), sort_keys=True))


def shown(value: Any, limit: int = 200) -> str:
    """JSON data in one line, for a message."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def request_difference(
    recorded: Mapping[str, Any], now: Mapping[str, Any], compare: CompareRequests
) -> str | None:
    """What differs first between two request summaries, in a few words (``None``: the
    same, as far as ``compare`` looks)."""
    keys = ["tools", "tool_choice", "structured_output", "settings", "messages"]
    if compare == "exact":
        keys += ["schemas", "digest"]
    else:  # the shape: the structured output's name, not its schema
        recorded, now = _named_output(recorded), _named_output(now)
    for key in keys:
        if recorded.get(key) != now.get(key):
            if key in ("digest", "schemas"):
                return f"{_SAID[key]} differ (compare_requests='exact')"
            return f"{_SAID[key]}: recorded {recorded.get(key)!r}, now {now.get(key)!r}"
    return None


def _named_output(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    output = summary.get("structured_output")
    if not isinstance(output, Mapping):
        return summary
    return {**summary, "structured_output": output.get("name")}


def calls_difference(
    recorded: list[RecordedToolCall], now: list[RecordedToolCall], turn: int
) -> str | None:
    """What differs first between the tool calls of one turn, in a sentence."""
    where = "before the first model call" if turn < 0 else f"turn {turn}"
    before = sorted(recorded, key=lambda c: (c.round_index, c.index))
    after = sorted(now, key=lambda c: (c.round_index, c.index))

    def key(call: RecordedToolCall) -> str:
        return json.dumps([call.tool_name, normal(call.arguments), call.ran], sort_keys=True)

    keys_before, keys_after = [key(c) for c in before], [key(c) for c in after]
    if keys_before != keys_after and sorted(keys_before) == sorted(keys_after):
        return f"{where}: the same calls are made in another order"
    for old, new in zip(before, after, strict=False):
        place = f"[{new.round_index}.{new.index}]"
        if old.tool_name != new.tool_name:
            return f"{where}: call {place} is {new.tool_name} now, {old.tool_name} in the recording"
        if normal(old.arguments) != normal(new.arguments):
            return f"{where}: {old.tool_name} {place} is called with other arguments"
        if (old.round_index, old.index) != (new.round_index, new.index):
            return f"{where}: {old.tool_name} comes in another place (another order)"
        if old.ran != new.ran:
            call = f"{new.tool_name} {place}"
            if old.ran:
                return f"{where}: {call} is refused now ({new.error}); it ran in the recording"
            return f"{where}: {call} runs now; the recording refused it ({old.error})"
    if len(after) > len(before):
        return f"{where}: {after[len(before)].said()} is a call the recording does not have"
    if len(before) > len(after):
        return f"{where}: the recorded call {before[len(after)].said()} was not made"
    return None


def end_difference(recorded: Recording, now: Recording) -> str | None:
    """How the run's end differs from the recorded one, in a sentence."""
    old, new = recorded.end, now.end
    if old.status == "unfinished" or new.status == "unfinished":
        return None
    if old.status != new.status or (
        old.status == "completed"
        and (old.stop_reason, old.records) != (new.stop_reason, new.records)
    ):
        return f"the run ends otherwise: {new.said()} now, {old.said()} in the recording"
    return None
