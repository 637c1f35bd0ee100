"""Reading the structured answer out of a model turn, and sending a bad one back.

With :class:`ToolStrategy`, a call to the output tool is answered right in the model turn:
a valid answer becomes ``state.structured_response`` with a tool message saying so; an
invalid one (or several calls of it) is answered with the errors, so the routing takes the
model back to try again. With :class:`ProviderStrategy`, a reply without tool calls is the
answer: its text must be JSON that fits. A reply that gives no answer at all is sent back
with a user message saying what is expected; a refusal is not (the run ends with the stop
reason ``refusal``). After ``retries`` failures in a run,
:class:`~toolloop.errors.StructuredOutputError` is raised. What an answer that failed is
told, and the error, are the strategies' own (:mod:`toolloop.kernel`), as in every product.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kernel import ProviderStrategy, ToolStrategy
from ._messages import AssistantMessage, ToolMessage, UserMessage, content_text
from ._state import AgentState, JumpTo
from ._tool_call import error_message

if TYPE_CHECKING:
    from ._spec import AgentSpec

__all__ = ["structured_answer"]


def _failed(strategy: ToolStrategy | ProviderStrategy, state: AgentState, error: str) -> None:
    state.structured_failures += 1
    if state.structured_failures > strategy.retries:
        failed = strategy.gave_up(state.structured_failures, error)
        failed.state = state
        raise failed


def _send_back(
    strategy: ToolStrategy | ProviderStrategy,
    state: AgentState,
    error: str,
    feedback: str,
) -> JumpTo:
    _failed(strategy, state, error)
    state.messages.append(UserMessage(content=feedback))
    return "model"


def structured_answer(
    spec: AgentSpec, state: AgentState, message: AssistantMessage
) -> JumpTo | None:
    """Handle the structured answer in ``message`` (see the module docs); ``"model"`` when
    the model must answer again."""
    strategy = spec.strategy
    if message.refusal is not None and not message.tool_calls:
        return None  # a refusal is the model's last word: the run ends with it
    if isinstance(strategy, ToolStrategy):
        name = strategy.tool.name
        calls = [call for call in message.tool_calls if call.name == name]
        if not calls:
            if message.tool_calls:
                return None  # other tools first
            return _send_back(
                strategy,
                state,
                f"the model answered without calling {name!r}",
                strategy.ask_for_the_call(),
            )
        if len(calls) > 1:
            error = strategy.called_too_often(len(calls))
            state.messages.extend(error_message(call, error) for call in calls)
            _failed(strategy, state, error)
            return None
        call = calls[0]
        try:
            if call.error is not None:
                raise ValueError(call.error)
            value = strategy.output.parse(call.args)
        except ValueError as exc:
            state.messages.append(error_message(call, strategy.fix_the_call(str(exc))))
            _failed(strategy, state, str(exc))
            return None
        state.structured_response = value
        state.messages.append(
            ToolMessage(
                tool_call_id=call.id,
                name=name,
                content=f"Returned the structured response: {content_text(call.args)}",
            )
        )
        return None
    assert isinstance(strategy, ProviderStrategy)
    if message.tool_calls:
        return None
    try:
        value = strategy.output.parse_json(message.content)
    except ValueError as exc:
        return _send_back(
            strategy,
            state,
            str(exc),
            strategy.answer_again(str(exc)),
        )
    state.structured_response = value
    return None
