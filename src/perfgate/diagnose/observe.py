"""Watching the server under test: speculative counters over a measured window, its
configuration facts, and what a server of unknown kind accepts.

Reads only; deciding and recording stay in :mod:`perfgate.run.session`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from perfgate.diagnose.measured import gpu_facts, spec_facts
from perfgate.diagnose.server import server_facts
from perfgate.engines import Engine, Fact, Facts, SpecCounters, parse_spec_counters
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.launch import Backend
from perfgate.measure.data import Measurement
from perfgate.measure.metrics import LevelMetrics, SpecStats


class SpecWindow:
    """Speculative-decoding counter deltas over exactly the measured part of a level."""

    def __init__(
        self,
        engine: Engine,
        base_url: str,
        headers: dict[str, str],
        clients: HttpClients = NETWORK,
    ) -> None:
        self.engine = engine
        self.clients = clients
        self.base_url = base_url
        self.headers = headers  # the server's API key and extra headers
        self.before: SpecCounters | None = None

    def _read(self, text: str | None) -> SpecCounters | None:
        if self.engine.metrics_path is None or self.engine.spec_prefix is None:
            return None
        if text is not None:  # read already (the server-metrics sampler's read)
            return parse_spec_counters(text, self.engine.spec_prefix)
        with self.clients.client(self.base_url, timeout=10.0, headers=self.headers) as c:
            return self.engine.spec_counters(c)

    def open(self, text: str | None = None) -> None:
        """Read the counters as measured requests start (from ``text``, the server's
        metrics just read, where given)."""
        self.before = self._read(text)

    def close(self, text: str | None = None) -> SpecStats | None:
        """Counts since ``open`` (None where the server exposes no spec counters)."""
        after = self._read(text)
        if after is None or self.before is None:
            return None
        delta = after.minus(self.before)
        self.before = None
        return SpecStats(
            drafts=delta.drafts,
            draft_tokens=delta.draft_tokens,
            accepted=delta.accepted,
            accepted_per_position=list(delta.accepted_per_position),
        )


def read_facts(
    engine: Engine,
    backend: Backend | None,
    *,
    engine_version: str,
    log: str,
    previous: Facts,
    measurements: Mapping[str, Measurement],
    clients: HttpClients = NETWORK,
) -> Facts:
    """The server's configuration facts now: command line, endpoints, log, measured
    acceptance (later sources win). Endpoint facts of ``previous`` are kept, as a stopped
    server answers no endpoint."""
    facts: Facts = {k: f for k, f in previous.items() if f.source == "endpoint"}
    if engine_version != "unknown":
        facts["engine_version"] = Fact(
            value=engine_version, source="endpoint", evidence="version endpoint"
        )
    if backend is not None:
        facts.update(engine.command_facts(backend.argv))
        if backend.alive():
            try:
                with clients.client(
                    backend.base_url, timeout=10.0, headers=backend.headers
                ) as client:
                    facts.update(engine.endpoint_facts(client))
            except httpx.HTTPError:
                pass
        facts.update(engine.log_facts(log))
    facts.update(spec_facts(measurements.values()))
    facts.update(gpu_facts(measurements))
    facts.update(server_facts(measurements))
    return facts


def rejected_extras(
    base_url: str,
    model: str,
    extras: dict[str, Any],
    headers: dict[str, str] | None = None,
    clients: HttpClients = NETWORK,
) -> str | None:
    """Why a server refuses the request fields that force output length (None: it takes
    them, or could not be asked; measuring then reports the failure with its evidence)."""
    if not extras:
        return None
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, **extras}
    try:
        with clients.client(base_url, timeout=30.0, headers=headers) as client:
            response = client.post("/v1/completions", json=body)
    except httpx.HTTPError:
        return None
    if 400 <= response.status_code < 500:
        return (
            f"the server rejects {', '.join(sorted(extras))} (HTTP {response.status_code}: "
            f"{response.text[:160]}); output lengths are not forced, so requests may "
            "end early and tok/s counts the tokens actually generated"
        )
    return None


def short_outputs(m: LevelMetrics, output_len: int, forced: bool) -> str | None:
    """What to say when a level's outputs came back shorter than asked (None: they didn't)."""
    if not m.ok or m.output_tokens >= m.ok * output_len:
        return None
    return (
        f"C={m.concurrency}: {m.output_tokens} output tokens over {m.ok} requests, "
        f"fewer than {output_len} each"
        + (" although ignore_eos was sent (the server ignores it)" if forced else "")
        + "; figures compare badly with runs of full-length outputs"
    )
