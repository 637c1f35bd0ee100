"""Middleware hooks: how often and in which order they run, updates and jumps, sync and async."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolloop import ExecutionTimeoutError
from toolloop.agents import (
    AgentDefinitionError,
    AgentMiddleware,
    AgentState,
    AssistantMessage,
    Command,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    Pause,
    Runtime,
    ToolCall,
    ToolCallRequest,
    ToolHandler,
    ToolMessage,
    UserMessage,
    after_agent,
    after_model,
    before_agent,
    before_model,
    create_agent,
    wrap_model_call,
    wrap_tool_call,
)
from toolloop.errors import StepFailedError
from toolloop.testing import ScriptedChatModel
from toolloop.tools import RunContext

pytestmark = pytest.mark.anyio


def call(name: str, args: dict[str, Any] | None = None) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args or {})}


def echo(text: str) -> str:
    """Echo the text."""
    return text


def two_turns() -> ScriptedChatModel:
    """A model that calls echo twice at once, then answers."""
    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "a"}), call("echo", {"text": "b"})])
    model.add_reply("done")
    return model


class Recorder(AgentMiddleware):
    """Logs every hook; half of them async, to show both kinds work side by side."""

    def __init__(self, tag: str, log: list[str]) -> None:
        self.tag = tag
        self.log = log

    @property
    def name(self) -> str:
        return self.tag

    def before_agent(self, state: AgentState, runtime: Runtime) -> None:
        self.log.append(f"{self.tag}.before_agent")

    async def before_model(self, state: AgentState, runtime: Runtime) -> None:
        await anyio.lowlevel.checkpoint()
        self.log.append(f"{self.tag}.before_model")

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse:
        self.log.append(f"{self.tag}.wrap_model_call>")
        response = await handler(request)
        self.log.append(f"{self.tag}.wrap_model_call<")
        return response

    def after_model(self, state: AgentState, runtime: Runtime) -> None:
        self.log.append(f"{self.tag}.after_model")

    async def wrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command:
        self.log.append(f"{self.tag}.wrap_tool_call>{request.tool_call.args['text']}")
        result = await handler(request)
        self.log.append(f"{self.tag}.wrap_tool_call<{request.tool_call.args['text']}")
        return result

    async def after_agent(self, state: AgentState, runtime: Runtime) -> None:
        self.log.append(f"{self.tag}.after_agent")


async def test_hook_counts_and_order() -> None:
    log: list[str] = []
    agent = create_agent(two_turns(), [echo], middleware=[Recorder("A", log), Recorder("B", log)])
    await agent.run("go")
    turn = [
        "A.before_model",  # in registration order
        "B.before_model",
        "A.wrap_model_call>",  # the first registered is outermost
        "B.wrap_model_call>",
        "B.wrap_model_call<",
        "A.wrap_model_call<",
        "B.after_model",  # in reverse order
        "A.after_model",
    ]
    onion = [("A", ">"), ("B", ">"), ("B", "<"), ("A", "<")]
    # the two calls run concurrently (each its own task): each one is wrapped in order
    for x in "ab":
        assert [e for e in log if e.endswith(x) and "wrap_tool_call" in e] == [
            f"{outer}.wrap_tool_call{d}{x}" for outer, d in onion
        ]
    assert [e for e in log if "wrap_tool_call" not in e] == [
        "A.before_agent",  # once per run, in order
        "B.before_agent",
        *turn,
        *turn,
        "B.after_agent",  # once per run, in reverse
        "A.after_agent",
    ]
    first_tool = min(i for i, e in enumerate(log) if "wrap_tool_call" in e)
    last_tool = max(i for i, e in enumerate(log) if "wrap_tool_call" in e)
    assert log[first_tool - 1] == "A.after_model"  # the tools come between the two turns
    assert log[last_tool + 1] == "A.before_model"
    assert len([e for e in log if "wrap_tool_call" in e]) == 8


async def test_hooks_run_once_per_run_for_each_run() -> None:
    log: list[str] = []
    model = ScriptedChatModel(["one", "two"])
    agent = create_agent(model, middleware=[Recorder("A", log)])
    await agent.run("first")
    await agent.run("second")
    assert log.count("A.before_agent") == 2
    assert log.count("A.after_agent") == 2
    assert log.count("A.before_model") == 2


async def test_an_update_is_applied_and_a_jump_is_used_once_and_not_kept() -> None:
    seen: list[Any] = []

    class Jumper(AgentMiddleware):
        def after_model(self, state: AgentState, runtime: Runtime) -> dict[str, Any] | None:
            if state.values.get("jumped"):
                return None
            # answered already, so "model" is where the rules would go anyway; jump to end
            return {"jump_to": "end", "jumped": True, "messages": [UserMessage(content="x")]}

    class Watcher(AgentMiddleware):
        def after_agent(self, state: AgentState, runtime: Runtime) -> None:
            seen.append(dict(state.values))

    model = ScriptedChatModel()
    model.add_reply(tool_calls=[call("echo", {"text": "a"})])
    result = await create_agent(model, [echo], middleware=[Watcher(), Jumper()]).run("go")
    assert len(model.requests) == 1  # the jump ended the run before the tools
    assert result.state.values == {"jumped": True}
    assert "jump_to" not in result.state.model_dump()
    assert "jump_to" not in json.dumps(result.state.model_dump(mode="json"))
    assert seen == [{"jumped": True}]
    assert isinstance(result.messages[-2], UserMessage)
    # the call the jump left behind is answered, so the conversation stays valid
    last = result.messages[-1]
    assert isinstance(last, ToolMessage)
    assert last.status == "error"
    assert "the run ended before this call ran" in last.content

    # a second run of the same thread: the jump was used, it does not come back
    model.add_reply("hello again")
    again = await create_agent(model, [echo], middleware=[Jumper()]).run(
        "again", state=result.state
    )
    assert again.text == "hello again"


async def test_a_jump_skips_the_hooks_after_it_of_the_same_kind() -> None:
    log: list[str] = []

    class Jump(AgentMiddleware):
        def __init__(self, where: str) -> None:
            self.where = where

        def before_model(self, state: AgentState, runtime: Runtime) -> Command | None:
            log.append("jump.before_model")
            if self.where == "before":
                return Command(jump_to="end")
            return None

        def after_model(self, state: AgentState, runtime: Runtime) -> Command | None:
            log.append("jump.after_model")
            return Command(jump_to="end") if self.where == "after" else None

    first = Recorder("first", log)
    last = Recorder("last", log)
    await create_agent(ScriptedChatModel(), middleware=[first, Jump("before"), last]).run("go")
    assert "last.before_model" not in log
    assert "first.wrap_model_call>" not in log  # no model call
    log.clear()
    model = ScriptedChatModel(["hi"])
    await create_agent(model, middleware=[first, Jump("after"), last]).run("go")
    # after_model hooks run in reverse: last, jump (which jumps), and first is skipped
    assert [e for e in log if e.endswith("after_model")] == ["last.after_model", "jump.after_model"]


async def test_before_agent_can_jump_to_the_end() -> None:
    @before_agent
    def refuse(state: AgentState, runtime: Runtime) -> dict[str, Any]:
        return {"messages": [AssistantMessage(content="closed today")], "jump_to": "end"}

    model = ScriptedChatModel()
    result = await create_agent(model, middleware=[refuse]).run("hi")
    assert model.requests == []
    assert result.text == "closed today"


async def test_decorated_functions_are_middleware_sync_and_async() -> None:
    log: list[str] = []

    @before_model
    def count(state: AgentState, runtime: Runtime) -> dict[str, Any]:
        log.append("count")
        return {"calls": state.values.get("calls", 0) + 1}

    @after_model(name="async_after")
    async def check(state: AgentState, runtime: Runtime) -> None:
        await anyio.lowlevel.checkpoint()
        log.append("check")

    @wrap_model_call
    def prompt(request: ModelRequest, handler: ModelHandler) -> Any:
        return handler(request.override(system_prompt="be brief"))  # a sync wrap: no await

    @wrap_tool_call
    async def shout(request: ToolCallRequest, handler: ToolHandler) -> ToolMessage | Command:
        result = await handler(request)
        assert isinstance(result, ToolMessage)
        return result.model_copy(update={"content": result.content.upper()})

    @after_agent
    def bye(state: AgentState, runtime: Runtime) -> None:
        log.append("bye")

    assert check.name == "async_after"
    model = two_turns()
    result = await create_agent(
        model, [echo], middleware=[count, check, prompt, shout, bye], system_prompt="long"
    ).run("go")
    assert log == ["count", "check", "count", "check", "bye"]
    assert result.state.values["calls"] == 2
    assert [m.content for m in result.messages if isinstance(m, ToolMessage)] == ["A", "B"]
    assert all(r.messages[0] == {"role": "system", "content": "be brief"} for r in model.requests)


async def test_wrap_model_call_can_answer_without_the_model_and_retry() -> None:
    attempts = 0

    class Retry(AgentMiddleware):
        async def wrap_model_call(
            self, request: ModelRequest, handler: ModelHandler
        ) -> ModelResponse:
            nonlocal attempts
            for _ in range(3):
                attempts += 1
                try:
                    return await handler(request)
                except Exception:
                    continue
            return ModelResponse(AssistantMessage(content="fallback"))

    model = ScriptedChatModel([RuntimeError("flaky"), "second try"])
    result = await create_agent(model, middleware=[Retry()]).run("go")
    assert result.text == "second try"
    assert attempts == 2

    class Canned(AgentMiddleware):
        def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AssistantMessage:
            return AssistantMessage(content="canned")

    result = await create_agent(ScriptedChatModel(), middleware=[Canned()]).run("go")
    assert result.text == "canned"


async def test_hooks_that_return_nonsense_fail_clearly() -> None:
    class Bad(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> Any:
            return 42

    with pytest.raises(StepFailedError, match=r"Bad\.before_model returned int") as info:
        await create_agent(ScriptedChatModel(), middleware=[Bad()]).run("go")
    assert isinstance(info.value.__cause__, AgentDefinitionError)

    class BadJump(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> Any:
            return {"jump_to": "somewhere"}

    with pytest.raises(StepFailedError, match="jump_to is one of"):
        await create_agent(ScriptedChatModel(), middleware=[BadJump()]).run("go")

    class PauseTooEarly(AgentMiddleware):
        def before_agent(self, state: AgentState, runtime: Runtime) -> Any:
            return Pause("?")

    with pytest.raises(StepFailedError, match="only before_model and after_model hooks can pause"):
        await create_agent(ScriptedChatModel(), middleware=[PauseTooEarly()]).run("go")

    class BadUpdate(AgentMiddleware):
        def before_model(self, state: AgentState, runtime: Runtime) -> Any:
            return {"todos": [{"status": "nope"}]}

    with pytest.raises(StepFailedError, match="update that does not fit") as info:
        await create_agent(ScriptedChatModel(), middleware=[BadUpdate()]).run("go")
    assert info.value.state.todos == []


async def test_a_hook_that_raises_fails_the_run_with_the_cause_chained() -> None:
    @before_model
    def broken(state: AgentState, runtime: Runtime) -> None:
        raise KeyError("missing")

    with pytest.raises(StepFailedError, match="KeyError") as info:
        await create_agent(ScriptedChatModel(), middleware=[broken]).run("go")
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.step == "model"


async def test_an_async_hook_that_hangs_times_out() -> None:
    @before_model
    async def hang(state: AgentState, runtime: Runtime) -> None:
        await anyio.sleep_forever()

    agent = create_agent(ScriptedChatModel(), middleware=[hang], hook_timeout=0.05)
    with pytest.raises(ExecutionTimeoutError, match=r"hook hang\.before_model did not finish"):
        await agent.run("go")
    # a hook's timeout is no timeout of the run: on_timeout="finish" does not finish on it
    with pytest.raises(ExecutionTimeoutError, match=r"hook hang\.before_model") as info:
        await agent.run("go", on_timeout="finish")
    assert info.value.step == "hang.before_model"


async def test_the_caller_s_deps_reach_the_hooks_and_the_tools_as_one_object() -> None:
    seen: list[Any] = []

    @before_agent
    def look(state: AgentState, runtime: Runtime) -> None:
        seen.append(("hook", runtime.deps, runtime.run_id))

    def whoami(ctx: RunContext[dict[str, str]]) -> str:
        """Who asks."""
        seen.append(("tool", ctx.deps, ctx.run_id))
        return ctx.deps["user"]

    def scripted() -> ScriptedChatModel:
        model = ScriptedChatModel()
        model.add_reply(tool_calls=[{"name": "whoami", "arguments": "{}"}])
        model.add_reply("ok")
        return model

    deps = {"user": "ada"}
    agent = create_agent(scripted(), [whoami], middleware=[look])
    result = await agent.run("go", deps=deps)
    assert seen == [("hook", deps, result.run_id), ("tool", deps, result.run_id)]
    assert seen[0][1] is seen[1][1] is deps  # one channel: the same object
    assert result.records[0].result == "ada"
    seen.clear()
    default = {"user": "bob"}  # the agent's deps, for every run that gives none
    result = await create_agent(scripted(), [whoami], middleware=[look], deps=default).run("go")
    assert [d for _, d, _ in seen] == [default, default]
    with pytest.raises(TypeError, match="context"):
        await agent.run("go", context=deps)  # type: ignore[call-arg]


async def test_wrap_model_call_may_answer_tool_calls_without_running_them() -> None:
    ran: list[str] = []

    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key.
        """
        ran.append(key)
        return f"looked up {key}"

    class Cache(AgentMiddleware):
        """Answers the model's first turn from a cache: one call answered, one left to run."""

        async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> Any:
            if request.state.model_calls > 1:
                return await handler(request)
            ask = AssistantMessage(
                content="",
                tool_calls=[
                    ToolCall(id="k1", name="lookup", args={"key": "cached"}),
                    ToolCall(id="k2", name="lookup", args={"key": "fresh"}),
                ],
            )
            return [ask, ToolMessage(tool_call_id="k1", name="lookup", content="from cache")]

    model = ScriptedChatModel()
    model.add_reply("both known")
    result = await create_agent(model, [lookup], middleware=[Cache()]).run("look up")
    assert ran == ["fresh"]  # the answered call never ran
    answers = {m.tool_call_id: m.content for m in result.messages if isinstance(m, ToolMessage)}
    assert answers == {"k1": "from cache", "k2": "looked up fresh"}
    assert result.text == "both known"
    sent = model.requests[0].messages  # the model saw both answers, in call order
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["k1", "k2"]


