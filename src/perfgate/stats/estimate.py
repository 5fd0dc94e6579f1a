"""A figure's estimate from its runs: noise, the median's interval, the limits, and the
signed-rank (Walsh average) bounds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from perfgate.stats.distributions import (
    combined_df,
    log_spread,
    median,
    median_efficiency,
    t_quantile,
)

Direction = Literal["higher", "lower"]


Verdict = Literal[
    "pass", "improved", "regressed", "too-noisy", "untrusted", "missing", "no-baseline", "creep"
]


Step = Literal["more", "done"]


CONFIDENCE = 0.95


NOISIER = 0.99  # runs are noisier than recorded past this quantile of F(n - 1, recorded df)


# -- noise and estimates -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Noise:
    """Run-to-run spread of a figure: sigma of ln(value), with its degrees of freedom."""

    sigma: float
    df: float

    @staticmethod
    def pooled(parts: Sequence[Noise]) -> Noise | None:
        """Noise pooled over independent estimates (weights: degrees of freedom)."""
        usable = [p for p in parts if p.df > 0]
        df = sum(p.df for p in usable)
        if not df:
            return None
        return Noise(math.sqrt(sum(p.df * p.sigma**2 for p in usable) / df), df)

    @staticmethod
    def of(samples: Sequence[float]) -> Noise | None:
        """The spread of one figure's runs (None for fewer than two)."""
        spread = log_spread(samples)
        return None if spread is None else Noise(spread, len(samples) - 1)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A figure from n runs: the median, and a confidence interval where noise is known.

    ``noise``: the spread the interval read (the runs' own, or the recorded one for a
    single run); ``df``: the interval's degrees of freedom (Welch-Satterthwaite's with a
    baseline's error in it)."""

    median: float
    low: float | None
    high: float | None
    n: int
    noise: Noise | None
    confidence: float = CONFIDENCE
    df: float | None = None
    welch: bool = False

    @property
    def interval(self) -> str:
        """The interval as people read it, naming what it is."""
        if self.low is None or self.high is None:
            why = "noise unknown" if self.noise is None else "a ratio interval about 0 is 0..0"
            return f"n={self.n}, no interval ({why})"
        kind = f" (Welch, df {self.df:.1f})" if self.welch and self.df is not None else ""
        return f"{self.confidence:.0%} CI {self.low:.4g}..{self.high:.4g}{kind}, n={self.n}"


def standard_error(noise: Noise, n: int) -> float:
    """Standard error of ln(median of n runs)."""
    return median_efficiency(n) * noise.sigma / math.sqrt(n)


def estimate(
    samples: Sequence[float],
    noise: Noise | None = None,
    *,
    baseline_error: tuple[float, float] | None = None,
) -> Estimate:
    """Median of runs with a t interval of the log median.

    The interval reads the runs' own spread; ``noise`` (the recorded one) only where the
    runs give none (a single run). ``baseline_error``: (sd of ln, df) of the baseline the
    runs are compared with; the interval is then Welch's interval of the drift from the
    baseline, with Satterthwaite's degrees of freedom, placed about the median.
    """
    if not samples:
        raise ValueError("estimate of no samples")
    n = len(samples)
    center = median(samples)
    spread = Noise.of(samples) or noise
    if spread is None:
        return Estimate(center, None, None, n, None)
    runs_var = standard_error(spread, n) ** 2
    base_var, base_df = (baseline_error[0] ** 2, baseline_error[1]) if baseline_error else (0, 0)
    df = combined_df(runs_var, spread.df, base_var, base_df) if base_var else spread.df
    if center <= 0:  # the interval is a ratio of the median: none about 0
        return Estimate(center, None, None, n, spread, df=df)
    half = t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(runs_var + base_var)
    return Estimate(
        center, center * math.exp(-half), center * math.exp(half), n, spread,
        df=df, welch=bool(base_var),
    )  # fmt: skip


# -- limits and the verdict ------------------------------------------------------------
def limits(
    value: float,
    tolerance: float,
    direction: Direction,
    *,
    floor: float | None = None,
    ceiling: float | None = None,
) -> tuple[float, float]:
    """(worst acceptable, clearly better) figures for a baseline value.

    The relative tolerance gives both; an absolute floor (higher is better) or
    ceiling (lower is better) tightens the worst acceptable figure.
    """
    if direction == "higher":
        worst = value * (1 - tolerance)
        if floor is not None:
            worst = max(worst, floor)
        return worst, value * (1 + tolerance)
    worst = value * (1 + tolerance)
    if ceiling is not None:
        worst = min(worst, ceiling)
    return worst, value * (1 - tolerance)


@lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(T ≤ t), t = 0 .. n(n+1)/2, of Wilcoxon's signed-rank statistic of n runs under a
    median exactly at the point tested (exact, by counting rank subsets)."""
    top = n * (n + 1) // 2
    counts = [1] + [0] * top
    for rank in range(1, n + 1):
        for t in range(top, rank - 1, -1):
            counts[t] += counts[t - rank]
    out, total = [], 0
    for c in counts:
        total += c
        out.append(total / 2**n)
    return tuple(out)


@lru_cache(maxsize=1024)
def walsh_rank(n: int, confidence: float) -> int:
    """The largest k whose k-th lowest Walsh average of n runs lies below the runs' median
    with at least ``confidence`` (Wilcoxon's signed-rank bound, for noise symmetric in
    log); 0 when none does (fewer than 5 runs at 95%)."""
    cdf = _signed_rank_cdf(n)
    rank = 0
    while rank < len(cdf) and cdf[rank] <= 1 - confidence:
        rank += 1
    return rank


def walsh_averages(values: Sequence[float]) -> list[float]:
    """Every (a + b) / 2 of two runs, a run with itself included, lowest first. Each rises
    or stays when any run rises, so every order statistic of them does too."""
    return sorted(
        (values[i] + values[j]) / 2 for i in range(len(values)) for j in range(i, len(values))
    )
