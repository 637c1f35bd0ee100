"""Replay a recorded run through today's code: the model's replies and the tools' results
are taken from the record, and every call the code makes now is checked against it.

:func:`replay` is the whole of it: ``await replay("run.jsonl", build)`` runs the product
that ``build(model, tools)`` makes with a :class:`ReplayModel` and replayed tools, and
raises :class:`ReplayMismatch` (a readable diff, turn by turn) where the code now does
something else. :class:`Replay` is the piece underneath, for a harness of one's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, TypedDict, TypeVar, overload

import anyio
import anyio.lowlevel
from typing_extensions import Unpack

from ..flow import FlowEvent
from ..kernel import RunResult, observe_runs
from ..models import ChatModel, ChatRequest
from ..tools import Tool, ToolRegistry
from ..tracing import EventTrace, redact_text
from ._recording import RecordedEnd, RecordedModelCall, RecordedToolCall, Recording
from ._replay_compare import (
    CompareRequests,
    calls_difference,
    end_difference,
    normal,
    request_difference,
    shown,
)
from ._replay_diff import ReplayError, ReplayMismatch, Transcript, render_diff
from ._replay_model import ReplayModel
from ._replay_store import StoredRun
from ._replay_tools import recorded_outcome, replay_tools

__all__ = ["CompareRequests", "Replay", "ReplaySettings", "replay"]

R = TypeVar("R")

RecordingSource = Recording | StoredRun | EventTrace | str | Path | IO[str]

DEFAULT_TIMEOUT = 60.0


class Replay:
    """One replay of a recorded run: the model and tools to build the run with, and the
    referee that checks what the run does against the record.

    ::

        referee = Replay("run.jsonl", tools=[get_weather])
        agent = create_agent(referee.model, referee.tools)
        result = await agent.run("Weather in Lisbon?", on_event=referee.observe)
        referee.check(result)  # ReplayMismatch if the code now does something else

    Inside :func:`replay` (which does the above) a divergence stops the run at once;
    alone, a model call that diverges raises :class:`ReplayMismatch` in the run and a tool
    call that diverges fails its record, and :meth:`check` raises the first divergence.

    Args:
        recording: a :class:`Recording` (of a durable run: ``await
            StoredRun(store, run_id).read()``), or a trace (a path, an open file, an
            :class:`~toolloop.tracing.EventTrace`).
        tools: the real tools (functions or :class:`~toolloop.tools.Tool`): their names,
            descriptions and schemas make the replayed tools, so arguments are checked as
            they were; a tool of the recording not given gets a stand-in that accepts any
            arguments.
        live_tools: names of tools that run for real (the call is still checked against
            the record; the result is the tool's own). They must be among ``tools``.
        reask_from: from this model call on (0 for the first), the model calls go to
            ``model``, and the run is no longer checked: the recorded replies before it set
            the scene, a real model answers after. A tool called after it gets its recorded
            result when the record has that call (same name and arguments), else runs for
            real (it must be among ``tools``).
        model: the real model for ``reask_from``.
        compare_requests: how much of each request is checked (:data:`CompareRequests`).
        chunk_size: characters per streamed piece of a replayed reply.

    Raises:
        ValueError: a live tool that is not among ``tools``; ``reask_from`` without
            ``model``.
        TraceError: the trace cannot be read.
    """

    def __init__(
        self,
        recording: RecordingSource,
        *,
        tools: Iterable[Tool | Callable[..., Any]] | ToolRegistry = (),
        live_tools: Collection[str] = (),
        reask_from: int | None = None,
        model: ChatModel | None = None,
        compare_requests: CompareRequests = "shape",
        chunk_size: int = 16,
    ) -> None:
        self.recording = _recording_of(recording)
        real = tools if isinstance(tools, ToolRegistry) else ToolRegistry(list(tools))
        self.real_tools = real
        unknown = sorted(set(live_tools) - set(real.names))
        if unknown:
            raise ValueError(
                f"live_tools {unknown}: no such tool among tools= ({', '.join(real.names) or '-'});"
                " a tool runs live only when its real tool is given"
            )
        if reask_from is not None:
            if reask_from < 0:
                raise ValueError(f"reask_from must be >= 0, got {reask_from}")
            if model is None:
                raise ValueError("reask_from needs model=: the real model that is asked again")
        if compare_requests not in ("off", "shape", "exact"):
            raise ValueError(
                f"compare_requests must be 'off', 'shape' or 'exact', got {compare_requests!r}"
            )
        self.live_tools = frozenset(live_tools)
        self.reask_from = reask_from
        self.compare_requests: CompareRequests = compare_requests
        self._live_model = model
        self.model = ReplayModel(self, chunk_size=chunk_size)
        """The model to build the run with."""
        self.tools = ToolRegistry(replay_tools(self, real, self.recording))
        """The tools to build the run with (one for every tool given and every tool the
        recording called)."""
        self.mismatch: ReplayError | None = None
        """The first divergence (or what made the replay impossible), once there is one."""
        self.events: list[FlowEvent] = []
        """The events of the replayed run (through :meth:`observe`)."""
        self._run: str | None = None
        self._opened = 0
        self._requests: dict[int, dict[str, Any]] = {}
        self._used: set[int] = set()
        self._made: list[RecordedToolCall] = []
        self._scope: anyio.CancelScope | None = None
        self._asked = -1
        self._answered = -1

    # -- what the run tells ----------------------------------------------------------------

    def observe(self, event: FlowEvent) -> None:
        """Take the replayed run's events (pass as ``on_event``): the order of its tool
        calls, the calls it refused and its end are checked with them. The first run seen
        is the one replayed (runs its tools start are left out)."""
        if self._run is None:
            self._run = event.execution_id
        elif event.execution_id != self._run:
            return
        self.events.append(event)

    # -- the referee ----------------------------------------------------------------------

    def _reasked(self, turn: int) -> bool:
        return self.reask_from is not None and turn >= self.reask_from

    def model_call(self, request: ChatRequest) -> RecordedModelCall | ChatModel:
        """The recorded reply to the run's next model call (or the live model, re-asked).

        Raises:
            ReplayMismatch: the call was not recorded, a recorded tool call was not made
                before it, or the request differs (see ``compare_requests``).
        """
        self._raise_if_stopped()
        position = self._opened
        self._opened += 1
        summary = request.summary()
        self._asked = position
        self._requests[position] = summary
        if self._reasked(position):
            assert self._live_model is not None
            self._answered = position
            return self._live_model
        recorded = self.recording.model_calls
        if self.events:  # the calls of the turns before, as the run told them
            now = Recording.from_events(self.events)
            for turn in sorted({c.turn for c in (*self.recording.tool_calls, *now.tool_calls)}):
                if turn >= position or self._reasked(turn):
                    continue
                told = calls_difference(self.recording.turn(turn), now.turn(turn), turn)
                if told is not None:
                    self._stop(turn, told)
        missing = self._missing(before=position)
        if missing is not None:
            self._stop(
                missing.turn,
                f"turn {missing.turn}: the recorded call {missing.said()} was not made (the "
                f"run asked the model again, model call #{position}, before it)",
            )
        if position >= len(recorded):
            self._stop(
                position,
                f"model call #{position} was not recorded: the recorded run made "
                f"{len(recorded)} model call{'s' * (len(recorded) != 1)}",
            )
        call = recorded[position]
        if self.compare_requests != "off" and call.request is not None:
            differs = request_difference(call.request, summary, self.compare_requests)
            if differs:
                self._stop(
                    position,
                    f"model call #{position} asks something else: {differs}",
                    request_turn=position,
                )
        self._answered = position
        return call

    def read_past(self, call: RecordedModelCall) -> BaseException:
        """The divergence of a run that reads past a reply recorded as closed early."""
        try:
            self._stop(
                call.position,
                f"model call #{call.position}: the recorded run stopped reading the reply "
                f"after {len(call.text)} characters (the short-circuit); now the code reads "
                "past them",
            )
        except ReplayMismatch as exc:
            return exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def tool_call(self, name: str, arguments: Mapping[str, Any], purpose: str | None) -> Any:
        """The outcome of a call of tool ``name`` the run makes now: the recorded one (or,
        for a live tool, its own).

        Raises:
            ReplayMismatch: the record has no such call at this point.
        """
        try:
            return await self._tool_call(name, arguments, purpose)
        except ReplayError:
            await anyio.lowlevel.checkpoint()  # inside replay(): the run is being stopped
            raise

    async def _tool_call(self, name: str, arguments: Mapping[str, Any], purpose: str | None) -> Any:
        self._raise_if_stopped()
        turn = self._opened - 1
        said = normal(arguments)
        if self._reasked(turn):
            found = self._find(name, said, turn=None)
            self._note(turn, name, said, found)
            if found is not None and name not in self.live_tools:
                return await self._serve(found)
            if name in self.real_tools.names:
                return await self._run_live(name, arguments, purpose)
            self._stop(
                turn,
                f"turn {turn} (re-asked): {name} {shown(said)} is not in the recording, and "
                "its real tool was not given to run it (tools=)",
            )
        found = self._find(name, said, turn=turn)
        self._note(turn, name, said, found)
        if found is None:
            waiting = [
                call.said()
                for i, call in enumerate(self.recording.tool_calls)
                if call.turn == turn and call.ran and i not in self._used
            ]
            has = f"; it has {', '.join(waiting)} to come" if waiting else "; it has no more"
            where = "before the first model call" if turn < 0 else f"turn {turn}"
            self._stop(
                turn,
                f"{where}: {name} {shown(said)} was called, which the recording does not have "
                f"at this point{has}",
            )
        assert found is not None
        if name in self.live_tools:
            return await self._run_live(name, arguments, purpose)
        return await self._serve(found)

    def _find(self, name: str, said: Any, *, turn: int | None) -> RecordedToolCall | None:
        for i, call in enumerate(self.recording.tool_calls):
            if i in self._used or not call.ran or call.tool_name != name:
                continue
            if turn is not None and call.turn != turn:
                continue
            if normal(call.arguments) == said:
                self._used.add(i)
                return call
        return None

    def _note(self, turn: int, name: str, said: Any, found: RecordedToolCall | None) -> None:
        self._made.append(
            RecordedToolCall(
                turn=turn,
                round_index=found.round_index if found is not None else -1,
                index=found.index if found is not None else len(self._made),
                call_id="",
                tool_name=name,
                arguments=said,
                ran=True,
                success=True,
            )
        )

    async def _serve(self, call: RecordedToolCall) -> Any:
        if call.cut:
            self._stop(
                call.turn,
                f"the trace cut the result of {call.said()} (a long string): it cannot be given "
                "back whole; record with max_value_chars=None, or run the tool live",
                error=ReplayError,
            )
        return await recorded_outcome(call)

    async def _run_live(self, name: str, arguments: Mapping[str, Any], purpose: str | None) -> Any:
        tool = self.real_tools.get(name)
        checked = tool.validate(dict(arguments))
        if tool.context_parameter is not None:
            checked = tool.with_context(checked, purpose or "")
        return await tool.execute(checked)

    def _missing(self, before: int) -> RecordedToolCall | None:
        """The first recorded call (that ran) of a turn before ``before`` not made yet."""
        for i, call in enumerate(self.recording.tool_calls):
            if i in self._used or not call.ran or call.turn >= before:
                continue
            if not self._reasked(call.turn):
                return call
        return None

    def _raise_if_stopped(self) -> None:
        if self.mismatch is not None:
            raise self.mismatch

    def _stop(
        self,
        turn: int | None,
        reason: str,
        *,
        request_turn: int | None = None,
        error: type[ReplayError] = ReplayMismatch,
        upto: int | None = None,
        ended: bool = False,
    ) -> None:
        """Note the first divergence, stop the run (inside :func:`replay`) and raise it."""
        if self.mismatch is None:
            diff = render_diff(
                Transcript.of(self.recording),
                self._now(ended),
                upto=None if ended else (turn if upto is None else upto),
                request_turn=request_turn,
            )
            if error is ReplayMismatch:
                self.mismatch = ReplayMismatch(
                    reason, diff, turn=turn, source=self.recording.source
                )
            else:
                self.mismatch = error(f"{self.recording.source} cannot be replayed: {reason}")
            if self._scope is not None:
                self._scope.cancel()
        raise self.mismatch

    def _now(self, ended: bool) -> Transcript:
        """What the run did so far, as a transcript."""
        recorded = self.recording.model_calls
        models = []
        for position in range(self._opened):
            summary = self._requests.get(position)
            if position == self._asked and position != self._answered:
                models.append(
                    RecordedModelCall(
                        position=position,
                        call_index=position,
                        error="not answered: the replay stopped the run here",
                        request=summary,
                    )
                )
            elif position < len(recorded) and not self._reasked(position):
                models.append(replace(recorded[position], request=summary))
            else:
                told = self._told_model(position)
                models.append(
                    replace(told, request=summary)
                    if told is not None
                    else RecordedModelCall(position=position, call_index=position, request=summary)
                )
        if self.events:
            now = Recording.from_events(self.events)
            calls: list[RecordedToolCall] = list(now.tool_calls)
            end = now.end if ended else None
        else:
            calls = list(self._made)
            end = None
        return Transcript(models, calls, end)

    def _told_model(self, position: int) -> RecordedModelCall | None:
        if not self.events:
            return None
        told = Recording.from_events(self.events).model_calls
        return told[position] if position < len(told) else None

    # -- the end --------------------------------------------------------------------------

    def check(self, result: Any = None) -> None:
        """Check the replayed run as a whole, once it returned: every recorded call made
        (in its place, in its order, when :meth:`observe` saw the run), every recorded
        model call made, the same end (told by the run's events, else by ``result``).

        Raises:
            ReplayMismatch: the first difference (or the divergence that stopped the run).
        """
        self._raise_if_stopped()
        recorded = self.recording
        now = Recording.from_events(self.events) if self.events else None
        turns = sorted(
            {c.turn for c in recorded.tool_calls}
            | ({c.turn for c in now.tool_calls} if now is not None else set())
            | set(range(-1, max(recorded.turns, self._opened)))
        )
        for turn in turns:
            if self._reasked(turn):
                break
            if now is not None:
                reason = calls_difference(recorded.turn(turn), now.turn(turn), turn)
                if reason is not None:
                    self._stop(turn, reason, upto=turn, ended=True)
            missing = self._missing(before=turn + 1)
            if missing is not None:
                self._stop(
                    missing.turn, f"the recorded call {missing.said()} was not made", ended=True
                )
            following = turn + 1
            if (
                following < recorded.turns
                and following >= self._opened
                and not self._reasked(following)
            ):
                self._stop(
                    following,
                    f"model call #{following} was not made: the run made {self._opened} model "
                    f"call{'s' * (self._opened != 1)}, the recording has {recorded.turns}",
                    ended=True,
                )
        if self.reask_from is not None:
            return
        if now is None:  # no events: the run's result says how it ended
            now = Recording(end=_end_of(result))
        said = end_difference(recorded, now)
        if said is not None:
            self._stop(None, said, ended=True)

    def bind(self, scope: anyio.CancelScope | None) -> None:
        """Stop the run by cancelling ``scope`` at the first divergence (what
        :func:`replay` does)."""
        self._scope = scope


class ReplaySettings(TypedDict, total=False):
    """The keyword options :func:`replay` hands to :class:`Replay` (see there)."""

    tools: Iterable[Tool | Callable[..., Any]] | ToolRegistry
    live_tools: Collection[str]
    reask_from: int | None
    model: ChatModel | None
    compare_requests: CompareRequests
    chunk_size: int


@overload
async def replay(
    recording: RecordingSource,
    run: Callable[[ChatModel, ToolRegistry], Awaitable[R]],
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    **options: Unpack[ReplaySettings],
) -> R: ...


@overload
async def replay(
    recording: RecordingSource,
    run: None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    **options: Unpack[ReplaySettings],
) -> RunResult: ...


async def replay(
    recording: RecordingSource,
    run: Callable[[ChatModel, ToolRegistry], Awaitable[R]] | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    **options: Unpack[ReplaySettings],
) -> Any:
    """Run a recorded run again through today's code, its model's replies and its tools'
    results taken from the record, and check that the code does what it did.

    ::

        async def build(model, tools):
            return await create_agent(model, tools).run("Weather in Lisbon?")

        result = await replay("tests/fixtures/weather.jsonl", build, tools=[get_weather])

    ``run(model, tools)`` makes and runs the product, as the recorded run was made, with
    the :class:`ReplayModel` and the replayed tools it is given (any product, any
    options). A trace written by ``toolloop run --trace`` names its product: without
    ``run``, the product is made again from it (the CLI's :func:`toolloop.cli.rerun`).

    Where the code now does something else (a call the record does not have, other
    arguments, another order, a missing call, another request to the model, another
    end), the run is stopped and :class:`ReplayMismatch` raised, with a diff of what was
    recorded and what happened, turn by turn. A run that raises raises as it is (when the
    recorded run failed too, that is what it did).

    Args:
        recording: the recorded run: a trace (a path, an open file, an
            :class:`~toolloop.tracing.EventTrace`), a durable run in its store
            (:class:`StoredRun`), or a :class:`Recording`.
        run: makes and runs the product with the replay's model and tools.
        timeout: seconds the replay may take (a hang guard); ``None``: no limit.

    Keyword Args:
        tools (Iterable[Tool | Callable] | ToolRegistry): the real tools (see
            :class:`Replay`).
        live_tools (Collection[str]): tools that run for real (see :class:`Replay`).
        reask_from (int | None): the model call from which ``model`` is asked (see
            :class:`Replay`).
        model (ChatModel | None): the real model for ``reask_from``.
        compare_requests (CompareRequests): how much of each request is checked
            (:data:`CompareRequests`).
        chunk_size (int): characters per streamed piece of a replayed reply.

    Returns:
        What ``run`` returned (the product's result).

    Raises:
        ReplayMismatch: the code now does something else.
        ReplayError: the recording cannot be replayed (the replay did not end in time, a
            result the trace cut, no ``run`` for a trace that names no product, a stored
            run that kept nothing to replay).
    """
    if isinstance(recording, StoredRun):
        recording = await recording.read()
    referee = Replay(recording, **options)
    if run is None:
        run = _product_of(referee.recording)
    deadline = anyio.current_time() + timeout if timeout is not None else float("inf")
    result: Any = None
    with anyio.CancelScope(deadline=deadline) as scope:
        referee.bind(scope)
        with observe_runs(referee.observe):
            try:
                result = await run(referee.model, referee.tools)
            except Exception as exc:
                if referee.mismatch is not None:
                    raise referee.mismatch from exc
                _ran_differently(referee, exc)
                raise  # it failed as the recorded run did
    referee.bind(None)
    if referee.mismatch is not None:
        raise referee.mismatch
    if scope.cancelled_caught:
        raise ReplayError(
            f"the replay of {referee.recording.source} did not end within {timeout} s (a "
            "recorded call that was cut off by a cancellation that does not come again?)"
        )
    referee.check(result)
    return result


def _ran_differently(referee: Replay, exc: Exception) -> None:
    """The run raised: a divergence (with what it raised) unless the recorded run failed
    with the same error, after the same calls."""
    try:
        referee.check()
    except ReplayMismatch as found:
        raise found from exc
    end = referee.recording.end
    if end.status == "failed" and end.error == redact_text(str(exc)):
        return
    try:
        referee._stop(
            None,
            f"the run raised {type(exc).__name__}: {exc}; the recorded run "
            f"{end.said().removeprefix('end: ')}",
            ended=True,
        )
    except ReplayMismatch as found:
        raise found from exc


def _end_of(result: Any) -> RecordedEnd:
    """How a run ended, from its result (a :class:`~toolloop.kernel.RunResult`)."""
    if getattr(result, "paused", False):
        return RecordedEnd("paused")
    stop, records = getattr(result, "stop_reason", None), getattr(result, "records", None)
    if isinstance(stop, str) and isinstance(records, list):
        return RecordedEnd("completed", stop, len(records))
    return RecordedEnd("unfinished")


def _product_of(recording: Recording) -> Callable[[ChatModel, ToolRegistry], Awaitable[Any]]:
    if not recording.meta.get("agent"):
        raise ReplayError(
            f"{recording.source} does not say which product ran (it was not written by "
            "`toolloop run --trace`): pass run=, a function that makes and runs the product "
            "with the model and tools it is given"
        )
    from ..cli import rerun

    return rerun(recording.meta)


# -- helpers ------------------------------------------------------------------------------


def _recording_of(source: RecordingSource) -> Recording:
    if isinstance(source, Recording):
        return source
    if isinstance(source, StoredRun):
        raise TypeError(
            f"{source.source} is read from its store with await: pass `await stored.read()` "
            "(a Recording) to Replay; replay() reads it itself"
        )
    return Recording.from_trace(source)
