"""pydantic-ai's ``Agent`` over a ``FunctionModel`` that plays the script.

``FunctionModel`` is pydantic-ai's own way to put a local function in the model's place: the
function answers turn ``i`` (the number of ``ModelResponse`` in the history) with
``ToolCallPart``s, then with a ``TextPart``. The agent is built once per tool delay, with the
four functions as plain tools (pydantic-ai builds their schemas and validates each call's
arguments with pydantic), and run with ``await agent.run(...)``; the calls of a response run
concurrently (its default parallel mode).
"""

from __future__ import annotations

from typing import Any

from .common import (
    FINAL_ANSWER,
    USER_INPUT,
    CheckFailed,
    RunFn,
    calls_for_turn,
    check_results,
    load,
    make_tools,
)


def build(delay: float) -> RunFn:
    pydantic_ai = load("pydantic_ai")
    function = load("pydantic_ai.models.function")
    messages = load("pydantic_ai.messages")
    ModelRequest = messages.ModelRequest
    ModelResponse = messages.ModelResponse
    TextPart = messages.TextPart
    ToolCallPart = messages.ToolCallPart
    ToolReturnPart = messages.ToolReturnPart

    def script(history: list[Any], info: Any) -> Any:
        turn = sum(isinstance(m, ModelResponse) for m in history)
        calls = calls_for_turn(turn)
        if not calls:
            return ModelResponse(parts=[TextPart(FINAL_ANSWER)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call_{turn}_{i}")
                for i, (name, args) in enumerate(calls)
            ]
        )

    agent = pydantic_ai.Agent(function.FunctionModel(script), tools=make_tools(delay))

    async def run() -> None:
        result = await agent.run(USER_INPUT)
        if result.output != FINAL_ANSWER:
            raise CheckFailed(f"pydantic-ai run: {result.all_messages()!r}")
        returned = [
            part.content
            for message in result.all_messages()
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        check_results("pydantic-ai", returned)

    return run
