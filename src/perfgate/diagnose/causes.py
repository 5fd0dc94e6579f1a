"""Diagnosis: why a figure regressed, from the server's facts and log.

Facts (``engines`` reads them from logs, command lines and endpoints; measured acceptance
comes from the run) are compared with the facts stored in the baseline. Differences are
ranked into likely causes, and the log lines the seeds grepped for by hand
(accept|spec|draft|NCCL|P2P|attention|KV cache|cuda graph|mamba) are attached. Build and
runtime facts the log reports (flash attention as resolved, GPU offload, CUDA graphs,
torch.compile, KV cache types) rank high. A fact this run did not report, from whatever
source (an attached server has no command line; a log at another verbosity omits lines), is
unknown: listed once as not known, never a change and never a cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from perfgate.engines import Fact, Facts
from perfgate.gate.figures import BY_NAME
from perfgate.gate.verdict import Check
from perfgate.measure.metrics import Measurement, SpecStats
from perfgate.stats import median

# Relative change under which a measured (noisy) number is "the same".
MEASURED_TOLERANCE = 0.15
# A speculative profile whose acceptance fell below this share of the baseline's.
ACCEPT_DROP = 0.8
# Acceptance this low is a cause even without a baseline to compare with.
ACCEPT_FLOOR = 0.2
MAX_LOG_LINES = 15


@dataclass(frozen=True, slots=True)
class FactRule:
    """How much a changed fact weighs as a cause, and how to name it."""

    label: str
    weight: float


RULES: dict[str, FactRule] = {
    "tensor_parallel_size": FactRule("tensor parallel size", 85),
    "cuda_graphs": FactRule("CUDA graphs", 90),
    "custom_all_reduce": FactRule("custom all-reduce", 80),
    "spec_method": FactRule("speculative method", 78),
    "spec_num_tokens": FactRule("draft tokens per step", 74),
    "draft_model": FactRule("draft model", 76),
    "spec_synthetic": FactRule("synthetic (benchmark-only) acceptance", 77),
    "attention_backend": FactRule("attention backend", 70),
    "kv_cache_tokens": FactRule("KV cache size (tokens)", 60),
    "max_concurrency": FactRule("maximum concurrency at full context", 55),
    "max_running_requests": FactRule("maximum running requests", 55),
    "threads": FactRule("threads", 68),
    "threads_batch": FactRule("batch threads", 60),
    "slots": FactRule("parallel slots", 66),
    "ctx_size": FactRule("context size", 45),
    "ctx_per_slot": FactRule("context per slot", 45),
    "batch_size": FactRule("batch size", 50),
    "ubatch_size": FactRule("micro-batch size", 50),
    "flash_attn": FactRule("flash attention", 62),
    "cache_prompt": FactRule("prompt (prefix) cache", 72),
    "cache_ram_mib": FactRule("prompt cache size (MiB)", 56),
    "kv_cache_type_k": FactRule("KV cache type (K)", 58),
    "kv_cache_type_v": FactRule("KV cache type (V)", 58),
    "kv_cache_dtype": FactRule("KV cache dtype", 58),
    "gpu_layers": FactRule("GPU layers", 70),
    # build and runtime facts read from the log: what the server really did
    "gpu_offload_supported": FactRule("GPU offload", 96),
    "gpu_layers_offloaded": FactRule("layers offloaded to the GPU", 92),
    "flash_attn_active": FactRule("flash attention", 88),
    "compile_mode": FactRule("torch.compile mode", 80),
    "config.enforce_eager": FactRule("eager mode (enforce_eager)", 82),
    "cuda_graph_mode": FactRule("CUDA graph mode", 75),
    "cuda_graph_max_batch": FactRule("largest CUDA-graphed batch", 62),
    "model_quant": FactRule("model quantization", 65),
    "override_kv": FactRule("model metadata overrides", 40),
    "engine_version": FactRule("engine version", 50),
    "nccl_version": FactRule("NCCL version", 40),
}
ARG_WEIGHT = 30.0  # any other engine argument
OTHER_WEIGHT = 20.0
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
# On/off facts (False, "off", "0" is off).
SWITCHES = ("cuda_graphs", "custom_all_reduce", "flash_attn", "flash_attn_active")
# Numeric facts where less is slower and more never explains a slowdown.
CAPACITIES = (
    "kv_cache_tokens",
    "max_concurrency",
    "max_running_requests",
    "gpu_layers_offloaded",
    "cuda_graph_max_batch",
)


@dataclass(frozen=True, slots=True)
class Cause:
    """One likely cause, with its rank score (higher: more likely) and why."""

    score: float
    text: str


@dataclass(frozen=True, slots=True)
class FactChange:
    """A fact that differs between the baseline (old) and this run (new)."""

    key: str
    old: Fact | None
    new: Fact | None

    def describe(self) -> str:
        """``key: old → new`` with absent values named."""
        return f"{self.key}: {_show(self.key, self.old)} → {_show(self.key, self.new)}"


class DiagnosisRecord(BaseModel):
    """A diagnosis as text, kept in the run JSON: ranked causes, the facts that differ
    from the baseline's (``key: old → new``), and the server's matching log lines."""

    causes: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)
    unknown: list[str] = Field(
        default_factory=list,
        description="Baseline facts this run did not report: not known, so never a cause.",
    )
    log_lines: list[str] = Field(default_factory=list)
    grep: str = ""
    baseline_has_facts: bool = True

    def lines(self) -> list[str]:
        """The diagnosis as message lines (empty when there is nothing to say)."""
        out: list[str] = []
        if self.causes:
            out.append("likely causes, most likely first:")
            out += [f"  {i}. {text}" for i, text in enumerate(self.causes, 1)]
        if self.changes:
            out.append("facts that differ from the baseline:")
            out += [f"  {change}" for change in self.changes]
        if self.unknown:
            out.append(f"facts not known for this run (not reported): {', '.join(self.unknown)}")
        if not self.changes and not self.baseline_has_facts:
            out.append(
                "the baseline has no recorded facts to compare with; record it again "
                "(--perf-update-baselines) to get a configuration diff"
            )
        if self.log_lines:
            out.append(f"server log lines matching {self.grep}:")
            out += [f"  {line}" for line in self.log_lines]
        return out


@dataclass
class Diagnosis:
    """Ranked causes, differing facts and matching log lines for a failure message."""

    causes: list[Cause] = field(default_factory=list)
    changes: list[FactChange] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    grep: str = ""
    baseline_has_facts: bool = True

    def record(self) -> DiagnosisRecord:
        """The diagnosis as text, for the run JSON and every report."""
        return DiagnosisRecord(
            causes=[c.text for c in self.causes],
            changes=[c.describe() for c in self.changes],
            unknown=list(self.unknown),
            log_lines=list(self.log_lines),
            grep=self.grep,
            baseline_has_facts=self.baseline_has_facts,
        )

    def lines(self) -> list[str]:
        """The diagnosis as message lines (empty when there is nothing to say)."""
        return self.record().lines()


def _show(key: str, fact: Fact | None) -> str:
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
        if not key.startswith("log_") and not _known_absent(old[key], new)
    )


def spec_facts(measurements: Iterable[Measurement]) -> Facts:
    """Acceptance over every measured window of the run, pooled: the counters of all
    windows summed into one :class:`~perfgate.measure.metrics.SpecStats`."""
    windows = [lv.spec for m in measurements for lv in m.levels if lv.spec is not None]
    pooled = SpecStats(
        drafts=sum(w.drafts for w in windows),
        draft_tokens=sum(w.draft_tokens for w in windows),
        accepted=sum(w.accepted for w in windows),
    )
    if pooled.accept_rate is None or pooled.draft_tokens <= 0:
        return {}
    evidence = (
        f"{pooled.accepted:.0f} accepted of {pooled.draft_tokens:.0f} drafted in "
        f"{pooled.drafts:.0f} drafts"
    )
    facts = {"spec_accept_rate": Fact(value=pooled.accept_rate, source="measured")}
    if pooled.mean_accept_length is not None:
        facts["spec_mean_accept_len"] = Fact(value=pooled.mean_accept_length, source="measured")
    for fact in facts.values():
        fact.evidence = evidence
    return facts


# A GPU below this mean utilisation at a level is mostly idle ...
IDLE_GPU_PCT = 30.0
# ... and a throughput gain under this factor while requests in flight grew by at least
# FLAT_SPAN is flat: together, a server that is not batching on its GPU.
FLAT_GAIN = 1.5
FLAT_SPAN = 4


def gpu_facts(measurements: Mapping[str, Measurement]) -> Facts:
    """GPU telemetry as facts: mean utilisation over the run's levels, and
    ``gpu_idle_while_flat`` where a measurement's GPU was mostly idle at its highest
    level while throughput stayed flat from its lowest (a server not batching)."""
    levels = [lv for m in measurements.values() for lv in m.levels if lv.gpu is not None]
    if not levels:
        return {}
    utils = [u for lv in levels if lv.gpu and (u := lv.gpu.util_mean_pct) is not None]
    facts: Facts = {}
    if utils:
        facts["gpu_util_mean_pct"] = Fact(
            value=round(sum(utils) / len(utils), 1),
            source="measured",
            evidence=f"NVML, mean over {len(utils)} level runs",
        )
    for name, m in measurements.items():
        by_level = {
            c: runs
            for c, runs in m.by_concurrency().items()
            if isinstance(c, int) and all(r.gpu is not None for r in runs)
        }
        if len(by_level) < 2:
            continue
        low, high = min(by_level), max(by_level)
        if high < FLAT_SPAN * low:
            continue
        agg = BY_NAME["agg_tok_s"]  # the gated figure: a run with no success has none
        low_tok, high_tok = agg.run_values(by_level[low]), agg.run_values(by_level[high])
        if not low_tok or not high_tok:
            continue
        tok_low, tok_high = median(low_tok), median(high_tok)
        util = median([r.gpu.util_mean_pct or 0.0 for r in by_level[high] if r.gpu])
        if tok_low <= 0 or util >= IDLE_GPU_PCT or tok_high >= FLAT_GAIN * tok_low:
            continue
        facts["gpu_idle_while_flat"] = Fact(
            value=(
                f"GPU mostly idle: {util:.0f}% mean utilisation at {name} C={high} while "
                f"throughput stayed flat from C={low} ({tok_high / tok_low:.2f}x the tok/s for "
                f"{high / low:g}x the requests in flight): the server is not batching on the "
                "GPU (see flash attention, slots and batch size in its log)"
            ),
            source="measured",
            evidence=f"NVML utilisation; agg tok/s {tok_low:.1f} at C={low}, {tok_high:.1f} "
            f"at C={high}",
        )
        break
    return facts


def _acceptance(facts: Mapping[str, Fact]) -> float | None:
    for key in ("spec_accept_rate", "log_accept_rate"):
        fact = facts.get(key)
        if fact is not None and isinstance(fact.value, int | float):
            return float(fact.value)
    return None


def _acceptance_causes(new: Mapping[str, Fact], old: Mapping[str, Fact]) -> list[Cause]:
    now, before = _acceptance(new), _acceptance(old)
    if now is None:
        return []  # not measured here: unknown (a failed accept_rate check names it)
    if before is not None and before > 0 and now < ACCEPT_DROP * before:
        drop = (before - now) / before
        return [Cause(100 + 100 * drop, f"draft acceptance {now:.1%} (baseline {before:.1%})")]
    if before is None and now < ACCEPT_FLOOR:
        return [
            Cause(
                60 + 60 * (1 - now / ACCEPT_FLOOR),  # ~1% acceptance outranks anything
                f"draft acceptance {now:.1%}: nearly every drafted token is rejected, so "
                "speculation costs more than it saves",
            )
        ]
    return []


_LOG_PREFIX = re.compile(r"^.*?\] ")


def _why(fact: Fact) -> str:
    """``: <the log line's message>`` for a fact read from a log line, else ''."""
    if fact.source != "log" or not fact.evidence:
        return ""
    message = _LOG_PREFIX.sub("", fact.evidence, count=1)
    return f": {message[:160]}{'...' if len(message) > 160 else ''}"


