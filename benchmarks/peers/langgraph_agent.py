"""LangChain's ``create_agent`` (a LangGraph graph) over a scripted chat model.

The model is a ``BaseChatModel`` subclass, LangChain's own way to write a model: its
``_agenerate`` answers turn ``i`` (the number of ``AIMessage`` in the history) with the
scripted tool calls, then with the final text; ``bind_tools`` returns it unchanged. The agent
is built once per tool delay (no checkpointer, no middleware) and run with
``await agent.ainvoke({"messages": [...]}, config={"max_concurrency": 4})``; its tool node
runs each call of a turn as its own task.
"""

from __future__ import annotations

from typing import Any

from .common import (
    CONCURRENCY,
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
    agents = load("langchain.agents")
    language_models = load("langchain_core.language_models")
    messages = load("langchain_core.messages")
    outputs = load("langchain_core.outputs")
    AIMessage = messages.AIMessage
    HumanMessage = messages.HumanMessage
    ToolMessage = messages.ToolMessage
    ChatGeneration = outputs.ChatGeneration
    ChatResult = outputs.ChatResult
    base: Any = language_models.BaseChatModel

    class ScriptedChatModel(base):  # type: ignore[misc]
        """Answers from the script; keeps nothing, so one model serves every run."""

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _answer(self, history: list[Any]) -> Any:
            turn = sum(isinstance(m, AIMessage) for m in history)
            calls = [
                {"name": name, "args": args, "id": f"call_{turn}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(calls_for_turn(turn))
            ]
            message = AIMessage(content="" if calls else FINAL_ANSWER, tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: list[Any], stop: Any = None, **kwargs: Any) -> Any:
            return self._answer(messages)

        async def _agenerate(self, messages: list[Any], stop: Any = None, **kwargs: Any) -> Any:
            return self._answer(messages)

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    agent = agents.create_agent(ScriptedChatModel(), tools=make_tools(delay))
    config = {"max_concurrency": CONCURRENCY}

    async def run() -> None:
        state = await agent.ainvoke({"messages": [HumanMessage(USER_INPUT)]}, config=config)
        history = state["messages"]
        answers = [m for m in history if isinstance(m, ToolMessage)]
        if history[-1].content != FINAL_ANSWER or any(m.status != "success" for m in answers):
            raise CheckFailed(f"langgraph run: {history!r}")
        check_results("langgraph", [m.content for m in answers])

    return run
