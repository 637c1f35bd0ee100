"""The agent's pluggable steps: what each one sees, and what each one answers.

Five steps think; the agent does the rest (routing, tools, checkpoints, the human). Each
step is a function (sync or async) of a :class:`StatusView`:

============  =====================================================================
``analyze``   what the request needs → text (kept as ``state.analysis``)
``plan``      → a :class:`StatusPlan` (or a list of steps); an empty plan means "just answer"
``decide``    → a :class:`StatusDecision`: call tools, ask a human, or finish
``reflect``   → a :class:`StatusReflection`: continue, replan, finish, or ask a human
``converse``  → the answer, as text, when no tool is needed
============  =====================================================================

By default each is a call to a chat model (:class:`LLMStatusSteps`); tests pass plain
functions. A step may return the output model, its data (a dict), or for ``plan`` a list.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..kernel import model_timeout_error, read_result_spec
from ..runner import READ_RESULT, longer_than
from ._state import AgentStatus, Note, StatusAgentState, StatusCallRecord, StatusToolCall

__all__ = [
    "StatusCallRequest",
    "StatusDecision",
    "StatusPlan",
    "StatusReflection",
    "StatusSteps",
    "StatusView",
    "StepFunction",
    "call_step",
]

M = TypeVar("M", bound=BaseModel)


class StatusPlan(BaseModel):
    """The planning step's answer: the steps that need tools (none: just answer)."""

    model_config = ConfigDict(frozen=True)

    steps: list[str] = Field(default_factory=list)


class StatusCallRequest(BaseModel):
    """One tool call the decision step asks for."""

    model_config = ConfigDict(frozen=True)

    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    purpose: str = ""


class StatusDecision(BaseModel):
    """The decision step's answer.

    ``action`` is ``call_tools`` (run ``tool_calls`` now), ``ask_human`` (say why in
    ``reason``) or ``finish`` (``answer`` is the answer). Left out, it is ``call_tools``
    when there are tool calls and ``finish`` otherwise.
    """

    model_config = ConfigDict(frozen=True)

    action: Literal["call_tools", "ask_human", "finish"] = "finish"
    tool_calls: list[StatusCallRequest] = Field(default_factory=list)
    reason: str = ""
    answer: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _infer_action(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("action"):
            data = {**data, "action": "call_tools" if data.get("tool_calls") else "finish"}
        return data


class StatusReflection(BaseModel):
    """The reflection step's verdict on where the run stands."""

    model_config = ConfigDict(frozen=True)

    verdict: Literal["continue", "replan", "finish", "ask_human"]
    note: str = ""
    """Why; kept for the next steps to read."""
    answer: str | None = None
    """With ``finish``: the answer (else the decision's answer stands)."""


@dataclass(frozen=True)
class StatusView:
    """What a step sees of the run (a copy: changing it changes nothing)."""

    run_id: str
    user_input: str
    status: AgentStatus
    analysis: str | None
    plan: list[str]
    records: list[StatusCallRecord]
    """Every call's record so far."""
    last_records: list[StatusCallRecord]
    """The records of the calls run since the last reflection."""
    pending_calls: list[StatusToolCall]
    notes: list[Note]
    """The human's messages and the reflections' notes, in order."""
    answer: str | None
    error: str | None
    tools: list[dict[str, Any]]
    """``{"name", "description", "parameters"}`` of every tool (and of the built-in
    ``read_result`` once a result is longer than ``max_result_chars``)."""
    max_result_chars: int | None = 2000
    """The run's ``max_result_chars``: a result longer than this (as text) is shown cut,
    with its handle ``"r:<call_id>"`` for ``read_result`` (``None``: whole)."""

    @classmethod
    def of(
        cls,
        state: StatusAgentState,
        tools: list[dict[str, Any]],
        max_result_chars: int | None = 2000,
    ) -> StatusView:
        last = set(state.unreflected)
        if max_result_chars is not None and any(
            r.record.success
            and r.record.tool_name != READ_RESULT
            and longer_than(r.record.result, max_result_chars)
            for r in state.records
        ):
            tools = [*tools, read_result_spec()]  # a result is cut: the model may read the rest
        return cls(
            run_id=state.run_id,
            user_input=state.user_input,
            status=state.status,
            analysis=state.analysis,
            plan=list(state.plan),
            records=list(state.records),
            last_records=[r for r in state.records if r.call_id in last],
            pending_calls=list(state.pending_calls),
            notes=list(state.notes),
            answer=state.answer,
            error=state.error,
            tools=tools,
            max_result_chars=max_result_chars,
        )


StepFunction = Callable[[StatusView], Any] | Callable[[StatusView], Awaitable[Any]]
"""A step: a function (sync or async) of the :class:`StatusView`."""


@dataclass(frozen=True)
class StatusSteps:
    """The five pluggable steps of a status-routed agent."""

    analyze: StepFunction
    plan: StepFunction
    decide: StepFunction
    reflect: StepFunction
    converse: StepFunction


async def call_step(
    step: StepFunction, view: StatusView, *, name: str = "step", timeout: float | None = None
) -> Any:
    """Call a step, sync or async, within ``timeout`` seconds (the run's ``model_timeout``).

    Raises:
        ModelCallError: an async step that did not finish in time (it was cancelled): it
            fails as a model call that failed does.
    """
    with anyio.move_on_after(timeout) as scope:
        result = step(view)
        if inspect.isawaitable(result):
            result = await result
        return result
    assert scope.cancelled_caught and timeout is not None
    raise model_timeout_error(f"the {name} step", timeout)


def as_text(value: Any, step: str) -> str | None:
    """A text answer of ``step`` (``None`` stays ``None``)."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"the {step} step returned {type(value).__name__}; it returns text (a str)")


def as_output(model: type[M], value: Any, step: str) -> M:
    """``value`` as the ``model`` a step answers with (its data, or for a plan a list)."""
    if isinstance(value, model):
        return value
    if model is StatusPlan and (value is None or isinstance(value, (list, tuple))):
        value = {"steps": list(value or [])}
    if isinstance(value, BaseModel):
        value = value.model_dump()
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ValueError(
            f"the {step} step returned {value!r:.200}, which is no {model.__name__}: "
            f"{exc.errors()[0].get('msg')} at {exc.errors()[0].get('loc')}"
        ) from exc
