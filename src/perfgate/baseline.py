"""Baselines: the figures a profile must hold on given hardware, and the compare step.

Baselines live in ``baselines/<profile>/<hardware-key>.json``. Each gated figure
has a key ``<measurement>.c<C>.<figure>`` (e.g. ``sweep.c4.agg_tok_s``), a value, a
relative tolerance, a direction and an optional absolute floor or ceiling.
``compare`` is the one place that turns samples into a verdict.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfgate.engines import Fact
from perfgate.errors import BaselineError
from perfgate.figures import BY_NAME, delta_pct, delta_text, parse_key
from perfgate.stats import (
    Direction,
    Estimate,
    Noise,
    Rule,
    Verdict,
    comparison,
    decide,
    derived_tolerance,
    detectable_drop,
    estimate,
    limits,
)

SCHEMA_VERSION = 2
ANY_HARDWARE = "any"  # baselines/<profile>/any.json: targets that hold on any machine
TolSource = Literal["derived", "manual"]


# A tolerance of 10 (1000%) or more gates nothing: recording refuses to derive one.
MAX_TOLERANCE = 10.0

# The spread of a figure between hosts (and days) of one hardware key, as sd of ln, where
# a baseline has not measured its own on MIN_HOST_DF host-to-host differences. Measured on
# this project's 2-core AVX-512 CI hosts: healthy servers ran 8-38% off the recording of
# another host (docs/baselines.md, "Another host of the same key"). Never 0.
DEFAULT_HOST_SIGMA = 0.2
MIN_HOST_DF = 4


class Expectation(BaseModel):
    """One gated figure: the value to hold, how far it may drift, and the noise behind it."""

    model_config = ConfigDict(extra="forbid")
    value: float = Field(gt=0, description="The baseline figure (median of the recorded runs).")
    tolerance: float = Field(
        ge=0, lt=MAX_TOLERANCE, description="Allowed relative drift (0.1 = 10%)."
    )
    direction: Direction = Field(description="Whether higher or lower is better.")
    unit: str = Field("", description="Unit, for messages.")
    floor: float | None = Field(None, ge=0, description="Absolute minimum (higher is better).")
    ceiling: float | None = Field(None, gt=0, description="Absolute maximum (lower is better).")
    runs: int | None = Field(
        None, ge=1, description="Runs the value is the median of; absent for a hand-set target."
    )
    spread: float | None = Field(
        None, ge=0, description="This figure's run-to-run spread when recorded (sd of ln)."
    )
    noise_sigma: float | None = Field(
        None,
        ge=0,
        description="Run-to-run noise the gate judges with: the spread of this kind of "
        "figure pooled over the baseline's levels (sd of ln, about the CV).",
    )
    noise_df: float | None = Field(None, ge=0, description="Degrees of freedom of noise_sigma.")
    host_sigma: float | None = Field(
        None,
        ge=0,
        description="Spread of this figure between hosts of its hardware key (sd of ln), "
        "pooled from recordings on different hosts; added to the noise when a run on "
        "another host than the recording's is judged. Absent: not measured yet.",
    )
    host_df: float | None = Field(None, ge=0, description="Degrees of freedom of host_sigma.")
    detectable: float | None = Field(
        None,
        ge=0,
        description="The smallest drop of this figure the gate fails 95% of the time, its "
        "runs as noisy as recorded (0.2: 20% fewer tok/s, or 1/0.8 times the seconds).",
    )
    tolerance_source: TolSource = Field(
        "manual",
        description="derived: from measured noise when recorded; manual: set by hand (kept "
        "when re-recording).",
    )

    @property
    def between_hosts(self) -> float:
        """The spread between hosts the gate uses on another host: the measured one once
        it rests on :data:`MIN_HOST_DF` host-to-host differences, else never below
        :data:`DEFAULT_HOST_SIGMA`."""
        measured = self.host_sigma if self.host_sigma is not None else 0.0
        if self.host_df is not None and self.host_df >= MIN_HOST_DF:
            return measured
        return max(measured, DEFAULT_HOST_SIGMA)

    def host_spread(self, another_host: bool) -> tuple[float, float]:
        """The spread between hosts (sd of ln) a run adds to its error, and its degrees of
        freedom: none on the baseline's own host or for a hand-set target; the measured
        spread with its df; the stated default as a known value (infinite df)."""
        if not another_host or not self.runs:
            return 0.0, math.inf
        sigma = self.between_hosts
        measured = self.host_df is not None and self.host_df >= MIN_HOST_DF
        return sigma, (
            self.host_df or math.inf
        ) if measured and sigma == self.host_sigma else math.inf

    @property
    def noise(self) -> Noise | None:
        """The recorded noise, where there is one."""
        if self.noise_sigma is None or not self.noise_df:
            return None
        return Noise(self.noise_sigma, self.noise_df)


class Baseline(BaseModel):
    """A profile's baseline on one hardware key (or ``any``: hardware-independent targets)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1, 2] = Field(description="Version of this file's schema.")
    profile: str = Field(description="Profile the figures belong to.")
    hardware: str = Field(description="Hardware key the figures were recorded on, or 'any'.")
    provenance: dict[str, object] = Field(
        default_factory=dict, description="Where the figures came from."
    )
    metrics: dict[str, Expectation] = Field(description="Gated figures by key.")
    facts: dict[str, Fact] = Field(
        default_factory=dict,
        description="The server's configuration when recorded (from its log, command line "
        "and endpoints, plus measured acceptance), compared by the diagnosis of a failure.",
    )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, metrics: dict[str, Expectation]) -> dict[str, Expectation]:
        if not metrics:
            raise ValueError("a baseline needs at least one figure")
        for key in metrics:
            parse_key(key)
        return metrics


