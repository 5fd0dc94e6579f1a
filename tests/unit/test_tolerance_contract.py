"""A tolerance a person sets is a contract with the number (issue 44): judged against the
recorded value as a fixed number; TOO NOISY names its dominant term and the fix in
numbers; recording says what a tolerance can promise."""

import math
import random

import pytest

from perfgate.gate.baseline import Expectation
from perfgate.gate.recording import build_baseline, diff_lines, supported_for, too_tight
from perfgate.gate.verdict import compare
from perfgate.stats.decide import Rule
from perfgate.stats.distributions import median_efficiency
from perfgate.stats.estimate import Noise
from perfgate.stats.power import derived_tolerance, detectable_drop, supported_tolerance

RULE = Rule(min_runs=3, max_runs=10, figures=12)
TTFT = "sweep.c1.ttft_s"
TOK_S = "sweep.c1.agg_tok_s"


def recorded_ttft(source: str, tolerance: float = 0.6) -> Expectation:
    """The e2e test's baseline: TTFT 0.2 s from 3 runs at a 23% spread (pooled over the
    three levels: 6 degrees of freedom)."""
    return Expectation(
        value=0.2, tolerance=tolerance, direction="lower", unit="s", runs=3, spread=0.23,
        noise_sigma=0.23, noise_df=6, tolerance_source=source,
    )  # fmt: skip


def gate(key: str, factors: list[float], exp: Expectation, rule: Rule = RULE):
    """The gate's loop on one figure: runs added one at a time while it asks for more;
    the final check."""
    runs: list[float] = []
    for factor in factors:
        runs.append(exp.value * factor)
        if len(runs) < rule.min_runs:
            continue
        final = Rule(rule.min_runs, len(runs), rule.figures) if len(runs) == len(factors) else rule
        check, more = compare(key, runs, exp, final)
        if not more:
            return check
    raise AssertionError("the gate asked for more runs than given")


# healthy runs as the e2e test saw them (its medians +15..26%): every one within 20%
WITHIN_20 = [1.15, 1.2, 1.05, 1.18, 1.19, 1.1, 1.2, 1.16, 1.12, 1.19]


def test_a_hand_set_60pct_tolerance_passes_runs_within_20pct_of_a_3_run_23pct_baseline():
    check = gate(TTFT, WITHIN_20, recorded_ttft("manual"))
    assert check.verdict == "pass", check.message()


def test_the_same_runs_against_a_derived_60pct_tolerance_still_charge_the_baselines_error():
    # derived tolerances keep the rule that charges the recorded value's own error: the
    # runs are the issue's, and with a 3-run, 23%-spread baseline they cannot be passed
    check = gate(TTFT, WITHIN_20, recorded_ttft("derived"))
    assert check.verdict == "too-noisy", check.message()
    assert "baseline's own error" in check.why and "record_repeats = " in check.why


@pytest.mark.parametrize(
    ("key", "factor"), [(TTFT, 1.8), (TOK_S, 0.2)], ids=["ttft-1.8x", "tok_s-80pct-fewer"]
)
def test_a_hand_set_60pct_tolerance_fails_runs_80pct_past_the_baseline(key, factor):
    exp = recorded_ttft("manual")
    if key == TOK_S:
        exp = exp.model_copy(update={"value": 50.0, "direction": "higher", "unit": "tok/s"})
    spread = [1.0, 1.1, 0.92, 1.05, 0.97, 1.08, 0.95, 1.02, 1.1, 0.9]
    check = gate(key, [factor * s for s in spread], exp)
    assert check.verdict == "regressed", check.message()


def test_a_hand_written_target_is_a_fixed_number_too():
    # {"value": 73.5, "tolerance": 0.10}: no runs, no noise; the seeds' threshold
    exp = Expectation(value=73.5, tolerance=0.10, direction="higher", unit="tok/s")
    assert exp.fixed and exp.judged_runs is None
    ok = gate(TOK_S, [0.97, 1.0, 0.99, 1.01, 0.98], exp)
    assert ok.verdict == "pass" and ok.limit == pytest.approx(66.15)
    slow = gate(TOK_S, [0.82, 0.85, 0.84, 0.83, 0.86], exp)
    assert slow.verdict == "regressed"


def test_too_noisy_names_the_runs_spread_and_the_runs_that_would_decide():
    # a fixed 10% tolerance; runs 15% apart with their median 6% below the number
    exp = Expectation(
        value=100.0, tolerance=0.1, direction="higher", runs=8, noise_sigma=0.05,
        noise_df=20, tolerance_source="manual",
    )  # fmt: skip
    runs = [75.0, 80.0, 85.0, 90.0, 92.0, 94.0, 96.0, 100.0, 105.0, 112.0]
    check, more = compare(TOK_S, runs, exp, Rule(3, 10, 12))
    assert check.verdict == "too-noisy" and not more, check.message()
    assert "the runs' spread" in check.why and "against 5.0% recorded" in check.why
    assert "this host is noisier today" in check.why
    assert "runs would decide at that spread" in check.why, check.why


def test_too_noisy_names_the_spread_between_hosts_and_recording_here():
    exp = Expectation(
        value=100.0, tolerance=0.25, direction="higher", runs=8, noise_sigma=0.02,
        noise_df=40, tolerance_source="derived",
    )  # fmt: skip
    # 45% below: past the 25% limit, within it widened by a 20% spread between hosts
    runs = [54.0, 55.0, 56.0, 54.5, 55.5, 56.5, 54.2, 55.2, 56.2, 55.0]
    check, _ = compare(TOK_S, runs, exp, Rule(3, 10, 12), another_host=True)
    assert check.verdict == "too-noisy", check.message()
    assert "spread between hosts (±" in check.why and "record a baseline on this host" in check.why


