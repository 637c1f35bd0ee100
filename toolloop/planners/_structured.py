"""The structured-output planner: one streamed request per round, read as it arrives.

The planner asks for the planner schema (``next_action`` first) and feeds every streamed
delta to an incremental reader of the decision (:class:`~toolloop.models.DecisionReader`).
The moment the bytes settle ``next_action`` as ``response`` — with ``execute`` and
``response`` the first character does — it leaves the stream, which closes the HTTP
connection, and returns. With streaming dispatch, each
command of a plan settled as ``execute`` is handed over the moment its JSON object closes,
so its tool starts while the rest of the plan is still being written. A ``next_action``
that is neither choice is read to the end and left to the loop's normalization.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import aclosing
from time import perf_counter
from typing import Any

from typing_extensions import Unpack

from .._errors import ModelOutputError
from ..models import (
    ChatModel,
    ChatRequest,
    DecisionReader,
    ReplyReader,
    StructuredOutput,
    stream_chat,
)
from ._base import Dispatch, PlannerContext, PlannerReply
from ._chat import ChatPlanner, ChatPlannerOptions
from ._prompt import PLANNER_SYSTEM_PROMPT, PlannerSchema, planner_messages

__all__ = ["StructuredPlanner"]

_CHOICES = ("execute", "response")


class StructuredPlanner(ChatPlanner):
    """Plans with a chat model's structured output, streamed and read incrementally.

    Args:
        model: any :class:`~toolloop.models.ChatModel` (e.g.
            :class:`~toolloop.models.OpenAIChatModel`).
        short_circuit: stop reading (and close the stream) as soon as ``next_action`` is
            known to be ``response``.
        strict: ask for a strict per-tool schema when every tool's parameters allow it.
        **options: the options of both chat planners
            (:class:`~toolloop.planners.ChatPlannerOptions`):

            - ``max_tokens`` (1024): the model's output limit per round; a plan cut off by
              it is a :class:`~toolloop.ModelOutputError`.
            - ``temperature`` (0.0): passed to the model.
            - ``system_prompt`` (:data:`~toolloop.planners.PLANNER_SYSTEM_PROMPT`):
              replaces the built-in instructions (the schema is appended).
            - ``max_result_chars`` (``None``): tool results longer than this (as text) are
              cut in the prompt, each with its handle for ``read_result``; ``None``: the
              run's ``max_result_chars``.
            - ``settings`` (``None``): more model settings for each request
              (:class:`~toolloop.models.ModelSettings`: ``seed``, ``top_p``, ...); they
              override ``max_tokens`` and ``temperature`` when they set them too.

    Raises:
        ValueError: an unknown model setting.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        short_circuit: bool = True,
        strict: bool = True,
        **options: Unpack[ChatPlannerOptions],
    ) -> None:
        super().__init__(model, "StructuredPlanner", PLANNER_SYSTEM_PROMPT, **options)
        self.short_circuit = short_circuit
        self.strict = strict
        self._schemas: dict[str, PlannerSchema] = {}

    def _schema(self, tools: Sequence[dict[str, Any]]) -> PlannerSchema:
        key = json.dumps(tools, sort_keys=True, default=str)
        schema = self._schemas.get(key)
        if schema is None:
            schema = self._schemas[key] = PlannerSchema(tools, strict=self.strict)
        return schema

    def request(self, context: PlannerContext) -> ChatRequest:
        """The request this planner sends for ``context``."""
        schema = self._schema(context.available_tools)
        messages = planner_messages(
            context,
            schema.schema,
            system_prompt=self.system_prompt,
            max_result_chars=self.max_result_chars,
        )
        output = StructuredOutput(schema=schema.schema, name="plan", strict=schema.strict)
        return self._request(messages, structured_output=output)

    async def plan(self, context: PlannerContext) -> PlannerReply:
        """Plan one round (see the class docs)."""
        return await self._plan(context, None)

    async def plan_streaming(self, context: PlannerContext, dispatch: Dispatch) -> PlannerReply:
        """Plan one round, handing over each command as soon as its JSON object closes
        (once ``next_action`` is settled as ``execute``)."""
        return await self._plan(context, dispatch)

    async def _plan(self, context: PlannerContext, dispatch: Dispatch | None) -> PlannerReply:
        schema = self._schema(context.available_tools)
        request = self.request(context)
        reader = DecisionReader(
            "next_action",
            _CHOICES,
            items="execution_commands",
            items_on="execute",  # a plan that does not execute runs nothing
            needs={"response": ()} if self.short_circuit else None,
        )
        said = ReplyReader()  # the rest of the reply: reasoning, refusal, how it ended
        started = perf_counter()
        decided_after: float | None = None
        async with (
            stream_chat(self.model, request) as deltas,
            aclosing(reader.text(deltas, said)) as texts,
        ):
            async for text in texts:
                for position, command in reader.feed(text):
                    if dispatch is not None:
                        dispatch(position, self._clean(schema, command))
                if decided_after is None and reader.choice is not None:
                    decided_after = perf_counter() - started
                if reader.settled:  # next_action is "response": the rest is not read
                    return PlannerReply(
                        output={"next_action": "response", "execution_commands": []},
                        short_circuited=True,
                        decided_after=decided_after,
                        chars_read=reader.offset,
                        reasoning=said.reasoning(),
                    )
        reply = said.reply()
        finish = reply.finish_reason
        if reader.offset == 0:  # no JSON at all: nothing, a refusal, or only reasoning
            if reply.refusal is not None:
                return PlannerReply(
                    output={"next_action": "response", "execution_commands": []},
                    decided_after=perf_counter() - started,
                    finish_reason=finish,
                    notes=(f"the model refused to plan: {reply.refusal}",),
                    reasoning=reply.reasoning,
                    refusal=reply.refusal,
                )
            if reply.empty:
                raise ModelOutputError(f"{reply.why_empty()}; a plan, a JSON object, was expected")
        if not reader.done:
            cut = (
                f" (the model hit its token limit, max_tokens={self._token_limit()}: raise "
                "max_tokens)"
                if finish == "length"
                else ""
            )
            try:
                reader.close()
            except ModelOutputError as exc:
                raise ModelOutputError(f"{exc}{cut}") from exc
        output = reader.value
        if isinstance(output, dict):
            commands = output.get("execution_commands")
            if isinstance(commands, list):
                output["execution_commands"] = [self._clean(schema, c) for c in commands]
        return PlannerReply(
            output=output,
            decided_after=decided_after,
            chars_read=reader.offset,
            finish_reason=finish,
            reasoning=reply.reasoning,
        )

    @staticmethod
    def _clean(schema: PlannerSchema, command: Any) -> Any:
        if isinstance(command, dict) and isinstance(command.get("tool_name"), str):
            kwargs = schema.clean_kwargs(command["tool_name"], command.get("tool_kwargs"))
            if kwargs is not command.get("tool_kwargs"):
                command = {**command, "tool_kwargs": kwargs}
        return command
