"""A lean HTTP/1.1 client for the measured, streamed requests.

httpx puts httpcore, h11 and anyio between a socket read and the code that stamps it:
about 55-90 µs of CPU a chunk and a task wake-up or two of delay (measured against the
simulator, ``benchmarks/harness_fidelity.py``). Here a connection is an
``asyncio.Protocol``:

- the request, head and body, goes out in one ``write``, stamped just before (``sent``);
- each read is stamped in ``data_received``, the moment the event loop hands it over,
  and its chunked framing undone in place; SSE and JSON are parsed after the response
  has ended, off the hot path;
- one connection per worker, kept alive between requests, opened before the clock.

Plain http and https (asyncio's TLS). No proxies, redirects or HTTP/2: the measurement
talks to the server directly. Everything else (checks, tokenizing) uses httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Clock = Callable[[], float]
HEAD_LIMIT = 64 * 1024


class ConnectionClosed(Exception):
    """The server closed a kept connection before any byte of the response: the request
    may be sent again on a new connection."""


@dataclass
class Response:
    """One response as it arrived: status, headers, and body pieces with their arrival
    times (two flat lists: floats and bytes are not tracked by the garbage collector,
    tuples would be, and a collection walking them stalls the loop)."""

    sent: float
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    end: float | None = None
    error: str | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


class WireConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection serving one request at a time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._response: Response | None = None
        self._done: asyncio.Future[Response] | None = None
        self._received_any = False
        self._raw = bytearray()
        self._framing = ""  # "chunked", "length", "close" once the head is read
        self._left = 0  # body bytes still expected ("length")
        self._keep_alive = True

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = self._clock()
        if self._response is None:
            self.abort()  # bytes nobody asked for: the connection is not usable
            return
        self._received_any = True
        self._raw += data
        if not self._framing and not self._head(now):
            return
        self._body(now)

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._response is None or self._done is None or self._done.done():
            return
        if not self._received_any:
            self._done.set_exception(ConnectionClosed("closed before any response byte"))
        elif self._framing == "close":
            self._finish(self._clock())
        else:
            self._fail(f"connection lost mid-response ({exc or 'closed by the server'})")

    # -- requests ---------------------------------------------------------------------
    def send(self, head: bytes, body: bytes) -> asyncio.Future[Response]:
        """Write one request; the future resolves when its response has ended."""
        assert self.transport is not None and self._response is None
        self._raw.clear()
        self._framing, self._left, self._keep_alive = "", 0, True
        self._received_any = False
        self._done = asyncio.get_running_loop().create_future()
        request = head + body
        # stamped just before the write: the bytes leave during the call, and on one
        # machine the server may even run (and read them) before the call returns
        self._response = Response(sent=self._clock())
        self.transport.write(request)
        return self._done

    def abort(self) -> None:
        """Drop the connection (a timed-out or broken exchange)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- parsing ----------------------------------------------------------------------
    def _head(self, now: float) -> bool:
        end = self._raw.find(b"\r\n\r\n")
        if end < 0:
            if len(self._raw) > HEAD_LIMIT:
                self._fail("response head too large")
            return False
        lines = bytes(self._raw[:end]).decode("latin-1").split("\r\n")
        del self._raw[: end + 4]
        response = self._response
        assert response is not None
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            self._fail(f"malformed status line {lines[0][:100]!r}")
            return False
        response.status = int(parts[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            response.headers[name.strip().lower()] = value.strip()
        headers = response.headers
        http11 = parts[0] == "HTTP/1.1"
        self._keep_alive = http11 and "close" not in headers.get("connection", "").lower()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            self._framing, self._left = "length", int(headers["content-length"])
            if self._left == 0:
                self._finish(now)
                return False
        else:
            self._framing = "close"
        return True

    def _body(self, now: float) -> None:
        response = self._response
        if response is None:
            return
        raw = self._raw
        if self._framing != "chunked":
            if raw:
                response.times.append(now)
                response.pieces.append(bytes(raw))
                self._left -= len(raw)
                raw.clear()
            if self._framing == "length" and self._left <= 0:
                self._finish(now)
            return
        pos = 0
        while True:
            line_end = raw.find(b"\r\n", pos)
            if line_end < 0:
                break
            try:
                size = int(bytes(raw[pos:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                self._fail(f"malformed chunk size {bytes(raw[pos:line_end])[:40]!r}")
                return
            if size == 0:
                if raw.find(b"\r\n\r\n", line_end) < 0:
                    break  # the trailers' end is not here yet
                raw.clear()
                self._finish(now)
                return
            if len(raw) < line_end + 2 + size + 2:
                break  # the whole chunk is not here yet
            response.times.append(now)
            response.pieces.append(bytes(raw[line_end + 2 : line_end + 2 + size]))
            pos = line_end + 2 + size + 2
        del raw[:pos]

    def _finish(self, now: float) -> None:
        response, done = self._response, self._done
        self._response, self._done = None, None
        if response is None or done is None:
            return
        response.end = now
        if not self._keep_alive:
            self.abort()
        if not done.done():
            done.set_result(response)

    def _fail(self, error: str) -> None:
        response = self._response
        if response is not None:
            response.error = error
            response.end = self._clock()
        self._finish(self._clock())
        self.abort()


def header_lines(headers: Mapping[str, str]) -> bytes:
    """Extra request headers as the lines of a head, encoded once per run (an API key,
    a gateway's headers). A name or value that would break the head is refused."""
    out = bytearray()
    for name, value in headers.items():
        if not name or any(c in name for c in ":\r\n ") or "\r" in value or "\n" in value:
            raise ValueError(f"not a valid HTTP header: {name!r}")
        out += f"{name}: {value}\r\n".encode("latin-1")
    return bytes(out)


class Endpoint:
    """Where measured requests go: scheme, host, port and path prefix of a base URL."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        default = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        self.authority = self.host if default else f"{self.host}:{self.port}"
        self._ssl: ssl.SSLContext | None = None

    def head(self, path: str, length: int, headers: bytes = b"") -> bytes:
        """The head of a JSON POST to ``path`` with a body of ``length`` bytes; ``headers``:
        extra header lines (:func:`header_lines`)."""
        return (
            (
                f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.authority}\r\n"
                "User-Agent: perfgate\r\nAccept: text/event-stream, application/json\r\n"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
            ).encode("latin-1")
            + headers
            + b"\r\n"
        )

    async def connect(self, clock: Clock, timeout_s: float = 10.0) -> WireConnection:
        """A new connection (TLS where the URL says https)."""
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout_s):
            _, protocol = await loop.create_connection(
                lambda: WireConnection(clock),
                self.host,
                self.port,
                ssl=self._ssl if self.tls else None,
            )
        return protocol


async def exchange(
    endpoint: Endpoint,
    connection: WireConnection | None,
    path: str,
    body: bytes,
    *,
    timeout_s: float,
    headers: bytes = b"",
    clock: Clock = time.perf_counter,
) -> tuple[Response, WireConnection, int]:
    """Send one request on ``connection`` (a new one when None or closed) and await its
    whole response. A kept connection the server had closed (before any response byte)
    is replaced once. Returns the response, the connection to keep, and reconnects."""
    head = endpoint.head(path, len(body), headers)
    reconnects = 0
    async with asyncio.timeout(timeout_s):
        while True:
            if connection is None or connection.closed:
                connection = await endpoint.connect(clock)
            try:
                return await connection.send(head, body), connection, reconnects
            except ConnectionClosed:
                if reconnects:
                    raise
                reconnects += 1
                connection = None
            except BaseException:
                with contextlib.suppress(Exception):
                    connection.abort()
                raise
