"""The executor: a run's tool configuration (registry, limits, timeout) and the one way a
command becomes a record.

:meth:`Executor.call` checks a command and runs its tool: an unknown tool, arguments that
fail the schema (the tool does not run), an exception or a timeout each become a failed
:class:`~toolloop.runner.ToolExecutionRecord`; only cancellation propagates.
:meth:`Executor.batch` runs many calls at once under the exact concurrency limit (see
:class:`~toolloop.runner.ToolBatch`); an optional shared :class:`anyio.CapacityLimiter`
bounds tool runs across batches and runs too. A tool given a
:class:`~toolloop.ratelimit.RateLimit` (``rate_limits``) has each try admitted by it; an
idempotent tool (``idempotent_tools``) is tried again by the ``retry`` policy; the record
says how many tries the call took (``attempts``). A tool given a
:class:`~toolloop.runner.SharedResults` (``shared_results``) has identical calls in flight
at once run once, and its results cached (see :mod:`toolloop.runner._shared`): the record
of a call that did not run its tool says where its outcome came from (``shared``).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import anyio
import anyio.abc

from .._errors import ToolCallError, ToolTimeoutError
from ..ratelimit import RateLimit, RetryPolicy, Tries
from ..tools import Tool, ToolRegistry, call_id_of
from ._batch import SplitCall, ToolBatch, call_split
from ._records import ToolCommand, ToolExecutionRecord
from ._shared import SharedResults, SharedSource, shared_key

__all__ = [
    "CallTries",
    "Executor",
    "OnFinish",
    "OnStart",
    "cancelled_error",
    "cancelled_record",
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


_LOG = logging.getLogger("toolloop")
_succeeded = ToolExecutionRecord.succeeded  # (looked up once: a model class's attributes
# are read through pydantic's metaclass)


def _raised(command: ToolCommand, error: str, exc: BaseException) -> ToolExecutionRecord:
    """The record of a tool that raised, logged with its traceback (logger ``toolloop``)."""
    _LOG.warning("%s (purpose: %r)", error, command.purpose, exc_info=exc)
    return ToolExecutionRecord.raised(command, error, exc)


def cancelled_error(tool_name: str) -> str:
    """The error of a record whose call the surrounding cancellation cut short."""
    return f"tool {tool_name!r} was cancelled before it finished"


def cancelled_record(command: ToolCommand) -> ToolExecutionRecord:
    """The record of a command whose call was cut short, or never started."""
    return ToolExecutionRecord.failed(command, cancelled_error(command.tool_name))


@dataclass(slots=True)
class CallTries:
    """How many tries the calls given it took (:meth:`Executor.execute` adds each call's),
    and where the outcome of the last came from when its tool did not run for it
    (``shared``: see :data:`~toolloop.runner.SharedSource`)."""

    count: int = 0
    shared: SharedSource | None = None


@dataclass(slots=True, eq=False)
class _Tried:
    """What a guarded call came to, with its tries: a value, or the last failure."""

    value: Any
    failure: Exception | None
    attempts: int
    shared: SharedSource | None = None

    def record(self, executor: Executor, command: ToolCommand) -> ToolExecutionRecord:
        failure = self.failure
        if failure is None:
            record = ToolExecutionRecord.succeeded(command, self.value)
        else:
            record = executor.raised(command, failure)
        if self.attempts != 1:
            record.__dict__["attempts"] = self.attempts
        if self.shared is not None:
            record.__dict__["shared"] = self.shared
        return record


_Guard = tuple[RateLimit | None, RetryPolicy | None]
_NO_LIMITS: Mapping[str, RateLimit] = MappingProxyType({})
_NO_SHARING: Mapping[str, SharedResults] = MappingProxyType({})


def _guards(
    rate_limits: Mapping[str, RateLimit] | None,
    retry: RetryPolicy | None,
    idempotent_tools: Collection[str],
) -> dict[str, _Guard] | None:
    """Each tool's limiter and retry policy, by name (``None``: no tool has either)."""
    if isinstance(idempotent_tools, str):
        raise TypeError(
            "idempotent_tools takes tool names, not one str: "
            f"idempotent_tools=[{idempotent_tools!r}]"
        )
    retried = set(idempotent_tools) if retry is not None else set()
    limits = dict(rate_limits or {})
    for name, limit in limits.items():
        if not isinstance(limit, RateLimit):
            raise TypeError(
                f"rate_limits[{name!r}] must be a toolloop.ratelimit.RateLimit, got "
                f"{type(limit).__name__}"
            )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(
            f"retry must be a toolloop.ratelimit.RetryPolicy, got {type(retry).__name__}"
        )
    names = retried | set(limits)
    if not names:
        return None
    return {name: (limits.get(name), retry if name in retried else None) for name in names}


class Executor(SplitCall[ToolCommand, ToolExecutionRecord]):
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
        rate_limits: tool names to the :class:`~toolloop.ratelimit.RateLimit` each try of
            their calls goes through (one object for several tools: a group).
        retry: the :class:`~toolloop.ratelimit.RetryPolicy` of the ``idempotent_tools``'
            calls (no other tool is retried).
        idempotent_tools: the tools safe to run twice.
        shared_results: tool names to the :class:`~toolloop.runner.SharedResults` their
            calls are shared by (identical calls in flight run once; a ``ttl`` caches).

    An executor holds only configuration: one can serve many rounds and runs, concurrently.

    A command becomes a record through :meth:`call`, which is a :class:`SplitCall` of three
    parts: :meth:`begin` (check the command, start its tool), then :meth:`succeeded` or
    :meth:`raised` (the record of what the tool did). A batch runs the parts itself,
    awaiting the tool with no frame of ours in between. A subclass that overrides
    :meth:`call` has its own ``call()`` awaited whole for every command of its batches (one
    coroutine more per call); one that overrides the parts keeps the batch's way.
    """

    __slots__ = (
        "_guards",
        "concurrency",
        "idempotent_tools",
        "limiter",
        "on_finish",
        "on_start",
        "rate_limits",
        "registry",
        "retry",
        "shared_results",
        "tool_timeout",
    )

    def __init__(
        self,
        tools: ToolRegistry | Iterable[Tool | Callable[..., Any]],
        *,
        concurrency: int = 8,
        limiter: anyio.CapacityLimiter | None = None,
        tool_timeout: float | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
        rate_limits: Mapping[str, RateLimit] | None = None,
        retry: RetryPolicy | None = None,
        idempotent_tools: Collection[str] = (),
        shared_results: Mapping[str, SharedResults] | None = None,
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
        self._guards = _guards(rate_limits, retry, idempotent_tools)
        self.rate_limits: Mapping[str, RateLimit] = (
            _NO_LIMITS if rate_limits is None else rate_limits
        )
        self.retry = retry
        self.idempotent_tools: frozenset[str] = frozenset(idempotent_tools)
        for name, shared in (shared_results or {}).items():
            if not isinstance(shared, SharedResults):
                raise TypeError(
                    f"shared_results[{name!r}] must be a toolloop.runner.SharedResults, got "
                    f"{type(shared).__name__}"
                )
        self.shared_results: Mapping[str, SharedResults] = (
            _NO_SHARING if shared_results is None else shared_results
        )
        for option, given in (("rate_limits", rate_limits), ("shared_results", shared_results)):
            for name in given or ():
                if name not in self.registry:  # a typo would silently turn it off
                    near = difflib.get_close_matches(str(name), self.registry.names, n=1)
                    raise ValueError(
                        f"{option} names {name!r}, which is not a tool of this run"
                        + (f" (did you mean {near[0]!r}?)" if near else "")
                        + f"; its tools: {self.registry.names}"
                    )

    def batch(
        self,
        *,
        concurrency: int | None = None,
        results: list[ToolExecutionRecord] | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> ToolBatch[ToolCommand, ToolExecutionRecord]:
        """A batch to submit commands to, as they arrive: ``async with executor.batch()``.

        Args:
            concurrency: replaces the executor's limit for this batch.
            results: a list to which the batch's records are appended, in submission
                order, when the batch ends, also when it is cancelled or fails.
            on_start: replaces the executor's ``on_start`` for this batch.
            on_finish: replaces the executor's ``on_finish`` for this batch.
            task_group: an open task group to start the batch's workers in (see
                :class:`ToolBatch`).
        """
        # the base call() is call_split(self, ...): the batch runs its parts itself; a
        # subclass's own call() is the call, awaited whole
        return ToolBatch(
            self if type(self).call is Executor.call else self.call,
            cancelled_record,
            concurrency=self.concurrency if concurrency is None else concurrency,
            on_start=self.on_start if on_start is None else on_start,
            on_finish=self.on_finish if on_finish is None else on_finish,
            results=results,
            task_group=task_group,
        )

    async def run(
        self,
        commands: Iterable[ToolCommand],
        *,
        results: list[ToolExecutionRecord] | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> list[ToolExecutionRecord]:
        """Run ``commands`` concurrently; their records, in command order.

        ``results`` (if given) receives the records even when the run is cancelled, before
        the cancellation propagates. The calls start in the calling task, one after
        another while each finishes without waiting, and spread over worker tasks the
        moment one waits (see :meth:`ToolBatch.run_here`): tools that return at once cost
        no task. A call the calling task runs gets a copy of its context, as in a task of
        its own.
        """
        batch = self.batch(
            results=results, on_start=on_start, on_finish=on_finish, task_group=task_group
        )
        # entered and left by hand: an async with block would hold its bound __aexit__
        # while the calls run
        await batch.__aenter__()
        try:
            await batch.run_here(commands)
        except BaseException as exc:
            if not await batch.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await batch.__aexit__(None, None, None)
        return batch.results

    def call(
        self, command: ToolCommand, on_start: Callable[[], object] | None = None
    ) -> Coroutine[Any, Any, ToolExecutionRecord]:
        """Run one command: ``await executor.call(command)`` for its record; only
        cancellation propagates.

        The command is checked first (unknown tool, arguments that fail the schema: a failed
        record at once, without waiting for the shared limiter); then the tool runs under
        the shared limiter and the timeout. ``on_start`` is called when the command starts,
        before it is checked. The coroutine is ``call_split(self, command, on_start)``:
        :meth:`begin`, then :meth:`succeeded` or :meth:`raised`.
        """
        return call_split(self, command, on_start)

    def begin(
        self, command: ToolCommand
    ) -> tuple[ToolExecutionRecord, None] | tuple[None, Awaitable[Any]]:
        """Check ``command`` and start its tool: ``(record, None)`` for a command that
        cannot run (unknown tool, arguments that fail the schema: the tool does not run),
        ``(None, work)`` for one that runs: await ``work`` for what the tool returned."""
        fields = command.__dict__  # (its fields, read at once)
        name = fields["tool_name"]
        try:
            tool = self.registry.get(name)
            arguments = tool.validate(fields["tool_kwargs"])
        except ToolCallError as exc:  # unknown tool, bad arguments: the tool did not run
            return ToolExecutionRecord.failed(command, str(exc)), None
        except Exception as exc:  # a validator that broke: still a record, never a crash
            return _raised(command, tool_error_text(name, exc), exc), None
        if self.shared_results:
            shared = self.shared_results.get(name)
            if shared is not None:
                key = shared_key(name, arguments)  # (its checked arguments, no run context)
                if key is not None:
                    if tool.context_parameter is not None:
                        arguments = tool.with_context(
                            arguments, command.purpose, call_id_of(command)
                        )
                    return None, self._shared(shared, key, tool, arguments, None, boxed=True)
        if tool.context_parameter is not None:  # decided when the tool was built
            arguments = tool.with_context(arguments, command.purpose, call_id_of(command))
        guards = self._guards
        if guards is not None:
            guard = guards.get(name)
            if guard is not None:  # its record says its tries: a _Tried comes back
                return None, self._tried(tool, arguments, guard, None, boxed=True)
        try:
            return None, self.execute(tool, arguments)
        except Exception as exc:  # the function refused its arguments before it ran
            return self.raised(command, exc), None

    def succeeded(self, command: ToolCommand, value: Any) -> ToolExecutionRecord:
        """The record of a command whose tool returned ``value``."""
        if type(value) is _Tried:  # a guarded call, with its tries
            return value.record(self, command)
        return _succeeded(command, value)

    def raised(self, command: ToolCommand, exc: Exception) -> ToolExecutionRecord:
        """The record of a command whose tool raised ``exc`` or ran out of time (logged,
        logger ``toolloop``: a timeout at INFO, anything else at WARNING with its
        traceback)."""
        if isinstance(exc, ToolTimeoutError):
            _LOG.info("%s", exc)
            return ToolExecutionRecord.failed(command, str(exc))
        return _raised(command, tool_error_text(command.tool_name, exc), exc)

    def execute(
        self, tool: Tool, arguments: dict[str, Any], *, tries: CallTries | None = None
    ) -> Awaitable[Any]:
        """Run an already checked call (``arguments`` from ``tool.validate``) under the
        shared limiter, the tool's rate limit and the timeout, tried again if the tool is
        idempotent and the retry policy says so: await it for what the tool returned.

        Unlike :meth:`call`, this raises: the tool's own exception, unchanged (the last
        try's), or :class:`~toolloop.errors.ToolTimeoutError`. For callers that decide per
        exception what to do (the agent's ``wrap_tool_call`` middleware retries chosen
        exceptions). ``tries``, if given, counts the tries made, and says where the outcome
        came from when the tool did not run for this call (``tries.shared``: a tool of
        ``shared_results``).
        """
        if self.shared_results:
            shared = self.shared_results.get(tool.name)
            if shared is not None:
                context = tool.context_parameter
                key = shared_key(
                    tool.name,
                    arguments
                    if context is None
                    else {k: v for k, v in arguments.items() if k != context},
                )
                if key is not None:
                    return self._shared(shared, key, tool, arguments, tries, boxed=False)
        return self._run(tool, arguments, tries)

    def _run(
        self, tool: Tool, arguments: dict[str, Any], tries: CallTries | None
    ) -> Awaitable[Any]:
        """:meth:`execute`, shared by no one."""
        guards = self._guards
        if guards is not None:
            guard = guards.get(tool.name)
            if guard is not None:
                return self._tried(tool, arguments, guard, tries, boxed=False)
        if tries is not None:
            tries.count += 1
        return self._once(tool, arguments)

    def _once(self, tool: Tool, arguments: dict[str, Any]) -> Awaitable[Any]:
        if self.limiter is None or not tool.holds_limiter:  # no frame of ours in between
            return tool.execute(arguments, timeout=self.tool_timeout)
        return self._execute_limited(tool, arguments, self.limiter)

    async def _shared(
        self,
        shared: SharedResults,
        key: str,
        tool: Tool,
        arguments: dict[str, Any],
        tally: CallTries | None,
        *,
        boxed: bool,
    ) -> Any:
        """The call of ``key`` through ``shared``: run here, or its outcome taken from the
        same call in flight or from the cache. ``boxed``: as a :class:`_Tried` (a failure
        included); else the value, or the failure raised."""
        tries = CallTries()
        ok, value, source = await shared.call(
            key,
            lambda: self._run(tool, arguments, tries),
            tool_name=tool.name,
            timeout=self._timeout_of(tool),
        )
        attempts = max(tries.count, 1)
        if tally is not None:
            tally.count += tries.count
            tally.shared = source
        if boxed:
            if ok:
                return _Tried(value, None, attempts, source)
            return _Tried(None, value, attempts, source)
        if ok:
            return value
        raise value

    def _timeout_of(self, tool: Tool) -> float | None:
        """The call's timeout: the smaller of the executor's and the tool's own."""
        mine, its = self.tool_timeout, tool.timeout
        if mine is None or its is None:
            return its if mine is None else mine
        return min(mine, its)

    async def _tried(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        guard: _Guard,
        tally: CallTries | None,
        *,
        boxed: bool,
    ) -> Any:
        """The call's tries: each admitted by the tool's limiter, a failure retried by its
        policy. ``boxed``: what it came to as a :class:`_Tried` (a failure included);
        else the value, or the last failure raised."""
        limit, retry = guard
        tries = Tries(limit, retry, "tool", tool.name)
        while True:
            permit = await tries.admit()
            try:
                value = await self._once(tool, arguments)
            except Exception as exc:
                failure = exc
            except BaseException as exc:  # cancelled: its place is freed, nothing learned
                tries.release(permit, exc)
                if tally is not None:
                    tally.count += tries.attempt
                raise
            else:
                tries.release(permit)
                if tally is not None:
                    tally.count += tries.attempt
                return _Tried(value, None, tries.attempt) if boxed else value
            tries.release(permit, failure)
            if not await tries.again(failure):
                if tally is not None:
                    tally.count += tries.attempt
                if boxed:
                    return _Tried(None, failure, tries.attempt)
                raise failure

    async def _execute_limited(
        self, tool: Tool, arguments: dict[str, Any], limiter: anyio.CapacityLimiter
    ) -> Any:
        # its own borrower per call: the task may already hold a token (nested runs)
        borrower = object()
        await limiter.acquire_on_behalf_of(borrower)
        try:
            return await tool.execute(arguments, timeout=self.tool_timeout)
        finally:
            limiter.release_on_behalf_of(borrower)
