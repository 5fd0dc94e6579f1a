"""Telling which engine serves an address (``perfgate init``): each engine's
:meth:`~perfgate.engines.base.Engine.identify` looks at the server's answers through one
:class:`ServerProbe`, which asks each path once however many engines look at it, and
claims the server (:class:`Identified`) or not (None)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from perfgate.errors import PerfgateError


@dataclass(frozen=True)
class Identified:
    """An engine's claim to serve the probed server, and what the server told on the way.

    ``source`` is the answer that showed it (``"/props"``, ``"/metrics (vllm:*)"``).
    ``certain`` is False for an answer other engines may give too (an endpoint that merely
    answers): another engine's certain claim then wins. ``slots`` (the requests it runs at
    once) and ``context`` (tokens per request) are None where it did not tell; ``sources``
    says where each told figure came from (``{"context": "/v1/models max_model_len"}``).
    """

    source: str
    certain: bool = True
    slots: int | None = None
    context: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


class ServerProbe:
    """A running server's answers to GET requests, each path asked once.

    Every engine's :meth:`~perfgate.engines.base.Engine.identify` reads the same probe, so
    a page several engines look at (``/metrics``) is fetched once. ``client`` (its
    ``base_url`` the server's) stays open for the caller's other requests.
    """

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self._answers: dict[str, httpx.Response | None] = {}

    def get(self, path: str) -> httpx.Response | None:
        """The server's answer to GET ``path`` (None: the request failed)."""
        if path not in self._answers:
            try:
                self._answers[path] = self.client.get(path)
            except httpx.HTTPError:
                self._answers[path] = None
        return self._answers[path]

    def json(self, path: str) -> dict[str, Any] | None:
        """The JSON object GET ``path`` answered with status 200, else None. A server that
        refuses it for want of an API key (401, 403) is an error saying how to pass one."""
        response = self.get(path)
        if response is None:
            return None
        if response.status_code in (401, 403):
            raise PerfgateError(
                f"{self.client.base_url} answered {response.status_code} to GET {path}: it "
                "wants an API key. Put it in an environment variable and name the variable: "
                "perfgate init --perf-base-url URL --api-key-env VLLM_API_KEY"
            )
        if response.status_code != 200:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def text(self, path: str) -> str | None:
        """The text GET ``path`` answered with status 200, else None."""
        response = self.get(path)
        if response is None or response.status_code != 200:
            return None
        return response.text

    @property
    def model(self) -> dict[str, Any]:
        """The first model ``/v1/models`` lists (every OpenAI-compatible server answers
        it; engines add fields such as ``max_model_len``), or {}."""
        listed = (self.json("/v1/models") or {}).get("data")
        first = listed[0] if isinstance(listed, list) and listed else None
        return first if isinstance(first, dict) else {}

    def by_metrics(self, prefix: str) -> Identified | None:
        """A certain claim when ``/metrics`` names series starting with ``prefix``
        (``"vllm:"``): an engine's own metric names tell it."""
        text = self.text("/metrics")
        if text is None or re.search(rf"^{re.escape(prefix)}", text, re.M) is None:
            return None
        return Identified(f"/metrics ({prefix}*)")
