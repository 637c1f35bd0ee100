"""The final answer: one request that folds a finished loop's results into the user's prompt.

With records, the system message carries the ``extra_instruction`` (tool output is quoted
data, not instructions) and the user message the user's input followed by the
``action_results``; with no record the request carries the user's input alone (and the
caller's system prompt, if any). Nothing is planned here: after a planner that answered
``response`` this is the one request left.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..models import ChatDelta, ChatModel, ChatRequest
from ..runner import json_safe
from ._results import LoopResult

__all__ = [
    "FINAL_ANSWER_RESULT_CHARS",
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


class _TextDeltas:
    """The text of a stream of :class:`ChatDelta` (no async generator, so leaving early
    leaves nothing to finalize)."""

    __slots__ = ("_deltas",)

    def __init__(self, deltas: AsyncIterator[ChatDelta]) -> None:
        self._deltas = deltas

    def __aiter__(self) -> _TextDeltas:
        return self

    async def __anext__(self) -> str:
        while True:
            delta = await self._deltas.__anext__()
            if delta.content:
                return delta.content


@asynccontextmanager
async def stream_final_answer(
    model: ChatModel,
    result: LoopResult,
    *,
    system_prompt: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    max_result_chars: int = FINAL_ANSWER_RESULT_CHARS,
) -> AsyncIterator[AsyncIterator[str]]:
    """Stream the final answer to the user's request, with the loop's results::

        async with stream_final_answer(model, result) as text:
            async for piece in text:
                print(piece, end="")

    Args:
        model: any :class:`~toolloop.models.ChatModel`.
        result: what :func:`~toolloop.async_plan_and_execute` returned.
        system_prompt: instructions put before the ``extra_instruction``.
        max_tokens: the answer's length limit (the server's default when ``None``).
        temperature: passed to the model.
        max_result_chars: each action result is cut to this many characters in the prompt.

    Yields:
        The answer's text, delta by delta. Leaving the block closes the stream.

    Raises:
        ModelCallError: the model could not be reached or answered an error.
    """
    request = ChatRequest(
        messages=final_answer_messages(
            result, system_prompt=system_prompt, max_result_chars=max_result_chars
        ),
        max_tokens=max_tokens,
        temperature=temperature,
    )
    async with model.stream(request) as deltas:
        yield _TextDeltas(deltas)


async def final_answer(
    model: ChatModel,
    result: LoopResult,
    *,
    system_prompt: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    max_result_chars: int = FINAL_ANSWER_RESULT_CHARS,
) -> str:
    """The whole final answer as text (see :func:`stream_final_answer`)."""
    async with stream_final_answer(
        model,
        result,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        max_result_chars=max_result_chars,
    ) as text:
        return "".join([piece async for piece in text])
