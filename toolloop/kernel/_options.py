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
from typing import Any, Literal, TypeAlias

import anyio
from typing_extensions import TypedDict

from ..checkpoints import CheckpointStore
from ..flow import FlowEvent
from ..models import UsageLimits
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


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    """A number of seconds: an int or float, not a bool, not NaN (infinity: no bound)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


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


class RunOverrides(RunDefaults, total=False):
    """The options a call of the loop, or of an agent's ``run``, ``resume`` or ``recover``,
    takes (``**options``; an agent's are over its defaults): any of :class:`RunOptions`."""

    run_id: str | None
