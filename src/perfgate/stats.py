"""Noise-aware statistics: medians, bootstrap confidence intervals, and the verdict.

A figure is measured several times (repeats, or one sample per request). Its
estimate is the median with a percentile-bootstrap interval for the median. The
verdict compares the interval, not the point, with the acceptable limit:

- ``regressed``: the whole interval is worse than the limit;
- ``inconclusive``: the interval straddles the limit (measure again);
- ``improved``: the whole interval is better than the baseline's other edge;
- ``pass``: otherwise.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]
Verdict = Literal["pass", "regressed", "inconclusive", "improved"]
CONFIDENCE = 0.95
RESAMPLES = 1000


@dataclass(frozen=True, slots=True)
class Estimate:
    """Median of samples and a confidence interval around it."""

    median: float
    low: float
    high: float
    n: int


def median(samples: Sequence[float]) -> float:
    """The median."""
    if not samples:
        raise ValueError("median of no samples")
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def bootstrap_interval(
    samples: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median (a point for a single sample).

    Seeded, so the same samples always give the same interval, and shifting every
    sample by a constant shifts the interval by the same constant.
    """
    n = len(samples)
    if n == 0:
        raise ValueError("interval of no samples")
    if n == 1:
        return samples[0], samples[0]
    rng = random.Random(seed)
    medians = sorted(
        median([samples[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)
    )
    tail = (1 - confidence) / 2
    low = medians[int(tail * (resamples - 1))]
    high = medians[int((1 - tail) * (resamples - 1) + 0.5)]
    return low, high


def estimate(samples: Sequence[float]) -> Estimate:
    """Median and bootstrap interval of samples."""
    low, high = bootstrap_interval(samples)
    return Estimate(median=median(samples), low=low, high=high, n=len(samples))


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


def decide(est: Estimate, worst: float, better: float, direction: Direction) -> Verdict:
    """The verdict of an estimate against its limits."""
    if direction == "lower":  # mirror so that higher is better below
        est = Estimate(median=-est.median, low=-est.high, high=-est.low, n=est.n)
        worst, better = -worst, -better
    if est.high < worst:
        return "regressed"
    if est.low < worst:
        return "inconclusive"
    if est.low > better:
        return "improved"
    return "pass"
