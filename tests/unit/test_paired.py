"""The paired (A/B) verdict: pure, on runs drawn from known distributions.

The rates claimed in docs/verdicts.md come from ``benchmarks/gate_study.py --paired-only``
(thousands of trials); here fewer trials of the same simulation check that they hold
with room, and hand-made pairs check each rule."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.stats.paired import PairedRule, Pairs, decide_paired, paired_limits

ROOT = Path(__file__).resolve().parents[2]
RANK = {"improved": 0, "pass": 0, "too-noisy": 1, "regressed": 2}


def study():
    """benchmarks/paired_study.py, the simulation the docs' table comes from."""
    spec = importlib.util.spec_from_file_location(
        "paired_study", ROOT / "benchmarks" / "paired_study.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["paired_study"] = module
    spec.loader.exec_module(module)
    return module


def verdict(ratios: list[float], rule: PairedRule, *, may_abort: bool = False) -> str:
    limit, better = paired_limits(rule.tolerance, "higher")
    decision = decide_paired(Pairs(tuple(ratios), limit, better, may_abort), rule)
    assert decision.step in ("done", "more"), decision
    return decision.verdict if decision.step == "done" else "more"


def test_pairs_are_log_ratios_mirrored_for_lower_is_better_figures():
    faster = Pairs.of([100.0, 100.0], [110.0, 90.0], "higher", 0.10)
    assert faster.ratios == pytest.approx((math.log(1.1), math.log(0.9)))
    ttft = Pairs.of([0.2, 0.2], [0.4, 0.1], "lower", 0.10)  # B's TTFT doubled, then halved
    assert ttft.ratios == pytest.approx((-math.log(2), math.log(2)))
    assert ttft.limit == pytest.approx(-math.log(1.1))  # 10% more seconds
    assert faster.limit == pytest.approx(math.log(0.9))  # 10% fewer tok/s


def test_bad_input_is_refused_saying_what_to_change():
    with pytest.raises(ValueError, match="3 runs of A against 2 of B"):
        Pairs.of([1.0, 1.0, 1.0], [1.0, 1.0], "higher", 0.1)
    with pytest.raises(ValueError, match="needs at least 7 pairs"):
        PairedRule(min_pairs=4)
    with pytest.raises(ValueError, match="between 0 and 1"):
        PairedRule(tolerance=1.5)
    with pytest.raises(ValueError, match="below min_pairs"):
        PairedRule(min_pairs=10, max_pairs=8)
    for tolerance in (0.0, 1.0):
        with pytest.raises(ValueError, match="between 0 and 1"):
            PairedRule(tolerance=tolerance)
    assert PairedRule(min_pairs=7).min_pairs == 7  # the fewest a 99% bound needs: allowed


def test_looks_grow_by_half_in_whole_blocks_and_end_at_the_cap():
    rule = PairedRule(min_pairs=8, max_pairs=40)
    assert rule.looks == (8, 12, 18, 28, 40)
    assert all(n % 2 == 0 for n in rule.looks)
    assert verdict([0.0] * 9, rule) == "more"  # between looks: no verdict is read


def test_agreeing_pairs_pass_at_the_first_look_and_not_before():
    rule = PairedRule()
    assert verdict([0.01, -0.01] * 3 + [0.0], rule) == "more"  # 7 pairs: fewer than the minimum
    assert verdict([0.01, -0.01] * 4, rule) == "pass"
    assert verdict([0.2, 0.22] * 4, rule) == "improved"  # 20% faster, beyond noise
    limit, better = paired_limits(0.1, "higher")
    improved = decide_paired(Pairs((0.2, 0.22) * 4, limit, better), rule)
    assert improved.why.startswith("B/A +23.4% over 8 pairs; its worst bound, +22.1%, clears")
    assert improved.why.endswith("clears the better limit +10.0%"), improved.why
    passed = decide_paired(Pairs((0.01, -0.01) * 4, limit, better), rule)
    assert passed.why.endswith("clears the limit -10.0%"), passed.why


def test_b_four_times_slower_ends_after_its_first_block():
    rule = PairedRule()
    quarter = math.log(0.25)
    assert verdict([quarter, quarter], rule, may_abort=True) == "regressed"
    assert verdict([quarter], rule, may_abort=True) == "more"  # one pair is not enough
    assert verdict([quarter, 0.0], rule, may_abort=True) == "more"  # the second disagrees
    assert verdict([quarter, quarter], rule) == "more"  # only tok/s figures stop the run


def test_the_reasons_name_the_ratio_its_bound_and_the_limit():
    rule = PairedRule(min_pairs=8, max_pairs=8)
    limit, better = paired_limits(0.1, "higher")
    regressed = decide_paired(Pairs((math.log(0.7),) * 8 + (), limit, better), PairedRule(
        min_pairs=8, max_pairs=8, figures=1, false_failure_rate=0.05))  # fmt: skip
    assert regressed.verdict == "regressed"
    assert "B/A -30.0% over 8 pairs" in regressed.why and "past the limit -10.0%" in regressed.why
    noisy = decide_paired(
        Pairs((0.3, -0.3, 0.25, -0.35, 0.1, -0.1, 0.0, -0.05), limit, better), rule
    )
    assert noisy.verdict == "too-noisy" and noisy.step == "done"
    assert "too noisy to decide after 8 pairs" in noisy.why and "95% interval" in noisy.why
    assert "pairs would decide" in noisy.why


def test_b_about_at_the_limit_stops_early_as_too_noisy_and_within_it_passes():
    rule = PairedRule()
    at_limit = [math.log(0.9) + 0.01 * (-1) ** i for i in range(12)]  # 10% slower, 1% noise
    assert verdict(at_limit[:8], rule) == "more"  # no verdict yet at the first look
    decision = decide_paired(
        Pairs.of([1.0] * 12, [math.exp(r) for r in at_limit], "higher", 0.1), rule
    )
    assert decision.verdict == "too-noisy" and "more pairs would not pass it" in decision.why
    within = [math.log(0.93) + 0.005 * (-1) ** i for i in range(12)]  # 7% slower, 10% allowed
    assert verdict(within, rule) == "pass"


def exact_signed_rank_k(n: int, confidence: float) -> int:
    """The rank of the Walsh average a one-sided signed-rank bound reads, from the exact
    null distribution of Wilcoxon's statistic (counted here, independently of the code:
    the number of subsets of 1..n with each sum): the largest k with P(T < k) <= 1 - c."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    everything, below, k = 2**n, 0, 0
    for total, count in enumerate(counts):
        if (below + count) / everything > 1 - confidence:
            break
        below += count
        k = total + 1
    return k


@pytest.mark.parametrize("n", [7, 8, 12, 18])
def test_the_bounds_are_the_exact_signed_rank_walsh_averages(n):
    """Each one-sided bound is the k-th lowest (highest) of the pairs' Walsh averages, k
    from Wilcoxon's exact distribution; the 95% interval reads each side at 97.5%."""
    ratios = tuple(math.log(1 + 0.01 * ((i * 7) % n - n / 3)) for i in range(n))
    pairs = Pairs(ratios, *paired_limits(0.1, "higher"))
    walsh = sorted((ratios[i] + ratios[j]) / 2 for i in range(n) for j in range(i, n))
    for confidence in (0.975, 0.99):
        k = exact_signed_rank_k(n, confidence)
        assert k >= 1
        assert pairs.bounds(confidence) == (walsh[k - 1], walsh[-k])
    assert pairs.interval(0.95) == pairs.bounds(0.975)


def test_a_lower_is_better_figure_keeps_its_direction_in_the_words():
    """B's TTFT 25% longer is a change of +25% in seconds, worse: mirrored in the ratios,
    not in what the reader is told."""
    ttft = Pairs.of([0.2] * 8, [0.25] * 8, "lower", 0.1)
    assert ttft.direction == "lower" and ttft.estimate == pytest.approx(-math.log(1.25))
    assert ttft.change(ttft.estimate) == pytest.approx(0.25) and ttft.pct(ttft.estimate) == "+25.0%"
    rule = PairedRule()
    spread = [1.0 + 0.002 * (-1) ** i for i in range(8)]
    for faster, expected in ((0.85, "improved"), (0.95, "pass"), (1.05, "pass")):
        seconds = Pairs.of([0.2] * 8, [0.2 * faster * s for s in spread], "lower", 0.1)
        assert decide_paired(seconds, rule).verdict == expected, faster
    tok = Pairs.of([100.0] * 8, [80.0] * 8, "higher", 0.1)
    assert tok.change(tok.estimate) == pytest.approx(-0.2) and tok.pct(tok.estimate) == "-20.0%"


def test_only_a_figure_marked_may_abort_stops_the_run_and_says_how_far_worse():
    quarter = [100.0, 100.0], [25.0, 20.0]
    assert not Pairs.of(*quarter, "higher", 0.1).may_abort  # the default: no early stop
    assert verdict([math.log(0.25), math.log(0.2)], PairedRule(), may_abort=False) == "more"
    stopped = decide_paired(Pairs.of(*quarter, "higher", 0.1, may_abort=True), PairedRule())
    assert stopped.verdict == "regressed" and stopped.step == "done"
    assert "B far worse: its first 2 pairs at x0.25, x0.20 of A" in stopped.why
    never = PairedRule(abort_below=0)  # 0: never stop early (and no log of 0)
    assert decide_paired(Pairs.of(*quarter, "higher", 0.1, may_abort=True), never).step == "more"


def test_too_noisy_early_needs_b_worse_than_half_the_limit_beyond_noise():
    """At a look, a B neither passed nor regressed stops as TOO NOISY only when even its
    best bound is worse than half the limit (about 5% at a 10% tolerance); nearer A it
    gets more pairs. Two sets of 12 pairs whose worst bound is past the limit (no pass):
    one with its best bound 6% below A, one 4%."""
    rule = PairedRule()
    limit, better = paired_limits(0.1, "higher")

    def alternating(centre: float, half_spread: float) -> list[float]:
        return [centre + half_spread * (-1) ** i for i in range(12)]

    worse, nearer = alternating(-0.085, 0.025), alternating(-0.075, 0.035)
    for ratios in (worse, nearer):
        pairs = Pairs(tuple(ratios), limit, better)
        low, _ = pairs.bounds(rule.pass_confidence)
        assert low is not None and low < limit  # not a pass
    _, high_worse = Pairs(tuple(worse), limit, better).bounds(rule.regressed_confidence)
    _, high_nearer = Pairs(tuple(nearer), limit, better).bounds(rule.regressed_confidence)
    assert high_worse is not None and high_nearer is not None
    assert limit < high_worse < limit / 2 < high_nearer < limit / 3  # about half the limit
    assert verdict(worse, rule) == "too-noisy"
    assert verdict(nearer, rule) == "more"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(-1.0, 1.0), min_size=8, max_size=30),
    st.integers(0, 29),
    st.floats(0.0, 1.0),
)
def test_worsening_a_pair_never_improves_the_verdict(ratios, which, by):
    rule = PairedRule(max_pairs=30)
    which %= len(ratios)
    worse = list(ratios)
    worse[which] -= by
    before, after = verdict(ratios, rule, may_abort=True), verdict(worse, rule, may_abort=True)
    if "more" not in (before, after):
        assert RANK[after] >= RANK[before], (ratios, worse)


