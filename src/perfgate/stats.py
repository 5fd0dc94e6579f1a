"""Run-to-run noise, intervals and the verdict of one figure.

The model (docs/verdicts.md):

- The sampling unit is one run of a level. A figure gives one value per run.
- Noise is multiplicative: ``ln(value) = ln(true) + e``, so the spread of ln(value) is
  close to the coefficient of variation between runs.
- The estimate of a figure from ``n`` runs is the median of the runs (one disturbed run
  cannot move it). Its interval, as printed, is Welch's: the runs' own spread (not pooled
  with the recording's) and the baseline's own error, with Satterthwaite's degrees of
  freedom.
- The verdict passes only on evidence and is monotone: each bound it reads rises or
  stays when any run improves, so worsening a run never improves a verdict.
  - PASS: Wilcoxon's signed-rank lower bound of the runs' median (a Walsh average) clears
    the limit at 95% whatever the width of the noise, from 5 runs; with fewer runs,
    every run clears it. Each by the baseline's own error; and the median clears it by
    the noise recorded with the baseline.
  - REGRESSED: the same bound mirrored lies past the limit, or every run is past it and
    the median's whole 95% interval (the recorded noise) too.
  - Otherwise the level is measured again, up to the most runs; then it is TOO NOISY,
    a failure of its own. Runs noisier than recorded are never passed on fewer than 5
    runs: the gate measures on until their own bound decides.
  - On another host than the recording's the limit lies further by the spread between
    hosts (at 95%).
- Derived tolerances are sized so that a healthy figure, its runs as noisy as recorded,
  passes with the family-wise rate to spare; each figure's detectable drop is the
  smallest the gate fails 95% of the time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Direction = Literal["higher", "lower"]
Verdict = Literal[
    "pass", "improved", "regressed", "too-noisy", "untrusted", "missing", "no-baseline", "creep"
]
Step = Literal["more", "done"]
CONFIDENCE = 0.95
VALUE_FLOOR = 1e-6  # a figure of 0 (acceptance collapsed) is taken as this, so logs exist
NOISIER = 0.99  # runs are noisier than recorded past this quantile of F(n - 1, recorded df)

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


def f_cdf(f: float, d1: float, d2: float) -> float:
    """P(F ≤ f) for Fisher's F with (d1, d2) degrees of freedom."""
    if f <= 0:
        return 0.0
    d2 = min(d2, 1e4)  # beyond, F(d1, d2) is d1·F ≈ chi²(d1) to 1e-4
    return _incomplete_beta(d1 / 2, d2 / 2, d1 * f / (d1 * f + d2))


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


@dataclass(frozen=True, slots=True)
class Comparison:
    """One figure's runs against its baseline, in log units where higher is better."""

    drift: float  # ln(median / baseline), mirrored for lower-is-better figures
    limit: float  # ln(worst acceptable / baseline), mirrored likewise (negative)
    better: float  # ln(clearly better / baseline), mirrored likewise (positive)
    runs: tuple[float, ...]  # each run's drift, lowest (worst) first
    recorded: Noise | None  # the runs' noise recorded with the baseline; None: unknown
    base_error: float = 0.0  # sd of ln of the baseline's value (its median's own error)
    host: float = 0.0  # the spread between hosts (sd of ln), on another host than the
    # recording's: more runs of this host cannot shrink it
    host_df: float = math.inf

    @property
    def spread(self) -> Noise | None:
        """The runs' own spread (sd of ln drift), None for fewer than two runs."""
        if len(self.runs) < 2:
            return None
        mean = math.fsum(self.runs) / len(self.runs)
        var = math.fsum((r - mean) ** 2 for r in self.runs) / (len(self.runs) - 1)
        return Noise(math.sqrt(var), len(self.runs) - 1)

    @property
    def error_df(self) -> float:
        """Degrees of freedom of the baseline's own error with the spread between hosts."""
        own = self.recorded.df if self.recorded else math.inf
        return combined_df(self.base_error**2, own, self.host**2, self.host_df)

    @property
    def noisier(self) -> bool:
        """Whether the runs are noisier than recorded (F test at :data:`NOISIER`)."""
        own = self.spread
        if own is None or self.recorded is None or self.recorded.df <= 0:
            return False
        if self.recorded.sigma <= 0 or own.sigma > 1e6 * self.recorded.sigma:
            return own.sigma > 0
        ratio = (own.sigma / self.recorded.sigma) ** 2
        return f_cdf(ratio, own.df, self.recorded.df) > NOISIER

    def error(self, n: int) -> tuple[float, float]:
        """(sd, df) of the drift of a median of n runs as noisy as recorded, with the
        baseline's own error."""
        assert self.recorded is not None
        return math.sqrt(standard_error(self.recorded, n) ** 2 + self.base_error**2), (
            self.recorded.df
        )

    def margin(self, quantile: float) -> float:
        """How far past (or within) the limit a run must be to count: the baseline's own
        error at one-sided ``quantile``."""
        if self.base_error <= 0:
            return 0.0
        df = self.recorded.df if self.recorded else math.inf
        return t_quantile(quantile, df) * self.base_error

    def host_allowance(self, quantile: float) -> float:
        """How much further the limit lies on another host than the recording's: the
        spread between hosts at one-sided ``quantile`` (0 on the recording's host)."""
        return t_quantile(quantile, self.host_df) * self.host if self.host > 0 else 0.0


