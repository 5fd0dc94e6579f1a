"""What changed between the baseline's facts and this run's: each fact that differs, and
those this run cannot know (never a change, never a cause)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfgate.facts import Fact

# Facts of the server's own metrics per level (diagnose.server): causes, not changes.
SERVER_FACTS = "server."


# Relative change under which a measured (noisy) number is "the same".
MEASURED_TOLERANCE = 0.15


# Facts that are read, not configured: shown in the diff only when they move a lot.
MEASURED_KEYS = {
    "spec_accept_rate",
    "spec_mean_accept_len",
    "log_accept_rate",
    "log_mean_accept_len",
    "graph_capture_s",
    "gpu_util_mean_pct",
}


# Facts read from log lines an engine may not print (log verbosity, build, version): their
# absence in this run is unknown, not a change, so it is never a cause.
ABSENT_IS_UNKNOWN = {
    "cuda_graphs",
    "gpu_offload_supported",
    "gpu_layers_offloaded",
    "gpu_layers_offloadable",
    "flash_attn_active",
    "kv_cache_type_k",
    "kv_cache_type_v",
    "compile_mode",
    "gpu_util_mean_pct",  # no NVML on this host: unknown
    "gpu_idle_while_flat",
    "cuda_graph_mode",
    "cuda_graph_max_batch",
    "config.device",
}


@dataclass(frozen=True, slots=True)
class FactChange:
    """A fact that differs between the baseline (old) and this run (new)."""

    key: str
    old: Fact | None
    new: Fact | None

    def describe(self) -> str:
        """``key: old → new`` with absent values named."""
        return f"{self.key}: {show_fact(self.key, self.old)} → {show_fact(self.key, self.new)}"


def show_fact(key: str, fact: Fact | None) -> str:
    """A fact's value for people: ``(absent)``, a rate as a percentage, a float to 4 digits."""
    if fact is None:
        return "(absent)"
    value = fact.value
    if key.endswith("accept_rate") and isinstance(value, float):
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _differs(key: str, old: Fact, new: Fact) -> bool:
    a, b = old.value, new.value
    if key in MEASURED_KEYS and isinstance(a, int | float) and isinstance(b, int | float):
        if key.endswith("accept_rate"):
            return abs(a - b) > 0.05 and abs(a - b) > MEASURED_TOLERANCE * max(abs(a), 1e-9)
        return abs(a - b) > MEASURED_TOLERANCE * max(abs(a), 1e-9)
    return a != b


def _known_absent(old: Fact, new: Mapping[str, Fact]) -> bool:
    """Whether a baseline fact this run lacks is known to be gone: a flag dropped from the
    command line of a server perfgate launched (its whole command line is known)."""
    return old.source == "command" and any(f.source == "command" for f in new.values())


def fact_changes(old: Mapping[str, Fact], new: Mapping[str, Fact]) -> list[FactChange]:
    """Facts that differ from the baseline's (measured figures only beyond their noise):
    facts this run reported, and flags dropped from a launched server's command line. A
    fact this run did not report is unknown, not a change: :func:`unknown_facts`."""
    changes = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if key.startswith("log_") and (a is None or b is None):
            continue  # periodic log figures come and go with timing
        if key.startswith(SERVER_FACTS):
            continue  # the server's per-level figures: ranked as causes (diagnose.server)
        if b is None:
            if a is not None and _known_absent(a, new):
                changes.append(FactChange(key, a, b))
        elif a is None or _differs(key, a, b):
            changes.append(FactChange(key, a, b))
    return changes


def unknown_facts(old: Mapping[str, Fact], new: Mapping[str, Fact]) -> list[str]:
    """Keys of baseline facts this run did not report and cannot know (an attached
    server's command line, a log line at another verbosity, an endpoint that did not
    answer): never a change, never a cause."""
    return sorted(
        key
        for key in old.keys() - new.keys()
        if not key.startswith(("log_", SERVER_FACTS)) and not _known_absent(old[key], new)
    )
