"""Watching the server under test: its configuration facts, and what a server of unknown
kind accepts (the readings over a measured window: :mod:`perfgate.measure.samplers`).

Reads only; deciding and recording stay in :mod:`perfgate.run.session`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from perfgate.diagnose.measured import gpu_facts, spec_facts
from perfgate.diagnose.server import server_facts
from perfgate.engines import Engine, Fact, Facts
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.launch import Backend
from perfgate.measure.data import Measurement
from perfgate.measure.metrics import LevelMetrics


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