def comparison(
    samples: Sequence[float],
    value: float,
    worst: float,
    better: float,
    direction: Direction,
    baseline_runs: int | None,
    recorded: Noise | None,
    host_sigma: float = 0.0,
    host_df: float = math.inf,
) -> Comparison:
    """The runs' drift from the baseline value, with what the verdict needs to read it.

    ``baseline_runs``: how many runs the baseline's median came from (None for a
    hand-entered target, which has no error of its own). ``recorded``: the noise recorded
    with the baseline. ``host_sigma``: the spread of the figure between hosts (sd of ln),
    for a baseline recorded on another host: the baseline's value is one host's draw.
    """
    sign = 1.0 if direction == "higher" else -1.0

    def log_ratio(x: float) -> float:
        return sign * math.log(max(x, VALUE_FLOOR) / value)

    base_error = 0.0
    if recorded is not None and baseline_runs:
        base_error = standard_error(recorded, baseline_runs)
    return Comparison(
        log_ratio(median(samples)),
        log_ratio(worst),
        log_ratio(better),
        tuple(sorted(log_ratio(v) for v in samples)),
        recorded,
        base_error,
        host_sigma,
        host_df,
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """How sure the gate must be before it decides.

    - ``near``: one-sided confidence of each bound the verdict reads (the signed-rank
      bounds, the baseline's own error);
    - ``false_failure_rate``: family-wise: the chance that noise alone fails any of
      ``figures`` figures of one profile (derived tolerances are sized for it);
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


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, whether more runs are wanted, and why."""

    verdict: Verdict
    step: Step
    why: str


def lower_bound(cmp: Comparison, rule: Rule) -> float:
    """The lower bound of the figure's drift a pass reads; it rises or stays when any run
    improves. Wilcoxon's signed-rank lower bound of the runs' median at ``rule.near`` (the
    k-th lowest Walsh average; the lowest run with fewer than 5 runs) less the baseline's
    own error, and no higher than the median less its recorded noise."""
    walsh = walsh_averages(cmp.runs)
    k = max(1, walsh_rank(len(cmp.runs), rule.near))
    low = walsh[k - 1] - cmp.margin(rule.near)
    if cmp.recorded is not None:
        sd, df = cmp.error(len(cmp.runs))
        low = min(low, cmp.drift - t_quantile(rule.near, df) * sd)
    return low


def decide(cmp: Comparison, n: int, rule: Rule) -> Decision:
    """The verdict of a comparison after n runs, or a request for more runs.

    - REGRESSED when so many runs are past the limit (beyond the baseline's own error
      and the spread between hosts) that a median at the limit would rarely give as many
      (the sign test at ``rule.near``); or when every run is, and the median's whole
      interval (:data:`CONFIDENCE`, the recorded noise) lies past it: the limit is the
      limit, whatever the family. (The family-wise rate sizes derived tolerances.)
    - PASS (IMPROVED past the better limit) when the low bound (:func:`lower_bound`) clears
      the limit. Runs noisier than recorded pass only once their number alone decides
      (5 or more at 95%): before, the gate measures again.
    - Otherwise more runs, up to ``rule.max_runs``; then TOO NOISY: the runs neither
      clear the limit nor are past it beyond noise.

    Every rule reads bounds that rise or stay when any run improves: worsening a run
    never improves the verdict (``tests/unit/test_stats.py``).
    """
    runs = cmp.runs
    limit = cmp.limit - cmp.host_allowance(rule.near)
    low = lower_bound(cmp, rule)
    past = sum(r < limit - cmp.margin(rule.near) for r in runs)
    beyond = "beyond noise and the spread between hosts" if cmp.host > 0 else "beyond noise"

    def done(verdict: Verdict, why: str) -> Decision:
        return Decision(verdict, "done", why)

    rank = walsh_rank(n, rule.near)
    if rank:
        walsh = walsh_averages(runs)
        if walsh[len(walsh) - rank] < limit - cmp.margin(rule.near):
            why = f"{past} of {n} runs past the limit, and their signed-rank bound, {beyond}"
            return done("regressed", why)
    if past == n:
        if cmp.recorded is None:
            return done("regressed", f"every run past the limit (n={n}; noise unknown)")
        sd, df = cmp.error(n)
        if cmp.drift + t_quantile(0.5 + CONFIDENCE / 2, df) * sd < limit:
            why = f"every run past the limit, and the median's whole {CONFIDENCE:.0%} interval"
            return done("regressed", f"{why}, {beyond}")
    if n < rule.min_runs:
        return Decision("pass", "more", "fewer runs than the minimum")
    final = n >= rule.max_runs
    cleared = f"the runs' signed-rank bound (n={n})" if rank else "every run"
    if low > limit:
        if cmp.noisier and not rank and not final:
            why = "clears the limit, but the runs are noisier than recorded: measuring again"
            return Decision("pass", "more", why)
        improved = low > cmp.better
        why = f"{cleared} clears the {'better limit' if improved else 'limit'}"
        if cmp.host > 0 and low <= cmp.limit:
            why += " widened by the spread between hosts (another host than the recording's)"
        return done("improved" if improved else "pass", why)
    if not final:
        return Decision("pass", "more", "near the limit: measuring again")
    return done("too-noisy", too_noisy_why(cmp, n, past, limit))


def too_noisy_why(cmp: Comparison, n: int, past: int, limit: float) -> str:
    """Why a figure is TOO NOISY, and what to do."""
    within = sum(r > limit for r in cmp.runs)
    own, rec = cmp.spread, cmp.recorded
    spread = f"the runs' spread {own.sigma:.1%}" if own else "one run"
    if rec is not None:
        spread += f" (recorded {rec.sigma:.1%}{': noisier than recorded' if cmp.noisier else ''})"
    return (
        f"too noisy to decide after {n} runs: {within} of {n} within the limit, {past} past it "
        f"beyond noise; {spread}. Measure on a quieter host, allow more runs "
        "(gate.max_extra_repeats), or record a looser tolerance on purpose (--perf-tolerance)"
    )


_STANDARD_NORMAL = statistics.NormalDist()


def _above(threshold: float, drift: float, noise: Noise) -> float:
    """The chance that one run of a figure whose true drift is ``drift`` lies above
    ``threshold`` (log units), its noise as recorded: normal, with the recorded sigma
    widened to the t distribution's sd at the recording's degrees of freedom."""
    widen = math.sqrt(noise.df / (noise.df - 2)) if noise.df > 4 else math.sqrt(2)
    sigma = noise.sigma * widen
    if sigma <= 0:
        return 1.0 if drift > threshold else 0.0
    return _STANDARD_NORMAL.cdf(max(-40.0, min(40.0, (drift - threshold) / sigma)))


def _signed_rank_pass(n: int, drift: float, threshold: float, noise: Noise, rule: Rule) -> float:
    """About the chance that the signed-rank lower bound of n runs clears ``threshold``:
    the Hodges-Lehmann estimate has sd sigma·√(π/3n) for normal noise, and the bound lies
    a t quantile of that below it."""
    sd = noise.sigma * math.sqrt(math.pi / (3 * n))
    if sd <= 0:
        return 1.0 if drift > threshold else 0.0
    z = (drift - threshold - t_quantile(rule.near, n - 1) * sd) / sd
    return _STANDARD_NORMAL.cdf(max(-40.0, min(40.0, z)))


def _pass_at_looks(drift: float, threshold: float, noise: Noise, rule: Rule) -> float:
    """About the chance of passing at some look: every run above ``threshold`` at the
    first look (exact), or the signed-rank bound above it at a later look. The later
    looks share their runs, so their union is taken as the likeliest of them (checked
    by simulation: ``tests/unit/test_stats.py``)."""
    first = max(1, rule.min_runs)
    early = 0.0 if walsh_rank(first, rule.near) else _above(threshold, drift, noise) ** first
    later = [
        _signed_rank_pass(n, drift, threshold, noise, rule)
        for n in range(first, rule.max_runs + 1)
        if walsh_rank(n, rule.near)
    ]
    return min(1.0, early + max(later, default=0.0))


def _normal_grid(points: int = 41, reach: float = 5.0) -> tuple[tuple[float, float], ...]:
    """(node, weight) pairs of a standard normal on an even grid over ±``reach`` sd: a
    fine grid, as the chance it averages is a steep step in the shift."""
    step = 2 * reach / (points - 1)
    nodes = [-reach + i * step for i in range(points)]
    weights = [math.exp(-x * x / 2) for x in nodes]
    total = math.fsum(weights)
    return tuple((x, w / total) for x, w in zip(nodes, weights, strict=True))


_NORMAL_NODES = _normal_grid()
_COARSE_NODES = _normal_grid(21, 4.5)  # enough where the shift is no wider than the noise


def pass_chance(
    drift: float, limit: float, noise: Noise, margin: float, rule: Rule, base_error: float = 0.0
) -> float:
    """About the chance that a figure whose true drift is ``drift`` passes
    against ``limit`` (log units, higher is better), its runs as noisy as recorded: the
    union over the looks (:func:`_pass_at_looks`) of its bound clearing the limit,
    averaged over the baseline's own error (``base_error``, sd of ln: a baseline that
    read high moves every run's drift down alike)."""
    total = 0.0
    nodes = _NORMAL_NODES if base_error > noise.sigma else _COARSE_NODES
    for node, weight in nodes if base_error > 0 else ((0.0, 1.0),):
        total += weight * _pass_at_looks(drift - node * base_error, limit + margin, noise, rule)
    return total


def _relative(log_limit: float, direction: Direction) -> float:
    """A log limit (negative, higher is better) as a relative tolerance."""
    return -math.expm1(log_limit) if direction == "higher" else math.expm1(-log_limit)


def derived_tolerance(
    noise: Noise, rule: Rule, baseline_runs: int, floor: float, direction: Direction
) -> float:
    """The relative tolerance recording derives from measured noise: the narrowest limit
    a healthy figure, its runs as noisy as recorded, still passes at its most runs with
    the family-wise rate to spare (its signed-rank bound above the limit by the
    baseline's own error, and its median by its noise), averaged over the baseline's
    own error (a baseline that read high puts every run lower alike); never below
    ``floor``."""
    n = rule.max_runs
    rate = rule.per_figure_rate
    base = standard_error(noise, baseline_runs)
    cmp = Comparison(0.0, 0.0, 0.0, (0.0,), noise, base)
    margin = cmp.margin(rule.near)
    sd, df = cmp.error(n)
    t_near = t_quantile(rule.near, df)
    median_sd = standard_error(noise, n)

    def misses(limit: float) -> float:
        total = 0.0
        for node, weight in _COARSE_NODES:  # the shift is narrower than the noise
            drift = -node * base
            if walsh_rank(n, rule.near):
                by_runs = 1 - _signed_rank_pass(n, drift, limit + margin, noise, rule)
            else:
                by_runs = 1 - _above(limit + margin, drift, noise) ** n
            z = (drift - limit - t_near * sd) / median_sd if median_sd > 0 else 40.0
            by_median = 1 - _STANDARD_NORMAL.cdf(max(-40.0, min(40.0, z)))
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
) -> float:
    """The smallest drop (0.3: 30% fewer tok/s, or 1/(1-0.3) times the seconds) the gate
    fails at least ``confidence`` of the time with its runs as noisy as recorded: its
    chance to pass (:func:`pass_chance`) is at most the rest. On another host
    (``host_sigma``) the limit lies further by the spread between hosts, and this host's
    own difference is drawn from it."""
    worst, _ = limits(1.0, tolerance, direction)
    base = standard_error(noise, baseline_runs) if baseline_runs else 0.0
    cmp = Comparison(0.0, 0.0, 0.0, (0.0,), noise, base, host_sigma, host_df)
    limit = math.log(max(worst, VALUE_FLOOR)) * (1 if direction == "higher" else -1)
    limit -= cmp.host_allowance(rule.near)
    spread = math.sqrt(base**2 + host_sigma**2)
    low, high = limit - 50 * noise.sigma - 1.0, 0.0  # drift caught .. drift missed
    margin = cmp.margin(rule.near)
    for _ in range(18):
        mid = (low + high) / 2
        if pass_chance(mid, limit, noise, margin, rule, spread) <= 1 - confidence:
            low = mid
        else:
            high = mid
    return round(-math.expm1(low), 4)
