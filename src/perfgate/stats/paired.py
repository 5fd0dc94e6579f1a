"""The paired verdict of a side-by-side (A/B) run: B's runs against A's, pair by pair.

A and B run on one host, interleaved in ABBA blocks (A B B A, A B B A, ...). Each adjacent
A-B pair gives one log ratio ``ln(B / A)``, mirrored for lower-is-better figures so that
higher is better. Drift that hits both runs of a pair cancels in its ratio; a steady
drift cancels over a block, because half the pairs run B second and half run it first.

The verdict judges the pairs' median (the Hodges-Lehmann estimate: the median of the
Walsh averages) against the tolerance, with Wilcoxon's signed-rank bounds: they need no
noise recorded beforehand, one disturbed pair (the host slowing between A and B) moves
them little, and each rises or stays when any pair improves, so worsening a pair never
improves the verdict.

- The verdict looks at the pairs at a few counts only (:attr:`PairedRule.looks`: from
  ``rule.min_pairs``, each about half as many again as the last, and ``rule.max_pairs``),
  so that looking often cannot buy a pass.
- PASS (IMPROVED past the better limit) when the lower bound at ``rule.pass_confidence``
  clears the limit at a look. All looks together pass a B exactly at the limit 2-7% of
  the time (the gate study's paired rows).
- REGRESSED when the upper bound at the per-figure, per-look share of the family-wise
  rate lies past the limit; or at once, when B is far worse: its first
  ``rule.abort_pairs`` pairs all below ``rule.abort_below`` of A, on a figure that may
  abort (tok/s).
- TOO NOISY early, when not passed, and that same upper bound lies past half the limit: B
  is worse than A beyond noise and about at the limit, where more pairs would not pass it.
- Otherwise more pairs, up to ``rule.max_pairs``; then TOO NOISY, with how many pairs the
  pairs' spread says would decide.

``benchmarks/gate_study.py`` (its paired rows) checks the rates by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfgate.stats.decide import Decision, bonferroni
from perfgate.stats.distributions import VALUE_FLOOR, median, t_quantile
from perfgate.stats.estimate import Direction, walsh_averages, walsh_rank

MOST_PAIRS = 400  # pairs beyond which no advice counts them
LOOK_GROWTH = 1.5  # each look at about this many times the pairs of the last


@dataclass(frozen=True, slots=True)
class PairedRule:
    """How sure the paired verdict must be before it decides.

    - ``tolerance``: how much worse B may be than A (0.10: 10% fewer tok/s, or 10% more
      seconds);
    - ``min_pairs`` and ``max_pairs``: pairs of a level before a pass, and at most;
    - ``figures`` and ``false_failure_rate``: the family-wise chance that B, as good as A,
      is REGRESSED on any of ``figures`` figures (Bonferroni: shared equally);
    - ``pass_confidence``: one-sided confidence of the lower bound a pass reads at each
      look;
    - ``abort_below`` and ``abort_pairs``: B's first pairs all below this share of A end
      the run at once (0: never).
    """

    tolerance: float = 0.10
    min_pairs: int = 8
    max_pairs: int = 200
    figures: int = 1
    false_failure_rate: float = 0.01
    pass_confidence: float = 0.99
    abort_below: float = 1 / 3  # both pairs of a first block this far below: not noise
    abort_pairs: int = 2  # (at 30% run noise a pair falls that low 0.45% of the time)

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError(f"the A/B tolerance must lie between 0 and 1, not {self.tolerance}")
        fewest = next(n for n in range(1, 64) if walsh_rank(n, self.pass_confidence))
        if self.min_pairs < fewest:
            raise ValueError(
                f"min_pairs {self.min_pairs}: a lower bound at {self.pass_confidence:.1%} "
                f"needs at least {fewest} pairs"
            )
        if self.max_pairs < self.min_pairs:
            raise ValueError(f"max_pairs {self.max_pairs} is below min_pairs {self.min_pairs}")

    @property
    def per_figure_rate(self) -> float:
        """The family's rate shared equally by its figures (:func:`bonferroni`)."""
        return bonferroni(self.false_failure_rate, self.figures)

    @property
    def looks(self) -> tuple[int, ...]:
        """The pair counts at which the verdict is read: ``min_pairs``, then each about
        half as many again (even: whole ABBA blocks), and ``max_pairs``."""
        counts = [self.min_pairs]
        while counts[-1] < self.max_pairs:
            step = max(2, round(counts[-1] * LOOK_GROWTH / 2) * 2 - counts[-1])
            counts.append(min(self.max_pairs, counts[-1] + step))
        return tuple(counts)

    @property
    def regressed_confidence(self) -> float:
        """One-sided confidence of the upper bound REGRESSED reads: the family-wise rate
        shared by the figures and the looks."""
        return 1 - self.per_figure_rate / len(self.looks)


