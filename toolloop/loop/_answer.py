"""The final answer: one request that folds a finished loop's results into the user's prompt.

With records, the system message carries the ``extra_instruction`` (tool output is quoted
data, not instructions) and the user message the user's input followed by the
``action_results``; with no record the request carries the user's input alone (and the
caller's system prompt, if any). Nothing is planned here: after a planner that answered
``response`` this is the one request left.

With ``response_format=`` (a pydantic model, a JSON schema, or the kernel's
:class:`~toolloop.kernel.ToolStrategy` / :class:`~toolloop.kernel.ProviderStrategy`, as the
middleware agent takes them), :func:`final_answer` asks for an answer that fits, sends one
that fails back with its errors (``retries`` times) and gives the value as
``structured_response``. A structured answer is not streamed: it is only an answer once the
whole of it fits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict, Unpack

from .._errors import ModelOutputError
from ..kernel import ResponseFormat, ask_structured, option_hint, output_schema
from ..models import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    ModelSettings,
    ReplyReader,
    Usage,
    UsageLimits,
    UsageMeter,
    stream_chat,
)
from ..runner import json_safe
from ._results import LoopResult

__all__ = [
    "FINAL_ANSWER_RESULT_CHARS",
    "AnswerOptions",
    "AnswerStream",
    "FinalAnswer",
    "final_answer",
    "final_answer_messages",
    "stream_final_answer",
]


FINAL_ANSWER_RESULT_CHARS = 20_000
"""Each action result is cut to this many characters (as JSON) in the final answer's prompt,
by default; the planner's prompt cuts them at 2,000."""


def _capped(action_results: dict[str, Any], max_result_chars: int) -> dict[str, Any]:
    """Each result as it is when short enough as JSON, else its JSON text, cut."""
    capped: dict[str, Any] = {}
    for purpose, value in action_results.items():
        safe = json_safe(value, max_string=max_result_chars)  # a long string: cut once, here
        if not isinstance(value, str):
            text = json.dumps(safe, ensure_ascii=False)
            if len(text) > max_result_chars:
                safe = f"{text[:max_result_chars]}… (cut: {len(text):,} characters of JSON)"
        capped[purpose] = safe
    return capped


def final_answer_messages(
    result: LoopResult,
    *,
    system_prompt: str | None = None,
    max_result_chars: int = FINAL_ANSWER_RESULT_CHARS,
) -> list[dict[str, Any]]:
    """The messages of the final answer's request for ``result`` (see the module docs).

    Args:
        system_prompt: instructions put before the ``extra_instruction``.
        max_result_chars: each action result longer than this as JSON is cut to it (with a
            note of its length), so one huge tool result cannot flood the prompt.
    """
    messages: list[dict[str, Any]] = []
    action_results = result.action_results
    if action_results is None:
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": result.user_input})
        return messages
    instruction = result.extra_instruction or ""
    system = f"{system_prompt}\n\n{instruction}" if system_prompt else instruction
    data = json.dumps(_capped(action_results, max_result_chars), ensure_ascii=False, indent=2)
    messages.append({"role": "system", "content": system})
    messages.append(
        {
            "role": "user",
            "content": f"{result.user_input}\n\n<action_results>\n{data}\n</action_results>",
        }
    )
    return messages


class AnswerStream:
    """The text of the final answer, delta by delta, and how it ended.

    ``finish_reason`` and ``usage`` are known once the text was read to its end
    (``None`` before, or when the server said nothing). An answer whose ``finish_reason``
    is ``"length"`` was cut off by ``max_tokens``: ``cut_off`` is then true. ``reasoning``
    is what a thinking model reasoned before its answer (``""`` when its server sent none).

    A reply with no text at all ends the iteration with an error instead of an empty
    answer: :class:`~toolloop.errors.ModelRefusalError` when the model refused (its words
    are the error's ``refusal``), :class:`~toolloop.ModelOutputError` when it said nothing
    (an empty stream, or a reply the token limit cut off while the model was reasoning).
    """

    __slots__ = ("_deltas", "_reader")

    def __init__(self, deltas: AsyncIterator[ChatDelta]) -> None:
        self._deltas = deltas
        self._reader = ReplyReader()

    @property
    def finish_reason(self) -> str | None:
        """Why the answer ended: ``"stop"``, ``"length"`` (the token limit), ..."""
        return self._reader.finish_reason

    @property
    def usage(self) -> Usage | None:
        """The call's usage, when the server reported it."""
        return self._reader.usage

    @property
    def reasoning(self) -> str:
        """What the model reasoned before its answer, so far."""
        reasoning = self._reader.reasoning()
        return reasoning.text if reasoning is not None else ""

    @property
    def cut_off(self) -> bool:
        """The token limit ended the answer (``finish_reason == "length"``)."""
        return self.finish_reason == "length"

    def __aiter__(self) -> AnswerStream:
        return self

    async def __anext__(self) -> str:
        reader = self._reader
        while True:
            try:
                delta = await self._deltas.__anext__()
            except StopAsyncIteration:
                if not reader.text:
                    reply = reader.reply()
                    if reply.refusal is not None:
                        raise reply.refused() from None
                    raise ModelOutputError(reply.why_empty()) from None
                raise
            reader.feed(delta)
            if delta.content:
                return delta.content


