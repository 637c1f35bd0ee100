"""Many runs spread over Ray actors, their outcomes streamed back as they finish.

The driver keeps each actor fed with chunks of items (at most ``runs_per_actor`` in flight
on each) and waits on all their streams at once, in one worker thread at a time
(``ray.wait``), so it works the same on asyncio and on trio and never blocks the loop.
An actor that dies loses the runs it was hosting: each is tried again on a fresh actor,
up to ``retries`` times, then reported as failed; no item is ever missing from the output.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import ray
from ray.exceptions import RayActorError

from ._await import cancel_ref
from ._host import Message, RunHost
from ._jobs import RunJob

__all__ = ["RayRunPool", "RunOutcome"]

_LOG = logging.getLogger("toolloop")

OnRunEvent = Callable[[int, Any], object]


@dataclass(frozen=True)
class RunOutcome:
    """How one item ended.

    Attributes:
        index: the item's place in the input.
        item: the item itself.
        ok: the run returned (``result``) rather than failing (``error``).
        result: what the job returned (a :class:`~toolloop.LoopResult` for a
            :class:`~toolloop.ray.LoopJob`); ``None`` when it failed.
        error: what went wrong: the run's exception (type and message), or the loss of its
            actor after every attempt.
        attempts: how many actors it was given to (more than one after a lost actor).
        actor: the index of the actor that ran it last.
    """

    index: int
    item: Any
    ok: bool
    result: Any = None
    error: str | None = None
    attempts: int = 1
    actor: int | None = None


@dataclass
class _Chunk:
    slot: int
    generation: int
    items: dict[int, tuple[Any, int]]  # index -> (item, attempts so far, this one included)


@dataclass
class _Collected:
    messages: list[Message] = field(default_factory=list)
    finished: bool = False
    error: BaseException | None = None


def _drain(stream: Any, out: _Collected) -> None:
    """Take every message ``stream`` has ready, without blocking."""
    try:
        while ray.wait([stream], timeout=0)[0]:
            try:
                ref = next(stream)
            except StopIteration:
                out.finished = True
                return
            out.messages.extend(ray.get(ref))
    except Exception as exc:  # the actor died, or the chunk itself failed
        out.error = exc


def _collect(streams: list[Any], poll: float) -> dict[int, _Collected]:
    """Block (in a worker thread) until some streams have messages, then take them all."""
    ready, _ = ray.wait(streams, num_returns=1, timeout=poll)
    if not ready:
        return {}
    ready, _ = ray.wait(streams, num_returns=len(streams), timeout=0)
    found: dict[int, _Collected] = {}
    for stream in ready:
        found[id(stream)] = out = _Collected()
        _drain(stream, out)
    return found


def _whole(label: str, value: int, low: int) -> int:
    """``value``, checked to be an int (not a bool) of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{label} must be an int >= {low}, got {value!r}")
    return value


def _kill(handle: Any) -> None:
    """Stop the actor ``handle`` for good, if it is still there."""
    try:
        ray.kill(handle, no_restart=True)
    except Exception as exc:  # already gone
        _LOG.debug("ray.kill: %s", exc)


