"""The pooled client of a measurement, whose connections stamp when a request left.

A request has left when its last byte was handed to the socket. httpx's trace events,
and even the return of httpcore's ``write``, come an event-loop turn later (anyio yields
after each write, or before it in older versions), so under load they stamp late: after
the server has already read the request. Instead, every connection here is a
:class:`StampedStream` that takes the clock inside the asyncio transport's own
``write``, just before the bytes go to the socket. A response's ``network_stream``
extension gives that time (:func:`sent_at`): on an HTTP/1.1 connection, one request at
a time, the last write before the response is the request's last byte.

Where the transport cannot be reached (another event loop, such as uvloop), the stamp
is taken after httpcore's write returns, and :attr:`StampedStream.exact` says so.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import typing
from collections.abc import Callable, Iterable

import httpcore
import httpx

Clock = Callable[[], float]


class StampedStream(httpcore.AsyncNetworkStream):
    """A network stream that remembers when it last wrote bytes."""

    def __init__(self, stream: httpcore.AsyncNetworkStream, clock: Clock) -> None:
        self._stream = stream
        self._clock = clock
        self.written_at: float | None = None
        self.exact = self._hook(_asyncio_transport(stream))

    def _hook(self, transport: asyncio.WriteTransport | None) -> bool:
        """Stamp inside the transport's ``write`` (False where it cannot be wrapped)."""
        if transport is None:
            return False
        write = transport.write
        clock = self._clock

        def stamped(data: bytes | bytearray | memoryview) -> None:
            self.written_at = clock()  # before: the server may read it before write returns
            write(data)

        try:
            transport.write = stamped  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a C transport (uvloop)
            return False
        return True

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)
        if buffer and not self.exact:
            self.written_at = self._clock()

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        tls = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return StampedStream(tls, self._clock)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


def _asyncio_transport(stream: object) -> asyncio.WriteTransport | None:
    """The asyncio transport under httpcore's anyio stream (through TLS), if reachable."""
    inner = getattr(stream, "_stream", None)  # httpcore's AnyIOStream -> anyio stream
    while inner is not None and hasattr(inner, "transport_stream"):  # anyio's TLSStream
        inner = inner.transport_stream
    transport = getattr(inner, "_transport", None)  # anyio's asyncio SocketStream
    return transport if isinstance(transport, asyncio.WriteTransport) else None


class StampingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, with every stream a :class:`StampedStream`."""

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self._backend = httpcore.AnyIOBackend()
        self._clock = clock

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return StampedStream(stream, self._clock)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(path, timeout, socket_options)
        return StampedStream(stream, self._clock)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def stamping_transport(
    max_connections: int, clock: Clock = time.perf_counter
) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (its error mapping and request conversion), with its pool
    rebuilt on :class:`StampingBackend`."""
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(  # httpx exposes no backend option
        ssl_context=httpx.create_ssl_context(),
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=5.0,
        network_backend=StampingBackend(clock),
    )
    return transport


def pooled_client(
    base_url: str, max_connections: int, timeout_s: float, clock: Clock = time.perf_counter
) -> httpx.AsyncClient:
    """The one async client a measurement uses: enough pooled connections for the top
    level, each stamping when a request left."""
    return httpx.AsyncClient(
        base_url=base_url,
        transport=stamping_transport(max_connections, clock),
        timeout=httpx.Timeout(timeout_s, connect=10.0),
    )


def sent_at(response: httpx.Response) -> float | None:
    """When the request of this response left (None: not a stamping connection)."""
    stream = response.extensions.get("network_stream")
    return stream.written_at if isinstance(stream, StampedStream) else None
