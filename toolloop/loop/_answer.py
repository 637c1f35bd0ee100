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

__all__ = ["final_answer", "final_answer_messages", "stream_final_answer"]


def final_answer_messages(
    result: LoopResult, *, system_prompt: str | None = None
) -> list[dict[str, Any]]:
    """The messages of the final answer's request for ``result`` (see the module docs)."""
    messages: list[dict[str, Any]] = []
    action_results = result.action_results
    if action_results is None:
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": result.user_input})
        return messages
    instruction = result.extra_instruction or ""
    system = f"{system_prompt}\n\n{instruction}" if system_prompt else instruction
    data = json.dumps(json_safe(action_results), ensure_ascii=False, indent=2)
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

    Yields:
        The answer's text, delta by delta. Leaving the block closes the stream.

    Raises:
        ModelCallError: the model could not be reached or answered an error.
    """
    request = ChatRequest(
        messages=final_answer_messages(result, system_prompt=system_prompt),
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
) -> str:
    """The whole final answer as text (see :func:`stream_final_answer`)."""
    async with stream_final_answer(
        model,
        result,
        system_prompt=system_prompt,
        max_tokens=max_tokens,
        temperature=temperature,
    ) as text:
        return "".join([piece async for piece in text])