class Check(BaseModel):
    """The outcome of judging one baseline figure."""

    key: str
    verdict: Verdict
    why: str = Field("", description="Why this verdict (or why the figure is missing).")
    measured: float | None = Field(None, description="Median of the runs' values.")
    low: float | None = Field(None, description="Lower end of the interval (None: no interval).")
    high: float | None = Field(None, description="Upper end of the interval.")
    interval: str = Field("", description="What the interval is, e.g. '95% CI …, n=3'.")
    samples: int = Field(0, description="Runs judged.")
    baseline: float | None = None
    tolerance: float | None = None
    limit: float | None = Field(None, description="Worst acceptable figure.")
    direction: Direction = "higher"
    unit: str = ""
    delta_pct: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this check fails the build (regressed, too noisy, untrusted, missing, or
        creep)."""
        return self.verdict in ("regressed", "too-noisy", "untrusted", "missing", "creep")

    @property
    def past_limit(self) -> bool:
        """Whether the median is past the limit (a pass then means: within noise)."""
        if self.limit is None:
            return False
        return (
            self.measured < self.limit if self.direction == "higher" else self.measured > self.limit
        )

    def message(self) -> str:
        """One line naming figure, measured (with interval), baseline, limit and Δ%."""
        unit = f" {self.unit}" if self.unit else ""
        if self.verdict == "missing":
            base = f" (baseline {self.baseline:.4g}{unit})" if self.baseline is not None else ""
            return f"{self.key}: MISSING{base}: {self.why}"
        measured = f"measured {self.measured:.4g}{unit} [{self.interval}]"
        if self.baseline is None or self.delta_pct is None or self.limit is None:
            return f"{self.key}: {measured} (no baseline figure)"
        better = "higher" if self.direction == "higher" else "lower"
        bound = "min" if self.direction == "higher" else "max"
        head = (
            f"{self.key}: {measured}, baseline {self.baseline:.4g}{unit} "
            f"(tolerance {self.tolerance:.1%}, {better} is better, {bound} {self.limit:.4g}), "
            f"Δ {delta_text(self.delta_pct, '%')}"
        )
        if self.verdict == "creep":
            return f"{head} → CREEP: within its tolerance this run, but {self.why}"
        return f"{head} → {self.verdict.upper().replace('-', ' ')} ({self.why})"


def floor_slack(checks: Sequence[Check]) -> tuple[float, str] | None:
    """For a run gated by floors only (the ``any`` tier): how many times slower the server
    could be before its nearest floor fails, and that figure's key; None when no speed or
    time figure passed against a limit. Ratios (scaling) do not move with the speed."""
    slack = []
    for c in checks:
        if c.failed or c.limit is None or c.measured is None or c.unit == "x":
            continue
        if c.limit <= 0 or c.measured <= 0:
            continue
        factor = c.measured / c.limit if c.direction == "higher" else c.limit / c.measured
        slack.append((factor, c.key))
    return min(slack) if slack else None


def missing(key: str, why: str, expectation: Expectation | None) -> Check:
    """A baseline figure this run did not produce."""
    return Check(
        key=key,
        verdict="missing",
        why=why,
        baseline=expectation.value if expectation else None,
        direction=expectation.direction if expectation else "higher",
        unit=expectation.unit if expectation else "",
    )


def compare(
    key: str,
    values: list[float],
    expectation: Expectation | None,
    rule: Rule,
    *,
    another_host: bool = False,
) -> tuple[Check, bool]:
    """Judge one figure's per-run values; also says whether more runs are wanted.
    ``another_host``: the baseline was recorded on another host than these runs, so
    the spread between hosts adds to the noise (:attr:`Expectation.between_hosts`)."""
    figure = parse_key(key).figure
    if expectation is None:
        est = estimate(values)
        return _check(key, est, est.interval, "no-baseline", figure.direction, figure.unit), False
    exp = expectation
    worst, better = limits(
        exp.value, exp.tolerance, exp.direction, floor=exp.floor, ceiling=exp.ceiling
    )
    host = exp.host_spread(another_host)
    cmp = comparison(values, exp.value, worst, better, exp.direction, exp.runs, exp.noise, *host)
    base_error = math.sqrt(cmp.base_error**2 + cmp.host**2)
    est = estimate(values, exp.noise, baseline_error=(base_error, cmp.error_df))
    decision = decide(cmp, est.n, rule)
    interval = est.interval
    if (own := cmp.spread) is not None and exp.noise is not None:
        noisier = ": noisier than recorded" if cmp.noisier else ""
        interval += f"; runs' spread {own.sigma:.1%}, recorded {exp.noise.sigma:.1%}{noisier}"
    check = _check(
        key,
        est,
        interval,
        decision.verdict,
        exp.direction,
        exp.unit,
        why=decision.why,
        baseline=exp.value,
        tolerance=exp.tolerance,
        limit=worst,
        delta_pct=delta_pct(est.median, exp.value),
    )
    return check, decision.step == "more"


def _check(
    key: str,
    est: Estimate,
    interval: str,
    verdict: Verdict,
    direction: Direction,
    unit: str,
    **judged: object,
) -> Check:
    """A check of an estimate: its median and interval, the verdict, and (``judged``) the
    baseline figures it was judged against."""
    return Check(
        key=key,
        measured=est.median,
        low=est.low,
        high=est.high,
        interval=interval,
        samples=est.n,
        verdict=verdict,
        direction=direction,
        unit=unit,
        **judged,
    )


def field_errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
        for err in exc.errors()
    )


def baseline_path(baselines_dir: Path, profile: str, hardware: str) -> Path:
    """Where the baseline of a profile on a hardware key lives."""
    return baselines_dir / profile / f"{hardware}.json"


def load_baseline(path: Path) -> Baseline | None:
    """Read and validate a baseline file; None when it does not exist."""
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not valid JSON: {exc}") from exc
    try:
        return Baseline.model_validate(raw)
    except ValidationError as exc:
        raise BaselineError(
            f"baseline {path} is invalid: {field_errors(exc)}. Fix it, or re-record it with "
            "`pytest -m perf --perf-update-baselines`."
        ) from exc


def load_profile_baselines(baselines_dir: Path, profile: str) -> dict[str, Baseline]:
    """Every baseline of a profile by hardware key, each validated."""
    directory = baselines_dir / profile
    found: dict[str, Baseline] = {}
    for path in sorted(directory.glob("*.json")):
        if "." in path.stem:  # <key>.golden.json sits next to baselines
            continue
        baseline = load_baseline(path)
        assert baseline is not None
        if baseline.hardware != path.stem or baseline.profile != profile:
            raise BaselineError(
                f"baseline {path} says profile {baseline.profile!r} on hardware "
                f"{baseline.hardware!r}; its path says {profile!r} on {path.stem!r}"
            )
        found[baseline.hardware] = baseline
    return found


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
    left_out = {k: v for k, v in values.items() if min(v) <= 0}
    values = {k: v for k, v in values.items() if k not in left_out}
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
            tol = derived_tolerance(
                sized, family, len(runs), max(figure.min_tolerance, min_tolerance), figure.direction
            )
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
        value = round(estimate(runs).median, 6)
        host_sigma, host_df = merged_host_spread(old, value, moved)
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
            else detectable_drop(kind, family, len(runs), tol, figure.direction),
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
        metrics=dict(sorted(metrics.items(), key=lambda kv: _key_order(kv[0]))),
        facts=facts or {},
    )
    return Recorded(new, kept, left_out)


def merged_host_spread(
    old: Expectation | None, value: float, moved: bool
) -> tuple[float | None, float | None]:
    """A figure's spread between hosts after recording ``value``: with the previous
    recording (``old``) on another host, their log ratio d is one host-to-host difference,
    of variance 2 sigma^2, pooled with those before it: (df sigma^2 + d^2 / 2) / (df + 1).
    On the same host the previous spread is kept. (Within-host noise is in d too: the
    estimate errs wide, never narrow.)"""
    if old is None:
        return None, None
    if not moved or not old.runs:  # same host, or a hand-set target: nothing between hosts
        return old.host_sigma, old.host_df
    d = math.log(value / old.value)
    df = old.host_df or 0.0
    variance = (df * (old.host_sigma or 0.0) ** 2 + d * d / 2) / (df + 1)
    return round(math.sqrt(variance), 6), df + 1


def _key_order(key: str) -> tuple[str, float, int]:
    parsed = parse_key(key)
    level = -1 if parsed.concurrency is None else parsed.concurrency  # measurement-wide first
    return parsed.measurement, level, list(BY_NAME).index(parsed.figure.name)


def write_json_atomic(path: Path, payload: str) -> None:
    """Write a file so readers see the old or the new content, never half of it."""
    write_bytes_atomic(path, payload.encode("utf-8"))


def write_bytes_atomic(path: Path, payload: bytes) -> None:
    """Write a file so readers see the old or the new content, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_baseline(path: Path, baseline: Baseline) -> None:
    """Write a baseline atomically."""
    write_json_atomic(path, baseline.model_dump_json(indent=2, exclude_none=True) + "\n")


def diff_lines(old: Baseline | None, recorded: Recorded) -> list[str]:
    """Added, changed, kept and removed figures, one line each."""
    new = recorded.baseline
    lines = []
    for key, exp in new.metrics.items():
        prev = old.metrics.get(key) if old else None
        tol = f"±{exp.tolerance:.1%} {exp.tolerance_source}"
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