class RayRunPool:
    """Actors that host many concurrent runs each; ``map`` streams outcomes back.

    ::

        job = LoopJob(planner=make_planner, tools=[search], options={"max_turns": 4})
        async with RayRunPool(job, actors=4) as pool:
            async for outcome in pool.map(requests):
                ...

    The job is put in Ray's object store once and each actor reads it once, at creation:
    nothing big is pickled per run. Each actor runs its runs on its own event loop, under
    one limiter shared by all of them (``tool_concurrency``).

    Args:
        job: what each item runs (:class:`~toolloop.ray.LoopJob`,
            :class:`~toolloop.ray.AgentJob`, or your own :class:`~toolloop.ray.RunJob`).
        actors: how many actors (spread over the cluster's nodes by default).
        runs_per_actor: at most this many runs in flight on each actor.
        chunk: items sent to an actor in one call (fewer calls; outcomes still stream back
            one by one).
        tool_concurrency: tokens of each actor's shared limiter (``None``: no limiter).
        retries: how many times a run whose actor died is given to a fresh actor. ``0``
            (the default) reports it failed: a run tried again starts over, so its tools run
            again; raise it for jobs whose tools are safe to repeat.
        actor_options: Ray options for the actors (``num_cpus`` (default 1),
            ``scheduling_strategy`` (default ``"SPREAD"``), ``runtime_env``...).
        poll: seconds the waiting thread blocks in one ``ray.wait`` before checking back.
        start_timeout: seconds to wait for the actors to start.
    """

    def __init__(
        self,
        job: RunJob,
        *,
        actors: int = 2,
        runs_per_actor: int = 256,
        chunk: int = 16,
        tool_concurrency: int | None = None,
        retries: int = 0,
        actor_options: Mapping[str, Any] | None = None,
        poll: float = 1.0,
        start_timeout: float = 120.0,
    ) -> None:
        self.actors = _whole("actors", actors, 1)
        self.runs_per_actor = _whole("runs_per_actor", runs_per_actor, 1)
        self.chunk = _whole("chunk", chunk, 1)
        self.retries = _whole("retries", retries, 0)
        if tool_concurrency is not None and (
            isinstance(tool_concurrency, bool)
            or not isinstance(tool_concurrency, int)
            or tool_concurrency < 1
        ):
            raise ValueError(
                f"tool_concurrency must be an int >= 1 or None, got {tool_concurrency!r}"
            )
        if not isinstance(job, RunJob):
            raise TypeError(
                f"job must have setup() and async run(item, host) (a LoopJob, an AgentJob or "
                f"a RunJob of your own), got {type(job).__name__}"
            )
        self.job = job
        self.tool_concurrency = tool_concurrency
        self.poll = poll
        self.start_timeout = start_timeout
        options: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
        options.update(actor_options or {})
        options["max_concurrency"] = runs_per_actor + 2
        options["max_restarts"] = 0  # the pool replaces a lost actor itself
        self._options = options
        self._job_ref: Any = None
        self._handles: list[Any] = []
        self._generations: list[int] = []

    @property
    def handles(self) -> list[Any]:
        """The actors' handles, by index (a lost actor's slot gets a fresh one)."""
        return list(self._handles)

    def _spawn(self, slot: int) -> Any:
        actor_class = ray.remote(RunHost).options(**self._options)
        return actor_class.remote(self._job_ref, slot, self.tool_concurrency)

    async def start(self) -> None:
        """Put the job in the object store and start the actors (``async with`` does it)."""
        if self._handles:
            return
        self._job_ref = ray.put(self.job)
        self._handles = [self._spawn(slot) for slot in range(self.actors)]
        self._generations = [0] * self.actors
        refs = [handle.ready.remote() for handle in self._handles]
        await anyio.to_thread.run_sync(
            lambda: ray.get(refs, timeout=self.start_timeout), abandon_on_cancel=True
        )

    def close(self) -> None:
        """Stop the actors (their runs in flight are cancelled)."""
        for handle in self._handles:
            _kill(handle)
        self._handles = []

    async def __aenter__(self) -> RayRunPool:
        try:
            await self.start()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def _replace(self, slot: int, generation: int, reason: BaseException) -> None:
        if self._generations[slot] != generation:
            return  # another chunk of that actor already had it replaced
        _LOG.warning("toolloop.ray: actor %d was lost (%s); starting a fresh one", slot, reason)
        _kill(self._handles[slot])
        self._handles[slot] = self._spawn(slot)
        self._generations[slot] += 1

    async def run_all(
        self, items: Iterable[Any], *, on_event: OnRunEvent | None = None
    ) -> list[RunOutcome]:
        """Every item's outcome, in input order (see :meth:`map`)."""
        outcomes = [outcome async for outcome in self.map(items, on_event=on_event)]
        return sorted(outcomes, key=lambda outcome: outcome.index)

    async def map(
        self, items: Iterable[Any], *, on_event: OnRunEvent | None = None
    ) -> AsyncIterator[RunOutcome]:
        """Run every item; yield each one's :class:`RunOutcome` as it finishes.

        Exactly one outcome per item, whatever happens to actors. Leaving the loop early
        (or being cancelled) cancels the runs still in flight.

        Args:
            items: what the job runs, one run each.
            on_event: ``on_event(index, event)`` for every event of every run, forwarded
                from the actors as they happen (costs a message per event; ``None``: the
                events stay in the actors).
        """
        if not self._handles:
            raise RuntimeError("the pool is not started: use `async with RayRunPool(...)`")
        queue: deque[tuple[int, Any, int]] = deque(
            (index, item, 0) for index, item in enumerate(items)
        )
        load = [0] * self.actors
        inflight: dict[int, tuple[Any, _Chunk]] = {}
        events = on_event is not None

        def submit() -> None:
            while queue:
                slot = min(range(self.actors), key=load.__getitem__)
                free = self.runs_per_actor - load[slot]
                want = min(self.chunk, len(queue))
                if free < want and (free < 1 or load[slot]):
                    return  # wait for a whole chunk's room (or an idle actor)
                taken = [queue.popleft() for _ in range(min(want, free))]
                chunk = _Chunk(slot, self._generations[slot], {})
                for index, item, tried in taken:
                    chunk.items[index] = (item, tried + 1)
                payload = [(index, item) for index, item, _ in taken]
                stream = self._handles[slot].run_chunk.remote(payload, events)
                inflight[id(stream)] = (stream, chunk)
                load[slot] += len(taken)

        try:
            submit()
            while inflight:
                streams = [stream for stream, _ in inflight.values()]
                found = await anyio.to_thread.run_sync(
                    _collect, streams, self.poll, abandon_on_cancel=True
                )
                for key, collected in found.items():
                    stream, chunk = inflight[key]
                    for kind, index, payload in collected.messages:
                        if kind == "event":
                            if on_event is not None:
                                _forward(on_event, index, payload)
                            continue
                        item, tried = chunk.items.pop(index)
                        load[chunk.slot] -= 1
                        yield RunOutcome(
                            index=index,
                            item=item,
                            ok=kind == "ok",
                            result=payload if kind == "ok" else None,
                            error=None if kind == "ok" else payload,
                            attempts=tried,
                            actor=chunk.slot,
                        )
                    if not (collected.finished or collected.error is not None):
                        continue
                    del inflight[key]
                    load[chunk.slot] -= len(chunk.items)
                    if not chunk.items:
                        continue
                    reason = collected.error or RuntimeError("the stream ended early")
                    if isinstance(reason, RayActorError):
                        self._replace(chunk.slot, chunk.generation, reason)
                    for index, (item, tried) in sorted(chunk.items.items()):
                        if tried <= self.retries and isinstance(reason, RayActorError):
                            queue.appendleft((index, item, tried))
                            continue
                        yield RunOutcome(
                            index=index,
                            item=item,
                            ok=False,
                            error=_lost_text(reason, tried),
                            attempts=tried,
                            actor=chunk.slot,
                        )
                submit()
        finally:
            for stream, _ in inflight.values():
                cancel_ref(stream)


def _lost_text(reason: BaseException, tried: int) -> str:
    what = str(reason).strip().splitlines()
    said = what[0] if what else ""
    tries = "once" if tried == 1 else f"{tried} times"
    return (
        f"the run was lost with its actor ({type(reason).__name__}: {said}); it was tried "
        f"{tries}: raise retries= to try again on a fresh actor, if its tools are safe to repeat"
        if isinstance(reason, RayActorError)
        else f"the run's actor failed it ({type(reason).__name__}: {said})"
    )


def _forward(on_event: OnRunEvent, index: int, event: Any) -> None:
    try:
        on_event(index, event)
    except Exception:
        _LOG.exception("toolloop.ray: the on_event callback %r raised; the runs go on", on_event)
