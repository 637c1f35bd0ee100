"""EXECUTE: run the tool commands of one round concurrently, one record per command.

Every command submitted to a round ends in exactly one :class:`ToolExecutionRecord`,
whatever happens to it: an unknown tool, arguments that fail the schema (the tool does not
run), an exception, a timeout, or the cancellation of the whole round. Records come back in
submission order, however the calls interleave.

A round is one task group. Commands may arrive while earlier ones already run (the planner
hands each one over as soon as its JSON object closes in the stream)::

    async with executor.round() as rnd:
        async for command in planner_stream:
            rnd.submit(command)
    rnd.records  # complete, in submission order

:meth:`Executor.run` is that with a list. At most ``concurrency`` calls of a round run at
once; the round starts no more worker tasks than that, and each worker takes the next
waiting command when its call ends (FIFO), so the limit is exact and costs nothing per call.
An optional shared :class:`anyio.CapacityLimiter` bounds calls across rounds and runs too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import perf_counter
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from .._errors import ToolCallError, ToolTimeoutError
from ..tools import Tool, ToolRegistry
from ._records import ToolCommand, ToolExecutionRecord

__all__ = [
    "ExecutionRound",
    "Executor",
    "OnFinish",
    "OnStart",
    "cancelled_error",
    "tool_error_text",
]

OnStart = Callable[[int, ToolCommand], object]
"""``on_start(index, command)``: a call starts (limits acquired); ``index`` in the round."""
OnFinish = Callable[[int, ToolExecutionRecord, float], object]
"""``on_finish(index, record, duration_s)``: a command has its record."""

_MAX_ERROR_CHARS = 2000


def tool_error_text(tool_name: str, exc: BaseException) -> str:
    """How a failed record says that a tool raised: the type and (bounded) message."""
    text = str(exc)
    if len(text) > _MAX_ERROR_CHARS:
        text = f"{text[:_MAX_ERROR_CHARS]}… ({len(text)} chars)"
    said = f"tool {tool_name!r} raised {type(exc).__name__}"
    return f"{said}: {text}" if text else said


def cancelled_error(tool_name: str) -> str:
    """The error of a record whose call the surrounding cancellation cut short."""
    return f"tool {tool_name!r} was cancelled before it finished"


class Executor:
    """Runs tool commands concurrently under exact limits; one record per command.

    Args:
        tools: a :class:`ToolRegistry`, or tools and typed functions to make one of.
        concurrency: at most this many calls of one round run at once (``>= 1``).
        limiter: optional limiter shared with other rounds, executors and runs; a call holds
            one of its tokens while it runs. Both limits hold at once.
        tool_timeout: default seconds per call; a tool's own smaller timeout wins.
        on_start: called (synchronously) as each call starts.
        on_finish: called (synchronously) as each command gets its record, cancelled ones
            included. A callback that raises aborts the round.

    An executor holds only configuration: one can serve many rounds and runs, concurrently.
    """

    __slots__ = ("concurrency", "limiter", "on_finish", "on_start", "registry", "tool_timeout")

    def __init__(
        self,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]],
        *,
        concurrency: int = 8,
        limiter: anyio.CapacityLimiter | None = None,
        tool_timeout: float | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if tool_timeout is not None and not tool_timeout > 0:
            raise ValueError(f"tool_timeout must be > 0 seconds or None, got {tool_timeout!r}")
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.concurrency = concurrency
        self.limiter = limiter
        self.tool_timeout = tool_timeout
        self.on_start = on_start
        self.on_finish = on_finish

    def round(
        self,
        *,
        records: list[ToolExecutionRecord] | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
    ) -> ExecutionRound:
        """A round to submit commands to, as they arrive: ``async with executor.round()``.

        Args:
            records: a list to which the round's records are appended, in submission order,
                when the round ends, also when it is cancelled or fails.
            on_start: replaces the executor's ``on_start`` for this round.
            on_finish: replaces the executor's ``on_finish`` for this round.
        """
        return ExecutionRound(
            self,
            records,
            self.on_start if on_start is None else on_start,
            self.on_finish if on_finish is None else on_finish,
        )

    async def run(
        self,
        commands: Iterable[ToolCommand],
        *,
        records: list[ToolExecutionRecord] | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
    ) -> list[ToolExecutionRecord]:
        """Run ``commands`` concurrently; their records, in command order.

        ``records`` (if given) receives the records even when the run is cancelled, before
        the cancellation propagates. The last command runs in the calling task when a
        concurrency slot is free (one task spawn less per round): a tool that sets a
        context variable without resetting it leaves it set in the caller's context.
        """
        commands = list(commands)
        async with self.round(records=records, on_start=on_start, on_finish=on_finish) as rnd:
            for command in commands[:-1]:
                rnd.submit(command)
            if commands:  # the last one runs in this task if a slot is free: one spawn less
                await rnd._submit_here(commands[-1])
        return rnd.records

    async def call(
        self, command: ToolCommand, *, on_start: Callable[[], object] | None = None
    ) -> ToolExecutionRecord:
        """Run one command and return its record; only cancellation propagates.

        The command is checked first (unknown tool, arguments that fail the schema: a failed
        record at once, without waiting for the shared limiter); then the tool runs under
        the shared limiter and the timeout. ``on_start`` is called when the command starts
        (after the check passes or fails, before any wait for the limiter).
        """
        name = command.tool_name
        if on_start is not None:
            on_start()
        try:
            tool = self.registry.get(name)
            arguments = tool.validate(command.tool_kwargs)
        except ToolCallError as exc:  # unknown tool, bad arguments: the tool did not run
            return ToolExecutionRecord.failed(command, str(exc))
        except Exception as exc:  # a validator that broke: still a record, never a crash
            return ToolExecutionRecord.failed(command, tool_error_text(name, exc))
        try:
            result = await self.execute(tool, arguments)
        except ToolTimeoutError as exc:
            return ToolExecutionRecord.failed(command, str(exc))
        except Exception as exc:
            return ToolExecutionRecord.failed(command, tool_error_text(name, exc))
        return ToolExecutionRecord.succeeded(command, result)

    async def execute(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        """Run an already checked call (``arguments`` from ``tool.validate``) under the
        shared limiter and the timeout, and return what the tool returned.

        Unlike :meth:`call`, this raises: the tool's own exception, unchanged, or
        :class:`~toolloop.errors.ToolTimeoutError`. For callers that decide per exception what to do
        (the agent's ``wrap_tool_call`` middleware retries chosen exceptions).
        """
        limiter = self.limiter
        if limiter is None:
            return await tool.execute(arguments, timeout=self.tool_timeout)
        # its own borrower per call: the task may already hold a token (nested runs)
        borrower = object()
        await limiter.acquire_on_behalf_of(borrower)
        try:
            return await tool.execute(arguments, timeout=self.tool_timeout)
        finally:
            limiter.release_on_behalf_of(borrower)


class ExecutionRound:
    """One round of tool calls: a task group, open while commands are submitted.

    Use as ``async with executor.round() as rnd``; :meth:`submit` commands inside the
    block; when the block exits every call has ended and :attr:`records` holds one record
    per command in submission order. If the block is cancelled or raises, running calls
    are cancelled, the commands without a record get a failed one ("was cancelled before
    it finished"), and then the cancellation or error propagates.
    """

    __slots__ = (
        "_commands",
        "_executor",
        "_limit",
        "_next",
        "_on_finish",
        "_on_start",
        "_queue",
        "_records",
        "_sink",
        "_started",
        "_state",
        "_task_group",
        "_workers",
    )

    def __init__(
        self,
        executor: Executor,
        sink: list[ToolExecutionRecord] | None,
        on_start: OnStart | None,
        on_finish: OnFinish | None,
    ) -> None:
        self._executor = executor
        self._sink = sink
        self._on_start = on_start
        self._on_finish = on_finish
        self._limit = executor.concurrency
        self._commands: list[ToolCommand] = []
        self._records: list[ToolExecutionRecord | None] = []
        self._started: list[float | None] = []
        self._queue: list[int] = []  # waiting commands; _next is the first not yet taken
        self._next = 0
        self._workers = 0
        self._state = 0  # 0 new, 1 open, 2 closed
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def commands(self) -> list[ToolCommand]:
        """The commands submitted so far, in order."""
        return list(self._commands)

    @property
    def records(self) -> list[ToolExecutionRecord]:
        """One record per submitted command, in submission order, once the round ended.

        Raises:
            RuntimeError: the round has not ended yet.
        """
        if self._state != 2:
            raise RuntimeError("the round's records are complete only after its block exits")
        return self._records  # type: ignore[return-value]  # no None once closed

    async def __aenter__(self) -> ExecutionRound:
        if self._state != 0:
            raise RuntimeError("a round is used once: open a new one with executor.round()")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._task_group is not None
        try:
            return bool(await self._task_group.__aexit__(exc_type, exc, tb))
        except BaseException as error:
            # The workers never raise, so a group holding only the block's own exception
            # is noise: let that exception through as it was raised.
            inner = getattr(error, "exceptions", None)
            if exc is None or inner is None or len(inner) != 1 or inner[0] is not exc:
                raise
        finally:
            self._close()
        raise exc

    def submit(self, command: ToolCommand) -> int:
        """Start ``command`` now, or as soon as the concurrency limit allows; its index.

        Raises:
            RuntimeError: the round is not open (outside its ``async with`` block).
        """
        index = self._add(command)
        if self._workers < self._limit:
            self._workers += 1
            self._task_group.start_soon(self._worker, index)  # type: ignore[union-attr]
        else:
            self._queue.append(index)
        return index

    async def _submit_here(self, command: ToolCommand) -> None:
        """Submit ``command``, running it in the calling task if a slot is free.

        The calling task then works like any worker (it takes waiting commands too) until
        nothing waits. For the round's owner after its last submission.
        """
        index = self._add(command)
        if self._workers < self._limit:
            self._workers += 1
            await self._worker(index)
        else:
            self._queue.append(index)

    def _add(self, command: ToolCommand) -> int:
        if self._state != 1:
            raise RuntimeError("submit() works only inside 'async with executor.round() as rnd:'")
        index = len(self._commands)
        self._commands.append(command)
        self._records.append(None)
        self._started.append(None)
        return index

    async def _worker(self, index: int) -> None:
        try:
            while True:
                await self._call(index)
                if self._next >= len(self._queue):
                    return
                index = self._queue[self._next]
                self._next += 1
        finally:
            self._workers -= 1

    async def _call(self, index: int) -> None:
        command = self._commands[index]
        on_start = self._on_start

        def started() -> None:
            self._started[index] = perf_counter()
            if on_start is not None:
                on_start(index, command)

        record = await self._executor.call(command, on_start=started)
        self._records[index] = record
        if self._on_finish is not None:
            start = self._started[index]
            self._on_finish(index, record, 0.0 if start is None else perf_counter() - start)

    def _close(self) -> None:
        """Give every command without a record a cancelled one; hand the records over."""
        self._state = 2
        self._queue.clear()
        self._next = 0
        records = self._records
        now = perf_counter()
        for index, record in enumerate(records):
            if record is None:
                command = self._commands[index]
                cancelled = ToolExecutionRecord.failed(command, cancelled_error(command.tool_name))
                records[index] = cancelled
                if self._on_finish is not None:
                    started = self._started[index]
                    self._on_finish(index, cancelled, 0.0 if started is None else now - started)
        if self._sink is not None:
            self._sink.extend(records)  # type: ignore[arg-type]  # no None left
