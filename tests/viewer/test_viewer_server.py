"""The viewer's server and sink over real HTTP, without a browser: the page and its assets,
the events as Server-Sent Events (history, then live; resumed by Last-Event-ID), events
sent from another process, secrets scrubbed, 127.0.0.1 only, trace files replayed."""

from __future__ import annotations

import http.client
import io
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolloop.cli import main
from toolloop.testing import ScriptedPlanner
from toolloop.viewer import ViewerError, ViewerServer, ViewerSink, replay_trace


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"] or "", answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"] or "", exc.read()


def _events(url: str, count: int, last_id: int | None = None) -> Iterator[tuple[int, Any]]:
    """The first ``count`` events of the stream, with their ids (a hang guard of 10 s)."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    request = urllib.request.Request(url + "events", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        event_id = None
        seen = 0
        while seen < count:
            line = stream.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                assert event_id is not None
                yield event_id, json.loads(line[6:])
                seen += 1


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "execution_id": "run-1", "at": 0.0, **fields}


def test_the_page_and_its_assets_are_served_from_the_package() -> None:
    with ViewerServer() as server:
        assert server.url == f"http://127.0.0.1:{server.port}/"
        status, kind, page = _get(server.url)
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert b'<script src="viewer.js">' in page
        assert b"http" not in page.replace(b"http-equiv", b"")  # nothing from elsewhere
        for path, content_type in (
            ("viewer.js", "text/javascript"),
            ("viewer.css", "text/css"),
        ):
            status, kind, body = _get(server.url + path)
            assert status == 200
            assert kind.startswith(content_type)
            assert b"//cdn" not in body and b"https://" not in body
        assert _get(server.url + "favicon.ico")[0] == 204
        assert _get(server.url + "nothing-here")[0] == 404


def test_a_page_of_another_site_is_refused() -> None:
    # a page that makes its own name resolve to 127.0.0.1 still sends its Host
    with ViewerServer() as server:
        assert _get(server.url, {"Host": "evil.example:80"})[0] == 403
        assert _get(server.url + "events", {"Host": "evil.example"})[0] == 403
        assert _get(server.url, {"Host": f"localhost:{server.port}"})[0] == 200
        # nor may a page of another site post events to it (a browser says where it is)
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        body = json.dumps(_event("round_started", round_index=0))
        connection.request("POST", "/events", body, {"Origin": "https://evil.example"})
        assert connection.getresponse().status == 403
        connection.close()
        assert server.statistics()["events"] == 0


def test_the_stream_gives_the_history_then_what_comes_and_resumes_by_id() -> None:
    with ViewerServer() as server:
        for index in range(3):
            server.publish(_event("round_started", round_index=index))
        got = list(_events(server.url, 3))
        assert [(i, e["round_index"]) for i, e in got] == [(0, 0), (1, 1), (2, 2)]
        assert [e["round_index"] for _, e in _events(server.url, 1, last_id=1)] == [2]

        later: list[tuple[int, Any]] = []
        reader = threading.Thread(target=lambda: later.extend(_events(server.url, 4)))
        reader.start()
        assert server.wait_for_pages(1, timeout=10)
        server.publish(_event("run_finished", turns=3, stop_reason="answered",
                              rounds=3, records=0))  # fmt: skip
        reader.join(10)
        assert [e["kind"] for _, e in later][-1] == "run_finished"
        assert server.statistics()["events"] == 4


def test_closing_the_server_ends_the_streams() -> None:
    server = ViewerServer()
    request = urllib.request.Request(server.url + "events")
    with urllib.request.urlopen(request, timeout=10) as stream:
        assert server.wait_for_pages(1, timeout=10)
        server.close()
        rest = stream.read().decode()  # returns: the server ended the stream
    assert "event: closed" in rest
    server.close()  # twice is fine


def test_the_oldest_events_are_let_go_past_the_limit() -> None:
    with ViewerServer(max_events=10) as server:
        for index in range(16):
            server.publish(_event("round_started", round_index=index))
        first_id, first = next(_events(server.url, 1))
        assert (first_id, first["round_index"]) == (6, 6)  # the last 10 are kept
        assert server.statistics()["events"] == 16


def test_only_loopback_and_a_free_port() -> None:
    with pytest.raises(ViewerError, match=r"127\.0\.0\.1"):
        ViewerServer(host="0.0.0.0")
    with ViewerServer() as taken, pytest.raises(ViewerError, match="choose another port"):
        ViewerServer(port=taken.port)


@pytest.mark.anyio
async def test_a_sink_serves_a_run_with_secrets_scrubbed() -> None:
    from toolloop import async_plan_and_execute

    def login(user: str, api_key: str) -> str:
        """Log in.

        Args:
            user: who.
            api_key: the key.
        """
        return f"welcome {user}"

    secret = "sk-live-0123456789abcdefghijklmnop"
    planner = ScriptedPlanner(
        [
            {
                "next_action": "execute",
                "execution_commands": [
                    {"tool_name": "login", "tool_kwargs": {"user": "ana", "api_key": secret}}
                ],
            }
        ]
    )
    with ViewerSink(meta={"request": "log in", "token": "abc"}) as sink:
        await async_plan_and_execute("log in", tools=[login], planner=planner, on_event=sink)
        assert sink.server is not None
        total = sink.server.statistics()["events"]
        events = [e for _, e in _events(sink.url, total)]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_meta"
    assert events[0]["meta"]["request"] == "log in"
    assert events[0]["meta"]["token"] != "abc"  # scrubbed
    assert {"round_started", "tool_call_started", "tool_call_finished", "run_finished"} <= set(
        kinds
    )
    assert secret not in json.dumps(events)
    finished = next(e for e in events if e["kind"] == "tool_call_finished")
    assert finished["record"]["result"] == "welcome ana"


def test_a_sink_sends_to_a_running_viewer() -> None:
    from toolloop.flow import FlowEvent

    with ViewerServer() as server:
        with ViewerSink(server.url, meta={"request": "elsewhere"}) as sink:
            assert sink.server is None
            for index in range(3):
                sink(FlowEvent(kind="round_started", execution_id="app-run", at=index / 10))
        # closing the sink sent what was pending
        events = [e for _, e in _events(server.url, 4)]
    assert [e["kind"] for e in events] == ["run_meta"] + ["round_started"] * 3
    assert events[-1]["at"] == 0.2


def test_a_sink_whose_viewer_is_gone_never_fails_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from toolloop.flow import FlowEvent

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="toolloop"):
        with ViewerSink(f"http://127.0.0.1:{port}") as sink:
            for _ in range(3):
                sink(FlowEvent(kind="round_started", execution_id="r", at=0.0))
    warnings = [r for r in caplog.records if "did not take the run's events" in r.message]
    assert len(warnings) == 1
    with pytest.raises(ViewerError, match="on this machine"):
        ViewerSink("http://192.0.2.1:8765/")


def test_events_posted_must_be_json_objects_with_a_kind() -> None:
    with ViewerServer() as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("POST", "/events", body=b'{"kind": "x"}\n[1, 2]\n')
        answer = connection.getresponse()
        assert (answer.status, answer.read()) == (400, b"line 2 is not a JSON object with a 'kind'")
        connection.close()
        assert server.statistics()["events"] == 0  # all or nothing


def test_a_trace_file_is_replayed_with_notes_for_lines_that_are_not_events(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text(
        '{"toolloop_trace": 1, "meta": {"request": "hi"}}\n'
        + json.dumps(_event("round_started", round_index=0))
        + "\nnot json\n"
        + json.dumps(
            _event("run_finished", round_index=0, stop_reason="answered", rounds=0, records=0)
        )
    )  # the last line has no line end: it is read all the same
    with ViewerServer() as server:
        assert replay_trace(server, trace) == 4
        events = [e for _, e in _events(server.url, 4)]
    assert [e["kind"] for e in events] == [
        "trace_header",
        "round_started",
        "viewer_note",
        "run_finished",
    ]
    assert events[0]["meta"] == {"request": "hi"}
    assert events[2]["text"] == "run.jsonl line 3 is not JSON (Expecting value)"


def test_following_a_trace_reads_what_is_appended(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text(json.dumps(_event("round_started", round_index=0)) + "\n")
    stop = threading.Event()
    with ViewerServer() as server:
        follower = threading.Thread(
            target=replay_trace, args=(server, trace), kwargs={"follow": True, "stop": stop}
        )
        follower.start()
        try:
            with trace.open("a") as file:
                file.write(json.dumps(_event("round_started", round_index=1)))
                file.flush()  # half a line: not read until its line end comes
                file.write("\n")
            events = [e["round_index"] for _, e in _events(server.url, 2)]
        finally:
            stop.set()
            follower.join(10)
    assert events == [0, 1]
    assert not follower.is_alive()


def test_the_view_command_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    err = io.StringIO()
    assert main(["view", "--follow"], stdout=io.StringIO(), stderr=err) == 2
    assert err.getvalue() == "toolloop: view: --follow needs a trace file to follow\n"
    with ViewerServer() as taken:
        err = io.StringIO()
        code = main(["view", "--port", str(taken.port)], stdout=io.StringIO(), stderr=err)
        assert code == 1
        assert err.getvalue().startswith(
            f"toolloop: view: the viewer cannot listen on 127.0.0.1 port {taken.port}"
        )
    err = io.StringIO()
    assert main(["view", str(tmp_path / "none.jsonl")], stdout=io.StringIO(), stderr=err) == 1
    assert "view: cannot read" in err.getvalue()


def test_the_demo_shows_itself_in_a_running_viewer() -> None:
    with ViewerServer() as server:
        out, err = io.StringIO(), io.StringIO()
        assert main(["demo", "--plain", "--view", str(server.port)], stdout=out, stderr=err) == 0
        assert err.getvalue() == ""
        assert f"viewer: {server.url}" in out.getvalue()
        total = server.statistics()["events"]  # all sent before the demo returned
        kinds = [e["kind"] for _, e in _events(server.url, total)]
    assert kinds[0] == "run_meta"
    assert kinds.count("tool_call_finished") == 9
    assert kinds[-1] == "execution_finished"


def test_view_without_a_viewer_is_one_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    err = io.StringIO()
    assert main(["demo", "--view", str(port)], stdout=io.StringIO(), stderr=err) == 2
    assert err.getvalue() == (
        f"toolloop: --view {port}: no toolloop viewer answers at http://127.0.0.1:{port}/; "
        f"start one first with `toolloop view --port {port}`\n"
    )
