"""What the server said about itself, as facts and causes: its queue, running requests,
KV-cache use, preemptions and prefix-cache hits at each level
(:mod:`perfgate.measure.server`), kept as facts (``server.<measurement>.<level tag>.<word>``,
e.g. ``server.sweep.c4.kv_peak``) so a baseline holds them too, and ranked as causes
against the baseline's:

- preemptions at a level where the baseline had none: the KV cache is too small;
- the prefix-cache hit rate far under the baseline's: prefix caching off or evicted;
- requests waiting while fewer run than are in flight: fewer slots / max-num-seqs;
- the KV cache full from some level on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from perfgate.diagnose.changes import SERVER_FACTS
from perfgate.facts import Fact, Facts
from perfgate.gate.values import level_tag
from perfgate.measure.data import Measurement
from perfgate.measure.server import ServerSeries
from perfgate.stats.distributions import median

PREFIX = SERVER_FACTS

# What each fact is, read off one level run's series (the median over its runs is kept).
READ: dict[str, tuple[str, Callable[[ServerSeries], float | None]]] = {
    "waiting_mean": ("waiting", lambda s: s.mean("waiting")),
    "waiting_peak": ("waiting", lambda s: s.peak("waiting")),
    "running_peak": ("running", lambda s: s.peak("running")),
    "kv_peak": ("kv_usage", lambda s: s.peak("kv_usage")),
    "preemptions": ("preemptions", lambda s: s.preemptions),
    "prefix_hit_rate": ("prefix_hits", lambda s: s.prefix_hit_rate),
}

# The KV cache this full is full.
KV_FULL = 0.99

# A hit rate under this share of the baseline's has fallen ...
PREFIX_DROP = 0.5

# ... from a baseline at least this high.
PREFIX_FLOOR = 0.1


def server_facts(measurements: Mapping[str, Measurement]) -> Facts:
    """Each level's server figures (median over its runs), as measured facts."""
    facts: Facts = {}
    for name, m in measurements.items():
        for level, runs in m.by_concurrency().items():
            series = [r.server for r in runs if r.server is not None]
            if not series:
                continue
            for fact, (word, read) in READ.items():
                values = [v for s in series if (v := read(s)) is not None]
                if not values:
                    continue
                source = series[-1].sources.get(word, word)
                facts[f"{PREFIX}{name}.{level_tag(level)}.{fact}"] = Fact(
                    value=round(median(values), 4),
                    source="measured",
                    evidence=f"{source}, median of {len(values)} runs",
                )
    return facts


@dataclass(frozen=True, slots=True)
class _Level:
    """One level's server facts, now and in the baseline."""

    measurement: str
    level: str
    now: dict[str, float]
    base: dict[str, float]
    sources: dict[str, str]

    @property
    def in_flight(self) -> int | None:
        """The level's concurrency (None: a request rate)."""
        return int(self.level[1:]) if self.level.startswith("c") else None

    @property
    def where(self) -> str:
        shown = f"C={self.level[1:]}" if self.in_flight is not None else f"{self.level[1:]} req/s"
        return f"{self.measurement} {shown}"


def _levels(new: Mapping[str, Fact], old: Mapping[str, Fact]) -> list[_Level]:
    grouped: dict[tuple[str, str], _Level] = {}
    for facts, side in ((new, "now"), (old, "base")):
        for key, fact in facts.items():
            if not key.startswith(PREFIX) or not isinstance(fact.value, int | float):
                continue
            measurement, rest = key[len(PREFIX) :].split(".", 1)
            level, word = rest.rsplit(".", 1)
            entry = grouped.setdefault((measurement, level), _Level(measurement, level, {}, {}, {}))
            getattr(entry, side)[word] = float(fact.value)
            if side == "now" and fact.evidence:
                entry.sources[word] = fact.evidence.split(",")[0]
    return [e for e in grouped.values() if e.now]


def _baseline(base: dict[str, float], word: str, shown: str) -> str:
    value = base.get(word)
    return "" if value is None else f" (baseline {shown.format(value)})"


# The configured limits on requests running at once, and how to name them.
SLOT_FACTS = (
    ("slots", "parallel slots (-np)"),
    ("arg.max_num_seqs", "--max-num-seqs"),
    ("max_running_requests", "--max-running-requests"),
)

# A KV cache this full at a level's peak is what held requests back, with no slot limit.
KV_BUSY = 0.7