def _is_off(fact: Fact | None) -> bool:
    return fact is not None and fact.value in (False, "off", "0", "NONE")


def _change_cause(change: FactChange) -> Cause | None:
    key, old, new = change.key, change.old, change.new
    if key in MEASURED_KEYS or new is None:
        return None  # measured figures rank through their checks; an absent fact never ranks
    if old is None and key in ABSENT_IS_UNKNOWN and not _is_off(new):
        return None  # the baseline's log did not say: unknown, so no change to blame
    rule = RULES.get(key)
    if rule is None:
        weight = ARG_WEIGHT if key.startswith("arg.") else OTHER_WEIGHT
        rule = FactRule(key.removeprefix("arg."), weight)
    if key == "gpu_offload_supported" and new is not None and new.value is False:
        return Cause(rule.weight, f"no usable GPU: every layer runs on the CPU{_why(new)}")
    if key in SWITCHES and new is not None:
        if old is None and _is_off(new):
            # many are logged only when off: the baseline did not say so
            return Cause(
                rule.weight * 0.8,
                f"{rule.label} off (the baseline's server did not report it off){_why(new)}",
            )
        if _is_off(new):
            return Cause(rule.weight, f"{rule.label} off (baseline on){_why(new)}")
        if _is_off(old):
            return Cause(rule.weight / 3, f"{rule.label} on (baseline off)")
    if key in CAPACITIES:
        a = old.value if old else None
        b = new.value if new else None
        if isinstance(a, int | float) and isinstance(b, int | float):
            if b >= a:
                return None  # more capacity does not slow anything down
            weight = rule.weight * (1 + (a - b) / a)
            return Cause(weight, f"{rule.label} {_show(key, new)} (baseline {_show(key, old)})")
    return Cause(rule.weight, f"{rule.label} {_show(key, new)} (baseline {_show(key, old)})")


