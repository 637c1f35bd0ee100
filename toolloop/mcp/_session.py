"""A session with one MCP server, open for as long as ``async with`` holds it: its tools as
toolloop tools, kept up to date when the server says its list changed.

The session lives in a task of its own (started by ``__aenter__``, ended by ``__aexit__``),
so the SDK's transport and task groups are entered and left in that one task, whatever
task calls the tools. Once open, that task is shielded from the caller's cancellation
until it has closed the session (the subprocess stopped, the HTTP session deleted), within
a bounded time.
"""

from __future__ import annotations

import logging
import math
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal, TextIO, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .._secrets import register_secret
from ..tools import Tool, ToolRegistry
from ._errors import MCPConnectionError, MCPToolError
from ._processes import ending_session
from ._results import result_value
from ._tools import check_prefix, make_tools

__all__ = ["MCPConnection", "MCPServerHTTP", "MCPServerStdio", "Protocol"]

Protocol = Literal["auto", "legacy"]
"""``"auto"``: the newest protocol both sides speak (the SDK asks the server, and falls back
to the initialize handshake of older servers); ``"legacy"``: the initialize handshake."""

_LOG = logging.getLogger("toolloop")
_CLOSE_TIMEOUT = 15.0
"""Seconds closing a session may take (a stdio server gets its stdin closed, then SIGTERM,
then SIGKILL, within about 7 s, and what is left of its session the same, within 4 s); a
hang guard, past which the session is abandoned."""
_MAX_PAGES = 100