class FinalAnswer(str):
    """The final answer's text (a ``str``), with how it ended: ``finish_reason`` (``"length"``:
    cut off by ``max_tokens``, see ``cut_off``), the call's ``usage`` when reported, the
    ``reasoning`` of a thinking model (``""`` when none was sent), and ``run_usage``: the
    run's usage with this answer's call added (what the run cost in all).

    With a ``response_format``: ``structured_response`` is the validated answer (a model
    instance for a pydantic schema), the text is its JSON as the model wrote it, and
    ``usage`` sums every try (``tries`` of them)."""

    finish_reason: str | None
    usage: Usage | None
    reasoning: str
    run_usage: Usage | None
    structured_response: Any
    tries: int

    def __new__(
        cls,
        text: str,
        *,
        finish_reason: str | None = None,
        usage: Usage | None = None,
        reasoning: str = "",
        run_usage: Usage | None = None,
        structured_response: Any = None,
        tries: int = 1,
    ) -> FinalAnswer:
        self = super().__new__(cls, text)
        self.finish_reason = finish_reason
        self.usage = usage
        self.reasoning = reasoning
        self.run_usage = run_usage
        self.structured_response = structured_response
        self.tries = tries
        return self

    @property
    def cut_off(self) -> bool:
        """The token limit ended the answer (``finish_reason == "length"``)."""
        return self.finish_reason == "length"


class AnswerOptions(TypedDict, total=False):
    """The options of the answer's request, the same for :func:`final_answer` and
    :func:`stream_final_answer` (which say what each does), with their defaults."""

    system_prompt: str | None
    """Instructions put before the ``extra_instruction`` (``None``: none)."""
    max_tokens: int | None
    """The answer's length limit (``None``: the server's default)."""
    temperature: float | None
    """Passed to the model (``None``: the model's default)."""
    max_result_chars: int
    """Each action result is cut to this many characters in the prompt
    (:data:`FINAL_ANSWER_RESULT_CHARS`)."""
    settings: ModelSettings | None
    """More model settings for this call (``None``)."""
    usage_limits: UsageLimits | None
    """The run's budget, ``result.usage`` counted against it (``None``: no budget)."""


_OPTIONS = frozenset(AnswerOptions.__annotations__)


@dataclass(frozen=True)
class _Ask:
    """What the answer asks, and under which budget (:func:`_ask` makes it)."""

    request: ChatRequest
    usage_limits: UsageLimits | None

    def metered(self, result: LoopResult) -> AbstractContextManager[Any]:
        """The run's budget over the answer's calls: ``result.usage`` counts against it."""
        if self.usage_limits is None:
            return nullcontext()
        meter = UsageMeter(self.usage_limits)
        meter.usage = result.usage  # the run's model calls so far count
        return meter

    @asynccontextmanager
    async def streamed(self, model: ChatModel, result: LoopResult) -> AsyncIterator[AnswerStream]:
        """The answer's text, streamed under the budget."""
        with self.metered(result):
            async with stream_chat(model, self.request) as deltas:
                yield AnswerStream(deltas)


def _checked(options: AnswerOptions, verb: str) -> AnswerOptions:
    """``options``, each one of :class:`AnswerOptions` (a ``TypeError`` naming ``verb``,
    the caller's function, for one that is not)."""
    for name in options:
        if name not in _OPTIONS:
            hint = option_hint(name, _OPTIONS)
            raise TypeError(f"{verb}() got an unexpected keyword argument {name!r}{hint}")
    return options


def _ask(
    result: LoopResult,
    *,
    system_prompt: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    max_result_chars: int = FINAL_ANSWER_RESULT_CHARS,
    settings: ModelSettings | None = None,
    usage_limits: UsageLimits | None = None,
) -> _Ask:
    """What the answer to ``result`` asks: :class:`AnswerOptions` read once, their defaults
    here."""
    messages = final_answer_messages(
        result, system_prompt=system_prompt, max_result_chars=max_result_chars
    )
    request = ChatRequest(
        messages=messages, max_tokens=max_tokens, temperature=temperature, settings=settings
    )
    return _Ask(request, usage_limits)


