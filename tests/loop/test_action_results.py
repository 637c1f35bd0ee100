from __future__ import annotations

from toolloop import ToolCommand, ToolExecutionRecord
from toolloop.loop import EXTRA_INSTRUCTION, LoopResult, to_action_results


def ok(purpose: str, result: object) -> ToolExecutionRecord:
    return ToolExecutionRecord.succeeded(ToolCommand(purpose=purpose, tool_name="t"), result)


def bad(purpose: str, error: str) -> ToolExecutionRecord:
    return ToolExecutionRecord.failed(ToolCommand(purpose=purpose, tool_name="t"), error)


def test_purpose_maps_to_result_in_order() -> None:
    assert to_action_results([ok("a", 1), ok("b", {"x": 2})]) == {"a": 1, "b": {"x": 2}}
    assert list(to_action_results([ok("b", 1), ok("a", 2)])) == ["b", "a"]


def test_repeated_purpose_gets_numbered_keys() -> None:
    results = to_action_results([ok("s", 1), ok("s", 2), ok("s", 3), ok("s (2)", 4)])
    assert results == {"s": 1, "s (2)": 2, "s (3)": 3, "s (2) (2)": 4}


def test_failure_keeps_its_error() -> None:
    assert to_action_results([bad("a", "boom")]) == {"a": {"error": "boom"}}


def test_result_injects_only_with_records() -> None:
    empty = LoopResult.build("hi", [], rounds=0, stop_reason="answered")
    assert empty.prompt == {} and empty.extra == {}
    assert empty.action_results is None and empty.extra_instruction is None
    assert empty.render_prompt() == "hi"

    full = LoopResult.build("hi", [ok("a", 1), bad("b", "no")], rounds=1, stop_reason="answered")
    assert full.action_results == {"a": 1, "b": {"error": "no"}}
    assert full.extra_instruction == EXTRA_INSTRUCTION
    assert [log["purpose"] for log in full.extra["tool_logs"]] == ["a", "b"]
    assert full.extra["tool_logs"][1]["error"] == "no"
    text = full.render_prompt()
    assert text.startswith("hi\n") and "quoted data" in text and '"a": 1' in text


def test_tool_logs_survive_unserializable_results() -> None:
    full = LoopResult.build("hi", [ok("a", object())], rounds=1, stop_reason="answered")
    assert isinstance(full.extra["tool_logs"][0]["result"], str)
    assert "object" in full.render_prompt()
