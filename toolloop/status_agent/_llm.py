"""The default steps of the status-routed agent: each one a chat-model call.

Through the :class:`~toolloop.models.ChatModel` seam, so any model adapter (the OpenAI one,
a scripted double) serves. ``plan``, ``decide`` and ``reflect`` ask for JSON that fits a
schema; ``analyze`` and ``converse`` ask for text; with a ``response_format``, the answer
is structured (:meth:`LLMStatusSteps.structured`). Tool results go to the model as quoted
data (see :data:`~toolloop.loop.EXTRA_INSTRUCTION`).

A decision and a reflection are read as they stream (:class:`~toolloop.models.DecisionReader`,
as the loop's planner reads its plans): the stream is closed the moment the choice is
settled and the fields that choice keeps are whole (the short-circuit), and with streaming
dispatch each tool call of a decision is handed over the moment it is complete
(:meth:`LLMStatusSteps.decide_streaming`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from contextlib import aclosing
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from .._errors import ModelOutputError, ModelRefusalError
from ..kernel import ProviderStrategy, StructuredAnswer, ToolStrategy, ask_structured
from ..models import (
    ChatModel,
    ChatReply,
    ChatRequest,
    DecisionReader,
    ReplyReader,
    StructuredOutput,
    stream_chat,
)
from ..runner import (
    EXTRA_INSTRUCTION,
    is_cut,
    json_safe,
    result_handle,
    result_text,
    shown_result,
)
from ._state import StatusCallRecord
from ._steps import StatusDecision, StatusPlan, StatusReflection, StatusView, as_output

__all__ = ["STATUS_SYSTEM_PROMPT", "CallDispatch", "LLMStatusSteps", "status_context"]

M = TypeVar("M", bound=BaseModel)

CallDispatch = Callable[[int, Any], None]
"""``dispatch(position, call)``: a tool call of a decision (its JSON data) handed over the
moment it is complete, while the rest of the decision still streams."""


@dataclass(frozen=True)
class _Choice:
    """How a decision of a step is read: its choice, the items handed over, and the fields
    each choice keeps (read whole before the stream is closed)."""

    key: str
    choices: tuple[str, ...]
    needs: Mapping[str, Collection[str]]
    items: str | None = None
    items_on: str | None = None


_DECIDE = _Choice(
    "action",
    ("call_tools", "ask_human", "finish"),
    # the calls, and the reason a human is told when one needs approval; a question's
    # reason; the answer
    {"call_tools": ("tool_calls", "reason"), "ask_human": ("reason",), "finish": ("answer",)},
    items="tool_calls",
    items_on="call_tools",
)
_REFLECT = _Choice(
    "verdict",
    ("continue", "replan", "finish", "ask_human"),
    # the note is kept for the next steps (and is a question's reason); a finish's answer
    {
        "continue": ("note",),
        "replan": ("note",),
        "ask_human": ("note",),
        "finish": ("note", "answer"),
    },
)

STATUS_SYSTEM_PROMPT = (
    "You are one step of an agent that serves a user's request with tools. The run's "
    "context comes as JSON: the request, an analysis, a plan, the tools, the results of the "
    "tool calls so far, and notes (a human's messages come with source 'human': follow "
    "them). " + EXTRA_INSTRUCTION
)

_TASKS = {
    "analyze": (
        "Analyze the request: in a few sentences, say what the user wants, what information "
        "is needed, and which tools (if any) could provide it. Answer in plain text."
    ),
    "plan": (
        "Write a plan: the steps that need tools, in order, as short sentences. If the "
        "request can be answered directly, without any tool, return an empty list."
    ),
    "decide": (
        "Decide the next move. 'call_tools': the tool calls to run now (only the tools "
        "listed, with arguments that fit their parameters). 'ask_human': you need a person's "
        "input or consent; say why in 'reason'. 'finish': the results answer the request; "
        "write the answer in 'answer'. Do not repeat a call whose result you already have."
    ),
    "reflect": (
        "Reflect on the last results. 'continue': the plan holds, decide the next move. "
        "'replan': the plan no longer fits, make a new one. 'finish': the request is served; "
        "put the answer in 'answer'. 'ask_human': a person must look at it; say why in "
        "'note'."
    ),
    "converse": "Answer the user's request directly, in plain text.",
    "answer": (
        "Give the final answer to the user's request, from the results (and the answer so "
        "far, if any), in the form asked for: fitting its schema exactly."
    ),
}

_PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
    "additionalProperties": False,
}

_REFLECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["continue", "replan", "finish", "ask_human"]},
        "note": {"type": "string"},
        "answer": {"type": ["string", "null"]},
    },
    "required": ["verdict", "note", "answer"],
    "additionalProperties": False,
}


def _output(model: type[M], data: Any, step: str) -> M:
    try:
        return as_output(model, data, step)
    except ValueError as exc:
        raise ModelOutputError(f"{exc}; the model's output does not fit the step") from exc


def _decision_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    names = [t["name"] for t in tools]
    call: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tool_name": {"type": "string", "enum": names} if names else {"type": "string"},
            "arguments": {"type": "object"},
            "purpose": {"type": "string"},
        },
        "required": ["tool_name", "arguments", "purpose"],
    }
    return {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["call_tools", "ask_human", "finish"]},
            "tool_calls": {"type": "array", "items": call},
            "reason": {"type": "string"},
            "answer": {"type": ["string", "null"]},
        },
        "required": ["action", "tool_calls", "reason", "answer"],
    }


def status_context(view: StatusView, *, max_result_chars: int | None = None) -> dict[str, Any]:
    """The run as the model sees it (JSON data). A result longer than ``max_result_chars``
    (``None``: the view's, the run's) is shown cut, as its head and a line saying how to
    read the rest, with ``result_ref`` (its handle for ``read_result``) and
    ``result_chars`` (its length) beside it."""
    limit = view.max_result_chars if max_result_chars is None else max_result_chars

    def result(r: StatusCallRecord) -> dict[str, Any]:
        value = r.record.result
        text = result_text(value)
        if not is_cut(text, limit, r.record.tool_name):
            return {"result": json_safe(value)}
        handle = result_handle(r.call_id)
        return {
            "result": shown_result(text, handle, limit),
            "result_ref": handle,
            "result_chars": len(text),
        }

    return {
        "user_request": view.user_input,
        "analysis": view.analysis,
        "plan": view.plan,
        "tools": view.tools,
        "results": [
            {
                "call_id": r.call_id,
                "tool_name": r.record.tool_name,
                "arguments": r.record.kwargs,
                "purpose": r.record.purpose,
                **(result(r) if r.record.success else {"error": r.record.error}),
            }
            for r in view.records
        ],
        "last_results": [r.call_id for r in view.last_records],
        "notes": [{"source": n.source, "text": n.text} for n in view.notes],
        "answer_so_far": view.answer,
        "last_error": view.error,
    }


@dataclass(eq=False)
class LLMStatusSteps:
    """The five steps of the status-routed agent, each a call to ``model``.

    Args:
        model: any :class:`~toolloop.models.ChatModel`.
        system_prompt: what every call is told first (the step's task follows it).
        max_tokens: the model's output limit per call.
        temperature: passed to the model.
        max_result_chars: tool results longer than this (as text) are cut in the prompt,
            each with its handle for ``read_result``; ``None`` (the default): the run's
            ``max_result_chars``.
        short_circuit: close the stream of a decision or a reflection the moment its
            choice (``action``, ``verdict``) is settled and the fields that choice keeps
            are whole (a decision's calls and reason, a reflection's note, an answer): what
            the model writes after them is not read. ``False``: every reply is read whole.
    """

    model: ChatModel
    _: KW_ONLY
    system_prompt: str = field(default=STATUS_SYSTEM_PROMPT, repr=False)
    max_tokens: int | None = 1024
    temperature: float | None = 0.0
    max_result_chars: int | None = None
    short_circuit: bool = True

    def request(
        self, step: str, view: StatusView, schema: dict[str, Any] | None = None
    ) -> ChatRequest:
        """The request ``step`` sends for ``view``."""
        context = json.dumps(
            status_context(view, max_result_chars=self.max_result_chars), ensure_ascii=False
        )
        return ChatRequest(
            messages=[
                {"role": "system", "content": f"{self.system_prompt}\n\n{_TASKS[step]}"},
                {"role": "user", "content": context},
            ],
            structured_output=None
            if schema is None
            else StructuredOutput(schema=schema, name=step, strict=False),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )

    async def analyze(self, view: StatusView) -> str:
        return (await self._reply(self.request("analyze", view), "analyze")).text

    async def plan(self, view: StatusView) -> StatusPlan:
        data = await self._json(self.request("plan", view, _PLAN_SCHEMA), "plan")
        return _output(StatusPlan, data, "plan")

    async def decide(self, view: StatusView) -> StatusDecision:
        return await self.decide_streaming(view, None)

    async def decide_streaming(
        self, view: StatusView, dispatch: CallDispatch | None
    ) -> StatusDecision:
        """The decision, each of its tool calls handed to ``dispatch`` (its place in
        ``tool_calls`` and its JSON data) the moment the call is complete in the stream,
        once the action is settled as ``call_tools``: the agent starts it while the model
        still writes the next one (streaming dispatch)."""
        schema = _decision_schema(view.tools)
        request = self.request("decide", view, schema)
        data = await self._decision(request, "decide", _DECIDE, dispatch)
        return _output(StatusDecision, data, "decide")

    async def reflect(self, view: StatusView) -> StatusReflection:
        request = self.request("reflect", view, _REFLECTION_SCHEMA)
        data = await self._decision(request, "reflect", _REFLECT, None)
        return _output(StatusReflection, data, "reflect")

    async def converse(self, view: StatusView) -> str:
        reply = await self._reply(self.request("converse", view), "converse")
        if reply.cut_off:  # an answer for the user that stops mid-way is not one
            raise ModelOutputError(
                f"the converse step's answer was cut off by its token limit (max_tokens="
                f"{self.max_tokens}) after {len(reply.text)} characters; raise max_tokens"
            )
        return reply.text

    async def structured(
        self, view: StatusView, strategy: ToolStrategy | ProviderStrategy
    ) -> StructuredAnswer:
        """The run's answer in the form of ``strategy`` (the conversation step's, with a
        ``response_format``): one that fails is sent back with its errors, ``retries`` times
        (:func:`~toolloop.kernel.ask_structured`)."""
        request = self.request("answer", view)
        return await ask_structured(
            self.model,
            request.messages,
            strategy,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )

    async def _reply(self, request: ChatRequest, step: str) -> ChatReply:
        """The whole reply; a refusal or a reply with nothing in it is an error."""
        reader = ReplyReader()
        async with stream_chat(self.model, request) as deltas:
            async for delta in deltas:
                reader.feed(delta)
        return _said(reader.reply(), step)

    async def _decision(
        self,
        request: ChatRequest,
        step: str,
        choice: _Choice,
        dispatch: CallDispatch | None,
    ) -> Any:
        """The JSON data of a decision, read as it streams (see the module docs)."""
        reader = DecisionReader(
            choice.key,
            choice.choices,
            items=choice.items,
            items_on=choice.items_on,
            needs=choice.needs if self.short_circuit else None,
        )
        said = ReplyReader()
        async with (
            stream_chat(self.model, request) as deltas,
            aclosing(reader.text(deltas, said)) as texts,
        ):
            async for text in texts:
                try:
                    closed = reader.feed(text)
                except ModelOutputError as exc:  # not JSON: what came says why
                    raise self._not_json(step, said.reply(), exc) from exc
                if dispatch is not None:
                    for position, call in closed:
                        dispatch(position, call)
                if reader.settled and not reader.done:  # the rest changes nothing kept
                    return {**reader.fields, choice.key: reader.choice}
        reply = _said(said.reply(), step)
        if not reader.done:
            try:
                reader.close()
            except ModelOutputError as exc:
                raise self._not_json(step, reply, exc) from exc
        return reader.value

    def _not_json(self, step: str, reply: ChatReply, exc: Exception) -> ModelOutputError:
        text = reply.text
        cut = (
            f"; the model hit its token limit (max_tokens={self.max_tokens}): raise it"
            if reply.cut_off
            else "; use a model that supports structured output"
        )
        return ModelOutputError(
            f"the {step} step asked the model for JSON and got {text[:200]!r}"
            f"{'…' if len(text) > 200 else ''} ({exc}){cut}"
        )

    async def _json(self, request: ChatRequest, step: str) -> Any:
        reply = await self._reply(request, step)
        try:
            return json.loads(reply.text)
        except ValueError as exc:
            raise self._not_json(step, reply, exc) from exc


def _said(reply: ChatReply, step: str) -> ChatReply:
    """``reply`` when it has text; a refusal or a reply with nothing in it is an error."""
    if reply.refusal is not None and not reply.text:
        raise ModelRefusalError(
            f"the {step} step: the model refused to answer: {reply.refusal!r}",
            refusal=reply.refusal,
        )
    if not reply.text:
        raise ModelOutputError(f"the {step} step: {reply.why_empty()}")
    return reply
