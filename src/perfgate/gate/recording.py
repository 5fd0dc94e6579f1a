"""Recording a baseline: each figure's value and noise from the recorded runs, its
tolerance derived from that noise, and what changed since the last recording."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from perfgate.errors import BaselineError
from perfgate.facts import Fact
from perfgate.gate.baseline import MAX_TOLERANCE, SCHEMA_VERSION, Baseline, Expectation, key_order
from perfgate.gate.figures import delta_pct, delta_text
from perfgate.gate.values import parse_key
from perfgate.stats.decide import Rule
from perfgate.stats.estimate import Noise, estimate
from perfgate.stats.power import derived_tolerance, detectable_drop, supported_tolerance


def kind_noise(values: dict[str, list[float]]) -> dict[str, Noise]:
    """Run-to-run noise of each kind of figure, pooled over its levels and measurements."""
    parts: dict[str, list[Noise]] = {}
    for key, runs in values.items():
        if (noise := Noise.of(runs)) is not None:
            parts.setdefault(parse_key(key).figure.name, []).append(noise)
    return {name: pooled for name, p in parts.items() if (pooled := Noise.pooled(p))}


@dataclass(frozen=True, slots=True)
class Recorded:
    """A baseline built from a run, with what changed against the previous one."""

    baseline: Baseline
    kept: list[str]  # previous figures this run did not measure, kept unchanged
    left_out: dict[str, list[float]] = field(default_factory=dict)  # 0 in a run: unjudgeable
    supported: dict[str, float] = field(default_factory=dict)  # narrowest tolerance the
    # noise supports, by key (:func:`supported_for`)


def supported_for(exp: Expectation, rule: Rule) -> float | None:
    """The narrowest tolerance a figure's recorded noise supports at the profile's runs
    and family-wise rate (:func:`perfgate.stats.power.supported_tolerance`); None where
    no noise was recorded."""
    if exp.noise is None or not exp.runs:
        return None
    return supported_tolerance(exp.noise, rule, exp.runs, exp.direction, fixed=exp.fixed)


def too_tight(baseline: Baseline, supported: dict[str, float]) -> list[str]:
    """A warning, at recording time, for tolerances a person set narrower than the noise
    supports: healthy runs would likely end TOO NOISY."""
    tight = {
        key: need
        for key, need in supported.items()
        if baseline.metrics[key].fixed and baseline.metrics[key].tolerance < need
    }
    if not tight:
        return []
    worst = max(tight, key=lambda k: tight[k])
    exp = baseline.metrics[worst]
    return [
        f"perfgate: warning: the tolerance {exp.tolerance:.0%} set by hand is narrower than "
        f"this host's noise supports for {len(tight)} of {len(baseline.metrics)} figures "
        f"(widest need: {worst} {tight[worst]:.0%}, its runs' noise {exp.noise_sigma:.1%} over "
        f"{exp.runs} runs): a healthy server will likely end TOO NOISY. Record with "
        f"--perf-tolerance {math.ceil(tight[worst] * 100) / 100:g}, or on a quieter host, or "
        "with more runs (gate.record_repeats)"
    ]


def build_baseline(
    profile: str,
    hardware: str,
    values: dict[str, list[float]],
    previous: Baseline | None,
    provenance: dict[str, object],
    rule: Rule,
    tolerance: float | None = None,
    facts: dict[str, Fact] | None = None,
    min_tolerance: float = 0.0,
    host_id: str = "",
    detectable: bool = True,
) -> Recorded:
    """A new baseline from per-run values (medians), merged into the previous one.

    The spread between hosts accumulates: when the previous baseline was recorded on
    another host (or names none), each figure's change between the two recordings is one
    more host-to-host difference in its ``host_sigma`` (:func:`merged_host_spread`).

    ``detectable``: record each figure's detectable drop (:func:`detectable_drop`; off for
    simulations that record thousands of baselines and never read it).

    Tolerances: ``tolerance`` if given; else a previous hand-set one; else derived from
    the measured noise (:func:`perfgate.stats.derived_tolerance`) for a profile of this
    many figures. Previous figures this run did not measure are kept, and listed. A figure
    at 0 in any run (no request met the service level) has no place on the gate's log
    scale: it is left out, and listed, and its kind's noise comes from the other levels.
    """
    values = {k: v for k, v in values.items() if parse_key(k).figure.recorded}
    # counts (Figure.shift) live on the gate's log scale as count + shift
    shift = {k: parse_key(k).figure.shift for k in values}
    left_out = {k: v for k, v in values.items() if min(v) + shift[k] <= 0}
    values = {k: [x + shift[k] for x in v] for k, v in values.items() if k not in left_out}
    noise = kind_noise(values)
    kept = sorted(previous.metrics.keys() - values.keys() - left_out.keys()) if previous else []
    family = Rule(
        min_runs=rule.min_runs,
        max_runs=rule.max_runs,
        figures=len(values.keys() | set(kept)),
        false_failure_rate=rule.false_failure_rate,
        near=rule.near,
    )
    metrics: dict[str, Expectation] = {}
    moved = previous is not None and (not host_id or previous.provenance.get("host_id") != host_id)
    for key, runs in values.items():
        figure = parse_key(key).figure
        old = previous.metrics.get(key) if previous else None
        kind = noise.get(figure.name)
        own = Noise.of(runs)
        if tolerance is not None:
            tol, source = tolerance, "manual"
        elif old is not None and old.tolerance_source == "manual" and old.runs is not None:
            tol, source = old.tolerance, "manual"
        elif kind is not None:
            # a level noisier than its kind's pool, over 5 runs or more, is sized by its
            # own spread (with the pool's degrees of freedom)
            noisier = own is not None and own.df >= 4 and own.sigma > kind.sigma
            sized = Noise(own.sigma, kind.df) if own is not None and noisier else kind
            floor = max(figure.min_tolerance, min_tolerance if figure.host_drift else 0.0)
            tol = derived_tolerance(sized, family, len(runs), floor, figure.direction)
            source = "derived"
            if tol >= MAX_TOLERANCE:
                shown = ", ".join(f"{v:.4g}" for v in runs)
                raise BaselineError(
                    f"{key}: its runs ({shown}) and its kind's noise across levels (sd of logs "
                    f"{kind.sigma:.2f}) are too spread to gate: the derived tolerance would be "
                    f"{tol:.0%}. Record on a quieter host, or with more runs "
                    "(--perf-repeats), or set a tolerance (--perf-tolerance)"
                )
        else:
            raise BaselineError(
                f"{key}: one run gives no noise to derive a tolerance from; record with "
                "at least 3 repeats"
            )
        value = round(estimate(runs).median - shift[key], 6)
        host_sigma, host_df = merged_host_spread(old, value, moved, shift[key])
        metrics[key] = Expectation(
            value=value,
            tolerance=tol,
            direction=figure.direction,
            unit=figure.unit,
            floor=old.floor if old else None,
            ceiling=old.ceiling if old else None,
            runs=len(runs),
            spread=None if own is None else round(own.sigma, 6),
            noise_sigma=None if kind is None else round(kind.sigma, 6),
            noise_df=None if kind is None else kind.df,
            host_sigma=host_sigma,
            host_df=host_df,
            detectable=None
            if kind is None or not detectable
            else detectable_drop(
                kind, family, len(runs), tol, figure.direction, fixed=source == "manual"
            ),
            tolerance_source=source,
        )
    for key in kept:
        assert previous is not None
        metrics[key] = previous.metrics[key]
    raw_hosts = previous.provenance.get("hosts") if previous else None
    hosts = [str(h) for h in raw_hosts] if isinstance(raw_hosts, list) else []
    if moved and previous is not None and not hosts:
        hosts = [str(previous.provenance.get("host_id") or "unknown")]
    prov = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        **provenance,
        "host_id": host_id,
        "hosts": [*(h for h in hosts if h != host_id), host_id or "unknown"],
    }
    new = Baseline(
        schema_version=SCHEMA_VERSION,
        profile=profile,
        hardware=hardware,
        provenance=prov,
        metrics=dict(sorted(metrics.items(), key=lambda kv: key_order(kv[0]))),
        facts=facts or {},
    )
    supported = {}
    if detectable:
        for key in values:
            if (need := supported_for(new.metrics[key], family)) is not None:
                supported[key] = need
    return Recorded(new, kept, left_out, supported)


def merged_host_spread(
    old: Expectation | None, value: float, moved: bool, shift: float = 0.0
) -> tuple[float | None, float | None]:
    """A figure's spread between hosts after recording ``value``: with the previous
    recording (``old``) on another host, their log ratio d is one host-to-host difference,
    of variance 2 sigma^2, pooled with those before it: (df sigma^2 + d^2 / 2) / (df + 1).
    On the same host the previous spread is kept. (Within-host noise is in d too: the
    estimate errs wide, never narrow.) A count compares as count + ``shift``."""
    if old is None:
        return None, None
    if not moved or not old.runs:  # same host, or a hand-set target: nothing between hosts
        return old.host_sigma, old.host_df
    d = math.log((value + shift) / (old.value + shift))
    df = old.host_df or 0.0
    variance = (df * (old.host_sigma or 0.0) ** 2 + d * d / 2) / (df + 1)
    return round(math.sqrt(variance), 6), df + 1


def diff_lines(old: Baseline | None, recorded: Recorded) -> list[str]:
    """Added, changed, kept and removed figures, one line each."""
    new = recorded.baseline
    lines = []
    for key, exp in new.metrics.items():
        prev = old.metrics.get(key) if old else None
        tol = f"±{exp.tolerance:.1%} {exp.tolerance_source}"
        if exp.detectable is not None:
            tol += f"; catches a {exp.detectable:.0%} drop at 95%"
        if (need := recorded.supported.get(key)) is not None:
            tol += f"; noise supports ±{need:.0%}"
        if key in recorded.kept:
            lines.append(f"  kept    {key}: {exp.value:.4g} {exp.unit} (not measured in this run)")
        elif prev is None:
            lines.append(f"  added   {key}: {exp.value:.4g} {exp.unit} ({tol})")
        else:
            pct = delta_text(delta_pct(exp.value, prev.value))
            was = f", was ±{prev.tolerance:.1%}" if prev.tolerance != exp.tolerance else ""
            lines.append(
                f"  changed {key}: {prev.value:.4g} → {exp.value:.4g} {exp.unit} "
                f"({pct}%; {tol}{was})"
            )
    for key, runs in recorded.left_out.items():
        shown = ", ".join(f"{v:.4g}" for v in runs)
        lines.append(f"  left out {key}: runs {shown} (0 in a run: not judged)")
    if old is not None:
        lines += [
            f"  removed {k}"
            for k in old.metrics
            if k not in new.metrics and k not in recorded.left_out
        ]
    return lines
