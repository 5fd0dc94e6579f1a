"""Run-to-run noise, intervals and the verdict of one figure.

The model (README "How the verdict is decided"):

- The sampling unit is one run of a level. A figure gives one value per run.
- Noise is multiplicative: ``ln(value) = ln(true) + e`` with ``e ~ N(0, sigma²)``, so sigma is
  close to the coefficient of variation between runs.
- The estimate of a figure from ``n`` runs is the median of the runs (one disturbed run
  cannot move it), with standard error ``c_n sigma / √n`` (``c_n``: :data:`MEDIAN_EFFICIENCY`).
- sigma comes from the spread recorded with the baseline, pooled with this run's own spread.
  A run far past the figure's limit counts in that spread as :data:`CENSOR` times past it
  (:func:`censored`): how far past does not change that it is past, and a figure that
  fell to 0 in some runs would otherwise read as noise wide enough to pass.
- A figure regresses when its whole interval lies past its limit; or when it is both
  past its limit and worse than the baseline at the family-wise rate: ``d + z sigma_d < 0``
  with ``z`` the one-sided quantile of ``false_failure_rate / figures``. That is
  Bonferroni's bound: with limits at least as wide as the noise-derived tolerance, the
  chance that any figure of a profile fails on noise alone is at most
  ``false_failure_rate``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Direction = Literal["higher", "lower"]
Verdict = Literal["pass", "improved", "regressed", "untrusted", "missing", "no-baseline", "creep"]
Step = Literal["more", "done"]
CONFIDENCE = 0.95
VALUE_FLOOR = 1e-6  # a figure of 0 (acceptance collapsed) is taken as this, so logs exist
CENSOR = 4.0  # a run further past its limit than this factor counts at it in the spread

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


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on :func:`t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError("quantile of p outside (0, 1)")
    if df > NORMAL_DF:
        return statistics.NormalDist().inv_cdf(p)
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
    """A figure from n runs: the median, and a confidence interval where noise is known."""

    median: float
    low: float | None
    high: float | None
    n: int
    noise: Noise | None
    confidence: float = CONFIDENCE
    held: int = 0  # runs the spread counted at ``bound``, far past the limit (censored)
    bound: float | None = None

    @property
    def interval(self) -> str:
        """The interval as people read it, naming what it is."""
        if self.low is None or self.high is None:
            why = "noise unknown" if self.noise is None else "a ratio interval about 0 is 0..0"
            text = f"n={self.n}, no interval ({why})"
        else:
            text = f"{self.confidence:.0%} CI {self.low:.4g}..{self.high:.4g}, n={self.n}"
        if self.held and self.bound is not None:
            runs, at = "run" if self.held == 1 else "runs", f"{self.bound:.4g}"
            text += f", {self.held} {runs} beyond {at} taken as {at} in the spread"
        return text


def standard_error(noise: Noise, n: int) -> float:
    """Standard error of ln(median of n runs)."""
    return median_efficiency(n) * noise.sigma / math.sqrt(n)


def censored(
    samples: Sequence[float], worst: float, direction: Direction
) -> tuple[list[float], float | None]:
    """The runs as a figure's spread reads them, and the bound they were held to: a run
    further past ``worst`` (the limit) than :data:`CENSOR` times counts at that bound.

    Only the spread reads them; the median stays the runs' own. A limit of 0 or less
    (a tolerance of 100% or more, higher is better) has no bound.
    """
    if worst <= 0:
        return list(samples), None
    if direction == "higher":
        bound = worst / CENSOR
        return [max(v, bound) for v in samples], bound
    bound = worst * CENSOR
    return [min(v, bound) for v in samples], bound


def estimate(
    samples: Sequence[float],
    noise: Noise | None = None,
    *,
    limit: tuple[float, Direction] | None = None,
) -> Estimate:
    """Median of runs with a t interval of the log median.

    ``noise``: the spread known from elsewhere (the baseline's), pooled with the runs' own.
    ``limit``: the figure's worst acceptable value and direction; runs far past it count
    at :func:`censored`'s bound in the runs' own spread. Without any spread estimate
    there is no interval, and the Estimate says so.
    """
    if not samples:
        raise ValueError("estimate of no samples")
    center = median(samples)
    spread_of, bound = censored(samples, *limit) if limit else (list(samples), None)
    held = sum(a != b for a, b in zip(samples, spread_of, strict=True))
    parts = [p for p in (noise, Noise.of(spread_of)) if p is not None]
    pooled = Noise.pooled(parts)
    if pooled is None:
        return Estimate(center, None, None, len(samples), None)
    if center <= 0:  # the interval is a ratio of the median: none about 0 (the verdict
        # still reads the noise, the median taken as VALUE_FLOOR)
        low = high = None
    else:
        half = t_quantile(0.5 + CONFIDENCE / 2, pooled.df) * standard_error(pooled, len(samples))
        low, high = center * math.exp(-half), center * math.exp(half)
    return Estimate(
        center,
        low,
        high,
        len(samples),
        pooled,
        held=held,
        bound=bound if held else None,
    )


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


@dataclass(frozen=True, slots=True)
class Comparison:
    """One figure's runs against its baseline, in log units where higher is better."""

    drift: float  # ln(measured / baseline), mirrored for lower-is-better figures
    limit: float  # ln(worst acceptable / baseline), mirrored likewise (negative)
    better: float  # ln(clearly better / baseline), mirrored likewise (positive)
    error: float | None  # standard error of drift; None when noise is unknown
    df: float
    host: float = 0.0  # the part of the error from the spread between hosts: more runs
    # of this host cannot shrink it
    past: int = 0  # runs past the limit, of ``runs``
    runs: int = 0


def runs_past(samples: Sequence[float], worst: float, direction: Direction) -> int:
    """How many runs are past the limit ``worst``."""
    if direction == "higher":
        return sum(v < worst for v in samples)
    return sum(v > worst for v in samples)


def sign_tail(n: int, k: int) -> float:
    """P(at least k of n runs past the limit) were the figure's median at the limit: the
    sign test's p-value (Binomial(n, 1/2))."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def comparison(
    est: Estimate,
    value: float,
    worst: float,
    better: float,
    direction: Direction,
    baseline_runs: int | None,
    host_sigma: float = 0.0,
    host_df: float = math.inf,
    past: int = 0,
) -> Comparison:
    """Drift of an estimate from the baseline value, with its standard error.

    ``baseline_runs``: how many runs the baseline's median came from (None for a
    hand-entered target, which has no error of its own). ``host_sigma``: the spread of
    the figure between hosts (sd of ln), for a baseline recorded on another host: the
    baseline's value is then one host's draw, and that spread adds to the error; the
    degrees of freedom of the sum are Welch-Satterthwaite's (:func:`combined_df`).
    ``past``: how many of the estimate's runs are past the limit (:func:`runs_past`).
    """
    sign = 1.0 if direction == "higher" else -1.0

    def log_ratio(x: float) -> float:
        return sign * math.log(max(x, VALUE_FLOOR) / value)

    error = None
    df = math.inf
    if est.noise is not None:
        variance = median_efficiency(est.n) ** 2 / est.n
        if baseline_runs:
            variance += median_efficiency(baseline_runs) ** 2 / baseline_runs
        runs_part = est.noise.sigma**2 * variance
        error = math.sqrt(runs_part + host_sigma**2)
        df = combined_df(runs_part, est.noise.df, host_sigma**2, host_df)
    return Comparison(
        log_ratio(est.median),
        log_ratio(worst),
        log_ratio(better),
        error,
        df,
        host_sigma,
        past,
        est.n,
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """How sure the gate must be before it decides.

    - ``near``: one-sided confidence that a figure is clearly on one side of its limit
      before the gate stops measuring it;
    - ``false_failure_rate``: family-wise: the chance that noise alone fails any of
      ``figures`` figures of one profile;
    - ``min_runs`` and ``max_runs``: runs of a level before any verdict, and at most.
    """

    min_runs: int = 3
    max_runs: int = 10
    figures: int = 1
    false_failure_rate: float = 0.01
    near: float = 0.95

    @property
    def per_figure_rate(self) -> float:
        """Bonferroni: the family's rate shared equally by its figures."""
        return self.false_failure_rate / max(1, self.figures)


