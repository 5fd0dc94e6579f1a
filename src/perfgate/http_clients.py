"""How a run opens its HTTP clients: real connections by default, or every one of them on
one injected httpx transport (a unit test drives a whole run on ``httpx.MockTransport``,
with no socket and no process).

Measured requests go through :mod:`perfgate.client.wire` (lean, timed sockets) on real
connections, and through httpx on an injected transport (:attr:`HttpClients.injected`).
"""

from __future__ import annotations

import httpx

Timeout = float | httpx.Timeout


class HttpClients:
    """Opens the httpx clients of a run: with ``transport`` (sync and async, as
    ``httpx.MockTransport`` is), all of them on it; without, real connections."""

    def __init__(self, transport: httpx.MockTransport | None = None) -> None:
        self.transport = transport

    @property
    def injected(self) -> bool:
        """Whether requests go to an injected transport instead of the network."""
        return self.transport is not None

    def client(
        self, base_url: str, *, timeout: Timeout, headers: dict[str, str] | None = None
    ) -> httpx.Client:
        """A blocking client of the server at ``base_url``."""
        return httpx.Client(
            base_url=base_url, timeout=timeout, headers=headers, transport=self.transport
        )

    def async_client(
        self, base_url: str, *, timeout: Timeout, headers: dict[str, str] | None = None
    ) -> httpx.AsyncClient:
        """An asyncio client of the server at ``base_url``."""
        return httpx.AsyncClient(
            base_url=base_url, timeout=timeout, headers=headers, transport=self.transport
        )


NETWORK = HttpClients()  # real connections: what every run uses unless a test injects
