"""Turning whatever a planner returned into a plan the loop can act on.

The rules, as in the design:

- ``tool_commands`` is read as ``execution_commands``; a single ``tool_command`` becomes a
  list of one;
- a missing ``next_action`` is inferred: commands present → ``execute``, else ``response``;
- ``use_tool`` that normalizes to False stops the loop;
- ``execute`` with no valid command is ``response``;
- a command without ``tool_name`` is dropped; a missing ``purpose`` gets a default;
- ``next`` mirrors ``todo_suggestion``.

Nothing a planner returns makes this raise: not garbage, not a mapping whose access raises,
not a value nested ten thousand levels deep or one that contains itself. An output that is
no object at all (``None``, a list, text that is not a JSON object) stops the loop with the
stop reason ``invalid_plan``. Commands that name a tool but cannot run (arguments that are
not an object, too large, nested deeper than 64 levels or cyclic, past the per-round limit)
are kept, in order, as records that failed without running, so every command still ends in
exactly one record. Everything set aside is explained in ``notes``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..planners import PlannerReply
from ..runner import (
    DEFAULT_PURPOSE,
    MAX_JSON_DEPTH,
    ToolCommand,
    ToolExecutionRecord,
    construct,
    flat_json_within,
    json_safe,
    nesting_depth,
    short_repr,
)
from ._results import StopReason

__all__ = ["NormalizedPlan", "PlanItem", "normalize_command", "normalize_plan", "over_limit"]

PlanItem = ToolCommand | ToolExecutionRecord
"""A command to run, or the record of one that failed before it could run."""

_ABSENT: Any = object()
_TRUE = {"true", "yes", "y", "1", "on"}
_FALSE = {"false", "no", "n", "0", "off", "none", "null", ""}


class NormalizedPlan(BaseModel):
    """A planner's output after normalization."""

    model_config = ConfigDict(frozen=True)

    next_action: Literal["execute", "response"]
    items: list[PlanItem] = Field(default_factory=list)
    """In the planner's order: commands to run, and records of commands that cannot run."""
    sources: list[int] = Field(default_factory=list)
    """For each item, its index among the planner's raw commands."""
    notes: list[str] = Field(default_factory=list)
    """What was dropped or repaired, and why."""
    stop_reason: StopReason | None = None
    """Why the plan stops the loop, when it does."""

    @property
    def commands(self) -> list[ToolCommand]:
        return [i for i in self.items if isinstance(i, ToolCommand)]

    @classmethod
    def of(
        cls,
        next_action: Literal["execute", "response"],
        *,
        items: list[PlanItem] | None = None,
        sources: list[int] | None = None,
        notes: list[str] | None = None,
        stop_reason: StopReason | None = None,
    ) -> NormalizedPlan:
        """A plan from parts normalization already checked (built without validating them
        again: every field is given)."""
        return construct(
            cls,
            {
                "next_action": next_action,
                "items": [] if items is None else items,
                "sources": [] if sources is None else sources,
                "notes": [] if notes is None else notes,
                "stop_reason": stop_reason,
            },
        )


def _short(value: Any, limit: int = 120) -> str:
    return short_repr(value, limit)


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    if value is None:
        return False
    return None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(json_safe(value), ensure_ascii=False)


def _to_mapping(raw: Any) -> Mapping[str, Any] | None:
    if type(raw) is dict or isinstance(raw, Mapping):
        return raw
    if isinstance(raw, BaseModel):
        return raw.model_dump()
    if isinstance(raw, (str, bytes, bytearray)):
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def normalize_plan(
    raw: Any,
    *,
    max_commands: int = 64,
    max_kwargs_bytes: int = 256 * 1024,
) -> NormalizedPlan:
    """Normalize a planner's raw output (a dict, a pydantic model or JSON text).

    Args:
        raw: whatever the planner returned.
        max_commands: commands past this many in one round fail without running.
        max_kwargs_bytes: arguments larger than this (as JSON) fail without running.
    """
    notes: list[str] = []
    if type(raw) is not dict and isinstance(raw, PlannerReply):
        raw = raw.output
    try:
        return _normalize(raw, notes, max_commands, max_kwargs_bytes)
    except Exception as exc:  # e.g. a mapping whose access raises: never the loop's crash
        notes.append(
            f"reading the planner output raised {type(exc).__name__}: {str(exc)[:200]}; "
            "ending without tools"
        )
        return NormalizedPlan.of("response", notes=notes, stop_reason="invalid_plan")


