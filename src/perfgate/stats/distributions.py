"""Distributions the verdict reads: the median and its efficiency, Student's t and F."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import lru_cache

VALUE_FLOOR = 1e-6  # a figure of 0 (acceptance collapsed) is taken as this, so logs exist


# sd(median of n normal draws) * sqrt(n) / sigma, for n = 1..20 (2e6-draw simulation,
# benchmarks/gate_study.py --constants); 1.2533 = sqrt(pi/2) beyond.
MEDIAN_EFFICIENCY = (
    1.0, 1.0, 1.16, 1.091, 1.197, 1.134, 1.214, 1.159, 1.223, 1.177,
    1.229, 1.188, 1.232, 1.196, 1.234, 1.203, 1.239, 1.208, 1.239, 1.211,
)  # fmt: skip


def median_efficiency(n: int) -> float:
    """``c_n``: the median of n runs has standard error ``c_n sigma / √n``."""
    return MEDIAN_EFFICIENCY[n - 1] if n <= len(MEDIAN_EFFICIENCY) else math.sqrt(math.pi / 2)


def median(samples: Sequence[float]) -> float:
    """The median."""
    if not samples:
        raise ValueError("median of no samples")
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def log_spread(samples: Sequence[float]) -> float | None:
    """Sample standard deviation of ln(samples) (≈ CV); None for fewer than two."""
    if len(samples) < 2:
        return None
    logs = [math.log(max(v, VALUE_FLOOR)) for v in samples]
    mean = math.fsum(logs) / len(logs)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


# -- Student's t, without scipy --------------------------------------------------------
def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


NORMAL_DF = 1e6  # Student's t with more degrees of freedom is the normal distribution


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom (normal for df = inf, and
    past :data:`NORMAL_DF`, where the two differ by less than 1e-6)."""
    if df > NORMAL_DF:
        return statistics.NormalDist().cdf(t)
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def _t_density(t: float, df: float) -> float:
    """Student's t density at ``t``."""
    log_scale = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_scale - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t: Newton's steps on :func:`t_cdf` from the normal
    quantile (a few steps), else bisection."""
    if not 0 < p < 1:
        raise ValueError("quantile of p outside (0, 1)")
    if df > NORMAL_DF:
        return statistics.NormalDist().inv_cdf(p)
    t = statistics.NormalDist().inv_cdf(p)
    for _ in range(12):
        density = _t_density(t, df)
        if density <= 0:
            break
        step = (t_cdf(t, df) - p) / density
        t -= step
        if abs(step) < 1e-12 * max(1.0, abs(t)):
            return t
    low, high = -1e4, 1e4
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10:
            break
    return (low + high) / 2


def f_cdf(f: float, d1: float, d2: float) -> float:
    """P(F ≤ f) for Fisher's F with (d1, d2) degrees of freedom."""
    if f <= 0:
        return 0.0
    d2 = min(d2, 1e4)  # beyond, F(d1, d2) is d1·F ≈ chi²(d1) to 1e-4
    return _incomplete_beta(d1 / 2, d2 / 2, d1 * f / (d1 * f + d2))


def combined_df(runs_var: float, runs_df: float, host_var: float, host_df: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two variance estimates (the
    second's df infinite for a stated default). With no second part it is the first's."""
    if host_var <= 0:
        return runs_df
    if runs_var <= 0:
        return host_df
    terms = (runs_var**2 / runs_df if runs_df > 0 else math.inf) + (
        host_var**2 / host_df if host_df > 0 else math.inf
    )
    return (runs_var + host_var) ** 2 / terms if terms > 0 else math.inf


_SQRT2 = math.sqrt(2.0)


def normal_cdf(z: float) -> float:
    """N(0, 1)'s cdf at ``z`` (NaN taken as +∞), for the chances of a verdict:
    ``statistics.NormalDist().cdf``'s own formula, without the method call or a clamp
    (a recording's power sums take it millions of times; erf is ±1 past |z| ≈ 8.3)."""
    return 0.5 * (1.0 + math.erf(z / _SQRT2)) if z == z else 1.0


def normal_grid(points: int = 41, reach: float = 5.0) -> tuple[tuple[float, float], ...]:
    """(node, weight) pairs of a standard normal on an even grid over ±``reach`` sd: a
    fine grid, as the chances averaged over it are steep steps in the shift."""
    step = 2 * reach / (points - 1)
    nodes = [-reach + i * step for i in range(points)]
    weights = [math.exp(-x * x / 2) for x in nodes]
    total = math.fsum(weights)
    return tuple((x, w / total) for x, w in zip(nodes, weights, strict=True))


def widened(sigma: float, df: float) -> float:
    """A recorded sd widened to the t distribution's at its degrees of freedom (√2 at 4
    or fewer), for the chance of one run past a point."""
    return sigma * (math.sqrt(df / (df - 2)) if df > 4 else math.sqrt(2))
