"""Token usage and budgets: what model calls cost, summed, and limits checked as they run.

A stream reports its usage in a last chunk (``stream_options={"include_usage": true}``);
a server that does not (or a stream closed before its end, e.g. by the short-circuit)
leaves that call's usage *unknown*: it counts as a request in ``unreported_requests``, never
as zero tokens, so a total with unreported requests is a lower bound.

A run counts its model calls with a :class:`UsageMeter` made active for the run (a context
variable, so every call made in the run's tasks is counted); :func:`stream_chat` is how
toolloop's planners, final answer and agents open a stream: it checks the meter's
:class:`UsageLimits` before the call, watches the stream as it runs (closing it once it
passes a token budget) and adds the call's usage when it ends. A meter given a
:class:`~toolloop.ratelimit.RateLimit` or a :class:`~toolloop.ratelimit.RetryPolicy` (a
run's ``model_rate_limit``, ``model_retry``) has every call admitted by the one and tried
again by the other (each try checked against the budget, counted, and told to the
observer with its attempt number).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from .._errors import UsageLimitError
from ..ratelimit import Permit, RateLimit, RetryPolicy, Tries
from ._chat import ChatDelta, ChatModel, ChatRequest

if TYPE_CHECKING:
    from ._reply import ChatReply, ReplyReader

__all__ = [
    "NO_USAGE",
    "CallObserver",
    "FinishedCall",
    "Usage",
    "UsageLimits",
    "UsageMeter",
    "current_meter",
    "stream_chat",
]


def _plus(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


class Usage(BaseModel):
    """Tokens and requests of one model call, or summed over many.

    A token count is ``None`` when no request in the sum reported it (unknown, not zero).
    """

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    """Model calls made (streams opened)."""
    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    total_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens served from the server's cache, where it says so."""
    reasoning_tokens: int | None = None
    """Completion tokens spent reasoning, where the server says so."""
    unreported_requests: int = 0
    """Requests whose usage is unknown (the server sent none, or the stream was closed
    before its end): the token counts are then a lower bound."""

    @property
    def complete(self) -> bool:
        """Every request reported its usage."""
        return self.unreported_requests == 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=_plus(self.input_tokens, other.input_tokens),
            output_tokens=_plus(self.output_tokens, other.output_tokens),
            total_tokens=_plus(self.total_tokens, other.total_tokens),
            cached_tokens=_plus(self.cached_tokens, other.cached_tokens),
            reasoning_tokens=_plus(self.reasoning_tokens, other.reasoning_tokens),
            unreported_requests=self.unreported_requests + other.unreported_requests,
        )

    @classmethod
    def unknown(cls) -> Usage:
        """One request whose usage was not reported."""
        return cls(requests=1, unreported_requests=1)

    @classmethod
    def from_openai(cls, usage: Any) -> Usage:
        """One request's usage from an OpenAI ``usage`` object or dict (``prompt_tokens``,
        ``completion_tokens``, ``total_tokens``, ``prompt_tokens_details.cached_tokens``,
        ``completion_tokens_details.reasoning_tokens``; DeepSeek's ``prompt_cache_hit_tokens``);
        fields that are missing or not whole numbers of 0 or more stay unknown."""

        def get(source: Any, name: str) -> Any:
            if isinstance(source, dict):
                return source.get(name)
            return getattr(source, name, None)

        def count(value: Any) -> int | None:
            whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            return value if whole else None

        prompt = count(get(usage, "prompt_tokens"))
        completion = count(get(usage, "completion_tokens"))
        total = count(get(usage, "total_tokens"))
        if total is None and prompt is not None and completion is not None:
            total = prompt + completion
        return cls(
            requests=1,
            input_tokens=prompt,
            output_tokens=completion,
            total_tokens=total,
            cached_tokens=count(get(get(usage, "prompt_tokens_details"), "cached_tokens"))
            if get(usage, "prompt_tokens_details") is not None
            else count(get(usage, "prompt_cache_hit_tokens")),  # DeepSeek's name for it
            reasoning_tokens=count(
                get(get(usage, "completion_tokens_details"), "reasoning_tokens")
            ),
        )


class UsageLimits(BaseModel):
    """A run's budget: checked before each model call and while a stream runs.

    ``None`` is no limit. A stream whose reply passes a token budget is closed; its tokens
    so far are estimated from its deltas (one a delta, as servers stream) unless the server
    reports counts as it goes. A reply that ends within its estimate but whose reported
    usage passes the budget is kept: the next call is refused.
    """

    model_config = ConfigDict(frozen=True)

    max_requests: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None

    def model_post_init(self, __context: Any) -> None:
        for name in ("max_requests", "max_input_tokens", "max_output_tokens", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"UsageLimits.{name} must be 0 or more, or None; got {value}")

    @property
    def limits_tokens(self) -> bool:
        return (
            self.max_input_tokens is not None
            or self.max_output_tokens is not None
            or self.max_total_tokens is not None
        )


