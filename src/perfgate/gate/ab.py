"""The side-by-side (A/B) policy, pure: when a level needs another ABBA block, when the run
stops at once, and each figure's paired verdict as a :class:`~perfgate.gate.verdict.Check`
(B measured, A as its reference).

A level's runs of A and B pair up in run order (``a[i]`` with ``b[i]``): the plan runs
them A B B A, so each pair is two adjacent runs. :mod:`perfgate.stats.paired` judges the
pairs; this module picks the figures, names them by key, and words the checks."""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from perfgate.gate.figures import judged_figures
from perfgate.gate.values import level_values, parse_key
from perfgate.gate.verdict import Check
from perfgate.measure.data import LevelData, Measurement
from perfgate.stats.decide import Decision
from perfgate.stats.paired import PairedRule, Pairs, decide_paired, far_worse

BlockStep = Literal["repeat", "next", "stop"]


@dataclass(frozen=True)
class Judged:
    """One figure of a level: A's and B's values (paired in order), the pairs, the
    decision now."""

    a: list[float]
    b: list[float]
    pairs: Pairs
    decision: Decision


def run_values(name: str, run: LevelData, chosen: Collection[str]) -> dict[str, float]:
    """Each figure's value in one run (a figure the run did not produce is left out)."""
    return {key: values[0] for key, values in level_values(name, [run], chosen).items()}


def figure_pairs(
    name: str, a: Sequence[LevelData], b: Sequence[LevelData], chosen: Collection[str]
) -> dict[str, tuple[list[float], list[float]]]:
    """Each figure's (A values, B values) over the pairs where both runs produced it."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for run_a, run_b in zip(a, b, strict=False):
        va, vb = run_values(name, run_a, chosen), run_values(name, run_b, chosen)
        for key in va.keys() & vb.keys():
            sides = out.setdefault(key, ([], []))
            sides[0].append(va[key])
            sides[1].append(vb[key])
    return dict(sorted(out.items()))


def pairs_of(key: str, a: Sequence[float], b: Sequence[float], tolerance: float) -> Pairs:
    """A figure's pairs: counts (a figure with a shift) judged as count + shift, like the
    gate; tok/s figures may stop the run at once when B is far worse."""
    figure = parse_key(key).figure
    shift = figure.shift
    return Pairs.of(
        [v + shift for v in a],
        [v + shift for v in b],
        figure.direction,
        tolerance,
        may_abort=figure.direction == "higher" and figure.unit == "tok/s",
    )


@dataclass(frozen=True)
class ABPolicy:
    """The A/B run's policy: the paired rule (its family: ``figures`` of every planned
    level) and the figures measured besides the default ones."""

    rule: PairedRule
    chosen: frozenset[str] = field(default_factory=frozenset)

    @staticmethod
    def build(
        tolerance: float,
        levels: int,
        chosen: Collection[str] = (),
        *,
        min_pairs: int = 8,
        max_pairs: int = 200,
    ) -> ABPolicy:
        """The policy for ``levels`` planned levels, each of the default figures and the
        ``chosen`` ones (the family the false-failure rate covers)."""
        figures = len(judged_figures(chosen)) * max(1, levels)
        rule = PairedRule(
            tolerance=tolerance, min_pairs=min_pairs, max_pairs=max_pairs, figures=figures
        )
        return ABPolicy(rule, frozenset(chosen))

    def decisions(
        self, name: str, a: Sequence[LevelData], b: Sequence[LevelData]
    ) -> dict[str, Judged]:
        """Each figure of a level: its values on both sides, its pairs, their decision.
        Runs pair up in order; a last run without its other side's is left out (server
        lifetimes that alternate end one side ahead)."""
        paired = min(len(a), len(b))
        a, b = a[:paired], b[:paired]
        out = {}
        for key, (va, vb) in figure_pairs(name, a, b, self.chosen).items():
            pairs = pairs_of(key, va, vb, self.rule.tolerance)
            out[key] = Judged(va, vb, pairs, decide_paired(pairs, self.rule))
        return out

    def after_block(
        self, name: str, a: Sequence[LevelData], b: Sequence[LevelData]
    ) -> tuple[BlockStep, str]:
        """After a block of a level (``a``, ``b``: its paired runs so far, warm-up runs
        left out): stop the run when B is far worse, another block while a figure is
        undecided, else the next level. With why, for the progress line."""
        decided = self.decisions(name, a, b)
        for key, judged in decided.items():
            if why := far_worse(judged.pairs, self.rule):
                return "stop", f"{key}: {why}"
        undecided = [key for key, judged in decided.items() if judged.decision.step == "more"]
        if undecided and len(a) < self.rule.max_pairs:
            return "repeat", f"{len(undecided)} figures undecided ({undecided[0]}, ...)"
        return "next", ""

    def judge(self, name: str, a: Measurement, b: Measurement) -> list[Check]:
        """Every figure of every level both sides ran, judged on its pairs. A figure still
        undecided (the run stopped early, or was interrupted) is TOO NOISY, saying so."""
        checks = []
        levels_b = b.by_concurrency()
        for level, runs_a in a.by_concurrency().items():
            runs_b = levels_b.get(level, [])
            for key, judged in self.decisions(name, runs_a, runs_b).items():
                checks.append(self.check(key, judged, stopped=b.aborted or ""))
        return checks

    def check(self, key: str, judged: Judged, *, stopped: str = "") -> Check:
        """One figure's paired verdict: B's median measured, A's as the reference."""
        figure = parse_key(key).figure
        pairs, decision = judged.pairs, judged.decision
        verdict = decision.verdict if decision.step == "done" else "too-noisy"
        why = decision.why
        if decision.step == "more":
            why = (
                f"not decided: the run stopped first ({stopped})"
                if stopped
                else f"not decided: {why}"
            )
        median_a, median_b = statistics.median(judged.a), statistics.median(judged.b)
        low, high = pairs.interval()
        interval, value_low, value_high = f"{pairs.n} pairs", None, None
        if low is not None and high is not None:  # B/A in the figure's own terms
            ends = sorted(pairs.change(x) for x in (low, high))
            interval = f"B/A 95% CI {ends[0]:+.1%}..{ends[1]:+.1%}, {pairs.n} pairs"
            value_low, value_high = median_a * (1 + ends[0]), median_a * (1 + ends[1])
        tolerance = self.rule.tolerance
        worst = 1 - tolerance if figure.direction == "higher" else 1 + tolerance
        return Check(
            key=key,
            verdict=verdict,
            why=why if "B/A" in why else f"{why}; B/A {pairs.pct(pairs.estimate)}",
            measured=median_b,
            low=value_low,  # B's value as A's median times the ratio's interval
            high=value_high,
            samples=pairs.n,
            interval=interval,
            baseline=median_a,
            tolerance=tolerance,
            limit=median_a * worst,
            direction=figure.direction,
            unit=figure.unit,
            delta_pct=100 * pairs.change(pairs.estimate),
            against="A",
        )