def combined_df(runs_var: float, runs_df: float, host_var: float, host_df: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two variance estimates: the
    runs' noise (``runs_df``) and the spread between hosts (``host_df``; infinite for a
    stated default). With no spread between hosts it is the runs' df."""
    if host_var <= 0:
        return runs_df
    terms = (runs_var**2 / runs_df if runs_df > 0 else math.inf) + (
        host_var**2 / host_df if host_df > 0 else math.inf
    )
    return (runs_var + host_var) ** 2 / terms if terms > 0 else math.inf


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, whether more runs are wanted, and why."""

    verdict: Verdict
    step: Step
    why: str


def decide(cmp: Comparison, n: int, rule: Rule) -> Decision:
    """The verdict of a comparison after n runs, or a request for more runs.

    - REGRESSED when the drift's whole interval (:data:`CONFIDENCE`, two-sided) lies past
      the limit, whatever the family: the limit is the limit. Or when so many of the runs
      are past the limit that a median at the limit would rarely give as many (the sign
      test at ``rule.near``): no spread enters it, so runs further past the limit can
      never turn it into a pass. Or else when both past the limit (clearly, or by the
      point estimate once no more runs are allowed) and worse than the baseline at the
      family-wise rate.
    - More runs are asked for while the figure is near its limit, in either direction,
      and only while they can narrow its error: once the runs' part of the error is no
      larger than the spread between hosts (``cmp.host``), the verdict is final.
    - With no noise estimate at all (one run, hand-entered baseline) only the point
      estimate can be judged, and the reason says so.
    """
    d, limit = cmp.drift, cmp.limit
    if cmp.past * 2 > cmp.runs and sign_tail(cmp.runs, cmp.past) <= 1 - rule.near:
        why = f"{cmp.past} of {cmp.runs} runs past the limit (sign test)"
        return Decision("regressed", "done", why)
    if cmp.error is None:
        if n < rule.min_runs:
            return Decision("pass", "more", "fewer runs than the minimum")
        verdict: Verdict = "regressed" if d < limit else "improved" if d > cmp.better else "pass"
        return Decision(verdict, "done", "judged on the point estimate: noise unknown")
    se = cmp.error
    z_near = t_quantile(rule.near, cmp.df)
    z_family = t_quantile(1 - rule.per_figure_rate, cmp.df)
    significant = d + z_family * se < 0
    beyond = d + z_near * se < limit
    wholly_past = d + t_quantile(0.5 + CONFIDENCE / 2, cmp.df) * se < limit
    within = d - z_near * se > limit
    runs_part = math.sqrt(max(0.0, se * se - cmp.host * cmp.host))
    final = n >= rule.max_runs or (cmp.host > 0 and runs_part <= cmp.host)
    noise = "noise and the spread between hosts" if cmp.host > 0 else "noise"
    if wholly_past:
        why = f"its whole {CONFIDENCE:.0%} interval past the limit, beyond {noise}"
        return Decision("regressed", "done", why)
    if n < rule.min_runs and not (beyond and significant):
        return Decision("pass", "more", "fewer runs than the minimum")
    if beyond and significant:
        return Decision("regressed", "done", f"past the limit, beyond {noise}")
    if within:
        improved = d - z_near * se > cmp.better
        return Decision("improved" if improved else "pass", "done", "clearly within the limit")
    if not final:
        return Decision("pass", "more", "near the limit: measuring again")
    if d < limit and significant:
        return Decision("regressed", "done", f"past the limit after the most runs, beyond {noise}")
    if d < limit:
        return Decision("pass", "done", f"past the limit by the point estimate, within {noise}")
    return Decision("pass", "done", "near the limit after the most runs")


def derived_tolerance(
    noise: Noise, rule: Rule, baseline_runs: int, floor: float, direction: Direction
) -> float:
    """The relative tolerance recording derives from measured noise.

    It is the smallest drift the gate can tell from noise at the family-wise rate after
    its most runs, ``z sigma √(c²_N/N + c²_b/b)`` in log units, and never below ``floor``.
    """
    n = rule.max_runs
    variance = median_efficiency(n) ** 2 / n + median_efficiency(baseline_runs) ** 2 / baseline_runs
    z = t_quantile(1 - rule.per_figure_rate, noise.df)
    log_tol = z * noise.sigma * math.sqrt(variance)
    relative = 1 - math.exp(-log_tol) if direction == "higher" else math.exp(log_tol) - 1
    return max(floor, round(relative, 4))


def smallest_failing_factor(
    noise: Noise,
    rule: Rule,
    baseline_runs: int,
    tolerance: float,
    direction: Direction,
    host_sigma: float = 0.0,
    host_df: float = math.inf,
) -> float:
    """The smallest factor by which a figure is worse (2.0: half the tok/s, or twice the
    seconds) whose runs the gate fails after its most runs: past the limit beyond noise,
    and worse than the baseline at the family-wise rate (:func:`decide`). A figure worse
    by this factor fails about half the time; by a smaller one, rarely."""
    n = rule.max_runs
    variance = median_efficiency(n) ** 2 / n + median_efficiency(baseline_runs) ** 2 / baseline_runs
    runs_part = noise.sigma**2 * variance
    se = math.sqrt(runs_part + host_sigma**2)
    df = combined_df(runs_part, noise.df, host_sigma**2, host_df)
    worst, _ = limits(1.0, tolerance, direction)
    limit = -abs(math.log(max(worst, VALUE_FLOOR)))
    log_factor = max(
        -limit + t_quantile(rule.near, df) * se,
        t_quantile(1 - rule.per_figure_rate, df) * se,
    )
    return math.exp(log_factor)
