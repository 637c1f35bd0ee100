"""The little HTTP/1.1 that `FakeOpenAIServer` needs: read a request, write a response.

Keep-alive connections, request bodies framed by `Content-Length` or chunked,
`Expect: 100-continue`; responses framed by `Content-Length` (or chunked, written by the
caller). Malformed requests raise `BadRequest` with the status to answer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import anyio
from anyio.abc import SocketStream

__all__ = [
    "DISCONNECTS",
    "MAX_HEAD",
    "BadRequest",
    "Connection",
    "RecordedRequest",
    "read_body",
    "read_request",
    "request_id",
    "response_head",
    "send_json",
    "send_response",
]

MAX_HEAD = 64 * 1024
MAX_BODY = 32 * 1024 * 1024
RECEIVE_SIZE = 65536
DISCONNECTS = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the server received, in arrival order."""

    method: str
    path: str
    """The path without the query string, e.g. `/v1/chat/completions`."""
    query: str
    headers: Mapping[str, str]
    """Lower-cased names; repeated headers joined with `", "`."""
    body: Any
    """The parsed JSON body, or None when the body is empty or not JSON."""
    raw_body: bytes
    connection: int
    """Index of the TCP connection it came on (equal values: a kept-alive connection)."""
    received_at: float
    """`time.monotonic()` when the request was read."""

    @property
    def stream(self) -> bool:
        """Whether the body asked for a streamed reply."""
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


class BadRequest(Exception):
    """A request that cannot be served; answer `status` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Connection:
    """A socket with a read buffer (requests are read from it; EOF is watched on it)."""

    def __init__(self, stream: SocketStream, index: int) -> None:
        self.stream = stream
        self.index = index
        self.buffer = bytearray()

    async def fill(self) -> None:
        self.buffer += await self.stream.receive(RECEIVE_SIZE)

    async def read_until(self, delimiter: bytes, limit: int) -> bytes:
        start = 0
        while (end := self.buffer.find(delimiter, start)) < 0:
            if len(self.buffer) > limit:
                raise BadRequest(431, "Request header fields too large")
            start = max(0, len(self.buffer) - len(delimiter) + 1)
            await self.fill()
        data = bytes(self.buffer[:end])
        del self.buffer[: end + len(delimiter)]
        return data

    async def read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self.fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)


async def read_request(connection: Connection) -> RecordedRequest:
    """Read one request (head and body); `anyio.EndOfStream` if the client closed first."""
    head = await connection.read_until(b"\r\n\r\n", MAX_HEAD)
    received_at = time.monotonic()
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest(400, "Malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(505, f"HTTP version not supported: {version}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, f"Malformed header line: {line!r}")
        name = name.lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if headers.get("expect", "").lower() == "100-continue":
        await connection.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    raw_body = await read_body(connection, headers)
    path, _, query = target.partition("?")
    body: Any = None
    if raw_body:
        try:
            body = json.loads(raw_body)
        except ValueError:
            body = None
    return RecordedRequest(
        method=method,
        path=path,
        query=query,
        headers=headers,
        body=body,
        raw_body=raw_body,
        connection=connection.index,
        received_at=received_at,
    )


async def read_body(connection: Connection, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await connection.read_until(b"\r\n", MAX_HEAD)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadRequest(400, "Malformed chunk size in the request body") from None
            total += size
            if total > MAX_BODY:
                raise BadRequest(413, "Request body too large")
            if size == 0:
                while await connection.read_until(b"\r\n", MAX_HEAD):  # trailers
                    pass
                return b"".join(parts)
            parts.append(await connection.read_exactly(size))
            if await connection.read_exactly(2) != b"\r\n":
                raise BadRequest(400, "Malformed chunk in the request body")
    length_header = headers.get("content-length")
    if length_header is None:
        return b""
    try:
        length = int(length_header)
    except ValueError:
        raise BadRequest(400, f"Malformed content-length: {length_header!r}") from None
    if length < 0:
        raise BadRequest(400, f"Malformed content-length: {length_header!r}")
    if length > MAX_BODY:
        raise BadRequest(413, "Request body too large")
    return await connection.read_exactly(length)


def response_head(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", "server: toolloop-fake-openai"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send_response(
    connection: Connection,
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    close: bool = False,
) -> None:
    all_headers = {"x-request-id": request_id(), **headers, "content-length": str(len(body))}
    if close:
        all_headers["connection"] = "close"
    await connection.send(response_head(status, all_headers) + body)


async def send_json(
    connection: Connection, status: int, value: Any, *, close: bool = False
) -> None:
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    await send_response(connection, status, body, {"content-type": "application/json"}, close=close)


def request_id() -> str:
    return "req_" + uuid.uuid4().hex