def _absolute_causes(new: Mapping[str, Fact], old: Mapping[str, Fact]) -> list[Cause]:
    """Facts worth naming even when the baseline has none to compare with."""
    causes = []
    for key, label, weight in (
        ("gpu_offload_supported", "no usable GPU: every layer runs on the CPU", 50),
        ("flash_attn_active", "flash attention off", 42),
        ("cuda_graphs", "CUDA graphs off", 40),
        ("custom_all_reduce", "custom all-reduce disabled", 35),
    ):
        fact = new.get(key)
        if fact is not None and fact.value is False:
            causes.append(Cause(weight, label + _why(fact)))
    layers, total = new.get("gpu_layers_offloaded"), new.get("gpu_layers_offloadable")
    if (
        layers is not None
        and total is not None
        and isinstance(layers.value, int)
        and isinstance(total.value, int)
        and layers.value < total.value
    ):
        share = f"{layers.value}/{total.value}"
        causes.append(Cause(45, f"only {share} layers offloaded to the GPU{_why(layers)}"))
    if "spec_synthetic" in new:
        causes.append(
            Cause(77, "synthetic speculative acceptance is on (benchmarking only, output invalid)")
        )
    return causes


def likely_causes(
    new: Mapping[str, Fact], old: Mapping[str, Fact], checks: Iterable[Check] = ()
) -> list[Cause]:
    """Causes ranked by score; each cause's text appears once."""
    causes = _acceptance_causes(new, old)
    for check in checks:
        if not check.failed or not check.key.endswith(".accept_rate") or causes:
            continue
        base = f"baseline {check.baseline or 0:.1%}"
        if check.measured is None:  # MISSING: the counters are gone
            causes.append(Cause(90, f"no speculative-decoding counters read ({base})"))
        else:
            causes.append(Cause(100, f"draft acceptance {check.measured:.1%} ({base})"))
    if old:
        for change in fact_changes(old, new):
            if (cause := _change_cause(change)) is not None:
                causes.append(cause)
    else:
        causes += _absolute_causes(new, old)
    if (idle := new.get("gpu_idle_while_flat")) is not None:  # measured now: always a cause
        causes.append(Cause(64, str(idle.value)))
    seen: set[str] = set()
    ranked = []
    for cause in sorted(causes, key=lambda c: -c.score):
        if cause.text not in seen:
            seen.add(cause.text)
            ranked.append(cause)
    return ranked


