"""Tolerances sized for detection: the chance a figure passes at a given drift, the
tolerance derived from noise, and the smallest drop the gate fails 95% of the time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from perfgate.stats.decide import Comparison, Rule, early_offset
from perfgate.stats.distributions import (
    VALUE_FLOOR,
    normal_cdf,
    normal_grid,
    t_quantile,
    widened,
)
from perfgate.stats.estimate import Direction, Noise, limits, standard_error, walsh_rank


def _above(threshold: float, drift: float, noise: Noise) -> float:
    """The chance that one run of a figure whose true drift is ``drift`` lies above
    ``threshold`` (log units), its noise as recorded: normal, with the recorded sigma
    widened to the t distribution's sd at the recording's degrees of freedom."""
    sigma = widened(noise.sigma, noise.df)
    if sigma <= 0:
        return 1.0 if drift > threshold else 0.0
    return normal_cdf((drift - threshold) / sigma)


@lru_cache(maxsize=256)
def _bound_shape(n: int, near: float) -> tuple[float, float]:
    """The Hodges-Lehmann estimate's sd of n runs per unit of noise sigma, √(π/3n), and
    the t quantile its signed-rank bound lies below it."""
    return math.sqrt(math.pi / (3 * n)), t_quantile(near, n - 1)


@lru_cache(maxsize=256)
def _bound_looks(rule: Rule) -> tuple[int, ...]:
    """The looks (run counts, min_runs up to max_runs) where a signed-rank bound exists."""
    first = max(1, rule.min_runs)
    return tuple(n for n in range(first, rule.max_runs + 1) if walsh_rank(n, rule.near))


def _signed_rank_pass(n: int, drift: float, threshold: float, noise: Noise, rule: Rule) -> float:
    """About the chance that the signed-rank lower bound of n runs clears ``threshold``:
    the Hodges-Lehmann estimate has sd sigma·√(π/3n) for normal noise, and the bound lies
    a t quantile of that below it."""
    unit_sd, t = _bound_shape(n, rule.near)
    sd = noise.sigma * unit_sd
    if sd <= 0:
        return 1.0 if drift > threshold else 0.0
    z = (drift - threshold - t * sd) / sd
    return normal_cdf(z)


def _pass_at_looks(
    drift: float,
    threshold: float,
    noise: Noise,
    rule: Rule,
    early: Sequence[tuple[int, float]] = (),
) -> float:
    """About the chance of passing at some look: every run above ``threshold`` at the
    first look (exact), or the signed-rank bound above it at a later look. The later
    looks share their runs, so their union is taken as the likeliest of them (checked
    by simulation: ``tests/unit/test_stats.py``). ``early``: (runs, threshold) of the
    looks before the first (:func:`perfgate.stats.decide.early_pass`), added whole."""
    first = max(1, rule.min_runs)
    sooner = sum(_above(limit, drift, noise) ** n for n, limit in early)
    sooner += 0.0 if walsh_rank(first, rule.near) else _above(threshold, drift, noise) ** first
    later = [_signed_rank_pass(n, drift, threshold, noise, rule) for n in _bound_looks(rule)]
    return min(1.0, sooner + max(later, default=0.0))


_NORMAL_NODES = normal_grid()


_COARSE_NODES = normal_grid(21, 4.5)  # enough where the shift is no wider than the noise


def pass_chance(
    drift: float,
    limit: float,
    noise: Noise,
    margin: float,
    rule: Rule,
    base_error: float = 0.0,
    early: Sequence[tuple[int, float]] = (),
) -> float:
    """About the chance that a figure whose true drift is ``drift`` passes
    against ``limit`` (log units, higher is better), its runs as noisy as recorded: the
    union over the looks (:func:`_pass_at_looks`) of its bound clearing the limit,
    averaged over the baseline's own error (``base_error``, sd of ln: a baseline that
    read high moves every run's drift down alike). ``early``: (runs, how far inside the
    limit every run must be) of the early looks."""
    total = 0.0
    nodes = _NORMAL_NODES if base_error > noise.sigma else _COARSE_NODES
    looks = [(n, limit + offset) for n, offset in early]
    for node, weight in nodes if base_error > 0 else ((0.0, 1.0),):
        total += weight * _pass_at_looks(
            drift - node * base_error, limit + margin, noise, rule, looks
        )
    return total


def _relative(log_limit: float, direction: Direction) -> float:
    """A log limit (negative, higher is better) as a relative tolerance."""
    return -math.expm1(log_limit) if direction == "higher" else math.expm1(-log_limit)


def derived_tolerance(
    noise: Noise,
    rule: Rule,
    baseline_runs: int,
    floor: float,
    direction: Direction,
    *,
    fixed: bool = False,
) -> float:
    """The relative tolerance recording derives from measured noise: the narrowest limit
    a healthy figure, its runs as noisy as recorded, still passes at its most runs with
    the family-wise rate to spare (its signed-rank bound above the limit by the
    baseline's own error, and its median by its noise), averaged over the baseline's
    own error (a baseline that read high puts every run lower alike); never below
    ``floor``. ``fixed``: judged against the number itself (a tolerance a person set),
    so no bound is moved by the baseline's own error, which still moves every run alike.
    With ``floor`` 0 it is the narrowest tolerance this noise supports
    (:func:`supported_tolerance`)."""
    n = rule.max_runs
    rate = rule.per_figure_rate
    base = standard_error(noise, baseline_runs)
    cmp = Comparison(0.0, 0.0, 0.0, (0.0,), noise, 0.0 if fixed else base)
    margin = cmp.margin(rule.near)
    sd, df = cmp.error(n)
    t_near = t_quantile(rule.near, df)
    median_sd = standard_error(noise, n)

    has_bound = walsh_rank(n, rule.near) > 0

    def misses(limit: float) -> float:
        total = 0.0
        for node, weight in _COARSE_NODES:  # the shift is narrower than the noise
            drift = -node * base
            if has_bound:
                by_runs = 1 - _signed_rank_pass(n, drift, limit + margin, noise, rule)
            else:
                by_runs = 1 - _above(limit + margin, drift, noise) ** n
            z = (drift - limit - t_near * sd) / median_sd if median_sd > 0 else 40.0
            by_median = 1 - normal_cdf(z)
            total += weight * min(1.0, by_runs + by_median)
        return total

    low, high = 0.0, 20 * noise.sigma + 0.5
    for _ in range(18):
        mid = (low + high) / 2
        if misses(-mid) <= rate / 2:  # half: the signed-rank chance is a normal
            # approximation; the gate study holds the family-wise rate with it
            high = mid
        else:
            low = mid
    return max(floor, round(_relative(-high, direction), 4))


def supported_tolerance(
    noise: Noise, rule: Rule, baseline_runs: int, direction: Direction, *, fixed: bool = False
) -> float:
    """The narrowest tolerance this noise supports: below it a healthy figure, its runs
    as noisy as recorded, can no longer be passed at the profile's runs with the
    family-wise false-failure rate kept, so it will likely end TOO NOISY (or fail)."""
    return derived_tolerance(noise, rule, baseline_runs, 0.0, direction, fixed=fixed)


@lru_cache(maxsize=4096)
def detectable_drop(
    noise: Noise,
    rule: Rule,
    baseline_runs: int | None,
    tolerance: float,
    direction: Direction,
    host_sigma: float = 0.0,
    host_df: float = math.inf,
    confidence: float = 0.95,
    fixed: bool = False,
) -> float:
    """The smallest drop (0.3: 30% fewer tok/s, or 1/(1-0.3) times the seconds) the gate
    fails at least ``confidence`` of the time with its runs as noisy as recorded: its
    chance to pass (:func:`pass_chance`) is at most the rest. On another host
    (``host_sigma``) the limit lies further by the spread between hosts, and this host's
    own difference is drawn from it. ``fixed``: judged against the number itself (a
    tolerance a person set): the drop is from the recorded number, no bound moves by
    its error."""
    worst, _ = limits(1.0, tolerance, direction)
    base = standard_error(noise, baseline_runs) if baseline_runs and not fixed else 0.0
    cmp = Comparison(0.0, 0.0, 0.0, (0.0,), noise, base, host_sigma, host_df)
    limit = math.log(max(worst, VALUE_FLOOR)) * (1 if direction == "higher" else -1)
    limit -= cmp.host_allowance(rule.near)
    spread = math.sqrt(base**2 + host_sigma**2)
    low, high = limit - 50 * noise.sigma - 1.0, 0.0  # drift caught .. drift missed
    margin = cmp.margin(rule.near)
    early = [(n, early_offset(cmp, n, rule)) for n in rule.early_looks]
    for _ in range(18):
        mid = (low + high) / 2
        if pass_chance(mid, limit, noise, margin, rule, spread, early) <= 1 - confidence:
            low = mid
        else:
            high = mid
    return round(-math.expm1(low), 4)
