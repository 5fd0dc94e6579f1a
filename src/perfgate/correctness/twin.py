"""A speculative profile's non-speculative twin, run alone: launched on a port of its own,
asked for its greedy outputs, stopped. One server at a time: two large models rarely fit
one host, so the twin runs before the profile's own server starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from perfgate.client import SimpleClient
from perfgate.correctness.golden import Greedy, greedy_outputs
from perfgate.engines import get_engine
from perfgate.errors import BackendError, PerfgateError
from perfgate.launch import launch
from perfgate.profile import load_profile


def twin_greedy(
    name: str,
    profiles_dir: Path,
    prompts: list[str],
    max_tokens: int,
    *,
    log_dir: Path,
    owner: str,
    before: str,
    progress: Callable[[str], None],
) -> Greedy | str:
    """The twin profile ``name``'s greedy outputs of ``prompts``, or why there are none."""
    try:
        twin = load_profile(name, profiles_dir)
        twin = twin.model_copy(update={"server": twin.server.model_copy(update={"port": 0})})
        engine = get_engine(twin.engine)
        progress(f"perfgate: starting twin profile {name} alone, before {before}")
        backend = launch(twin, engine, log_dir, owner=owner)
    except (BackendError, PerfgateError) as exc:
        return f"twin profile {name} could not start: {exc}"
    try:
        backend.wait_ready(twin.timeouts.startup_s)
        client = SimpleClient(
            backend.base_url,
            twin.model.name,
            timeout_s=twin.timeouts.request_s,
            fields=twin.server.request_fields,
            headers=backend.headers,
        )
        return greedy_outputs(client, prompts, max_tokens, engine.deterministic_extras())
    except (BackendError, httpx.HTTPError) as exc:
        return f"twin profile {name} failed: {exc}"
    finally:
        backend.stop()
        progress(f"perfgate: twin profile {name} stopped")
