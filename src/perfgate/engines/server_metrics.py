"""What a server says about its own state on ``/metrics``, in one vocabulary for every
engine: requests running and waiting, KV-cache use, preemptions, prefix-cache hits and
queries, and its own count of generated tokens.

Each engine maps the vocabulary to its Prometheus names (:class:`MetricMap`, a tuple of
spellings per word: the first one the server exposes wins, so older and newer versions
both read). A word the engine or its version does not expose is *absent*, never 0.

The reader is a lean line scan, not a full Prometheus parse: it runs every half second
beside the measured requests, and looks only at the lines of the names it wants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

MetricKind = Literal["gauge", "counter"]

# The vocabulary: each word, what kind of series it is, and what it means.
VOCABULARY: dict[str, tuple[MetricKind, str]] = {
    "running": ("gauge", "requests the server is generating for now"),
    "waiting": ("gauge", "requests queued in the server, not yet running"),
    "kv_usage": ("gauge", "share of the KV cache in use (0-1)"),
    "preemptions": ("counter", "requests preempted (their KV cache given up) so far"),
    "prefix_hits": ("counter", "prompt tokens (or blocks) found in the prefix cache"),
    "prefix_queries": ("counter", "prompt tokens (or blocks) looked up in the prefix cache"),
    "server_generated_tokens": ("counter", "output tokens the server generated"),
}

GAUGES = tuple(word for word, (kind, _) in VOCABULARY.items() if kind == "gauge")
COUNTERS = tuple(word for word, (kind, _) in VOCABULARY.items() if kind == "counter")

# Gauges summed over label sets (data-parallel ranks, models) except these, whose
# largest value is the server's (a share of each rank's own cache).
LARGEST_OF_LABELS = frozenset({"kv_usage"})


@dataclass(frozen=True)
class MetricMap:
    """An engine's Prometheus names for the vocabulary: each word, its spellings (first
    exposed wins; ``a+b``: the sum of two names, read only where both are exposed).
    ``notes``: why a word is absent for this engine, said once per run."""

    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    def wanted(self) -> set[str]:
        """Every Prometheus name a spelling reads."""
        return {part for names in self.names.values() for name in names for part in name.split("+")}


@dataclass(frozen=True)
class Reading:
    """One read of ``/metrics``: each word's value and the name it came from."""

    values: dict[str, float]
    sources: dict[str, str]


def _value(line: str) -> float | None:
    rest = line[line.rfind("}") + 1 :] if "{" in line else line.partition(" ")[2]
    parts = rest.split()
    if not parts:
        return None
    try:
        return float(parts[0])
    except ValueError:
        return None


def read_metrics(text: str, metric_map: MetricMap) -> Reading:
    """The vocabulary's values in Prometheus text (absent words are left out): label sets
    summed (``kv_usage``: the largest), the first spelling the server exposes per word."""
    wanted = metric_map.wanted()
    found: dict[str, float] = {}  # name -> value (label sets summed; kv_usage: largest)
    largest = {
        part
        for word in LARGEST_OF_LABELS
        for name in metric_map.names.get(word, ())
        for part in name.split("+")
    }
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if 0 <= at < end:
                end = at
        name = line[:end]
        if name not in wanted:
            continue
        value = _value(line)
        if value is None or value != value:  # NaN: not a reading
            continue
        if name in largest:
            found[name] = max(found.get(name, value), value)
        else:
            found[name] = found.get(name, 0.0) + value
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for word, names in metric_map.names.items():
        for name in names:
            parts = name.split("+")
            if all(part in found for part in parts):
                values[word], sources[word] = sum(found[part] for part in parts), name
                break
    return Reading(values, sources)
