"""Tool retry: call a tool again, with exponential backoff, when it raises chosen exceptions.

Only failures of the tool itself are retried: a call with arguments that fail the schema,
or that names no tool, is answered at once (running it again would fail the same way).
Each attempt has the agent's ``tool_timeout``; a :class:`~toolloop.errors.ToolTimeoutError` is a
``TimeoutError``, so ``retry_on=(TimeoutError,)`` retries timeouts.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection

import anyio

from ...runner import tool_error_text
from .._messages import ToolMessage
from .._middleware import AgentMiddleware, ToolCallRequest, ToolHandler
from .._state import Command
from .._tool_call import error_message

__all__ = ["ToolRetryMiddleware"]

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[Exception], bool]


class ToolRetryMiddleware(AgentMiddleware):
    """Retry failing tool calls with exponential backoff.

    Args:
        max_retries: retries after the first attempt (``0``: no retry).
        retry_on: the exception types to retry, or a function of the exception saying
            whether to retry; other exceptions fail the call at once.
        tool_names: the tools to retry; ``None``: every tool.
        initial_delay: seconds before the first retry.
        backoff_factor: each further retry waits this many times longer.
        max_delay: the longest wait between two attempts.
        jitter: vary each wait by up to ±25 %, so that many calls do not retry in step.
        on_failure: the error text when the last attempt failed too, from the exception
            (by default it says how many attempts were made and what the last one raised).
        name: the middleware's name.
    """

    def __init__(
        self,
        *,
        max_retries: int = 2,
        retry_on: RetryOn = (Exception,),
        tool_names: Collection[str] | None = None,
        initial_delay: float = 1.0,
        backoff_factor: float = 2.0,
        max_delay: float = 60.0,
        jitter: bool = True,
        on_failure: Callable[[Exception], str] | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if initial_delay < 0 or backoff_factor < 1 or max_delay < 0:
            raise ValueError(
                "ToolRetryMiddleware needs initial_delay >= 0, backoff_factor >= 1 and "
                f"max_delay >= 0; got {initial_delay}, {backoff_factor}, {max_delay}"
            )
        self.max_retries = max_retries
        self.retry_on = retry_on
        self.tool_names = None if tool_names is None else frozenset(tool_names)
        self.initial_delay = initial_delay
        self.backoff_factor = backoff_factor
        self.max_delay = max_delay
        self.jitter = jitter
        self.on_failure = on_failure
        self._name = name or "ToolRetryMiddleware"

    @property
    def name(self) -> str:
        return self._name

    def should_retry(self, exc: Exception) -> bool:
        retry_on = self.retry_on
        if isinstance(retry_on, (type, tuple)):
            return isinstance(exc, retry_on)
        return bool(retry_on(exc))

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first)."""
        wait: float = min(self.initial_delay * self.backoff_factor**retry, self.max_delay)
        if self.jitter and wait > 0:
            wait *= random.uniform(0.75, 1.25)
        return wait

    async def wrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command:
        call = request.tool_call
        if self.tool_names is not None and call.name not in self.tool_names:
            return await handler(request)
        retry = 0
        while True:
            try:
                return await handler(request)
            except Exception as exc:
                if not self.should_retry(exc):
                    raise
                if retry >= self.max_retries:
                    return error_message(call, self._failure(call.name, exc, retry + 1))
            await anyio.sleep(self.delay(retry))
            retry += 1

    def _failure(self, name: str, exc: Exception, attempts: int) -> str:
        if self.on_failure is not None:
            return self.on_failure(exc)
        return f"{tool_error_text(name, exc)} (attempt {attempts} of {attempts}, no retry left)"