def _check_seconds(name: str, value: float | None, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        hint = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a positive number of seconds{hint}, got {value!r}")
    return float(value)


class MCPConnection:
    """A session with an MCP server, whose tools are toolloop :class:`~toolloop.Tool`\\ s.

    Use :class:`MCPServerStdio` or :class:`MCPServerHTTP`; this base holds what they share.
    The session is open inside ``async with``: the server is started (stdio) or connected
    to (HTTP), the protocol negotiated and the tools listed on the way in; on the way out
    the session is closed, also when the block is cancelled or times out.

    Inside the block, :attr:`tools` are plain toolloop tools: give them to
    ``async_plan_and_execute(tools=...)``, ``create_agent(tools=...)`` or
    ``StatusAgent(tools=...)``, mixed with other tools and other servers' tools. Their
    arguments are checked against the server's input schema before the call (a call that
    fails it never reaches the server); a call's result becomes the record's result (see
    :meth:`call_tool`); a failure becomes a failed record.

    Args:
        prefix: put before every tool name, with ``_`` (``prefix="fs"``: ``fs_read``), so
            that two servers' tools cannot clash. 1-32 letters, digits, ``_``, ``-``.
        timeout: seconds one tool call may take; then it is cancelled (the server is told)
            and its record fails. ``None``: no limit of the server's own (the run's
            ``tool_timeout`` still applies).
        connect_timeout: seconds to start or reach the server, negotiate and list its tools;
            also bounds each later listing.
        protocol: ``"auto"`` (default) or ``"legacy"`` (see :data:`Protocol`).

    Raises:
        ValueError: a bad prefix or timeout.
    """

    label: str
    """The server, for messages: its command line, or its URL without credentials."""
    _hint = "check that the server runs"
    prefix: str | None
    timeout: float | None
    connect_timeout: float
    protocol: Protocol

    def __init__(
        self,
        *,
        label: str,
        prefix: str | None = None,
        timeout: float | None = 300.0,
        connect_timeout: float = 30.0,
        protocol: Protocol = "auto",
    ) -> None:
        if protocol not in ("auto", "legacy"):
            raise ValueError(f"protocol must be 'auto' or 'legacy', got {protocol!r}")
        self.label = label
        self.prefix = check_prefix(prefix)
        self.timeout = _check_seconds("timeout", timeout, allow_none=True)
        connect = _check_seconds("connect_timeout", connect_timeout, allow_none=False)
        assert connect is not None
        self.connect_timeout = connect
        self.protocol = protocol
        self._client: Client | None = None
        self._tools: list[Tool] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        self._closing = anyio.Event()
        self._changed = anyio.Event()
        self._lost: str | None = None
        self._entered = False
        self._tool_changes = 0
        self._relisted = anyio.Event()
        self._open_error: MCPConnectionError | None = None

    # -- what subclasses say -------------------------------------------------------------

    async def _server(self, stack: AsyncExitStack) -> Any:  # pragma: no cover - abstract
        """What ``mcp.Client`` connects to (entering any resource it needs on ``stack``)."""
        raise NotImplementedError

    # -- the session's lifetime ------------------------------------------------------------

    async def __aenter__(self) -> MCPConnection:
        if self._entered:
            raise RuntimeError(
                f"MCP server {self.label!r}: this session was already opened; make a new "
                "MCPServerStdio/MCPServerHTTP for each `async with`"
            )
        self._entered = True
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        try:
            await task_group.start(self._serve)
        except BaseException as exc:  # cancelled while opening
            self._closing.set()
            await task_group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        failure = self._open_error
        if failure is not None:
            await task_group.__aexit__(None, None, None)
            raise failure
        self._task_group = task_group
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session (``async with`` does; call it from the task that opened it):
        a call still running fails its record, a stdio server is stopped, an HTTP session
        is deleted. Waits at most 15 s; also when the caller is being cancelled."""
        self._closing.set()
        task_group, self._task_group = self._task_group, None
        if task_group is not None:
            # the block's own exception is not handed in: it goes on as it is, not wrapped
            # in an exception group (the session's task has nothing to say about it)
            await task_group.__aexit__(None, None, None)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The session's task: open, list, report started, wait for the close, close.

        Opening fails into ``_open_error`` (reported as started, so that ``__aenter__``
        raises it after this task has ended, not as an exception group)."""
        started = False
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + self.connect_timeout
            try:
                async with AsyncExitStack() as stack:
                    client = Client(
                        await self._server(stack),
                        mode=self.protocol,
                        message_handler=self._on_message,
                        cache=None,
                        client_info=types.Implementation(name="toolloop", version=_version()),
                    )
                    await stack.enter_async_context(client)
                    self._client = client
                    await self._fetch(client)
                    watchers = await stack.enter_async_context(anyio.create_task_group())
                    if _listens(client):
                        await watchers.start(self._listen, client)
                    watchers.start_soon(self._refresh_on_change, client)
                    # open: from here on, only __aexit__ closes the session, and the close
                    # finishes even if the caller is being cancelled (bounded below)
                    scope.deadline = math.inf
                    scope.shield = True
                    started = True
                    task_status.started()
                    await self._closing.wait()
                    scope.deadline = anyio.current_time() + _CLOSE_TIMEOUT
                    watchers.cancel_scope.cancel()
            except Exception as exc:
                if started:
                    _LOG.warning("MCP server %s: closing the session failed: %s", self.label, exc)
                else:
                    self._open_error = MCPConnectionError(
                        f"could not open MCP server {self.label!r}: {_describe(exc)}; {self._hint}",
                        server=self.label,
                    )
                    self._open_error.__cause__ = exc
            finally:
                self._client = None
                self._lost = self._lost or "the session is closed"
        if scope.cancelled_caught and not started:
            self._open_error = MCPConnectionError(
                f"MCP server {self.label!r} did not start and list its tools within "
                f"{self.connect_timeout} s (connect_timeout); check the command or URL, or "
                "raise connect_timeout",
                server=self.label,
            )
        elif scope.cancelled_caught:
            _LOG.warning(
                "MCP server %s: closing the session took more than %s s; abandoned",
                self.label,
                _CLOSE_TIMEOUT,
            )
        if not started:
            task_status.started()

    # -- the tool list ---------------------------------------------------------------------

    @property
    def tools(self) -> list[Tool]:
        """The server's tools as toolloop tools, as last listed (a new list each time).

        Listed when the session opens, and again whenever the server says its list changed
        (``notifications/tools/list_changed``, or a ``subscriptions/listen`` event on the
        2026 protocol). A run takes the tools it is given when it starts: a tool the server
        removed meanwhile fails its record with the server's answer.
        """
        return list(self._tools)

    @property
    def tool_changes(self) -> int:
        """How many times the tool list was listed again after the server said it changed."""
        return self._tool_changes

    async def wait_tools_changed(self, seen: int = 0) -> list[Tool]:
        """Wait until the tool list was listed again after a change more than ``seen``
        times (:attr:`tool_changes`), and return the new :attr:`tools`.

        ``n = server.tool_changes`` before acting, then ``await server.wait_tools_changed(n)``:
        no change is missed, even one already picked up. Bound the wait yourself
        (``anyio.fail_after``): a server may never change its list.
        """
        while self._tool_changes <= seen:
            await self._relisted.wait()
        return self.tools

    def registry(self) -> ToolRegistry:
        """The :attr:`tools` in a :class:`~toolloop.tools.ToolRegistry`."""
        return ToolRegistry(self._tools)

    async def list_tools(self) -> list[Tool]:
        """Ask the server for its tools now; update and return :attr:`tools`.

        Raises:
            MCPConnectionError: the session is not open, or the server did not answer
                within ``connect_timeout``.
            MCPToolError: the server answered the listing with an error.
        """
        client = self._open_client()
        return await self._fetch(client)

    async def _fetch(self, client: Client) -> list[Tool]:
        specs: list[types.Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.connect_timeout):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    specs.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except TimeoutError as exc:
            raise MCPConnectionError(
                f"MCP server {self.label!r} did not list its tools within {self.connect_timeout}"
                " s (connect_timeout)",
                server=self.label,
            ) from exc
        except MCPError as exc:
            raise self._error(exc, "tools/list") from exc
        self._tools = make_tools(
            specs,
            prefix=self.prefix,
            call=self.call_tool,
            timeout=self.timeout,
            server=self.label,
        )
        return self.tools

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: a change of the tool list (older protocols)."""
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()
        await anyio.lowlevel.checkpoint()

    async def _listen(
        self, client: Client, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """On the 2026 protocol, changes come on a ``subscriptions/listen`` stream."""
        reported = False
        try:
            with anyio.CancelScope() as scope:
                scope.deadline = anyio.current_time() + self.connect_timeout
                async with client.listen(tools_list_changed=True) as subscription:
                    scope.deadline = math.inf
                    reported = True
                    task_status.started()
                    async for _event in subscription:
                        self._changed.set()
            if scope.cancelled_caught and not reported:
                _LOG.warning(
                    "MCP server %s: no answer to subscriptions/listen within %s s; changes "
                    "to its tool list will not be picked up",
                    self.label,
                    self.connect_timeout,
                )
        except (MCPError, ListenNotSupportedError, SubscriptionLost) as exc:
            _LOG.info("MCP server %s: no tool-list changes from now on: %s", self.label, exc)
        except Exception as exc:  # a listen stream the SDK could not read: the session goes on
            _LOG.warning(
                "MCP server %s: no tool-list changes from now on: %s", self.label, _describe(exc)
            )
        finally:
            if not reported:
                task_status.started()

    async def _refresh_on_change(self, client: Client) -> None:
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            try:
                await self._fetch(client)
            except Exception as exc:  # whatever the server sent, the session goes on
                _LOG.warning(
                    "MCP server %s: listing the changed tools failed: %s",
                    self.label,
                    _describe(exc),
                )
            else:
                self._tool_changes += 1
                self._relisted.set()
                self._relisted = anyio.Event()

    # -- calls -------------------------------------------------------------------------------

    def _open_client(self) -> Client:
        client = self._client
        if client is None or self._lost is not None:
            if not self._entered:
                why = "the session is not open; use the server inside `async with server:`"
            else:
                why = self._lost or "the session is closed"
            raise MCPConnectionError(f"MCP server {self.label!r}: {why}", server=self.label)
        return client

    def _error(self, exc: MCPError, tool: str) -> MCPToolError | MCPConnectionError:
        if exc.code == types.CONNECTION_CLOSED:
            if self._closing.is_set():
                self._lost = "the session was closed while the call ran"
            else:
                self._lost = (
                    f"the connection was lost ({exc.message}); open a new session to use it again"
                )
            return MCPConnectionError(f"MCP server {self.label!r}: {self._lost}", server=self.label)
        return MCPToolError(
            f"MCP server {self.label!r} answered {tool!r} with error {exc.code}: {exc.message}",
            server=self.label,
            tool=tool,
            code=exc.code,
        )

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Call the server's tool ``name`` (its name on the server, without the prefix).

        The tools in :attr:`tools` call this after their schema check. The result is the
        call's ``structured_content`` when the server gave one, else its text (several text
        blocks joined by a blank line), else its content blocks as JSON objects.

        Raises:
            MCPToolError: the server said the call failed (``is_error``), or answered with
                an error (unknown tool, invalid arguments).
            MCPConnectionError: the session is not open, or the connection was lost.
        """
        client = self._open_client()
        try:
            result = await client.call_tool(name, dict(arguments))
        except MCPError as exc:
            raise self._error(exc, name) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            self._lost = "the connection was lost; open a new session to use it again"
            raise MCPConnectionError(
                f"MCP server {self.label!r}: {self._lost}", server=self.label
            ) from exc
        except pydantic.ValidationError as exc:
            raise MCPToolError(
                f"MCP server {self.label!r} answered {name!r} with a result that does not fit "
                f"the protocol: {exc.error_count()} problem(s), first: "
                f"{exc.errors()[0]['msg']}",
                server=self.label,
                tool=name,
            ) from exc
        return result_value(result, server=self.label, tool=name)

    def __repr__(self) -> str:
        state = "open" if self._client is not None and self._lost is None else "closed"
        return f"{type(self).__name__}({self.label!r}, prefix={self.prefix!r}, {state})"


def _listens(client: Client) -> bool:
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False  # older protocols send notifications/tools/list_changed unasked
    tools = client.server_capabilities.tools
    return bool(tools is not None and tools.list_changed)


def _describe(exc: BaseException) -> str:
    """``Type: message`` of the exception, looking into exception groups of one."""
    inner = getattr(exc, "exceptions", None)  # an exception group (3.11+ or the backport)
    if isinstance(inner, tuple) and inner:
        return "; ".join(_describe(one) for one in inner)
    text = str(exc)
    if isinstance(exc, MCPError):
        text = f"error {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(label: str, limit: int = 120) -> str:
    return label if len(label) <= limit else f"{label[: limit - 1]}…"


def _has_fd(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    return True


def _errlog(stream: TextIO | None) -> TextIO:
    """Where the server's stderr goes: ``stream``, else this process's stderr if it is a
    real file (not under a notebook's or a test's capture), else the original stderr,
    else nowhere."""
    for candidate in (stream, sys.stderr, sys.__stderr__):
        if candidate is not None and _has_fd(candidate):
            return candidate
    return cast(TextIO, subprocess.DEVNULL)  # anyio.open_process takes a descriptor too


def _version() -> str:
    from .. import __version__

    return __version__


class MCPServerStdio(MCPConnection):
    """An MCP server started as a subprocess, spoken to over its stdin and stdout.

    Args:
        command: the program (``"python"``, ``"npx"``, ``"uvx"`` ...).
        args: its arguments.
        env: environment variables for it, over the SDK's safe defaults (``PATH``,
            ``HOME`` ...; not the whole environment).
        cwd: its working directory.
        stderr: where its standard error goes: a file with a descriptor (default: this
            process's stderr; its original one when ``sys.stderr`` is captured, as in a
            notebook).
        prefix: put before every tool name, with ``_``.
        timeout: seconds one tool call may take (default 300); ``None``: no limit of its own.
        connect_timeout: seconds to open the session and list the tools (default 30).
        protocol: ``"auto"`` or ``"legacy"`` (see :data:`Protocol`).

    The process runs while the session is open; closing the session closes its stdin,
    then terminates it (its whole process group), then kills it; then every process still
    in its session (what it started, also in process groups of their own) is terminated,
    then killed, also when the server itself exited at once.
    """

    command: str
    args: list[str]
    _hint = "check that the command starts an MCP server on its own (it speaks on stdout)"

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stderr: TextIO | None = None,
        prefix: str | None = None,
        timeout: float | None = 300.0,
        connect_timeout: float = 30.0,
        protocol: Protocol = "auto",
    ) -> None:
        if not isinstance(command, str) or not command:
            raise ValueError(f"command must be a program to run, got {command!r}")
        if stderr is not None and not _has_fd(stderr):
            raise ValueError(
                f"stderr must be a file with a descriptor (an open file, sys.stderr), got "
                f"{type(stderr).__name__}"
            )
        if isinstance(args, str):
            raise ValueError(
                f"args must be a list of arguments, got the string {args!r}; "
                "MCPServerStdio.from_command_line('prog arg ...') splits a command line"
            )
        super().__init__(
            label=_short(shlex.join([command, *args])),
            prefix=prefix,
            timeout=timeout,
            connect_timeout=connect_timeout,
            protocol=protocol,
        )
        self.command = command
        self.args = list(args)
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._stderr = stderr
        for value in (self._env or {}).values():
            register_secret(value)  # tokens handed to the server never show in messages

    @classmethod
    def from_command_line(cls, command_line: str, **options: Any) -> MCPServerStdio:
        """``MCPServerStdio.from_command_line("python server.py --db x.db")``: the line
        split as a POSIX shell would (no shell runs it).

        Raises:
            ValueError: the line is empty or its quotes do not close.
        """
        try:
            words = shlex.split(command_line)
        except ValueError as exc:
            raise ValueError(f"cannot split the command line {command_line!r}: {exc}") from exc
        if not words:
            raise ValueError("the command line of an MCP server is empty")
        return cls(words[0], words[1:], **options)

    async def _server(self, stack: AsyncExitStack) -> Any:
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=self.command, args=self.args, env=self._env, cwd=self._cwd
        )
        return ending_session(stdio_client(params, errlog=_errlog(self._stderr)))


