"""The SSE decoder: events from bytes, however the bytes are cut."""

from __future__ import annotations

import pytest

from toolloop.models import _sse
from toolloop.models._sse import SSEDecoder


def test_a_long_event_in_many_pieces_is_read_whole() -> None:
    data = "x" * (4 * 1024 * 1024)
    body = f"data: {data}\n\n".encode()
    decoder = SSEDecoder()
    events = [e for i in range(0, len(body), 4096) for e in decoder.feed(body[i : i + 4096])]
    assert [e.data for e in events] == [data]


def test_crlf_comments_events_and_a_split_character() -> None:
    body = ': keep-alive\r\nevent: error\r\ndata: {"a":\r\ndata: "é"}\r\n\r\ndata: [DONE]\n\n'
    raw = body.encode()
    cut = raw.index("é".encode()) + 1  # inside the two bytes of é
    decoder = SSEDecoder()
    events = decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) + decoder.close()
    assert [(e.event, e.data) for e in events] == [("error", '{"a":\n"é"}'), (None, "[DONE]")]


def test_an_event_past_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sse, "MAX_EVENT_CHARS", 1000)
    decoder = SSEDecoder()
    for _ in range(9):
        decoder.feed(b"y" * 100)
    with pytest.raises(ValueError, match="an event of over 1,000 characters"):
        decoder.feed(b"y" * 200)