async def test_a_synthetic_reply_that_answers_everything_goes_back_to_the_model() -> None:
    class Mock(AgentMiddleware):
        def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> Any:
            if request.state.model_calls > 1:
                return handler(request)
            ask = AssistantMessage(content="", tool_calls=[ToolCall(id="m1", name="nope", args={})])
            return [ask, ToolMessage(tool_call_id="m1", name="nope", content="mocked")]

    model = ScriptedChatModel(["done"])
    result = await create_agent(model, middleware=[Mock()]).run("go")
    assert [e.step for e in result.trace if e.step in ("model", "tools")] == ["model", "model"]
    assert result.text == "done"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (["text"], "starts with str"),
        ([AssistantMessage(content="x"), UserMessage(content="y")], "only ToolMessages"),
        (
            [AssistantMessage(content="x"), ToolMessage(tool_call_id="zz", content="y")],
            "the tool call 'zz', which the message does not ask for",
        ),
    ],
)
async def test_a_synthetic_reply_that_does_not_fit_is_a_clear_error(
    reply: list[Any], message: str
) -> None:
    class Bad(AgentMiddleware):
        def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> Any:
            return reply

    with pytest.raises(StepFailedError, match=message) as info:
        await create_agent(ScriptedChatModel(["x"]), middleware=[Bad()]).run("go")
    assert isinstance(info.value.__cause__, AgentDefinitionError)
