"""An independent reading of a provider fixture: plain ``json``, no toolloop code.

It is written apart from toolloop's adapter on purpose, so the two can be held against each
other and against the fixture's hand-written ``expect``. Run it as a script to check every
fixture (``python tests/providers/independent.py``): it prints each one that disagrees with
its ``expect``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_paths() -> list[Path]:
    """Every fixture, sorted by provider then case."""
    return sorted(FIXTURES.glob("*/*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def is_stream(fixture: dict[str, Any]) -> bool:
    content_type = str(fixture.get("headers", {}).get("content-type", ""))
    return "event-stream" in content_type


def _events(body: str) -> list[Any]:
    """The JSON payloads of the stream's events (``[DONE]`` and comments left out)."""
    payloads: list[Any] = []
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        data_lines = []
        for line in block.split("\n"):
            if line.startswith("data:"):
                value = line[5:]
                data_lines.append(value[1:] if value.startswith(" ") else value)
        if not data_lines:
            continue
        data = "\n".join(data_lines)
        if data.strip() == "[DONE]":
            continue
        payloads.append(json.loads(data))
    return payloads


def _usage(raw: Any) -> dict[str, int | None] | None:
    if not isinstance(raw, dict):
        return None
    prompt = raw.get("prompt_tokens")
    completion = raw.get("completion_tokens")
    total = raw.get("total_tokens")
    if total is None and isinstance(prompt, int) and isinstance(completion, int):
        total = prompt + completion
    return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": total}


class _Reading:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning_fields: list[str] = []
        self.details_text: list[str] = []
        self.refusal: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.by_index: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, int | None] | None = None
        self.error: str | None = None

    def content(self, value: Any) -> None:
        if isinstance(value, str):
            self.text.append(value)
        elif isinstance(value, list):
            for part in value:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    self.text.append(part["text"])
                elif part.get("type") == "thinking":
                    inner = part.get("thinking")
                    if isinstance(inner, str):
                        self.reasoning_fields.append(inner)
                    elif isinstance(inner, list):
                        for piece in inner:
                            if isinstance(piece, dict) and isinstance(piece.get("text"), str):
                                self.reasoning_fields.append(piece["text"])

    def message(self, delta: dict[str, Any]) -> None:
        self.content(delta.get("content"))
        # vLLM's releases in between send the same text under both names: one is taken
        for name in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(name), str) and delta[name]:
                self.reasoning_fields.append(delta[name])
                break
        for item in delta.get("reasoning_details") or ():
            if isinstance(item, dict):
                for key in ("text", "summary"):
                    if isinstance(item.get(key), str):
                        self.details_text.append(item[key])
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:  # "" is none (Snowflake)
            self.refusal.append(delta["refusal"])
        for piece in delta.get("tool_calls") or ():
            self.tool_piece(piece)

    def tool_piece(self, piece: dict[str, Any]) -> None:
        function = piece.get("function") or {}
        pid = piece.get("id") or None  # "" is no id
        name = function.get("name") or None
        args = function.get("arguments") or ""
        index = piece.get("index")
        call: dict[str, Any] | None
        if isinstance(index, int):
            call = self.by_index.get(index)
            if call is not None and pid and call["id"] and pid != call["id"]:
                call = None
        else:
            call = self.calls[-1] if self.calls else None
            if call is not None:
                # ids tell calls apart when both have one; without, a second name does
                same = pid == call["id"] if pid and call["id"] else not (name and call["name"])
                if not same:
                    call = None
        if call is None:
            call = {"id": None, "name": "", "arguments": ""}
            self.calls.append(call)
            if isinstance(index, int):
                self.by_index[index] = call
        if pid and not call["id"]:
            call["id"] = pid
        if name and not call["name"]:
            call["name"] = name
        if isinstance(args, str):
            call["arguments"] += args
        elif isinstance(args, dict):  # some servers send the object itself
            call["arguments"] += json.dumps(args)

    def chunk(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error") is not None:
            error = chunk["error"]
            self.error = str(error.get("message") if isinstance(error, dict) else error)
        usage = _usage(chunk.get("usage")) or _usage((chunk.get("x_groq") or {}).get("usage"))
        if usage is not None:
            self.usage = usage
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.message(choice.get("delta") or choice.get("message") or {})
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def result(self) -> dict[str, Any]:
        text = "".join(self.text)
        reasoning = "".join(self.reasoning_fields) or "".join(self.details_text)
        stripped = text.lstrip()
        for tag in ("think", "thought"):  # a server without a reasoning parser; Gemini's
            opening, closing = f"<{tag}>", f"</{tag}>"
            if not reasoning and stripped.startswith(opening) and closing in stripped:
                head, _, tail = stripped[len(opening) :].partition(closing)
                reasoning, text = head, tail.lstrip()
        calls = []
        for call in self.calls:
            raw = call["arguments"]
            calls.append(
                {
                    "id": call["id"],
                    "name": call["name"],
                    "arguments": json.loads(raw) if raw.strip() else {},
                }
            )
        return {
            "text": text,
            "reasoning": reasoning,
            "refusal": "".join(self.refusal) if self.refusal else None,
            "finish_reason": self.finish,
            "tool_calls": calls,
            "usage": self.usage,
            "error": self.error,
        }


def read(fixture: dict[str, Any]) -> dict[str, Any]:
    """What the fixture's body says, read independently (the shape of ``expect``)."""
    body = "".join(fixture["body"])
    reading = _Reading()
    if is_stream(fixture):
        for chunk in _events(body):
            reading.chunk(chunk)
    else:
        reading.chunk(json.loads(body))
    return reading.result()


def disagreements(fixture: dict[str, Any]) -> list[str]:
    """Where the independent reading and the hand-written ``expect`` differ."""
    got, want = read(fixture), fixture["expect"]
    return [
        f"{key}: expect says {want.get(key)!r}, the body says {got[key]!r}"
        for key in got
        if got[key] != want.get(key)
    ]


def main() -> int:
    bad = 0
    for path in fixture_paths():
        try:
            problems = disagreements(load(path))
        except Exception as exc:  # a fixture that cannot be read at all
            problems = [f"unreadable: {type(exc).__name__}: {exc}"]
        if problems:
            bad += 1
            print(f"{path.relative_to(FIXTURES)}:")
            for problem in problems:
                print(f"  {problem}")
    print(f"{len(fixture_paths())} fixtures, {bad} disagree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