_METER: ContextVar[UsageMeter | None] = ContextVar("toolloop_usage_meter", default=None)

NO_USAGE = Usage()
"""No request at all (shared: a :class:`Usage` is immutable)."""


class _Active:
    """``with meter.active():`` (a class, not a generator: a run pays a few hundred ns)."""

    __slots__ = ("_meter", "_token")

    def __init__(self, meter: UsageMeter) -> None:
        self._meter = meter

    def __enter__(self) -> UsageMeter:
        self._token = _METER.set(self._meter)
        return self._meter

    def __exit__(self, *exc: object) -> None:
        _METER.reset(self._token)


def current_meter() -> UsageMeter | None:
    """The usage meter of the run in progress in this task, if any."""
    return _METER.get()


class UsageMeter:
    """Counts the model calls of one run and holds them to its limits.

    Args:
        limits: the run's budget (``None``: count only).
        parent: the meter of the run this one's run is a tool of (a run as a tool, see
            :func:`toolloop.kernel.as_tool`): every call is checked against its budget too
            (and its parent's, up the tree) and counted in its usage.
    """

    __slots__ = (
        "_calls",
        "_token",
        "calls",
        "limits",
        "observer",
        "parent",
        "rate_limit",
        "retry",
        "started",
        "usage",
    )

    def __init__(
        self,
        limits: UsageLimits | None = None,
        *,
        observer: CallObserver | None = None,
        rate_limit: RateLimit | None = None,
        retry: RetryPolicy | None = None,
        parent: UsageMeter | None = None,
    ) -> None:
        self._token: Token[UsageMeter | None] | None = None  # while the meter is active
        self.limits = limits
        self.parent = parent
        self.usage = NO_USAGE
        """Everything counted so far (set it to go on from an earlier total)."""
        self.calls = 0
        """How many calls this meter counted (a mark for :meth:`since`)."""
        self._calls: list[Usage] | None = None  # made at the first call (most runs: none)
        self.observer = observer
        """Told of every call (see :class:`CallObserver`); ``None``: nobody listens, and a
        call costs nothing more than its counting."""
        self.started = 0
        """The index of the next call an observer is told of (set it to go on from an
        earlier run's count)."""
        self.rate_limit = rate_limit
        """Admits every call (``None``: no limiter)."""
        self.retry = retry
        """Tries a failed call again (``None``: no retry of toolloop's)."""

    @property
    def makes_tries(self) -> bool:
        """Whether toolloop makes each try of this meter's calls (a limiter or a retry
        policy is given): a client's own retries are then off, so that each try is
        admitted, counted and told."""
        return self.rate_limit is not None or self.retry is not None

    def since(self, mark: int) -> Usage | None:
        """The usage of the calls counted after ``mark`` (:attr:`calls` then); ``None`` when
        there were none."""
        calls = self._calls
        if calls is None or mark >= len(calls):
            return None
        total = Usage()
        for call in calls[mark:]:
            total = total + call
        return total

    def active(self) -> AbstractContextManager[UsageMeter]:
        """Count the model calls made in this block (and the tasks it starts)."""
        return _Active(self) if self._token is not None else self

    def __enter__(self) -> UsageMeter:
        """``with meter:`` is ``with meter.active():`` for a meter not active yet (and holds
        nothing during the block)."""
        if self._token is not None:
            raise RuntimeError(
                "this usage meter is active already; nest another block with meter.active()"
            )
        self._token = _METER.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _METER.reset(token)

    def _exceeded(
        self,
        what: str,
        limit: int,
        used: str,
        *,
        closed: bool,
        usage: Usage | None = None,
        estimated: bool = False,
    ) -> UsageLimitError:
        action = "the stream was closed" if closed else "no more model calls are made"
        verb = "passed" if closed else "reached"
        return UsageLimitError(
            f"the run's usage {verb} its limit {what}={limit} ({used}); {action}. Raise the "
            "limit in usage_limits=UsageLimits(...), or pass on_usage_limit='finish' to end "
            "the run with the results so far",
            usage=self.usage if usage is None else usage,
            limit=what,
            estimated=estimated,
        )

    @property
    def watches_tokens(self) -> bool:
        """Whether a token budget (this meter's or a parent's) watches a reply as it
        streams."""
        meter: UsageMeter | None = self
        while meter is not None:
            if meter.limits is not None and meter.limits.limits_tokens:
                return True
            meter = meter.parent
        return False

    def check_before_call(self) -> None:
        """Raise :class:`~toolloop.errors.UsageLimitError` if the next call has no room left
        (in this meter's budget, or in a parent's)."""
        if self.limits is not None:
            self._check_own()
        if self.parent is not None:
            self.parent.check_before_call()

    def _check_own(self) -> None:
        limits = self.limits
        assert limits is not None
        used = self.usage
        if limits.max_requests is not None and used.requests >= limits.max_requests:
            raise self._exceeded(
                "max_requests", limits.max_requests, f"{used.requests} made", closed=False
            )
        for name, count in (
            ("max_input_tokens", used.input_tokens),
            ("max_output_tokens", used.output_tokens),
            ("max_total_tokens", used.total_tokens),
        ):
            limit = getattr(limits, name)
            if limit is not None and count is not None and count >= limit:
                raise self._exceeded(name, limit, f"{count} used", closed=False)

    def check_stream(self, reported: Usage | None, pieces: int) -> None:
        """Raise if the call in progress (``reported`` by the server so far, else
        ``pieces`` deltas, about a token each) passes a token budget.

        The error's ``usage`` counts the call in progress as it was checked: by the
        server's count so far, or estimated (``UsageLimitError.estimated``; its request
        then counts in ``unreported_requests``, as the server has not reported it)."""
        limits = self.limits
        if limits is None:
            return
        used = self.usage
        counted = reported is not None and bool(reported.output_tokens)
        output = reported.output_tokens if reported is not None and counted else pieces
        assert output is not None
        call_total = (
            reported.total_tokens
            if reported is not None and reported.total_tokens is not None
            else output + (reported.input_tokens or 0 if reported else 0)
        )
        inputs = reported.input_tokens if reported is not None else None
        # each budget: the run's count with the call in progress, how to say it (None: as
        # used, the server's own count), and the call's total if it is a count of its own
        for name, total, what, call in (
            ("max_output_tokens", (used.output_tokens or 0) + output, "output tokens", None),
            (
                "max_total_tokens",
                (used.total_tokens or 0) + call_total,
                "tokens in all",
                call_total,
            ),
            (
                "max_input_tokens",
                None if inputs is None else (used.input_tokens or 0) + inputs,
                None,
                None,
            ),
        ):
            limit = getattr(limits, name)
            if limit is not None and total is not None and total > limit:
                raise self._exceeded(
                    name,
                    limit,
                    f"{total} used" if what is None else _with_reply(total, what, counted),
                    closed=True,
                    usage=used + _in_progress(reported, output, counted, call),
                    estimated=not counted,
                )

    def add(self, usage: Usage) -> None:
        """Count one call's usage."""
        if self._calls is None:
            self._calls = []
        self._calls.append(usage)
        self.calls += 1
        self.usage = self.usage + usage
        parent = self.parent
        while parent is not None:  # a run's calls are its parents' too
            parent.usage = parent.usage + usage
            parent = parent.parent