def pair_ratio(a: float, b: float, direction: Direction) -> float:
    """One pair's log ratio B/A, higher is better (mirrored for lower-is-better)."""
    sign = 1.0 if direction == "higher" else -1.0
    return sign * math.log(max(b, VALUE_FLOOR) / max(a, VALUE_FLOOR))


def paired_limits(tolerance: float, direction: Direction) -> tuple[float, float]:
    """(limit, better) in mirrored log units: B at the worst acceptable ratio to A, and
    B clearly better (the gate's :func:`perfgate.stats.estimate.limits` with A as 1)."""
    if direction == "higher":
        return math.log(1 - tolerance), math.log(1 + tolerance)
    return -math.log(1 + tolerance), -math.log(1 - tolerance)


@dataclass(frozen=True, slots=True)
class Pairs:
    """One figure's pairs of a level: log ratios B/A in run order, higher is better."""

    ratios: tuple[float, ...]
    limit: float
    better: float
    may_abort: bool = False  # a figure whose far-worse pairs end the run (tok/s)
    direction: Direction = "higher"  # the figure's own, for the words

    @staticmethod
    def of(
        a: Sequence[float],
        b: Sequence[float],
        direction: Direction,
        tolerance: float,
        *,
        may_abort: bool = False,
    ) -> Pairs:
        """The pairs of A's and B's runs, in run order (``a[i]`` pairs with ``b[i]``)."""
        if len(a) != len(b):
            raise ValueError(f"{len(a)} runs of A against {len(b)} of B: pairs need both")
        limit, better = paired_limits(tolerance, direction)
        ratios = tuple(pair_ratio(x, y, direction) for x, y in zip(a, b, strict=True))
        return Pairs(ratios, limit, better, may_abort, direction)

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def estimate(self) -> float:
        """The pairs' median ratio (Hodges-Lehmann: the median of the Walsh averages)."""
        return median(walsh_averages(self.ratios))

    def bounds(self, confidence: float) -> tuple[float | None, float | None]:
        """Wilcoxon's signed-rank (low, high) bounds of the median ratio, each one-sided
        at ``confidence``; None where the pairs are too few for it."""
        k = walsh_rank(self.n, confidence)
        if not k:
            return None, None
        walsh = walsh_averages(self.ratios)
        return walsh[k - 1], walsh[len(walsh) - k]

    def interval(self, confidence: float = 0.95) -> tuple[float | None, float | None]:
        """The two-sided ``confidence`` interval of the median ratio (log units)."""
        return self.bounds(0.5 + confidence / 2)

    def change(self, log_ratio: float) -> float:
        """A mirrored log ratio as B's change against A in the figure's own terms
        (+0.25: B's value 25% above A's, whether that is better or worse)."""
        return math.expm1(log_ratio if self.direction == "higher" else -log_ratio)

    def pct(self, log_ratio: float) -> str:
        """A mirrored log ratio as B/A's signed percent change in the figure's own terms."""
        return f"{self.change(log_ratio):+.1%}"


