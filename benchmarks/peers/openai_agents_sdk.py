"""The OpenAI Agents SDK's ``Runner.run`` over a custom ``Model`` that plays the script.

The SDK's way to bring another model is to implement its ``Model`` interface: ``get_response``
answers the turn that follows the ``function_call`` items already in the input with
``ResponseFunctionToolCall`` items, then with an output message. The agent is built once per
tool delay (the four functions through ``function_tool``, which builds strict JSON schemas and
validates each call's arguments with pydantic; ``parallel_tool_calls=True``) and run with
``await Runner.run(agent.clone(), ...)``: a clone per run, its fastest path at scale. With one
shared ``Agent``, each turn of each run compares the agent's tools with those of every other
run in progress on it (``agents/run_internal/agent_tool_configuration.py``, a guard against
tools changed mid-run), which is quadratic in the runs at once: 52 runs/s at 1,000 but 9 at
10,000 on the benchmark's machine; the clone costs a few microseconds. Tracing is turned off
(``set_tracing_disabled``): it would try to export spans to OpenAI's servers, and there is no
network here.
"""

from __future__ import annotations

import json
from typing import Any

from .common import (
    FINAL_ANSWER,
    MAX_ROUNDS,
    USER_INPUT,
    CheckFailed,
    RunFn,
    calls_for_turn,
    check_results,
    load,
    make_tools,
    turn_after_calls,
)


def _item_type(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


def build(delay: float) -> RunFn:
    sdk = load("agents")
    items = load("agents.items")
    interface = load("agents.models.interface")
    responses = load("openai.types.responses")
    sdk.set_tracing_disabled(True)
    ModelResponse = items.ModelResponse
    ToolCallOutputItem = items.ToolCallOutputItem
    Usage = sdk.Usage
    ResponseFunctionToolCall = responses.ResponseFunctionToolCall
    ResponseOutputMessage = responses.ResponseOutputMessage
    ResponseOutputText = responses.ResponseOutputText
    base: Any = interface.Model

    class ScriptedModel(base):  # type: ignore[misc]
        """Answers from the script; keeps nothing, so one model serves every run."""

        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            made = (
                0
                if isinstance(input, str)
                else sum(_item_type(i) == "function_call" for i in input)
            )
            turn = turn_after_calls(made)
            calls = calls_for_turn(turn)
            output: list[Any]
            if calls:
                output = [
                    ResponseFunctionToolCall(
                        id=f"fc_{turn}_{i}",
                        call_id=f"call_{turn}_{i}",
                        type="function_call",
                        name=name,
                        arguments=json.dumps(args),
                    )
                    for i, (name, args) in enumerate(calls)
                ]
            else:
                text = ResponseOutputText(text=FINAL_ANSWER, type="output_text", annotations=[])
                output = [
                    ResponseOutputMessage(
                        id=f"msg_{turn}",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[text],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    agent = sdk.Agent(
        name="planner",
        instructions="Plan the trip with the tools, then answer.",
        model=ScriptedModel(),
        tools=[sdk.function_tool(fn) for fn in make_tools(delay)],
        model_settings=sdk.ModelSettings(parallel_tool_calls=True),
    )

    async def run() -> None:
        # a clone per run (the same tools, model and settings): the SDK checks every run in
        # progress on one Agent object against the others at each turn, which makes
        # thousands of concurrent runs of a single Agent quadratic (see the module's doc)
        result = await sdk.Runner.run(agent.clone(), USER_INPUT, max_turns=MAX_ROUNDS)
        if result.final_output != FINAL_ANSWER:
            raise CheckFailed(f"openai-agents run: {result.new_items!r}")
        outputs = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
        check_results("openai-agents", outputs)

    return run
