"""The three example paths of the status-routed agent, with plain steps and with the default
chat-model steps (offline, and over HTTP through the OpenAI adapter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from status_support import Scripted, call, calls, finish, path_of

from toolloop import ModelOutputError
from toolloop.checkpoints import Replan, SQLiteCheckpointStore
from toolloop.errors import StepFailedError
from toolloop.loop import EXTRA_INSTRUCTION
from toolloop.models import OpenAIChatModel
from toolloop.status_agent._agent import StatusAgent, StatusAgentResult
from toolloop.status_agent._llm import LLMStatusSteps
from toolloop.status_agent._state import StatusAgentState
from toolloop.status_agent._steps import StatusView
from toolloop.testing import FakeOpenAIServer, ScriptedChatModel, ScriptedChatReply
from toolloop.tools import RunContext

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
        ":ResourceWarning"
    ),
]

FORECAST = {"Paris": 21, "Rome": 25}


class Weather:
    def __init__(self, *, down: set[str] | None = None) -> None:
        self.down = down or set()
        self.calls: list[tuple[str, str]] = []

    def get_weather(self, city: str, source: str = "main") -> dict[str, Any]:
        """Today's forecast for a city.

        Args:
            city: the city's name.
            source: the weather service to ask.
        """
        self.calls.append((city, source))
        if source in self.down:
            raise ConnectionError(f"weather service {source!r} is down")
        return {"city": city, "temperature": FORECAST[city]}


def weather_of(view: StatusView) -> dict[str, int]:
    return {
        r.record.result["city"]: r.record.result["temperature"]
        for r in view.records
        if r.record.success
    }


# -- 1. a normal conversation --------------------------------------------------------------


async def test_a_normal_conversation() -> None:
    converse = Scripted(lambda view: f"Hello! You said: {view.user_input}")
    agent = StatusAgent(
        analyze=lambda view: "a greeting; no tool needed",
        plan=lambda view: [],
        decide=Scripted(),
        reflect=Scripted(),
        converse=converse,
    )
    result = await agent.run("Hi, how are you?")
    assert result.status == "completed"
    assert result.text == "Hello! You said: Hi, how are you?"
    assert path_of(result) == [
        "analysis:analysis_completed",
        "planning:conversation_ready",
        "conversation:conversation_completed",
    ]
    assert converse.views[0].analysis == "a greeting; no tool needed"
    assert result.records == []
    stored = await agent.store.get(result.run_id)
    assert stored is not None
    assert stored.status == "completed"  # the result, kept: a recovery gives it back
    assert StatusAgentResult.model_validate(stored.result) == result


# -- 2. tools, with reflection and continue -------------------------------------------------


def city_decisions(view: StatusView) -> dict[str, Any]:
    got = weather_of(view)
    missing = [city for city in ("Paris", "Rome") if city not in got]
    if missing:
        return calls(call("get_weather", f"weather in {missing[0]}", city=missing[0]))
    return finish(", ".join(f"{c}: {t}°C" for c, t in got.items()))


async def test_tools_with_reflection_and_continue() -> None:
    weather = Weather()

    def done(view: StatusView) -> dict[str, Any]:
        got = weather_of(view)
        return {"verdict": "finish", "answer": f"Rome is warmer ({got['Rome']}°C)"}

    reflect = Scripted({"verdict": "continue", "note": "Paris known; Rome next"}, done)
    agent = StatusAgent(
        tools=[weather.get_weather],
        analyze=lambda view: "the weather of two cities",
        plan=lambda view: ["weather in Paris", "weather in Rome"],
        decide=Scripted(city_decisions, city_decisions, city_decisions),
        reflect=reflect,
        converse=Scripted(),
    )
    result = await agent.run("Is it warmer in Paris or in Rome?")
    assert path_of(result) == [
        "analysis:analysis_completed",
        "planning:decision_ready",
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:continue",
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:reflection_completed",
    ]
    assert weather.calls == [("Paris", "main"), ("Rome", "main")]
    assert result.text == "Rome is warmer (25°C)"
    assert result.stop_reason == "answered"
    assert [r.call_id for r in result.state.records] == ["call-1", "call-2"]
    assert reflect.views[1].last_records[0].call_id == "call-2"


# -- 3. an error, a human, a new plan -------------------------------------------------------


def sourced_decisions(view: StatusView) -> dict[str, Any]:
    if weather_of(view):
        return finish(f"Paris: {weather_of(view)['Paris']}°C")
    source = "backup" if view.plan == ["ask the backup service"] else "main"
    return calls(call("get_weather", "weather in Paris", city="Paris", source=source))


async def test_an_error_goes_to_a_human_who_replans() -> None:
    weather = Weather(down={"main"})
    plan = Scripted(["ask the main service"], ["ask the backup service"])
    agent = StatusAgent(
        tools=[weather.get_weather],
        analyze=lambda view: "the weather in Paris",
        plan=plan,
        decide=Scripted(sourced_decisions, sourced_decisions, sourced_decisions),
        reflect=Scripted({"verdict": "finish"}),
        converse=Scripted(),
    )
    paused = await agent.run("Weather in Paris?")
    assert paused.status == "paused"
    assert path_of(paused)[-3:] == [
        "tool_execution:tool_execution_failed",
        "reflection:needs_human",
        "human_intervention:waiting_for_human",
    ]
    request = paused.request
    assert request is not None and request.kind == "review"
    assert "weather service 'main' is down" in request.details["failed"][0]["error"]
    assert await agent.request(paused.run_id) == request

    result = await agent.resume(paused.run_id, Replan(message="use the backup service"))
    assert path_of(result)[len(path_of(paused)) :] == [
        "human_intervention:replan",
        "planning:decision_ready",
        "decision:ready_for_execution",
        "tool_execution:tools_completed",
        "reflection:reflection_completed",
    ]
    assert plan.views[1].notes[0].text == "use the backup service"
    assert weather.calls == [("Paris", "main"), ("Paris", "backup")]
    assert [r.record.success for r in result.state.records] == [False, True]
    assert await agent.request(paused.run_id) is None


# -- the default steps: a chat model --------------------------------------------------------


def llm_script() -> list[str]:
    def decide(city: str) -> str:
        return json.dumps(
            {
                "action": "call_tools",
                "tool_calls": [
                    {"tool_name": "get_weather", "arguments": {"city": city}, "purpose": city}
                ],
                "reason": f"need {city}",
                "answer": None,
            }
        )

    return [
        "The user wants to compare the weather of Paris and Rome.",
        json.dumps({"steps": ["weather in Paris", "weather in Rome"]}),
        decide("Paris"),
        json.dumps({"verdict": "continue", "note": "Rome next", "answer": None}),
        decide("Rome"),
        json.dumps({"verdict": "finish", "note": "", "answer": "Rome is warmer (25°C)."}),
    ]


async def test_the_default_steps_ask_a_chat_model() -> None:
    model = ScriptedChatModel(llm_script())
    weather = Weather()
    agent = StatusAgent(tools=[weather.get_weather], model=model)
    result = await agent.run("Is it warmer in Paris or in Rome?")
    assert result.text == "Rome is warmer (25°C)."
    assert weather.calls == [("Paris", "main"), ("Rome", "main")]
    assert path_of(result)[-2:] == [
        "tool_execution:tools_completed",
        "reflection:reflection_completed",
    ]
    requests = model.requests
    assert [r.structured_output.name if r.structured_output else None for r in requests] == [
        None,
        "plan",
        "decide",
        "reflect",
        "decide",
        "reflect",
    ]
    system = requests[0].messages[0]["content"]
    assert EXTRA_INSTRUCTION in system
    decide_schema = requests[2].structured_output
    assert decide_schema is not None
    items = decide_schema.schema["properties"]["tool_calls"]["items"]
    assert items["properties"]["tool_name"]["enum"] == ["get_weather"]
    context = json.loads(requests[4].messages[1]["content"])
    assert context["results"][0]["result"] == {"city": "Paris", "temperature": 21}
    assert context["notes"] == [{"source": "reflection", "text": "Rome next"}]
    assert context["plan"] == ["weather in Paris", "weather in Rome"]


async def test_steps_given_replace_the_defaults_and_bad_model_output_fails_clearly() -> None:
    model = ScriptedChatModel(["analysis", "not json {"])
    agent = StatusAgent(model=model, converse=lambda view: "unused")
    assert agent.steps.converse is not agent.steps.plan
    with pytest.raises(StepFailedError) as info:
        await agent.run("x")
    assert isinstance(info.value.__cause__, ModelOutputError)
    assert "the plan step asked the model for JSON and got 'not json {'" in str(info.value)
    # the run is marked failed (and can be recovered)
    (run_id,) = await agent.store.run_ids(status="failed")
    model.add_reply(json.dumps({"steps": []}))
    model.add_reply("Here you go.")
    result = await agent.recover(run_id)
    assert result.text == "unused"

    with pytest.raises(ValueError, match=r"needs model= for its default steps, or functions for"):
        StatusAgent(analyze=lambda view: "x")
    view = StatusView.of(StatusAgentState(user_input="x"), [])
    with pytest.raises(ModelOutputError, match="no StatusDecision"):
        await LLMStatusSteps(ScriptedChatModel(['{"action": 3}'])).decide(view)


async def test_over_http_through_the_openai_adapter_with_a_pause_in_sqlite(tmp_path: Path) -> None:
    weather = Weather(down={"main"})
    script = [
        "The weather in Paris.",
        json.dumps({"steps": ["ask the main service"]}),
        json.dumps(
            {
                "action": "call_tools",
                "tool_calls": [
                    {"tool_name": "get_weather", "arguments": {"city": "Paris"}, "purpose": "Paris"}
                ],
                "reason": "",
                "answer": None,
            }
        ),
        # after the human's replan
        json.dumps({"steps": ["ask the backup service"]}),
        json.dumps(
            {
                "action": "call_tools",
                "tool_calls": [
                    {
                        "tool_name": "get_weather",
                        "arguments": {"city": "Paris", "source": "backup"},
                        "purpose": "Paris",
                    }
                ],
                "reason": "",
                "answer": None,
            }
        ),
        json.dumps({"verdict": "finish", "note": "", "answer": "21°C in Paris."}),
    ]
    async with FakeOpenAIServer() as server:
        for reply in script:
            server.add_reply(reply)
        async with (
            OpenAIChatModel("fake-model", base_url=server.base_url, max_retries=0) as model,
            SQLiteCheckpointStore(tmp_path / "runs.db") as store,
        ):
            agent = StatusAgent(tools=[weather.get_weather], model=model, store=store)
            paused = await agent.run("Weather in Paris?")
            assert paused.paused
            again = StatusAgent(tools=[weather.get_weather], model=model, store=store)
            result = await again.resume(paused.run_id, {"kind": "replan", "message": "backup"})
        assert result.text == "21°C in Paris."
        assert len(server.requests) == 6
        body = server.requests[1].body
        assert isinstance(body, dict)
        assert body["response_format"]["type"] == "json_schema"
    assert weather.calls == [("Paris", "main"), ("Paris", "backup")]


async def test_the_status_agent_counts_usage_and_hands_tools_their_deps() -> None:
    seen: list[tuple[str, int, str]] = []

    async def get_weather(city: str, ctx: RunContext[str]) -> dict[str, Any]:
        """The weather.

        Args:
            city: the city.
        """
        seen.append((ctx.deps, ctx.round_index, ctx.run_id))
        return {"city": city, "temperature": 21 if city == "Paris" else 25}

    tokens = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    script = [ScriptedChatReply(content=text, usage=tokens) for text in llm_script()]
    script[0] = ScriptedChatReply(content=script[0].content)  # this one reports nothing
    agent = StatusAgent(tools=[get_weather], model=ScriptedChatModel(script))
    result = await agent.run("Is it warmer in Paris or in Rome?", deps="the-db")
    assert result.text == "Rome is warmer (25°C)."
    assert (result.usage.requests, result.usage.unreported_requests) == (6, 1)
    assert result.usage.total_tokens == 75
    assert seen == [("the-db", 0, result.run_id), ("the-db", 1, result.run_id)]
