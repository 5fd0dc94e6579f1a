"""The verdict of one figure: its runs compared with the baseline under the gate's rule."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from perfgate.stats.distributions import (
    VALUE_FLOOR,
    combined_df,
    f_cdf,
    median,
    normal_cdf,
    normal_grid,
    t_quantile,
    widened,
)
from perfgate.stats.estimate import (
    CONFIDENCE,
    NOISIER,
    Direction,
    Noise,
    Step,
    Verdict,
    standard_error,
    walsh_averages,
    walsh_rank,
)


def bonferroni(family_rate: float, members: int) -> float:
    """Bonferroni: a family-wise rate shared equally by its members (at least one)."""
    return family_rate / max(1, members)


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
    base_runs: int = 0  # runs the baseline's value is the median of (0: a fixed number)

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
        return self.noisier_at(NOISIER)

    def noisier_at(self, quantile: float) -> bool:
        """Whether the runs are noisier than recorded, by an F test at ``quantile``."""
        own = self.spread
        if own is None or self.recorded is None or self.recorded.df <= 0:
            return False
        if self.recorded.sigma <= 0 or own.sigma > 1e6 * self.recorded.sigma:
            return own.sigma > 0
        ratio = (own.sigma / self.recorded.sigma) ** 2
        return f_cdf(ratio, own.df, self.recorded.df) > quantile

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

    ``baseline_runs``: how many runs the baseline's median came from, whose error the
    verdict charges (None for a fixed number: a hand-entered target, or any tolerance a
    person set, which is a contract with the number itself). ``recorded``: the noise
    recorded with the baseline. ``host_sigma``: the spread of the figure between hosts (sd
    of ln), for a baseline recorded on another host: the baseline's value is one host's
    draw.
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
        baseline_runs or 0,
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """How sure the gate must be before it decides.

    - ``near``: one-sided confidence of each bound the verdict reads (the signed-rank
      bounds, the baseline's own error);
    - ``false_failure_rate``: family-wise: the chance that noise alone fails any of
      ``figures`` figures of one profile (derived tolerances are sized for it);
    - ``min_runs`` and ``max_runs``: runs of a level before the usual verdict, and at most;
    - ``early_runs``: the fewest runs that may pass before ``min_runs``, when they agree
      far inside the limit (:func:`early_pass`; ``min_runs`` or more: never early);
    - ``early_rate``: the chance that a figure exactly at its limit passes at one of those
      early looks, shared equally by them (the early looks' whole cost in detection).
    """

    min_runs: int = 3
    max_runs: int = 10
    figures: int = 1
    false_failure_rate: float = 0.01
    near: float = 0.95
    early_runs: int = 2
    early_rate: float = 0.01

    @property
    def per_figure_rate(self) -> float:
        """The family's rate shared equally by its figures (:func:`bonferroni`)."""
        return bonferroni(self.false_failure_rate, self.figures)

    @property
    def early_looks(self) -> range:
        """The run counts at which a figure may pass early (before ``min_runs``)."""
        return range(max(1, self.early_runs), self.min_runs)


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


_GRID = normal_grid()


@lru_cache(maxsize=4096)
def _early_offset(sigma: float, df: float, base: float, n: int, chance: float) -> float:
    """The x with P(all n runs > limit + x) = ``chance`` for a figure exactly at its limit:
    each run off by its noise (sd ``sigma`` widened to t at ``df``) and all alike by the
    baseline's own error (sd ``base``), averaged over a normal grid of the latter."""
    sd = widened(sigma, df)
    grid = _GRID if base > 0 else ((0.0, 1.0),)

    def passes(x: float) -> float:
        if sd <= 0:
            return math.fsum(w for z, w in grid if z * base > x)
        return math.fsum(w * (1 - normal_cdf((x - z * base) / sd)) ** n for z, w in grid)

    low, high = 0.0, 12 * (sd + base) + 1e-9
    for _ in range(40):
        mid = (low + high) / 2
        if passes(mid) > chance:
            low = mid
        else:
            high = mid
    return high


def early_offset(cmp: Comparison, n: int, rule: Rule) -> float:
    """How far inside the limit every one of n runs must lie to pass at an early look
    (log units): so far that a figure exactly at its limit, its runs as noisy as recorded
    and the baseline off by its own error, passes at this look with a chance of this
    look's share of ``rule.early_rate`` (computed, not bounded: :func:`_early_offset`)."""
    assert cmp.recorded is not None
    share = rule.early_rate / max(1, len(rule.early_looks))
    return _early_offset(cmp.recorded.sigma, cmp.recorded.df, cmp.base_error, n, share)


EARLY_NOISIER = 0.95  # an early look waits for more runs past this quantile of F


def early_pass(cmp: Comparison, n: int, rule: Rule, *, guarded: bool = False) -> bool:
    """Whether n runs (an early look: fewer than ``rule.min_runs``) pass at once: their
    noise recorded, and every run inside the limit by :func:`early_offset`. The lowest
    run decides, so it is monotone. ``guarded`` (while more runs can come): the runs
    must also not look noisier than recorded (an F test at :data:`EARLY_NOISIER`), and
    clear the offset sized by their own spread where it is the wider, so runs far
    noisier than recorded (a host busier than at recording) wait for the usual
    verdict."""
    if n not in rule.early_looks or cmp.recorded is None:
        return False
    limit = cmp.limit - cmp.host_allowance(rule.near)
    if cmp.runs[0] <= limit + early_offset(cmp, n, rule):
        return False
    if not guarded:
        return True
    own = cmp.spread
    if own is None or cmp.noisier_at(EARLY_NOISIER):
        return own is None
    wider = replace(cmp, recorded=Noise(max(own.sigma, cmp.recorded.sigma), cmp.recorded.df))
    return cmp.runs[0] > limit + early_offset(wider, n, rule)


def decide(cmp: Comparison, n: int, rule: Rule, *, explain: bool = True) -> Decision:
    """The verdict of a comparison after n runs, or a request for more runs.

    - REGRESSED when so many runs are past the limit (beyond the baseline's own error
      and the spread between hosts) that a median at the limit would rarely give as many
      (the sign test at ``rule.near``); or when every run is, and the median's whole
      interval (:data:`CONFIDENCE`, the recorded noise) lies past it: the limit is the
      limit, whatever the family. (The family-wise rate sizes derived tolerances.)
    - PASS (IMPROVED past the better limit) when the low bound (:func:`lower_bound`) clears
      the limit. Runs noisier than recorded pass only once their number alone decides
      (5 or more at 95%): before, the gate measures again.
    - PASS early, before ``rule.min_runs``, when the runs agree far inside the limit
      (:func:`early_pass`: a sequential design whose early looks spend
      ``rule.early_rate``; the gate study checks the rates).
    - Otherwise more runs, up to ``rule.max_runs``; then TOO NOISY: the runs neither
      clear the limit nor are past it beyond noise.

    Every rule reads bounds that rise or stay when any run improves: worsening a run
    never improves the verdict (``tests/unit/test_stats.py``). ``explain``: say why a
    figure is TOO NOISY (off where only the verdict is wanted).
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
    final = n >= rule.max_runs
    if n < rule.min_runs:
        if early_pass(cmp, n, rule, guarded=not final):
            improved = low > cmp.better
            why = f"all {n} runs agree, far inside the limit (an early look)"
            return done("improved" if improved else "pass", why)
        if not final:
            return Decision("pass", "more", "fewer runs than the minimum")
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
    return done("too-noisy", too_noisy_why(cmp, n, past, limit, rule) if explain else "")


MOST_RUNS = 100  # runs beyond which no advice counts them: the noise cannot decide


def runs_to_decide(cmp: Comparison, sigma: float, base_error: float | None = None) -> int | None:
    """About how many runs at run-to-run spread ``sigma`` would put the median's 95%
    interval (with the baseline's own error, or ``base_error``, and the spread between
    hosts) clear of the limit, on one side or the other; None when no number of runs
    would (the median at the limit, or the fixed terms alone too wide)."""
    gap = abs(cmp.drift - cmp.limit)
    base = cmp.base_error if base_error is None else base_error
    fixed = base**2 + cmp.host**2
    df = cmp.recorded.df if cmp.recorded else math.inf
    t = t_quantile(0.5 + CONFIDENCE / 2, df)
    for n in range(2, MOST_RUNS + 1):
        half = t * math.sqrt(standard_error(Noise(sigma, df), n) ** 2 + fixed)
        if half < gap:
            return n
    return None


def baseline_runs_needed(cmp: Comparison, n: int, rule: Rule, recorded: Noise) -> int | None:
    """The fewest recorded runs (at most 30) with which these same runs would have been
    decided: the baseline's own error shrunk to that of a median of so many runs."""
    for k in range(max(cmp.base_runs, 1) + 1, 31):
        again = replace(cmp, base_error=standard_error(recorded, k), base_runs=k)
        if decide(again, n, rule, explain=False).verdict != "too-noisy":
            return k
    return None


def _pm(sd: float, df: float) -> str:
    """A log sd as the ± of its 95% interval, in percent."""
    return f"±{math.expm1(t_quantile(0.5 + CONFIDENCE / 2, df) * sd):.0%}"


def too_noisy_why(cmp: Comparison, n: int, past: int, limit: float, rule: Rule) -> str:
    """Why a figure is TOO NOISY: the interval's dominant term (the runs' own spread, the
    baseline's own error, the spread between hosts), and the fix in numbers."""
    within = sum(r > limit for r in cmp.runs)
    own, rec = cmp.spread, cmp.recorded
    head = f"too noisy to decide after {n} runs: {within} of {n} within the limit, {past} past it"
    runs_noise = own or rec
    runs_sd = standard_error(runs_noise, n) if runs_noise else 0.0
    terms = {"runs": runs_sd, "baseline": cmp.base_error, "host": cmp.host}
    dominant = max(terms, key=lambda k: terms[k])
    rec_df = rec.df if rec else math.inf
    if dominant == "baseline" and rec is not None:
        own_error = (
            f"{head} beyond noise. The baseline's own error ({_pm(cmp.base_error, rec_df)}, "
            f"{cmp.base_runs} recorded runs at {rec.sigma:.0%} spread) is most of the interval"
        )
        target = baseline_runs_needed(cmp, n, rule, rec)
        if target is None:
            return (
                f"{own_error}, and 30 recorded runs would not decide these: record on a "
                "quieter host, or set a looser tolerance on purpose (--perf-tolerance)"
            )
        return (
            f"{own_error}: re-record with --perf-update-baselines at record_repeats = {target} "
            f"(about {_pm(standard_error(rec, target), rec_df)}; these runs would then decide)"
        )
    if dominant == "host":
        return (
            f"{head} beyond noise and the spread between hosts. The spread between hosts "
            f"({_pm(cmp.host, cmp.host_df)}: the baseline was recorded on another host) is most "
            "of the interval: record a baseline on this host (--perf-update-baselines), which "
            "takes it out"
        )
    if own is None:
        return f"{head} beyond noise; one run: measure more runs (gate.repeats)"
    spread = f"the runs' spread {own.sigma:.1%}"
    if rec is not None:
        spread += f" against {rec.sigma:.1%} recorded"
        if cmp.noisier:
            spread += ": this host is noisier today"
    need = runs_to_decide(cmp, own.sigma)
    if need is None:
        fix = (
            f"no number of runs decides at this spread with the median "
            f"{abs(math.expm1(cmp.drift - cmp.limit)):.1%} from the limit: measure on a quieter "
            "host, or set a looser tolerance this noise supports (perfgate baseline show)"
        )
    else:
        fix = (
            f"about {need} runs would decide at that spread (raise gate.max_extra_repeats); or "
            "measure on a quieter host, or set a looser tolerance (perfgate baseline show)"
        )
    return f"{head} beyond noise; {spread}; {fix}"