def test_the_advised_record_repeats_shrink_the_baselines_error_below_the_runs():
    check = gate(TTFT, WITHIN_20, recorded_ttft("derived"))
    advised = int(check.why.split("record_repeats = ")[1].split()[0])
    assert 3 < advised <= 30
    # re-recorded with that many runs, the same runs decide
    exp = recorded_ttft("derived").model_copy(update={"runs": advised})
    assert gate(TTFT, WITHIN_20, exp).verdict == "pass"


def test_a_tolerance_set_narrower_than_the_noise_supports_is_named_at_recording():
    rng = random.Random(5)
    values = {
        f"sweep.c{c}.{fig}": [base * math.exp(rng.gauss(0, 0.12)) for _ in range(8)]
        for c in (1, 2, 4)
        for fig, base in (("agg_tok_s", 40.0 * c), ("per_request_tok_s", 40.0), ("ttft_s", 0.3))
    }
    rule = Rule(3, 10)
    tight = build_baseline("p", "hw", values, None, {}, rule, tolerance=0.1)
    warning = too_tight(tight.baseline, tight.supported)
    assert len(warning) == 1 and "the tolerance 10% set by hand" in warning[0], warning
    need = max(tight.supported.values())
    assert f"--perf-tolerance {math.ceil(need * 100) / 100:g}" in warning[0]
    assert need > 0.1
    lines = "\n".join(diff_lines(None, tight))
    assert "catches a " in lines and "noise supports ±" in lines
    # at the tolerance it names, no warning; a derived tolerance is never too tight
    loose = build_baseline("p", "hw", values, None, {}, rule, tolerance=math.ceil(need * 100) / 100)
    assert too_tight(loose.baseline, loose.supported) == []
    derived = build_baseline("p", "hw", values, None, {}, rule)
    assert too_tight(derived.baseline, derived.supported) == []


def test_supported_tolerance_grows_with_the_noise_and_is_the_unfloored_derived_one():
    rule = Rule(3, 10, 12)
    quiet, loud = Noise(0.03, 20), Noise(0.15, 20)
    assert supported_tolerance(quiet, rule, 8, "higher") < supported_tolerance(
        loud, rule, 8, "higher"
    )
    assert supported_tolerance(loud, rule, 8, "higher") == derived_tolerance(
        loud, rule, 8, 0.0, "higher"
    )
    exp = Expectation(value=1.0, tolerance=0.3, direction="higher", runs=8, noise_sigma=0.15,
                      noise_df=20, tolerance_source="derived")  # fmt: skip
    assert supported_for(exp, rule) == supported_tolerance(loud, rule, 8, "higher")
    hand = Expectation(value=1.0, tolerance=0.3, direction="higher")
    assert supported_for(hand, rule) is None  # no noise recorded: nothing to size by


@pytest.mark.parametrize(("sigma", "figures"), [(0.05, 12), (0.15, 12)])
def test_a_fixed_tolerance_the_noise_supports_keeps_its_rates(sigma, figures):
    """Simulated: a tolerance a person set at the narrowest the noise supports, judged as
    a fixed number. A healthy server (its true value off the recorded number by the
    baseline's own error: 3 recorded runs) fails at most its share of the family-wise 1%;
    a server the stated detectable drop below the number fails at least 95% of the time."""
    rule = Rule(3, 10, figures)
    noise = Noise(sigma, 6)
    tol = supported_tolerance(noise, rule, 3, "higher", fixed=True)
    drop = detectable_drop(noise, rule, 3, tol, "higher", fixed=True)
    assert 0 < tol < drop < 1
    rng = random.Random(int(sigma * 1000) + figures)
    exp = Expectation(
        value=100.0, tolerance=tol, direction="higher", runs=3, noise_sigma=sigma,
        noise_df=6, tolerance_source="manual",
    )  # fmt: skip
    base_sd = sigma * median_efficiency(3) / math.sqrt(3)

    def fails(true: float) -> bool:
        runs: list[float] = []
        while True:
            runs.append(true * math.exp(rng.gauss(0, sigma)))
            check, more = compare(TOK_S, runs, exp, rule)
            if not more:
                return check.failed

    trials = 3000
    healthy = sum(fails(100.0 * math.exp(rng.gauss(0, base_sd))) for _ in range(trials)) / trials
    caught = sum(fails(100.0 * (1 - drop)) for _ in range(1000)) / 1000
    assert healthy <= max(3 * rule.per_figure_rate, 2 / trials), healthy
    assert caught >= 0.95, caught


def test_baseline_show_prints_what_each_tolerance_can_promise(tmp_path, capsys):
    from perfgate.cli import main
    from perfgate.gate.baseline import baseline_path, save_baseline

    rng = random.Random(9)
    values = {
        f"sweep.c{c}.ttft_s": [0.3 * c * math.exp(rng.gauss(0, 0.12)) for _ in range(8)]
        for c in (1, 2, 4)
    }
    recorded = build_baseline("p", "hw", values, None, {}, Rule(3, 10), tolerance=0.1)
    save_baseline(baseline_path(tmp_path, "p", "hw"), recorded.baseline)
    assert main(["baseline", "show", "p", "--baselines-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "profile p not found" in out and "[gate] defaults" in out
    assert out.count("noise supports ±") == 3 and out.count("catches a drop of") == 3, out
    assert "warning: the tolerance 10% set by hand is narrower" in out, out