def test_a_steady_drift_cancels_in_abba_pairs_and_fails_runs_taken_one_side_after_the_other():
    """No noise, the host 2% slower every run, B as fast as A: interleaved A B B A pairs
    pass; the same runs taken as all of A, then all of B (today's four manual steps)
    compare B with an A measured a whole level earlier, and fail."""
    rule = PairedRule()
    speed = [math.exp(-0.02 * run) for run in range(36)]  # 9 blocks: 18 pairs, a look
    a = [speed[i] for block in range(9) for i in (4 * block, 4 * block + 3)]
    b = [speed[i] for block in range(9) for i in (4 * block + 1, 4 * block + 2)]
    interleaved = decide_paired(Pairs.of(a, b, "higher", 0.1), rule)
    assert interleaved.verdict == "pass", interleaved.why
    sequential = decide_paired(Pairs.of(speed[:18], speed[18:], "higher", 0.1), rule)
    assert sequential.verdict == "regressed", sequential.why


@pytest.mark.parametrize(
    ("cv", "drift", "regression", "trials", "most_failed", "least_caught"),
    [
        (0.05, "step", 0.0, 150, 0, None),  # claimed: ≤ 1% of builds fail
        (0.05, "steady", 0.0, 150, 0, None),
        (0.05, "step", 0.10, 100, None, 0.90),  # claimed: ≥ 95% caught
        (0.15, "step", 0.25, 60, None, 0.95),  # claimed: ≥ 95% caught
    ],
)
def test_the_studys_rates_hold_on_fresh_trials(
    cv, drift, regression, trials, most_failed, least_caught
):
    """The paired study's model, fresh seeds (not the table's): 12 figures with
    independent lognormal run noise, a host that drifts or slows 30% inside a pair."""
    module = study()
    setting = module.Setting(cv, regression, drift, False)
    rule = module.rule_for(3)
    results = [module.trial((9_000_001 + i, setting, 3, rule)) for i in range(trials)]
    if most_failed is not None:
        assert sum(r[0] for r in results) <= most_failed
    if least_caught is not None:
        assert sum(r[1] for r in results) >= least_caught * trials


def test_the_study_replays_the_shipped_rule():
    module = study()
    rng = random.Random(1)
    verdicts, pairs = module.run_level(
        rng, module.Setting(0.05, 0.75, "none", True), module.rule_for(3), 1
    )
    assert verdicts["agg_tok_s"] == "regressed" and pairs == 2  # the seeds' 4x: one block
