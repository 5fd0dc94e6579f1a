"""Facts the run itself measured: pooled speculative acceptance, and GPU telemetry (a GPU
mostly idle while throughput stayed flat)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from perfgate.engines import SpecStats
from perfgate.facts import Fact, Facts
from perfgate.gate.figures import BY_NAME
from perfgate.measure.data import Measurement
from perfgate.stats.distributions import median


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