_NUMBERS = re.compile(r"\d+(?:[.,]\d+)*")


def matching_log_lines(log: str, grep: str, limit: int = MAX_LOG_LINES) -> list[str]:
    """Log lines matching ``grep`` (case-insensitive). A line repeated with other numbers
    (per-request timings, periodic metrics) is kept once, at its last occurrence; the
    last ``limit`` remain, each cut to 400 characters."""
    pattern = re.compile(grep, re.IGNORECASE)
    last_of_shape: dict[str, int] = {}
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("$ "):
            continue  # the command line perfgate wrote: facts cover it
        if pattern.search(line):
            last_of_shape[_NUMBERS.sub("#", line.strip())] = index
    kept = sorted(last_of_shape.values())[-limit:]
    return [lines[i].strip()[:400] for i in kept]


def diagnose(
    new: Mapping[str, Fact],
    old: Mapping[str, Fact] | None,
    checks: Iterable[Check] = (),
    log: str = "",
    grep: str = "",
) -> Diagnosis:
    """Everything a failure message needs to say why."""
    baseline = dict(old or {})
    return Diagnosis(
        causes=likely_causes(new, baseline, checks),
        changes=fact_changes(baseline, new) if baseline else [],
        unknown=unknown_facts(baseline, new),
        log_lines=matching_log_lines(log, grep) if log and grep else [],
        grep=grep,
        baseline_has_facts=bool(baseline),
    )