def _with_reply(count: int, what: str, counted: bool) -> str:
    if counted:
        return f"{count} {what} with the reply in progress, as the server counted them so far"
    return (
        f"an estimated {count} {what} with the reply in progress, a token a delta: the "
        "server's own count comes at the end of a stream"
    )


def _in_progress(
    reported: Usage | None, output: int, counted: bool, total: int | None = None
) -> Usage:
    """The call in progress as a budget check saw it: ``output`` tokens (the server's count,
    or estimated), and what the server reported of the rest."""
    inputs = reported.input_tokens if reported is not None else None
    if total is None:
        total = output + (inputs or 0)
    return Usage(
        requests=1,
        input_tokens=inputs,
        output_tokens=output,
        total_tokens=total,
        cached_tokens=reported.cached_tokens if reported is not None else None,
        reasoning_tokens=reported.reasoning_tokens if reported is not None else None,
        unreported_requests=0 if counted else 1,
    )


@dataclass(frozen=True, slots=True)
class FinishedCall:
    """A model call of a run that ended (what a :class:`CallObserver` is told)."""

    index: int
    """0 for the run's first model call."""
    reply: ChatReply
    """The reply as it was read."""
    usage: Usage | None
    duration: float
    closed_early: bool
    """The reader left before the reply's end."""
    error: BaseException | None
    """What made the call fail, when it did."""
    attempt: int = 1
    """The try (1 for the first; more when a retry policy tried the call again)."""
    request: ChatRequest | None = None
    """The request the call answered."""