def pairs_to_decide(pairs: Pairs, rule: PairedRule) -> int | None:
    """About how many pairs at these pairs' spread would put the median's bound clear of
    the limit on one side or the other (normal approximation of the signed-rank bound);
    None when none would within :data:`MOST_PAIRS` (the median at the limit)."""
    if pairs.n < 2:
        return None
    mean = math.fsum(pairs.ratios) / pairs.n
    sd = math.sqrt(math.fsum((r - mean) ** 2 for r in pairs.ratios) / (pairs.n - 1))
    gap = abs(pairs.estimate - pairs.limit)
    z = t_quantile(rule.pass_confidence, math.inf)
    for n in range(pairs.n, MOST_PAIRS + 1):
        if z * sd / math.sqrt(0.955 * n) < gap:  # Hodges-Lehmann: 95.5% efficient
            return n
    return None


def far_worse(pairs: Pairs, rule: PairedRule) -> str | None:
    """Why the run stops at once: B's first ``rule.abort_pairs`` pairs all below
    ``rule.abort_below`` of A, on a figure that may abort; None when not."""
    first = pairs.ratios[: rule.abort_pairs]
    if not pairs.may_abort or rule.abort_below <= 0 or len(first) < rule.abort_pairs:
        return None
    if max(first) >= math.log(rule.abort_below):
        return None
    worst = ", ".join(f"x{1 + pairs.change(r):.2f}" for r in first)
    return f"B far worse: its first {len(first)} pairs at {worst} of A (an early stop)"


def decide_paired(pairs: Pairs, rule: PairedRule) -> Decision:
    """The verdict of one figure's pairs, or a request for more pairs (module docstring)."""
    n, pct = pairs.n, pairs.pct
    if why := far_worse(pairs, rule):
        return Decision("regressed", "done", why)
    final = n >= rule.max_pairs
    if n not in rule.looks and not final:
        why = "fewer pairs than the minimum" if n < rule.min_pairs else "until the next look"
        return Decision("pass", "more", why)
    _, high = pairs.bounds(rule.regressed_confidence)
    if high is not None and high < pairs.limit:
        why = (
            f"B/A {pct(pairs.estimate)} over {n} pairs; even its best bound, {pct(high)}, "
            f"is past the limit {pct(pairs.limit)}, beyond noise"
        )
        return Decision("regressed", "done", why)
    low, _ = pairs.bounds(rule.pass_confidence)
    if low is not None and low > pairs.limit:
        improved = low > pairs.better
        why = f"B/A {pct(pairs.estimate)} over {n} pairs; its worst bound, {pct(low)}, clears "
        why += (
            f"the better limit {pct(pairs.better)}" if improved else f"the limit {pct(pairs.limit)}"
        )
        return Decision("improved" if improved else "pass", "done", why)
    if high is not None and high < pairs.limit / 2:
        why = (
            f"B/A {pct(pairs.estimate)} over {n} pairs: about at the limit {pct(pairs.limit)} "
            f"and worse than A beyond noise (best bound {pct(high)}); more pairs would not "
            "pass it, so the level stops here"
        )
        return Decision("too-noisy", "done", why)
    if not final:
        return Decision("pass", "more", "near the limit: measuring more pairs")
    return Decision("too-noisy", "done", too_noisy_why(pairs, rule))


def too_noisy_why(pairs: Pairs, rule: PairedRule) -> str:
    """Why a figure's pairs decided nothing by the most pairs, and the fix in numbers."""
    low, high = pairs.interval()
    span = "unknown"
    if low is not None and high is not None:
        ends = sorted(pairs.change(x) for x in (low, high))
        span = f"{ends[0]:+.1%}..{ends[1]:+.1%}"
    head = (
        f"too noisy to decide after {pairs.n} pairs: B/A {pairs.pct(pairs.estimate)} "
        f"(95% interval {span}) against the limit {pairs.pct(pairs.limit)}"
    )
    need = pairs_to_decide(pairs, rule)
    if need is None:
        return f"{head}; B is about at the limit: no number of pairs decides it"
    return (
        f"{head}; about {need} pairs would decide (raise [ab] max_pairs), or loosen the tolerance"
    )