def _normalize(
    raw: Any, notes: list[str], max_commands: int, max_kwargs_bytes: int
) -> NormalizedPlan:
    data = raw if type(raw) is dict else _to_mapping(raw)
    if data is None:
        notes.append(
            "planner output is not an object with next_action and execution_commands; "
            f"got {type(raw).__name__} {_short(raw)}: ending without tools"
        )
        return NormalizedPlan.of("response", notes=notes, stop_reason="invalid_plan")

    raw_commands: Any = data.get("execution_commands")
    if raw_commands is None and "tool_commands" in data:
        raw_commands = data["tool_commands"]
    if raw_commands is None and "tool_command" in data:
        raw_commands = [data["tool_command"]] if data["tool_command"] is not None else []
    if raw_commands is None:
        raw_commands = []
    elif type(raw_commands) is list:
        pass
    elif isinstance(raw_commands, Mapping):
        raw_commands = [raw_commands]
    elif not isinstance(raw_commands, (list, tuple)):
        notes.append(
            "execution_commands must be a list of commands, got "
            f"{type(raw_commands).__name__} {_short(raw_commands)}: ignored"
        )
        raw_commands = []

    items: list[PlanItem] = []
    sources: list[int] = []
    for i, entry in enumerate(raw_commands):
        item = normalize_command(i, entry, notes, max_kwargs_bytes=max_kwargs_bytes)
        if item is None:
            continue
        if len(items) >= max_commands and isinstance(item, ToolCommand):
            item = over_limit(item, max_commands)
        items.append(item)
        sources.append(i)
    if len(items) > max_commands:
        notes.append(f"{len(items) - max_commands} commands past the limit of {max_commands}")

    use_tool = data.get("use_tool", True)
    if use_tool is not True and _as_bool(use_tool) is False:
        return NormalizedPlan.of("response", items=[], notes=notes, stop_reason="use_tool_false")

    action = data.get("next_action")
    if action is None:
        next_action = "execute" if items else "response"
    elif type(action) is str and (action == "execute" or action == "response"):
        next_action = action  # as it should be: nothing to read
    else:
        text = str(action).strip().lower() if isinstance(action, str) else None
        next_action = "execute" if text == "execute" else "response"
        if text not in ("execute", "response"):
            notes.append(f"next_action must be 'execute' or 'response', got {_short(action)}")
    if next_action == "execute" and not items:
        return NormalizedPlan.of("response", notes=notes, stop_reason="no_commands")
    if next_action == "response":
        return NormalizedPlan.of("response", notes=notes, stop_reason="answered")
    return NormalizedPlan.of("execute", items=items, sources=sources, notes=notes)


def over_limit(command: ToolCommand, max_commands: int) -> ToolExecutionRecord:
    """The record of a command past the per-round limit: it does not run."""
    return ToolExecutionRecord.failed(
        command,
        f"not run: the planner asked for more than {max_commands} commands in one round; "
        "ask for fewer",
    )


def normalize_command(
    index: int, entry: Any, notes: list[str], *, max_kwargs_bytes: int = 256 * 1024
) -> PlanItem | None:
    """One raw command: a :class:`ToolCommand`, the failed record of one that cannot run,
    or ``None`` (dropped, with the reason appended to ``notes``)."""
    if type(entry) is not dict:
        if isinstance(entry, BaseModel):
            entry = entry.model_dump()
        if not isinstance(entry, Mapping):
            notes.append(f"command {index} is not an object ({_short(entry)}): dropped")
            return None
    name = entry.get("tool_name")
    if type(name) is not str or not (name := name.strip()):
        notes.append(f"command {index} has no tool_name ({_short(dict(entry))}): dropped")
        return None
    purpose = entry.get("purpose")
    purpose = (purpose if type(purpose) is str else _as_text(purpose)).strip() or DEFAULT_PURPOSE
    todo = entry.get("todo_suggestion", _ABSENT)
    if todo is _ABSENT:
        todo = entry.get("next")
    if type(todo) is not str:
        todo = _as_text(todo)
    kwargs: Any = entry.get("tool_kwargs")
    problem: str | None = None
    if type(kwargs) is dict and flat_json_within(kwargs, max_kwargs_bytes):
        pass  # the common case, settled in one pass: nothing nested, nothing large
    else:
        kwargs, problem = _unusual_kwargs(kwargs, max_kwargs_bytes)
    # every field is checked above, so the model is built without validating it again
    command = construct(
        ToolCommand,
        {"purpose": purpose, "tool_name": name, "tool_kwargs": kwargs, "todo_suggestion": todo},
    )
    if problem is not None:
        return ToolExecutionRecord.failed(command, problem)
    return command


def _unusual_kwargs(kwargs: Any, max_kwargs_bytes: int) -> tuple[dict[str, Any], str | None]:
    """Arguments other than a small flat object: read (JSON text, a mapping), and why they
    cannot be used if they cannot (``None``: they can), with what the record keeps."""
    if kwargs is None:
        kwargs = {}
    elif type(kwargs) is str and kwargs.strip().startswith("{"):
        try:
            kwargs = json.loads(kwargs)
        except (ValueError, RecursionError):
            pass
    problem: str | None = None
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        problem = (
            f"not run: tool_kwargs must be an object of arguments, got "
            f"{type(kwargs).__name__} {_short(kwargs)}"
        )
        kwargs = {}
    elif type(kwargs) is dict and flat_json_within(kwargs, max_kwargs_bytes):
        pass  # the common case, settled in one pass: nothing nested, nothing large
    else:
        if type(kwargs) is not dict:
            kwargs = dict(kwargs)
        depth = nesting_depth(kwargs)
        size = 0 if depth is None or depth > MAX_JSON_DEPTH else _json_size(kwargs)
        if depth is None:
            problem = "not run: tool_kwargs contain themselves (a cycle), which JSON cannot say"
            kwargs = {"omitted": "a cycle"}
        elif depth > MAX_JSON_DEPTH:
            problem = (
                f"not run: tool_kwargs nest more than {MAX_JSON_DEPTH} levels deep; "
                "send flatter arguments"
            )
            kwargs = {"omitted": f"nested more than {MAX_JSON_DEPTH} levels"}
        elif size > max_kwargs_bytes:
            problem = (
                f"not run: tool_kwargs are {size} bytes as JSON, more than the limit of "
                f"{max_kwargs_bytes}"
            )
            kwargs = {"omitted": f"{size} bytes"}
        elif not all(type(k) is str for k in kwargs):
            problem = "not run: tool_kwargs keys must be strings"
            kwargs = {str(k): v for k, v in kwargs.items()}
    return kwargs, problem


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def _json_size(kwargs: dict[str, Any]) -> int:
    """The size of ``kwargs`` as JSON (whatever they hold: never raises)."""
    try:
        return len(_ENCODER.encode(kwargs))
    except (TypeError, ValueError, RecursionError):
        return len(json.dumps(json_safe(kwargs), ensure_ascii=False))
