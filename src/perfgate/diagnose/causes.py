"""Diagnosis: why a figure regressed, from the server's facts and log.

Facts (``engines`` reads them from logs, command lines and endpoints; measured acceptance
comes from the run) are compared with the facts stored in the baseline. Differences are
ranked into likely causes, and the log lines the seeds grepped for by hand
(accept|spec|draft|NCCL|P2P|attention|KV cache|cuda graph|mamba) are attached. Build and
runtime facts the log reports (flash attention as resolved, GPU offload, CUDA graphs,
torch.compile, KV cache types) rank high. A fact this run did not report, from whatever
source (an attached server has no command line; a log at another verbosity omits lines), is
unknown: listed once as not known, never a change and never a cause."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from perfgate.diagnose.changes import (
    ABSENT_IS_UNKNOWN,
    MEASURED_KEYS,
    FactChange,
    fact_changes,
    show_fact,
    unknown_facts,
)
from perfgate.diagnose.logs import matching_log_lines
from perfgate.diagnose.server import server_causes
from perfgate.facts import Fact
from perfgate.gate.verdict import Check

# A speculative profile whose acceptance fell below this share of the baseline's.
ACCEPT_DROP = 0.8


# Acceptance this low is a cause even without a baseline to compare with.
ACCEPT_FLOOR = 0.2


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
    "structured_output_backend": FactRule("structured-output (guided decoding) backend", 52),
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


# On/off facts (False, "off", "0" is off).
SWITCHES = ("cuda_graphs", "custom_all_reduce", "flash_attn", "flash_attn_active", "cache_prompt")


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
            return Cause(
                weight, f"{rule.label} {show_fact(key, new)} (baseline {show_fact(key, old)})"
            )
    return Cause(
        rule.weight, f"{rule.label} {show_fact(key, new)} (baseline {show_fact(key, old)})"
    )


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
    causes += [Cause(score, text) for score, text in server_causes(new, old)]
    seen: set[str] = set()
    ranked = []
    for cause in sorted(causes, key=lambda c: -c.score):
        if cause.text not in seen:
            seen.add(cause.text)
            ranked.append(cause)
    return ranked


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