@asynccontextmanager
async def stream_final_answer(
    model: ChatModel,
    result: LoopResult,
    *,
    response_format: None = None,
    **options: Unpack[AnswerOptions],
) -> AsyncIterator[AnswerStream]:
    """Stream the final answer to the user's request, with the loop's results::

        async with stream_final_answer(model, result) as text:
            async for piece in text:
                print(piece, end="")

    Args:
        model: any :class:`~toolloop.models.ChatModel`.
        result: what :func:`~toolloop.async_plan_and_execute` returned.
        response_format: not taken here: a structured answer is not streamed (it is one
            only once the whole of it fits); ask :func:`final_answer` for it.
        **options: the answer's request (:class:`AnswerOptions`):

            - ``system_prompt`` (``None``): instructions put before the
              ``extra_instruction``.
            - ``max_tokens`` (``None``: the server's default): the answer's length limit.
            - ``temperature`` (``None``): passed to the model.
            - ``max_result_chars`` (:data:`FINAL_ANSWER_RESULT_CHARS`): each action result
              is cut to this many characters in the prompt.
            - ``settings`` (``None``): more model settings for this call
              (:class:`~toolloop.models.ModelSettings`).
            - ``usage_limits`` (``None``): the run's budget: the answer is one more model
              call of the run, so ``result.usage`` counts against it (a call past it is
              refused, a reply that passes a token budget is closed:
              :class:`~toolloop.errors.UsageLimitError`). A run given ``answer_with=``
              makes its answer under its own budget.

    Yields:
        The answer's text, delta by delta (an :class:`AnswerStream`: once read, its
        ``finish_reason`` says whether ``max_tokens`` cut it off). Leaving the block closes
        the stream.

    Raises:
        ModelCallError: the model could not be reached or answered an error.
        ModelOutputError: the reply had no text (raised as the iteration ends; a
            :class:`~toolloop.errors.ModelRefusalError` when the model refused).
        TypeError: a ``response_format`` was given, or an option that is not one.
    """
    if response_format is not None:
        raise TypeError(
            "stream_final_answer streams text; a structured answer is not streamed (it is "
            "one only once the whole of it fits its schema): use "
            "final_answer(model, result, response_format=...), whose structured_response "
            "is the validated value"
        )
    async with _ask(result, **_checked(options, "stream_final_answer")).streamed(
        model, result
    ) as text:
        yield text


async def final_answer(
    model: ChatModel,
    result: LoopResult,
    *,
    response_format: ResponseFormat | None = None,
    **options: Unpack[AnswerOptions],
) -> FinalAnswer:
    """The whole final answer (see :func:`stream_final_answer`, whose ``**options`` it
    takes: :class:`AnswerOptions`): its text, a ``str``, with its ``finish_reason``
    (``cut_off`` when ``max_tokens`` ended it), ``usage`` and ``reasoning``.

    ``response_format``: a pydantic model class, a JSON schema, or a
    :class:`~toolloop.kernel.ToolStrategy` (the default for a bare schema: the model
    answers by calling a tool of that schema) or :class:`~toolloop.kernel.ProviderStrategy`
    (the provider's ``json_schema`` response format). An answer that fails the schema is
    sent back with its errors, ``retries`` times; the answer's ``structured_response`` is
    the validated value, and every try is a model call of the run (counted, and held to
    ``usage_limits``).

    Raises:
        ModelCallError: the model could not be reached or answered an error.
        ModelOutputError: the reply had no text: an empty stream, or one the token limit cut
            off while the model was reasoning (a :class:`~toolloop.errors.ModelRefusalError`
            when the model refused: its words are the error's ``refusal``).
        StructuredOutputError: with ``response_format``, every try failed its schema.
        ResponseFormatError: ``response_format`` is no usable schema.
        TypeError: an option that is not one.
    """
    ask = _ask(result, **_checked(options, "final_answer"))
    strategy = output_schema(response_format)
    if strategy is not None:
        request = ask.request
        with ask.metered(result):
            answer = await ask_structured(
                model,
                request.messages,
                strategy,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                settings=request.settings,
            )
        reply = answer.reply
        return FinalAnswer(
            answer.text,
            finish_reason=reply.finish_reason,
            usage=answer.usage,
            reasoning=reply.reasoning.text if reply.reasoning is not None else "",
            run_usage=result.usage + answer.usage,
            structured_response=answer.value,
            tries=answer.tries,
        )
    async with ask.streamed(model, result) as text:
        whole = "".join([piece async for piece in text])
        call = text.usage if text.usage is not None else Usage.unknown()
        return FinalAnswer(
            whole,
            finish_reason=text.finish_reason,
            usage=text.usage,
            reasoning=text.reasoning,
            run_usage=result.usage + call,
        )