class MCPServerHTTP(MCPConnection):
    """An MCP server reached over Streamable HTTP.

    Args:
        url: its endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``); their
            values are secrets: never shown in messages, traces or logs.
        prefix: put before every tool name, with ``_``.
        timeout: seconds one tool call may take (default 300); ``None``: no limit of its own.
        connect_timeout: seconds to open the session and list the tools (default 30).
        protocol: ``"auto"`` or ``"legacy"`` (see :data:`Protocol`).

    Closing the session deletes it on the server (``DELETE``), within a bounded time.
    """

    url: str
    _hint = "check the URL (the endpoint, often /mcp) and that the server is up"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        prefix: str | None = None,
        timeout: float | None = 300.0,
        connect_timeout: float = 30.0,
        protocol: Protocol = "auto",
    ) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"url must be an http:// or https:// URL of the server's MCP endpoint, e.g. "
                f"http://127.0.0.1:8000/mcp, got {url!r}"
            )
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        super().__init__(
            label=urlunsplit((parts.scheme, host, parts.path, "", "")),
            prefix=prefix,
            timeout=timeout,
            connect_timeout=connect_timeout,
            protocol=protocol,
        )
        self.url = url
        self._headers = dict(headers or {})
        for value in self._headers.values():
            register_secret(value)
        if parts.password:
            register_secret(parts.password)

    async def _server(self, stack: AsyncExitStack) -> Any:
        # reads wait as long as a call may take (a response can be a quiet stream)
        read = None if self.timeout is None else max(300.0, self.timeout + 5.0)
        http = httpx2.AsyncClient(
            headers=self._headers, timeout=httpx2.Timeout(self.connect_timeout, read=read)
        )
        await stack.enter_async_context(http)
        return streamable_http_client(self.url, http_client=http)
