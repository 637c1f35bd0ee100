"""The run context a tool may ask for: the run's id, round, the call's id and purpose, the
caller's deps, and a way to report progress.

A typed function declares a parameter annotated :class:`RunContext` (or
``RunContext[MyDeps]``); it is left out of the tool's JSON schema (the model never sees it,
nor can it pass one: the schema forbids unknown arguments) and filled in when the tool is
called in a run. Whether a tool takes one is decided once, when the tool is built: a tool
that does not pays nothing per call.

The run (the loop, an agent) makes a :class:`RunScope` active for its tasks; the call's
context is made from it, and from the command, when the tool is called. The call's id is the
one the run's events tell (``ToolCallStarted.call_id``): the middleware agent hands it over
with the call; the loop and the status agent name each call in their scope before the runner
starts it (:meth:`RunScope.name_call`), and the runner reads it back (:func:`call_id_of`).

A call's :attr:`RunContext.idempotency_key` is made from the run's id and the call's
identity in the run: its id, or, when the run keeps it under another key (a durable loop's
call planned again differently at the same place after a crash), that key. It is the same
whenever the same call of the same run runs again (resume, recover, a retry), and differs
for any other call.
"""

from __future__ import annotations

import hashlib
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union, get_args, get_origin

import anyio.from_thread

__all__ = [
    "Progress",
    "RunContext",
    "RunScope",
    "call_id_of",
    "is_run_context",
    "run_context",
]

DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class Progress:
    """What a tool reported with :meth:`RunContext.report`, handed to the run's ``report``."""

    run_id: str
    round_index: int
    tool_name: str
    purpose: str
    call_id: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What a tool learns of the run that calls it (declare a parameter of this type).

    ::

        async def search(query: str, ctx: RunContext[MyDeps]) -> list[str]:
            ctx.report("searching", query=query)
            return await ctx.deps.index.search(query)

    Attributes:
        deps: the caller's ``deps=`` object (``None`` when none was given).
        run_id: the run's id.
        round_index: the loop's round (the agent's model turn).
        purpose: why the planner called the tool (the command's ``purpose``; the tool's name
            in the middleware agent, whose model gives no purpose).
        tool_name: the tool's name.
        call_id: the call's id, as the run's events tell it (``ToolCallStarted.call_id``):
            ``"<round>.<position>"`` in the loop, the model's tool-call id in the middleware
            agent, the journal's call id in the status agent; ``""`` outside a run.
        idempotency_key: a key for an outside system to do this call's side effect once
            (send it as the API's ``Idempotency-Key``, or keep it in a unique column): the
            same each time this call of this run runs, across resume, recover, a retry, a
            Ray retry of a durable run; another for every other call. 32 hex digits; outside
            a run, a fresh one per call.
    """

    deps: DepsT
    run_id: str
    round_index: int
    purpose: str
    tool_name: str
    call_id: str = ""
    idempotency_key: str = field(default_factory=lambda: uuid.uuid4().hex)
    _report: Callable[[Progress], None] | None = field(default=None, repr=False, compare=False)

    def report(self, message: str, **data: Any) -> None:
        """Tell the run's observers how the call is going (a
        :class:`~toolloop.runner.ToolProgress` event); from the tool's task or, for a sync
        tool, from its worker thread. Nothing happens outside a run that listens.

        Args:
            message: a short line, e.g. ``"3 of 10 pages read"``.
            **data: JSON-like details.
        """
        if self._report is not None:
            text = message if isinstance(message, str) else str(message)
            self._report(
                Progress(
                    self.run_id,
                    self.round_index,
                    self.tool_name,
                    self.purpose,
                    self.call_id,
                    text,
                    data,
                )
            )


class RunScope:
    """What a run tells the tools it calls: made active for the run's tasks by the run.

    Args:
        run_id: the run's id.
        deps: the caller's ``deps=`` object.
        report: called with each :class:`Progress` a tool reports, on the run's event loop
            (a report from a worker thread is carried over to it).
    """

    __slots__ = ("_identities", "_named", "_round_index", "_thread", "deps", "report", "run_id")

    def __init__(
        self,
        run_id: str,
        deps: Any = None,
        report: Callable[[Progress], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.deps = deps
        self.report = report
        self._round_index = 0
        self._named: dict[int, tuple[object, str]] = {}
        self._identities: dict[str, str] = {}
        self._thread = threading.get_ident()

    @property
    def round_index(self) -> int:
        """The round in progress; the run moves it on (which forgets the calls named in the
        round before)."""
        return self._round_index

    @round_index.setter
    def round_index(self, index: int) -> None:
        self._round_index = index
        if self._named:
            self._named.clear()
        if self._identities:
            self._identities.clear()

    def name_call(self, call: object, call_id: str, *, identity: str | None = None) -> None:
        """Name the call the runner is about to be handed ``call`` for (its command): the
        tool's context of that call has ``call_id`` (read back by :func:`call_id_of`);
        ``identity``: the key the run keeps the call under, when it is not ``call_id``
        (its context's ``idempotency_key`` is made from it)."""
        self._named[id(call)] = (call, call_id)
        if identity is not None and identity != call_id:
            self._identities[call_id] = identity

    @contextmanager
    def active(self) -> Iterator[RunScope]:
        """Make this the scope of the tools called in this block (and the tasks it starts)."""
        token = _SCOPE.set(self)
        try:
            yield self
        finally:
            _SCOPE.reset(token)

    def _deliver(self, progress: Progress) -> None:
        report = self.report
        if report is None:
            return
        if threading.get_ident() == self._thread:
            report(progress)
            return
        try:  # a sync tool in a worker thread: over to the event loop
            anyio.from_thread.run_sync(report, progress)
        except RuntimeError:  # the run is over (a thread abandoned at its timeout)
            pass

    def context(self, tool_name: str, purpose: str, call_id: str = "") -> RunContext[Any]:
        """The context of one call of ``tool_name``."""
        return RunContext(
            self.deps,
            self.run_id,
            self._round_index,
            purpose,
            tool_name,
            call_id,
            self.idempotency_key(call_id) if call_id else uuid.uuid4().hex,
            self._deliver if self.report is not None else None,
        )

    def idempotency_key(self, call_id: str) -> str:
        """The idempotency key of call ``call_id`` of this run (see the module docs)."""
        identity = self._identities.get(call_id, call_id)
        material = f"{len(self.run_id)}:{self.run_id}:{identity}".encode()
        return hashlib.sha256(material, usedforsecurity=False).hexdigest()[:32]


_SCOPE: ContextVar[RunScope | None] = ContextVar("toolloop_run_scope", default=None)


def run_context(tool_name: str, purpose: str, call_id: str = "") -> RunContext[Any]:
    """The context of a call of ``tool_name`` in the run in progress (outside any run: no
    deps, run id ``""``, round 0, and reports go nowhere)."""
    scope = _SCOPE.get()
    if scope is None:
        return RunContext(None, "", 0, purpose, tool_name, call_id)
    return scope.context(tool_name, purpose, call_id)


def call_id_of(call: object) -> str:
    """The id the run in progress named the call of ``call`` with
    (:meth:`RunScope.name_call`) in this round; ``""`` when it named none (or outside a
    run)."""
    scope = _SCOPE.get()
    if scope is None:
        return ""
    named = scope._named.get(id(call))
    if named is None or named[0] is not call:
        return ""
    return named[1]


def is_run_context(annotation: Any) -> bool:
    """Whether ``annotation`` is :class:`RunContext`, ``RunContext[...]``, or an optional one
    (``RunContext[...] | None``: a tool also called outside runs by hand)."""
    if annotation is RunContext:
        return True
    origin = get_origin(annotation)
    if origin is RunContext:
        return True
    if origin is Union or origin is types.UnionType:
        return any(
            arg is RunContext or get_origin(arg) is RunContext for arg in get_args(annotation)
        )
    return False