class CallObserver(Protocol):
    """Told of every model call a run makes (see :attr:`UsageMeter.observer`), each try of
    it: the kernel turns these into the run's ``ModelCallStarted`` / ``ModelCallFinished``
    events."""

    def call_started(self, index: int, attempt: int = 1) -> None:
        """Try ``attempt`` (1 for the first) of call ``index`` (0 for the run's first) is
        about to be made."""

    def call_finished(self, call: FinishedCall) -> None:
        """A call ended."""


class _MeteredDeltas:
    """A stream's deltas, watched: the last usage reported, and the budget while it runs;
    with an observer, the reply read as it comes."""

    __slots__ = ("_deltas", "_meter", "_watch", "ended", "pieces", "reader", "reported")

    def __init__(
        self, deltas: AsyncIterator[ChatDelta], meter: UsageMeter, reader: ReplyReader | None
    ) -> None:
        self._deltas = deltas
        self._meter = meter
        self._watch = meter.watches_tokens
        self.reported: Usage | None = None
        self.pieces = 0
        self.reader = reader
        self.ended = False

    def __aiter__(self) -> _MeteredDeltas:
        return self

    async def __anext__(self) -> ChatDelta:
        try:
            delta = await self._deltas.__anext__()
        except StopAsyncIteration:
            self.ended = True
            raise
        if self.reader is not None:
            self.reader.feed(delta)
        if delta.usage is not None:
            self.reported = delta.usage  # cumulative: the last one counts
        if delta.content or delta.tool_calls or delta.reasoning or delta.refusal:
            self.pieces += 1  # reasoning is output the budget pays for too
            if self._watch:  # the reply grows: is it still within the budget?
                self._meter.check_stream(self.reported, self.pieces)
        # a delta with usage alone ends the stream: what it cost is counted, and the next
        # call is checked against it
        return delta


_REFUSED = Usage(requests=1)
"""A try the server refused (it opened no stream): a request, without tokens."""


@asynccontextmanager
async def stream_chat(
    model: ChatModel, request: ChatRequest
) -> AsyncIterator[AsyncIterator[ChatDelta]]:
    """``model.stream(request)``, counted by the run's :class:`UsageMeter` if one is active.

    Before the call the run's limits are checked; while the stream runs a token budget
    that is passed closes it; when it ends its usage is added (unknown when the server
    reported none), and the meter's observer, if any, is told of the call.

    With the meter's ``rate_limit`` or ``retry`` (a run's ``model_rate_limit``,
    ``model_retry``), each try is admitted by the limiter and checked against the budget
    first; a try whose stream could not be opened is counted as a request (without
    tokens), told to the observer, and made again if the policy says so. Once a stream is
    open, what happens to it is the call's: a stream that breaks later is not tried again
    (its reader has read part of it).

    Raises:
        UsageLimitError: a limit of the run was reached before the call (or a try), or
            passed during it (the stream is closed).
    """
    meter = _METER.get()
    if meter is None:
        async with model.stream(request) as deltas:
            yield deltas
        return
    meter.check_before_call()
    observer = meter.observer
    index = meter.started
    if observer is not None:
        meter.started = index + 1
    tries: Tries | None = None
    if meter.rate_limit is not None or meter.retry is not None:
        tries = Tries(meter.rate_limit, meter.retry, "model", index=index)
    permit: Permit | None = None
    attempt = 1
    while True:
        if tries is not None:
            if tries.attempt:
                meter.check_before_call()  # a retry is a model call of the run
            permit = await tries.admit()
            attempt = tries.attempt
        reader: ReplyReader | None = None
        started = 0.0
        if observer is not None:
            from ._reply import ReplyReader  # (it imports this module)

            observer.call_started(index, attempt)
            started = perf_counter()
            reader = ReplyReader()
        watched: _MeteredDeltas | None = None
        usage: Usage | None = None
        error: BaseException | None = None
        try:
            async with model.stream(request) as deltas:
                watched = _MeteredDeltas(deltas, meter, reader)
                try:
                    yield watched
                finally:
                    reported = watched.reported
                    usage = Usage.unknown() if reported is None else reported
                    meter.add(usage)
        except Exception as exc:
            error = exc
            if watched is not None or tries is None:
                raise
            meter.add(_REFUSED)  # (retried below, or raised: outside this block)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if tries is not None:
                tries.release(permit, error)
            if observer is not None:
                assert reader is not None
                closed_early = watched is not None and not watched.ended
                took = perf_counter() - started
                ended = FinishedCall(
                    index, reader.reply(), usage, took, closed_early, error, attempt, request
                )
                observer.call_finished(ended)
        if error is None:
            return
        assert tries is not None and isinstance(error, Exception)
        if not await tries.again(error):
            raise error
