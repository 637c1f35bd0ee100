"""What every run of every product takes: its limits, budget, durability, approvals, deps.

The same keyword arguments, with the same defaults, in the loop's calls, the agents' runs,
resumes and recoveries (the agents' constructors take them as defaults a call overrides).
:class:`RunOptions` holds them, checked once.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

import anyio
from typing_extensions import TypedDict

from ..checkpoints import CheckpointStore
from ..flow import FlowEvent
from ..models import UsageLimits
from ..ratelimit import RateLimit, RetryPolicy
from ..runner import Executor, SharedResults
from ..tools import ToolRegistry
from ._approval import ApprovalSpec

__all__ = [
    "RENAMED_OPTIONS",
    "OnEvent",
    "OnLimit",
    "RunDefaults",
    "RunOptions",
    "RunOverrides",
    "UnknownOutcome",
    "option_hint",
]

OnLimit: TypeAlias = Literal["raise", "finish"]
"""What a run does when its ``timeout`` or its budget is reached: raise, or finish with what
it has (the stop reason says which)."""

UnknownOutcome: TypeAlias = Literal["fail", "retry", "ask"]
"""What a resumed or recovered run does with a tool call whose outcome is unknown (it
started, and its process died or the run ended before the outcome was recorded: it may or
may not have taken effect). ``"fail"``: the call ends as a failed record that says what cut
it off, and the run goes on as after any failed call (the model decides; the status agent
first puts failed calls to a human's review); ``"retry"``: it runs again when its tool is in
``idempotent_tools``, else as ``"fail"``; ``"ask"``: the run pauses and asks a human
(a :class:`~toolloop.checkpoints.HumanRequest` of kind ``interrupted_tool_calls``). Such a
call is never run again silently."""

OnEvent: TypeAlias = Callable[[FlowEvent], None]

_POLICIES = ("raise", "finish")
_NO_RATE_LIMITS: Mapping[str, RateLimit] = MappingProxyType({})
_NO_SHARING: Mapping[str, SharedResults] = MappingProxyType({})


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    """A number of seconds: an int or float, not a bool, not NaN (infinity: no bound)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _check_per_tool(name: str, given: object, kind: type, where: str, example: str) -> None:
    """Refuse an option of tool names to ``kind`` objects that is not one."""
    if not isinstance(given, Mapping):
        raise TypeError(
            f"{name} takes tool names to {kind.__name__}s ({{'search': {example}}}), got "
            f"{type(given).__name__}"
        )
    for tool, value in given.items():
        if not isinstance(tool, str) or not isinstance(value, kind):
            raise TypeError(
                f"{name} takes tool names to toolloop.{where}.{kind.__name__} objects, got "
                f"{tool!r}: {type(value).__name__}"
            )


RENAMED_OPTIONS: Mapping[str, str] = {
    "max_rounds": "max_turns",
    "planner_timeout": "model_timeout",
    "max_steps": "max_turns",
}
"""Options of earlier releases, by name, and what they are called now (an error says it)."""
_UNKNOWN = ("fail", "retry", "ask")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """The options of a run, the same in every product (see the module docs).

    Attributes:
        concurrency: at most this many tool calls of the run at once.
        limiter: a :class:`anyio.CapacityLimiter` shared by many runs (both limits hold).
        tool_timeout: seconds for each tool call (a tool's own, smaller timeout wins).
        model_timeout: seconds for each model call (the loop: each planner call).
        timeout: seconds for the run (this call of it: a resume has its own).
        on_timeout: ``"raise"`` :class:`~toolloop.ExecutionTimeoutError`, or ``"finish"``
            with what the run has (stop reason ``"timeout"``).
        max_turns: the iteration bound: the loop's rounds, the middleware agent's model
            calls, the status agent's steps (``None``: the product's default).
        usage_limits: the run's budget (:class:`~toolloop.models.UsageLimits`), checked
            before each model call of the run and while a stream runs.
        on_usage_limit: ``"raise"`` :class:`~toolloop.errors.UsageLimitError`, or
            ``"finish"`` (stop reason ``"usage_limit"``).
        store: a :class:`~toolloop.checkpoints.CheckpointStore`: the run is durable.
        run_id: the run's id (in the store); a new one by default.
        needs_approval: which tool calls wait for a human (see
            :data:`~toolloop.kernel.ApprovalSpec`).
        unknown_outcome: see :data:`UnknownOutcome`.
        idempotent_tools: the tools safe to run twice (for ``unknown_outcome="retry"``).
        deps: your dependencies (a DB pool, an HTTP client...): ``ctx.deps`` of every tool
            that takes a :class:`~toolloop.tools.RunContext`, ``runtime.deps`` of the
            agent's hooks. Not saved: give them again to a resume.
        on_event: called with every event of the run, as it happens.
        streaming_dispatch: start each tool call the moment the model has written it,
            while the rest of its reply still streams (the loop: with a planner that
            streams its commands; the agents: each call of a model turn, see their
            concepts pages); ``False``: a turn's calls start once its reply is whole.
        model_rate_limit: a :class:`~toolloop.ratelimit.RateLimit` every model call of
            the run goes through (share one object among runs to limit them together).
        model_retry: a :class:`~toolloop.ratelimit.RetryPolicy` for the run's model calls.
            Given (or with a ``model_rate_limit``, which takes ``RetryPolicy()`` when this
            is not given), toolloop makes every try itself and a client's own retries are
            off; ``None`` without a limiter: the client's own (``openai``'s
            ``max_retries``).
        rate_limits: tool names to the :class:`~toolloop.ratelimit.RateLimit` their calls
            go through (one object for several tools limits them as a group).
        tool_retry: a :class:`~toolloop.ratelimit.RetryPolicy` for the calls of the
            run's ``idempotent_tools`` (no other tool is ever retried).
        shared_results: tool names to the :class:`~toolloop.runner.SharedResults` their
            calls are shared by: identical calls in flight at once (in this run and in
            every run given the same object) run once, each keeping its own record; with
            a ``ttl``, successful results are cached.
        max_result_chars: a tool result longer than this (as text: a string as it is,
            else its JSON) is shown to the model cut to it, with a handle the built-in
            ``read_result`` tool reads the rest by; the run keeps it whole (see
            :mod:`toolloop.kernel` ``ResultKept``). ``None``: results are shown whole.
    """

    concurrency: int = 4
    limiter: anyio.CapacityLimiter | None = None
    tool_timeout: float | None = None
    model_timeout: float | None = None
    timeout: float | None = None
    on_timeout: OnLimit = "raise"
    max_turns: int | None = None
    usage_limits: UsageLimits | None = None
    on_usage_limit: OnLimit = "raise"
    store: CheckpointStore | None = None
    run_id: str | None = None
    needs_approval: ApprovalSpec = ()
    unknown_outcome: UnknownOutcome = "fail"
    idempotent_tools: Collection[str] = field(default=())
    deps: Any = None
    on_event: OnEvent | None = None
    streaming_dispatch: bool = False
    model_rate_limit: RateLimit | None = None
    model_retry: RetryPolicy | None = None
    rate_limits: Mapping[str, RateLimit] = field(default_factory=lambda: _NO_RATE_LIMITS)
    tool_retry: RetryPolicy | None = None
    shared_results: Mapping[str, SharedResults] = field(default_factory=lambda: _NO_SHARING)
    max_result_chars: int | None = 2000

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse a value no run can take, saying what was expected.

        Raises:
            ValueError, TypeError: an option of the wrong kind or out of range.
        """
        if not _whole(self.concurrency):
            raise TypeError(f"concurrency must be an int, got {self.concurrency!r}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency!r}")
        for name in ("tool_timeout", "model_timeout", "timeout"):
            value = getattr(self, name)
            if value is not None and not (_number(value) and value > 0):
                raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}")
        for name in ("on_timeout", "on_usage_limit"):
            if getattr(self, name) not in _POLICIES:
                raise ValueError(f"{name} must be 'raise' or 'finish', got {getattr(self, name)!r}")
        if self.max_turns is not None and not _whole(self.max_turns):
            raise TypeError(f"max_turns must be an int, got {self.max_turns!r}")
        if self.max_turns is not None and self.max_turns < 0:
            raise ValueError(f"max_turns must be 0 or more, got {self.max_turns!r}")
        if self.run_id is not None and not (isinstance(self.run_id, str) and self.run_id):
            raise TypeError(f"run_id must be a non-empty str, got {self.run_id!r}")
        if self.store is not None and not isinstance(self.store, CheckpointStore):
            raise TypeError(
                "store must be a CheckpointStore (e.g. toolloop.checkpoints.SQLiteCheckpointStore"
                f"('runs.db')), got {type(self.store).__name__}"
            )
        if self.on_event is not None and not callable(self.on_event):
            raise TypeError(
                f"on_event must be a callable of one event, got {type(self.on_event).__name__}"
            )
        if self.usage_limits is not None and not isinstance(self.usage_limits, UsageLimits):
            raise TypeError(
                "usage_limits must be a toolloop.models.UsageLimits, got "
                f"{type(self.usage_limits).__name__}"
            )
        if self.unknown_outcome not in _UNKNOWN:
            raise ValueError(
                f"unknown_outcome must be one of {list(_UNKNOWN)}, got {self.unknown_outcome!r}"
            )
        if isinstance(self.idempotent_tools, str):
            raise TypeError(
                "idempotent_tools takes tool names (a list or set), not one str: "
                f"idempotent_tools=[{self.idempotent_tools!r}]"
            )
        if self.limiter is not None and not isinstance(self.limiter, anyio.CapacityLimiter):
            raise TypeError(
                f"limiter must be an anyio.CapacityLimiter, got {type(self.limiter).__name__}"
            )
        if not isinstance(self.streaming_dispatch, bool):
            raise TypeError(
                f"streaming_dispatch must be True or False, got {self.streaming_dispatch!r}"
            )
        limit = self.max_result_chars
        if limit is not None and not (_whole(limit) and limit >= 1):
            raise ValueError(
                f"max_result_chars must be an int of 1 or more (or None: no cut), got {limit!r}"
            )
        self._check_rates()

    def _check_rates(self) -> None:
        if self.model_rate_limit is not None and not isinstance(self.model_rate_limit, RateLimit):
            raise TypeError(
                "model_rate_limit must be a toolloop.ratelimit.RateLimit, got "
                f"{type(self.model_rate_limit).__name__}"
            )
        for name in ("model_retry", "tool_retry"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, RetryPolicy):
                raise TypeError(
                    f"{name} must be a toolloop.ratelimit.RetryPolicy, got {type(value).__name__}"
                )
        _check_per_tool("rate_limits", self.rate_limits, RateLimit, "ratelimit", "RateLimit(5)")
        _check_per_tool(
            "shared_results", self.shared_results, SharedResults, "runner", "SharedResults()"
        )

    @property
    def model_tries(self) -> RetryPolicy | None:
        """The retry policy of the run's model calls: ``model_retry``, else
        ``RetryPolicy()`` when a ``model_rate_limit`` is given (a limiter must see every
        answer, so toolloop makes the tries), else ``None``."""
        if self.model_retry is not None or self.model_rate_limit is None:
            return self.model_retry
        return _DEFAULT_RETRY

    def tool_executor(
        self, registry: ToolRegistry, *, concurrency: bool = True, reuse: Executor | None = None
    ) -> Executor:
        """The run's :class:`~toolloop.runner.Executor` of ``registry``, with the limits of
        these options (``limiter``, ``tool_timeout``, ``rate_limits``, ``tool_retry`` for
        the ``idempotent_tools``, ``shared_results``; ``concurrency`` unless told not to):
        ``reuse`` if it has them (an executor is configuration only: runs with the same
        limits share one)."""
        if reuse is not None and self._fits(reuse, concurrency):
            return reuse
        per_run: dict[str, Any] = {"concurrency": self.concurrency} if concurrency else {}
        return Executor(
            registry,
            **per_run,
            limiter=self.limiter,
            tool_timeout=self.tool_timeout,
            rate_limits=self.rate_limits,
            retry=self.tool_retry,
            idempotent_tools=self.idempotent_tools,
            shared_results=self.shared_results,
        )

    def _fits(self, executor: Executor, concurrency: bool) -> bool:
        if (
            (concurrency and executor.concurrency != self.concurrency)
            or executor.limiter is not self.limiter
            or executor.tool_timeout != self.tool_timeout
            or executor.retry is not self.tool_retry
        ):
            return False
        limits = self.rate_limits
        if (limits or executor.rate_limits) and limits is not executor.rate_limits:
            if dict(limits) != dict(executor.rate_limits):
                return False
        sharing = self.shared_results
        if (sharing or executor.shared_results) and sharing is not executor.shared_results:
            if dict(sharing) != dict(executor.shared_results):
                return False
        # the idempotent tools matter only to a retry policy
        return self.tool_retry is None or executor.idempotent_tools == frozenset(
            self.idempotent_tools
        )

    def turns(self, default: int) -> int:
        """``max_turns``, or the product's ``default`` when it is not given."""
        return default if self.max_turns is None else self.max_turns

    def merged(self, **given: Any) -> RunOptions:
        """These options with those ``given`` replacing them (a call's options over an
        agent's defaults). A ``None`` given is none (``timeout=None``: no timeout), and an
        ``on_event`` given is called besides the default one (both see every event).

        Raises:
            TypeError: a name that is no run option (the message says which was meant).
            ValueError: a value no run can take.
        """
        if not given:
            return self
        if not _NAMES.issuperset(given):
            for name in given:
                if name not in _NAMES:
                    raise TypeError(f"no run option named {name!r}{option_hint(name, _NAMES)}")
        key = _plain_key(given) if self is _DEFAULTS else None
        if key is not None:  # plain values over the defaults: checked once, then shared
            options = _SHARED.get(key)
            if options is None:
                options = dataclasses.replace(self, **given)
                if len(_SHARED) >= _SHARED_MAX:
                    _SHARED.clear()
                _SHARED[key] = options
            return options
        on_event = given.get("on_event")
        if on_event is not None and self.on_event is not None and on_event is not self.on_event:
            given = {**given, "on_event": _Both(self.on_event, on_event)}
        return dataclasses.replace(self, **given)

    @classmethod
    def over_defaults(cls, **given: Any) -> RunOptions:
        """The kernel's defaults with the options ``given`` over them: a call's options
        where no agent sets defaults. Options of plain values (numbers, names, ``None``)
        are checked once and shared by the calls that give the same ones (options are
        frozen).

        Raises:
            TypeError: a name that is no run option (the message says which was meant).
            ValueError: a value no run can take.
        """
        return _DEFAULTS.merged(**given)

    @classmethod
    def defaults(cls, given: Mapping[str, Any], *, where: str, max_turns: int) -> RunOptions:
        """The options an agent's constructor was ``given``, checked: the defaults of its
        runs (a call of the agent's overrides them). ``where`` names the constructor,
        ``max_turns`` is the product's bound when none is given.

        Raises:
            TypeError: ``run_id`` (it names one run: give it to the call), or a name that
                is no run option.
            ValueError: an option no run can take.
        """
        if "run_id" in given:
            raise TypeError(
                f"{where} takes no run_id: it names one run; give it to the call that runs it"
            )
        options = _DEFAULTS.merged(**given)
        return options if options.max_turns is not None else options.merged(max_turns=max_turns)


_DEFAULTS = RunOptions()
_DEFAULT_RETRY = RetryPolicy()
_NAMES = frozenset(f.name for f in dataclasses.fields(RunOptions))

_PLAIN = frozenset((int, float, str, bool, type(None)))
_Key: TypeAlias = tuple[tuple[tuple[str, object], ...], tuple[type, ...]]
_SHARED: dict[_Key, RunOptions] = {}
"""The defaults merged with options of plain values (numbers, names, ``None``), by those
values: options are frozen, so the runs given the same ones share them (each checked
once). Bounded: emptied when full."""
_SHARED_MAX = 256


def _plain_key(given: Mapping[str, Any]) -> _Key | None:
    """``given`` as a key of :data:`_SHARED` (the values with their types: ``True`` is not
    ``1``), or ``None`` when a value is no plain value (an object, a callable, a list), or
    when it names one run (``run_id``: never the same twice)."""
    if "run_id" in given:
        return None
    kinds = tuple(map(type, given.values()))
    if not _PLAIN.issuperset(kinds):
        return None
    return tuple(given.items()), kinds


def option_hint(name: str, known: Collection[str]) -> str:
    """What an option ``name`` that is none of ``known`` was likely meant to be: its new
    name (:data:`RENAMED_OPTIONS`), or the closest known one; ``""`` when none is close."""
    renamed = RENAMED_OPTIONS.get(name)
    if renamed is not None:
        return f"; it is now {renamed!r}"
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Both:
    """Two event observers as one: the default's, then the call's."""

    __slots__ = ("first", "second")

    def __init__(self, first: OnEvent, second: OnEvent) -> None:
        self.first = first
        self.second = second

    def __call__(self, event: FlowEvent) -> None:
        try:
            self.first(event)
        finally:  # (one that raises is logged by the run; the other still sees the event)
            self.second(event)


class RunDefaults(TypedDict, total=False):
    """The run options an agent's constructor takes as the defaults of its runs
    (``**options``): every one of :class:`RunOptions` but ``run_id``."""

    concurrency: int
    limiter: anyio.CapacityLimiter | None
    tool_timeout: float | None
    model_timeout: float | None
    timeout: float | None
    on_timeout: OnLimit
    max_turns: int | None
    usage_limits: UsageLimits | None
    on_usage_limit: OnLimit
    store: CheckpointStore | None
    needs_approval: ApprovalSpec
    unknown_outcome: UnknownOutcome
    idempotent_tools: Collection[str]
    deps: Any
    on_event: OnEvent | None
    streaming_dispatch: bool
    model_rate_limit: RateLimit | None
    model_retry: RetryPolicy | None
    rate_limits: Mapping[str, RateLimit]
    tool_retry: RetryPolicy | None
    shared_results: Mapping[str, SharedResults]
    max_result_chars: int | None


class RunOverrides(RunDefaults, total=False):
    """The options a call of the loop, or of an agent's ``run``, ``resume`` or ``recover``,
    takes (``**options``; an agent's are over its defaults): any of :class:`RunOptions`."""

    run_id: str | None