def _why_queued(lv: _Level, new: Mapping[str, Fact]) -> str:
    """Why requests waited: every slot the server is configured with was busy, else a KV
    cache with no room for more, else too few slots of an unknown limit."""
    running = lv.now["running_peak"]
    for key, label in SLOT_FACTS:
        limit = new.get(key)
        if limit is not None and isinstance(limit.value, int | float) and running >= limit.value:
            return (
                f"every slot busy ({label} {limit.value:g} for {lv.in_flight} requests in flight)"
            )
    kv = lv.now.get("kv_peak")
    if lv.now.get("preemptions", 0) > 0 or (kv is not None and kv >= KV_BUSY):
        shown = "" if kv is None else f", {kv:.0%} in use at its peak"
        return f"the KV cache had no room for more requests{shown}"
    return "fewer slots (-np, --max-num-seqs, --max-running-requests) than requests in flight"


def server_causes(new: Mapping[str, Fact], old: Mapping[str, Fact]) -> list[tuple[float, str]]:
    """Causes the server's own figures show, (score, text), each kind named once at its
    worst level."""
    levels = _levels(new, old)
    causes: list[tuple[float, str]] = []

    preempted = [
        lv for lv in levels if lv.now.get("preemptions", 0) > lv.base.get("preemptions", 0) * 2
    ]
    if preempted:
        lv = max(preempted, key=lambda e: e.now["preemptions"])
        count = lv.now["preemptions"]
        causes.append(
            (
                92,
                f"preemptions {count:.0f} at {lv.where}"
                f"{_baseline(lv.base, 'preemptions', '{:.0f}')}: "
                f"the KV cache is too small for the requests in flight "
                f"({lv.sources.get('preemptions', 'preemptions')})",
            )
        )

    fallen = [
        lv
        for lv in levels
        if "prefix_hit_rate" in lv.now
        and lv.base.get("prefix_hit_rate", 0) >= PREFIX_FLOOR
        and lv.now["prefix_hit_rate"] < PREFIX_DROP * lv.base["prefix_hit_rate"]
    ]
    if fallen:
        lv = min(fallen, key=lambda e: e.now["prefix_hit_rate"] - e.base["prefix_hit_rate"])
        causes.append(
            (
                86,
                f"prefix-cache hit rate {lv.now['prefix_hit_rate']:.0%} at {lv.where} "
                f"(baseline {lv.base['prefix_hit_rate']:.0%}): prompt (prefix) caching is "
                f"off, or its cache evicted ({lv.sources.get('prefix_hit_rate', 'prefix hits')})",
            )
        )

    queued = []
    for lv in levels:
        waiting, running = lv.now.get("waiting_peak"), lv.now.get("running_peak")
        if waiting is None or running is None or lv.in_flight is None:
            continue
        if waiting < 1 or running >= lv.in_flight:
            continue
        if lv.base.get("waiting_mean", -1.0) + 0.5 >= lv.now.get("waiting_mean", 0.0):
            continue  # queued as much in the baseline
        queued.append(lv)
    if queued:
        lv = max(queued, key=lambda e: e.now.get("waiting_mean", 0.0))
        base = ""
        if "waiting_peak" in lv.base and "running_peak" in lv.base:
            base = (
                f" (baseline: waiting up to {lv.base['waiting_peak']:.0f}, running "
                f"{lv.base['running_peak']:.0f})"
            )
        causes.append(
            (
                65,  # under a changed slot count (66), which this queue is the evidence of
                f"waiting up to {lv.now['waiting_peak']:.0f} (mean "
                f"{lv.now.get('waiting_mean', 0):.1f}) while running at most "
                f"{lv.now['running_peak']:.0f} at {lv.where}{base}: {_why_queued(lv, new)} "
                f"({lv.sources.get('waiting_peak', 'waiting')})",
            )
        )

    full = [
        lv
        for lv in levels
        if lv.now.get("kv_peak", 0) >= KV_FULL and lv.base.get("kv_peak", 0) < KV_FULL
    ]
    if full:
        first = min(full, key=lambda e: (e.measurement, e.in_flight or 0))
        causes.append(
            (
                72,
                f"KV cache {first.now['kv_peak']:.0%} full from {first.where} on"
                f"{_baseline(first.base, 'kv_peak', '{:.0%}')}",
            )
        )
    return causes
