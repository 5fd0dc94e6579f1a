"""Statistics: Student's t, intervals with their stated coverage, and the verdict rule."""

import math
import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from perfgate.gate.baseline import Expectation, load_baseline
from perfgate.gate.verdict import compare
from perfgate.stats.decide import Decision, Rule
from perfgate.stats.distributions import median_efficiency, t_quantile
from perfgate.stats.estimate import Noise, estimate, limits
from perfgate.stats.power import derived_tolerance, detectable_drop


@pytest.mark.parametrize(
    ("p", "df", "table"),  # textbook t-table values
    [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 10, 2.228), (0.95, 5, 2.015),
     (0.995, 30, 2.750), (0.975, math.inf, 1.960)],
)  # fmt: skip
def test_t_quantiles_match_the_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=1e-3)


def test_median_efficiency_matches_a_fresh_simulation():
    rng = random.Random(7)
    for n in (3, 5, 10):
        meds = [sorted(rng.gauss(0, 1) for _ in range(n))[n // 2] if n % 2 else
                sum(sorted(rng.gauss(0, 1) for _ in range(n))[n // 2 - 1: n // 2 + 1]) / 2
                for _ in range(20000)]  # fmt: skip
        sd = math.sqrt(sum(m * m for m in meds) / len(meds))
        assert sd * math.sqrt(n) == pytest.approx(median_efficiency(n), rel=0.03)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_interval_holds_its_stated_coverage(n):
    """Lognormal noise (CV 5%): the 95% interval of the median, from the runs' own spread
    (not pooled with a recording's), covers the true value 95% ± 2% of the time."""
    rng = random.Random(n)
    sigma, trials, covered = 0.05, 4000, 0
    for _ in range(trials):
        runs = [100 * math.exp(rng.gauss(0, sigma)) for _ in range(n)]
        est = estimate(runs, Noise(0.01, 40))  # a recorded noise: not read with 2+ runs
        covered += est.low <= 100 <= est.high
    assert abs(covered / trials - 0.95) < 0.02


def test_the_interval_against_a_baseline_is_welchs():
    """With a baseline's error, the interval is Welch's: its degrees of freedom lie between
    the runs' own (2) and the sum, and it says so."""
    est = estimate([99.0, 100.0, 102.0], baseline_error=(0.02, 20))
    assert est.welch and est.df is not None and 2 < est.df < 22
    assert "Welch" in est.interval
    plain = estimate([99.0, 100.0, 102.0])
    assert plain.low is not None and est.low is not None and est.low < plain.low


def test_no_noise_estimate_means_no_interval_and_says_so():
    est = estimate([70.0])
    assert est.low is None and "no interval" in est.interval
    assert "95% CI" in estimate([70.0, 71.0]).interval


def judge(
    runs, value, tol, direction="higher", noise=None, baseline_runs=8, rule=None, source="derived"
):
    """The gate's decision on one figure's runs, through :func:`compare` as a run is judged
    (the key only names a figure; the expectation carries the direction). ``source``: a
    derived tolerance charges the baseline's own error; a manual one is a fixed number
    (``tests/unit/test_tolerance_contract.py``)."""
    expectation = Expectation(
        tolerance_source=source,
        value=value,
        tolerance=tol,
        direction=direction,
        runs=baseline_runs,
        noise_sigma=None if noise is None else noise.sigma,
        noise_df=None if noise is None else noise.df,
    )
    rule = rule or Rule(min_runs=3, max_runs=10, figures=36)
    check, more = compare("sweep.c1.agg_tok_s", list(runs), expectation, rule)
    return Decision(check.verdict, "more" if more else "done", check.why or "")


def test_a_tolerance_tighter_than_the_noise_is_too_noisy_not_a_pass_nor_a_regression():
    # a 2% hand-set tolerance on a figure with 25% run-to-run noise: -5% cannot be told
    # from noise either way, so it fails as TOO NOISY and says what to do
    d = judge(
        [95.0, 80.0, 110.0], 100.0, 0.02, noise=Noise(0.25, 40), rule=Rule(3, 3, 36),
        source="manual",
    )  # fmt: skip
    assert d.verdict == "too-noisy", d
    assert "quieter host" in d.why and "looser tolerance" in d.why


def test_one_slow_run_among_several_is_resolved_by_more_runs():
    noise = Noise(0.03, 40)
    tol = derived_tolerance(noise, Rule(3, 10, 36), 8, 0.02, "higher")
    runs = [100.0, 55.0, 101.0]  # one run hit by a noisy neighbour
    first = judge(runs, 100.0, tol, noise=noise)
    assert first.verdict != "regressed"
    extra = iter([99.0, 100.5, 98.5, 101.5, 99.5, 100.2, 98.9])
    while (d := judge(runs, 100.0, tol, noise=noise)).step == "more":
        runs.append(next(extra))
    assert d.verdict == "pass" and len(runs) <= 10


def test_a_whole_slow_run_alone_is_not_a_verdict():
    # one run with tight requests but 40% slow: below the minimum runs, and within
    # the noise a 25%-CV baseline knows, so the gate measures more
    d = judge([60.0], 100.0, 0.3, noise=Noise(0.25, 40))
    assert d.step == "more"


def test_a_clear_regression_is_decided_early():
    d = judge([50.0, 51.0, 49.0], 100.0, 0.1, noise=Noise(0.03, 40))
    assert d.verdict == "regressed" and d.step == "done"


def test_near_the_limit_asks_for_more_then_decides():
    noise = Noise(0.05, 40)
    runs = [89.0, 91.0, 90.0]
    assert judge(runs, 100.0, 0.1, noise=noise).step == "more"
    final = judge(runs * 4, 100.0, 0.1, noise=noise, rule=Rule(3, 12, 36))
    assert final.step == "done"


def test_a_run_whose_whole_interval_is_past_the_limit_regresses_whatever_the_family():
    # CI, prefix cache off: the sweep stopped after one run (goodput fell to 0), and its
    # TTFT, 5.9x a 3-run recording (2 degrees of freedom), has its whole interval past the
    # limit; the family-wise quantile of 5 figures at 2 df (t = 15.8) once passed it
    d = judge([0.8718], 0.1475, 0.5, "lower", Noise(0.1356, 2), baseline_runs=3, rule=Rule(1, 1, 5))
    assert (d.verdict, d.step) == ("regressed", "done"), d
    assert "whole 95% interval" in d.why


def test_hand_entered_target_uses_the_runs_own_spread():
    # the seeds' 73.5 tok/s within 10%, no recorded noise: 17.7 tok/s is a regression
    d = judge([17.5, 17.7, 17.9], 73.5, 0.10, baseline_runs=None)
    assert d.verdict == "regressed"
    assert judge([70.0, 71.0, 69.5], 73.5, 0.10, baseline_runs=None).verdict == "pass"


SEVERITY = {"improved": 0, "pass": 1, "too-noisy": 2, "regressed": 3}


@given(
    st.lists(st.floats(1, 400), min_size=1, max_size=10),
    st.integers(0, 9),
    st.floats(0.05, 1.0),
    st.sampled_from(["higher", "lower"]),
    st.one_of(st.none(), st.tuples(st.floats(0.0, 0.6), st.floats(1, 80))),
    st.one_of(st.none(), st.integers(1, 12)),
    st.floats(0.01, 0.9),
    st.booleans(),
    st.integers(1, 10),
)
@example(  # the counterexample of the pooled rule: [30]*3 regressed, one run at 15 passed
    runs=[30.0] * 3, index=0, factor=0.5, direction="higher", noise=(0.25, 2),
    baseline_runs=8, tol=0.5, another_host=False, min_runs=3,
)  # fmt: skip
def test_worsening_any_run_never_improves_the_verdict(
    runs, index, factor, direction, noise, baseline_runs, tol, another_host, min_runs
):
    """The whole verdict, at every count of runs, with or without recorded noise, a
    baseline's own error and the spread between hosts: one run worse by any factor never
    judges better (improved < pass < too noisy < regressed)."""
    i = index % len(runs)
    worse = list(runs)
    worse[i] = runs[i] * factor if direction == "higher" else runs[i] / factor
    expectation = Expectation(
        value=100.0, tolerance=tol, direction=direction, runs=baseline_runs,
        noise_sigma=None if noise is None else noise[0],
        noise_df=None if noise is None else noise[1],
    )  # fmt: skip
    rule = Rule(min(min_runs, len(runs)), len(runs), 12)
    a = compare("sweep.c1.agg_tok_s", runs, expectation, rule, another_host=another_host)[0]
    b = compare("sweep.c1.agg_tok_s", worse, expectation, rule, another_host=another_host)[0]
    assert SEVERITY[b.verdict] >= SEVERITY[a.verdict], (a.why, b.why)


def test_the_pooled_rules_counterexample_fails_both_ways():
    """Runs [30, 30, 30] against 100 (tolerance 50%, recorded noise 25% at 2 df) regressed;
    with one run worse, at 15, the pooled rule passed it. Now the worse runs never judge
    better: at 3 runs both fail (a 2-df recording cannot call them regressed), and at 5
    runs both regress (every run past the limit: the sign test)."""
    for n, verdict in ((3, "too-noisy"), (5, "regressed")):
        for runs in ([30.0] * n, [30.0] * (n - 1) + [15.0]):
            d = judge(runs, 100.0, 0.5, noise=Noise(0.25, 2), rule=Rule(3, n, 12))
            assert d.verdict == verdict, (runs, d)


def test_derived_tolerance_grows_with_noise_and_family():
    small = derived_tolerance(Noise(0.03, 40), Rule(3, 10, 36), 8, 0.02, "higher")
    noisy = derived_tolerance(Noise(0.25, 40), Rule(3, 10, 36), 8, 0.02, "higher")
    fewer = derived_tolerance(Noise(0.03, 40), Rule(3, 10, 4), 8, 0.02, "higher")
    assert 0.04 < small < 0.2 < noisy and fewer < small
    assert derived_tolerance(Noise(0.001, 40), Rule(3, 10, 36), 8, 0.02, "higher") == 0.02


@pytest.mark.parametrize(("sigma", "figures"), [(0.03, 36), (0.05, 12), (0.1, 12)])
def test_a_derived_tolerance_passes_a_healthy_figure_and_catches_its_detectable_drop(
    sigma, figures
):
    """Simulated: with runs as noisy as recorded, a healthy figure fails at most its share
    of the family-wise 1%, and a drop of the recorded detectable size fails at least 95%
    of the time (runs up to the rule's most, as the gate measures them)."""
    rule = Rule(3, 10, figures)
    noise = Noise(sigma, 40)
    tol = derived_tolerance(noise, rule, 8, 0.0, "higher")
    drop = detectable_drop(noise, rule, 8, tol, "higher")
    assert 0 < drop <= tol
    rng = random.Random(int(sigma * 1000) + figures)
    expectation = Expectation(
        value=100.0, tolerance=tol, direction="higher", runs=8,
        noise_sigma=sigma, noise_df=40, tolerance_source="derived",
    )  # fmt: skip

    def fails(true: float) -> bool:
        base = 100.0 * math.exp(rng.gauss(0, sigma * median_efficiency(8) / math.sqrt(8)))
        exp = expectation.model_copy(update={"value": base})
        runs: list[float] = []
        while True:
            runs.append(true * math.exp(rng.gauss(0, sigma)))
            check, more = compare("sweep.c1.agg_tok_s", runs, exp, rule)
            if not more:
                return check.failed

    trials = 3000
    healthy = sum(fails(100.0) for _ in range(trials)) / trials
    caught = sum(fails(100.0 * (1 - drop)) for _ in range(1000)) / 1000
    assert healthy <= max(3 * rule.per_figure_rate, 2 / trials), healthy
    assert caught >= 0.95, caught


@pytest.mark.parametrize("met", [0.05, 0.15, 0.25])
def test_a_share_that_fell_fails_even_when_some_runs_met_none(met):
    """slo_met recorded at 1.0 (every request met its service level; tolerance 50%). Each
    gated run's share is Binomial(6, met) / 6, so many runs have none at all: a run of 0
    is no reason to pass. (CI saw 4 runs of 8 at 0 and 4 at 1/6 pass as noise.) Failed in
    every one of 2000 gates, each run to the gate's minimum and more while asked; most
    as REGRESSED."""
    rng = random.Random(int(met * 100))
    baseline = Expectation(
        value=1.0, tolerance=0.5, direction="higher", runs=8, noise_sigma=0.0, noise_df=14
    )
    rule = Rule(min_runs=3, max_runs=10, figures=9)
    verdicts: dict[str, int] = {}
    for _ in range(2000):
        runs: list[float] = []
        while True:
            runs.append(sum(rng.random() < met for _ in range(6)) / 6)
            if len(runs) < rule.min_runs:
                continue
            check, more = compare("sweep.c2.slo_met", runs, baseline, rule)
            if not more or len(runs) >= rule.max_runs:
                break
        check = compare("sweep.c2.slo_met", runs, baseline, Rule(3, len(runs), 9))[0]
        verdicts[check.verdict] = verdicts.get(check.verdict, 0) + 1
    assert set(verdicts) <= {"regressed", "too-noisy"}, verdicts
    assert verdicts.get("regressed", 0) >= 1000, verdicts


@example(runs=[60.0] * 5, fallen=[True] + [False] * 7, further=1.0, direction="higher")
@given(
    st.lists(st.floats(40, 120), min_size=3, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
    st.floats(1.0, 3.0),
    st.sampled_from(["higher", "lower"]),
)
def test_runs_already_far_past_the_limit_falling_further_never_judge_better(
    runs, fallen, further, direction
):
    """Runs four times past the limit (a quarter of it, higher is better) fall further: by
    a factor, or to 0 (higher is better). How far past never makes a failing figure pass:
    a 0 among runs once read as noise wide enough to pass."""
    noise = Noise(0.05, 40)
    worst = limits(100.0, 0.1, direction)[0]
    far = worst / 4 if direction == "higher" else worst * 4
    chosen = [i for i in range(len(runs)) if fallen[i]] or [0]
    there = [far if i in chosen else v for i, v in enumerate(runs)]
    beyond = far / further if direction == "higher" else far * further
    past = [beyond if i in chosen else v for i, v in enumerate(runs)]
    zero = [0.0 if i in chosen else v for i, v in enumerate(runs)]
    rule = Rule(3, len(runs), 36)
    at = SEVERITY[judge(there, 100.0, 0.1, direction, noise, rule=rule).verdict]
    assert SEVERITY[judge(past, 100.0, 0.1, direction, noise, rule=rule).verdict] >= at
    if direction == "higher":
        assert SEVERITY[judge(zero, 100.0, 0.1, direction, noise, rule=rule).verdict] >= at


def test_a_median_of_0_has_no_ratio_interval_and_still_fails():
    """Runs at 0 (every request missed its service level): no interval is printed (it
    read 1e-06..1e-06 before), and the figure fails."""
    zeros = estimate([0.0, 0.0, 0.0, 0.3])
    assert zeros.low is None and zeros.noise is not None
    assert zeros.interval.startswith("n=4, no interval (a ratio interval about 0")
    assert judge([0.0, 0.0, 0.0, 0.3], 1.0, 0.1, "higher", None).verdict == "regressed"
    # noise unknown (a hand-set target), and one run of 4 within: no evidence either way
    verdict = judge([0.0, 0.0, 0.0, 0.95], 1.0, 0.1, "higher", None, rule=Rule(3, 4, 36))
    assert verdict.verdict == "too-noisy", verdict


@pytest.mark.parametrize(
    ("key", "most", "worst"), [("sweep.c4.ttft_s", 1.3, 4.9), ("sweep.c4.agg_tok_s", 0.70, 0.19)]
)
def test_runs_further_past_the_limit_never_buy_a_pass(key, most, worst):
    """Issue 27's case, against the shipped avx512 baseline (limit 1.25x; 12 figures):
    8 runs at 1.3x regress, and so do the same runs with 3 of them at 4.9x (their spread
    once widened the interval into a pass, with every run past the limit)."""
    from perfgate.gate.policy import GatePolicy
    from tests.helpers import ROOT

    baseline = load_baseline(
        ROOT / "baselines" / "llamacpp-gemma3-270m" / "cpu-2x-amd-epyc-avx512.json"
    )
    assert baseline is not None
    exp = baseline.metrics[key]
    rule = GatePolicy().rule(baseline, 8)
    jitter = [0.985, 0.99, 0.995, 1.0, 1.0, 1.005, 1.01, 1.015]
    at = [exp.value * most * j for j in jitter]
    worse = at[:5] + [exp.value * worst * j for j in jitter[5:]]
    for runs in (at, worse):
        check = compare(key, runs, exp, rule)[0]
        assert check.verdict == "regressed", (runs, check)
    assert "8 of 8 runs past the limit" in compare(key, worse, exp, rule)[0].why


def test_a_run_within_the_baselines_own_error_of_the_limit_is_not_counted_past_it():
    """Runs count as past the limit only beyond the baseline's own error (its median from
    8 runs at 10% noise: a margin of ~7%). Two runs far past and one just past, within
    that margin: not every run is past, so not regressed at 3 runs (too noisy); the same
    at 5 runs, where the highest run is the signed-rank bound. One more run far past
    instead regresses."""
    rule3, rule5 = Rule(3, 3, 12), Rule(3, 5, 12)
    noise = Noise(0.1, 40)
    just_past = 100.0 * (1 - 0.25) * 0.98  # 2% past a 25% limit: within the ~7% margin
    for runs, rule in (([40.0, 40.0, just_past], rule3), ([40.0] * 4 + [just_past], rule5)):
        d = judge(runs, 100.0, 0.25, noise=noise, rule=rule)
        assert d.verdict == "too-noisy", (runs, d)
        worse = [*runs[:-1], 40.0]
        assert judge(worse, 100.0, 0.25, noise=noise, rule=rule).verdict == "regressed"


def test_runs_noisier_than_recorded_pass_only_once_their_own_bound_decides():
    """Recorded noise 2%; three runs 30% apart all clear a 50% limit: noisier than
    recorded, so the gate measures again rather than pass on 3 runs; at 5 runs their own
    signed-rank bound decides, and they pass. Runs as noisy as recorded pass at 3."""
    noise, rule = Noise(0.02, 40), Rule(3, 10, 12)
    wide = [80.0, 100.0, 125.0]
    first = judge(wide, 100.0, 0.5, noise=noise, rule=rule)
    assert first.step == "more" and "noisier than recorded" in first.why, first
    then = judge([*wide, 95.0, 105.0], 100.0, 0.5, noise=noise, rule=rule)
    assert (then.verdict, then.step) == ("pass", "done"), then
    steady = judge([99.0, 100.0, 101.0], 100.0, 0.5, noise=noise, rule=rule)
    assert (steady.verdict, steady.step) == ("pass", "done"), steady


def test_a_figure_clearly_better_than_its_tolerance_is_improved():
    noise = Noise(0.03, 40)
    assert judge([150.0, 152.0, 149.0], 100.0, 0.1, noise=noise).verdict == "improved"
    assert judge([104.0, 105.0, 103.0], 100.0, 0.1, noise=noise).verdict == "pass"
    assert judge([60.0, 61.0, 59.0], 100.0, 0.1, "lower", noise).verdict == "improved"
