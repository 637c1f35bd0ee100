"""What a finished loop hands back: the records, folded into the final answer's prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import Field, computed_field

from ..checkpoints import HumanRequest
from ..kernel import RunResult
from ..models import NO_USAGE, Usage
from ..runner import EXTRA_INSTRUCTION, ToolExecutionRecord, construct, json_safe

__all__ = ["EXTRA_INSTRUCTION", "LoopResult", "StopReason", "to_action_results"]

StopReason = Literal[
    "answered",
    "use_tool_false",
    "no_commands",
    "max_turns",
    "timeout",
    "invalid_plan",
    "usage_limit",
    "refusal",
]
"""Why a loop run stopped: the kernel's vocabulary (:data:`toolloop.kernel.StopReason`), the
reasons that can happen to a loop: ``answered`` (the planner answered ``response``),
``use_tool_false``, ``no_commands`` (no command could run), ``max_turns`` (``max_turns``
rounds ran), ``timeout``, ``invalid_plan``, ``usage_limit``, ``refusal``."""


T = TypeVar("T")
_UNSET: Any = object()


class _folded(cached_property[T], Generic[T]):  # (lower case: a decorator, as its base)
    """``functools.cached_property`` without its lock, as in Python 3.12: what a result folds
    is made once, when it is first read (by the caller that holds the result)."""

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> _folded[T]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any] | None = None) -> Any:
        if instance is None:
            return self
        cache: dict[Any, Any] = instance.__dict__
        name = self.attrname
        value = cache.get(name, _UNSET)
        if value is _UNSET:
            value = cache[name] = self.func(instance)
        return value


def to_action_results(done_plans: Sequence[ToolExecutionRecord]) -> dict[str, Any]:
    """``{purpose: result}`` in record order.

    A purpose seen again gets a numbered key (``"search (2)"``); a failed record keeps its
    error as ``{"error": ...}``. Results are JSON data (:func:`~toolloop.runner.json_safe`):
    ``json.dumps`` takes them whatever the tools returned (bytes, datetimes, cycles, NaN).
    """
    results: dict[str, Any] = {}
    for record in done_plans:
        fields = record.__dict__  # (a record's fields, read at once)
        key = purpose = fields["purpose"]
        n = 2
        while key in results:
            key = f"{purpose} ({n})"
            n += 1
        results[key] = (
            json_safe(fields["result"]) if fields["success"] else {"error": fields["error"]}
        )
    return results


class LoopResult(RunResult):
    """The outcome of :func:`~toolloop.async_plan_and_execute`: the kernel's
    :class:`~toolloop.kernel.RunResult` (``run_id``, ``status``, ``stop_reason``, ``usage``,
    ``request``, ``text``), with the loop's records and what they fold into.

    With records, ``prompt`` holds ``action_results`` and ``extra_instruction`` and ``extra``
    holds the raw records as ``tool_logs``; with no record both are empty, so nothing is
    injected into the final prompt.
    """

    user_input: str
    done_plans: list[ToolExecutionRecord] = Field(default_factory=list)
    """Every record, in the order the commands were planned (the run's ``records``)."""
    rounds: int
    """How many rounds executed tools."""
    stop_reason: StopReason | None = None
    """Why the loop stopped (``None`` while a durable run is paused for a human)."""
    notes: list[str] = Field(default_factory=list)
    """What normalization set aside in the planner's outputs, round by round."""
    planner_text: str | None = None
    """Text the planner's model wrote beside its last plan, e.g. the answer of a
    tool-calling model that called no tool, or its refusal (``None`` when there was
    none)."""

    @computed_field
    @_folded
    def prompt(self) -> dict[str, Any]:
        """``{"action_results": ..., "extra_instruction": ...}`` when there are records."""
        if not self.done_plans:
            return {}
        return {
            "action_results": to_action_results(self.done_plans),
            "extra_instruction": EXTRA_INSTRUCTION,
        }

    @computed_field
    @_folded
    def extra(self) -> dict[str, Any]:
        """``{"tool_logs": [records as dicts]}`` when there are records."""
        if not self.done_plans:
            return {}
        return {"tool_logs": [json_safe(r) for r in self.done_plans]}

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """The records (``done_plans``), as every run's result names them."""
        return self.done_plans

    @property
    def action_results(self) -> dict[str, Any] | None:
        value = self.prompt.get("action_results")
        return value if isinstance(value, dict) else None

    @property
    def extra_instruction(self) -> str | None:
        value = self.prompt.get("extra_instruction")
        return value if isinstance(value, str) else None

    def render_prompt(self) -> str:
        """The user input with the action results (if any), as text for a final request."""
        if not self.done_plans:
            return self.user_input
        results = json.dumps(self.prompt["action_results"], ensure_ascii=False, indent=2)
        return (
            f"{self.user_input}\n\n{self.prompt['extra_instruction']}\n\n"
            f"<action_results>\n{results}\n</action_results>"
        )

    @classmethod
    def build(
        cls,
        user_input: str,
        done_plans: Sequence[ToolExecutionRecord],
        *,
        rounds: int,
        stop_reason: StopReason | None,
        notes: Sequence[str] = (),
        planner_text: str | None = None,
        run_id: str = "",
        request: HumanRequest | None = None,
        usage: Usage | None = None,
        text: str | None = None,
        status: Literal["completed", "paused"] | None = None,
        structured_response: Any = None,
    ) -> LoopResult:
        """Fold the records in (when read); with none, nothing is injected. ``text`` is the
        final answer when the run made one, else the planner's text."""
        paused = status == "paused" if status is not None else request is not None
        return construct(  # every field given, each of the right type
            cls,
            {
                "run_id": run_id,
                "status": "paused" if paused else "completed",
                "stop_reason": None if paused else stop_reason,
                "usage": usage if usage is not None else NO_USAGE,
                "request": request,
                "text": text if text is not None else planner_text,
                "user_input": user_input,
                "done_plans": list(done_plans),
                "rounds": rounds,
                "notes": list(notes),
                "planner_text": planner_text,
                "structured_response": structured_response,
            },
        )
