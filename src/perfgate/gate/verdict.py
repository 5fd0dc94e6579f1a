"""One figure's verdict: its runs against its baseline expectation.

:func:`compare` is the one place that turns samples into a verdict (a :class:`Check`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from perfgate.gate.baseline import Expectation
from perfgate.gate.figures import delta_pct, delta_text
from perfgate.gate.values import level_name, parse_key
from perfgate.measure.data import Measurement
from perfgate.stats.decide import Rule, comparison, decide
from perfgate.stats.estimate import Direction, Estimate, Verdict, estimate, limits


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
    against: str = Field(
        "baseline",
        description="What the figure is judged against: the "
        "baseline, or A (a side-by-side run's reference).",
    )

    @property
    def failed(self) -> bool:
        """Whether this check fails the build (regressed, too noisy, untrusted, missing, or
        creep)."""
        return self.verdict in ("regressed", "too-noisy", "untrusted", "missing", "creep")

    @property
    def past_limit(self) -> bool:
        """Whether the median is past the limit (a pass then means: within noise)."""
        if self.limit is None or self.measured is None:
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
        if self.baseline is None or self.limit is None:
            return f"{self.key}: {measured} (no baseline figure)"
        better = "higher" if self.direction == "higher" else "lower"
        bound = "min" if self.direction == "higher" else "max"
        head = (
            f"{self.key}: {measured}, {self.against} {self.baseline:.4g}{unit} "
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
    the spread between hosts adds to the noise (:attr:`Expectation.between_hosts`).
    A count (:attr:`Figure.shift`) is judged as count + shift on the gate's log scale, so
    a baseline of 0 (no queue, no preemption) still has a limit; the check shows counts.
    A figure that does not drift with the host (:attr:`Figure.host_drift`) is judged as on
    the recording's host."""
    figure = parse_key(key).figure
    another_host = another_host and figure.host_drift
    shift = figure.shift
    if not shift:
        return _compare(key, values, expectation, rule, another_host)
    if expectation is not None:
        expectation = expectation.model_copy(
            update={
                "value": expectation.value + shift,
                "floor": None if expectation.floor is None else expectation.floor + shift,
                "ceiling": None if expectation.ceiling is None else expectation.ceiling + shift,
            }
        )
    check, more = _compare(key, [v + shift for v in values], expectation, rule, another_host)
    shown = {
        name: value - shift
        for name in ("measured", "low", "high", "baseline", "limit")
        if (value := getattr(check, name)) is not None
    }
    return check.model_copy(update=shown), more


def _compare(
    key: str,
    values: list[float],
    expectation: Expectation | None,
    rule: Rule,
    another_host: bool,
) -> tuple[Check, bool]:
    figure = parse_key(key).figure
    if expectation is None:
        est = estimate(values)
        return _check(key, est, est.interval, "no-baseline", figure.direction, figure.unit), False
    exp = expectation
    worst, better = limits(
        exp.value, exp.tolerance, exp.direction, floor=exp.floor, ceiling=exp.ceiling
    )
    host = exp.host_spread(another_host)
    cmp = comparison(
        values, exp.value, worst, better, exp.direction, exp.judged_runs, exp.noise, *host
    )
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


def measurement_problems(name: str, measurement: Measurement) -> list[str]:
    """What fails a measurement besides its figures: failed requests (each level's, with
    its first errors), a sweep stopped early, levels not run."""
    problems = []
    for level in measurement.levels:
        m = level.metrics
        if m.fail:
            problems.append(
                f"{name} {level_name(level.level)}: {m.fail} of {m.ok + m.fail} "
                f"requests failed: {'; '.join(m.errors[:3])}"
            )
    if measurement.aborted:
        problems.append(measurement.aborted)
    elif measurement.not_run:
        problems.append(f"{name}: levels not run: {measurement.not_run}")
    return problems
