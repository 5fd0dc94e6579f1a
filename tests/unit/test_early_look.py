"""The early look (issue 44): a level whose runs agree far inside their limits is decided
before ``gate.repeats`` runs, with the chance that a figure at its limit passes there held
to ``Rule.early_rate`` (simulated here), and never while recording or unjudged."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.gate.baseline import Expectation
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.gate.verdict import compare
from perfgate.stats.decide import Rule, comparison, early_pass
from perfgate.stats.distributions import median_efficiency
from perfgate.stats.estimate import Noise, limits
from perfgate.stats.power import derived_tolerance
from tests.synthetic import level_run, measurement

KEY = "sweep.c1.agg_tok_s"
RULE = Rule(min_runs=3, max_runs=10, figures=12)


@pytest.mark.parametrize("source", ["derived", "manual"])
@pytest.mark.parametrize("sigma", [0.03, 0.10])
def test_a_figure_at_its_limit_passes_the_early_look_at_most_its_rate(source, sigma):
    """Simulated: the true value exactly at the limit, runs lognormal at the recorded
    noise, the baseline off by its own error (8 recorded runs) where the verdict charges
    it (derived); a hand-set tolerance's limit is fixed to the number. Two runs pass at
    once in at most ``RULE.early_rate`` (1%) of 20,000 trials, within 3 standard errors."""
    noise = Noise(sigma, 21)
    tol = derived_tolerance(noise, RULE, 8, 0.0, "higher") if source == "derived" else 0.2
    rng = random.Random(int(sigma * 100) + len(source))
    base_sd = sigma * median_efficiency(8) / math.sqrt(8)
    trials, passed = 20000, 0
    for _ in range(trials):
        value = 100.0 * math.exp(rng.gauss(0, base_sd)) if source == "derived" else 100.0
        exp = Expectation(
            value=value, tolerance=tol, direction="higher", runs=8, noise_sigma=sigma,
            noise_df=21, tolerance_source=source,
        )  # fmt: skip
        at_limit = 100.0 * (1 - tol)  # the truth: the recorded value's error aside
        runs = [at_limit * math.exp(rng.gauss(0, sigma)) for _ in range(2)]
        check, more = compare(KEY, runs, exp, RULE)
        passed += not more and check.verdict in ("pass", "improved")
    rate = passed / trials
    assert rate <= RULE.early_rate + 3 * math.sqrt(RULE.early_rate / trials), rate


def test_healthy_runs_that_agree_stop_at_the_early_look_and_say_so():
    noisy = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]
    runs = {"sweep": measurement({c: noisy for c in (1, 2, 4)})}
    base = build_baseline("p", "h", run_values(runs), None, {}, Rule(3, 10)).baseline
    two = [level_run(1, v, repeat=i) for i, v in enumerate((100.0, 99.0))]
    assert GatePolicy().after_level("sweep", two, base) == "next"
    checks = GatePolicy().judge({"sweep": measurement({1: [100.0, 99.0]})}, base, {"sweep": [1]})
    c1 = [c for c in checks.checks if c.key.startswith("sweep.c1.")]
    assert c1 and all(c.verdict == "pass" for c in c1), [c.message() for c in c1]
    assert all("an early look" in c.why for c in c1)
    # min_repeats = repeats: no early look; recording: the minimum; one run: never early
    assert GatePolicy(early_runs=3).after_level("sweep", two, base) == "repeat"
    assert GatePolicy(recording=True).after_level("sweep", two, base) == "repeat"
    assert GatePolicy().after_level("sweep", two[:1], base) == "repeat"
    # a figure this baseline lacks (C=8 was never recorded) waits for the minimum
    eight = [level_run(8, 100.0, repeat=i) for i in range(2)]
    assert GatePolicy().after_level("sweep", eight, base) == "repeat"


def test_runs_that_disagree_or_sit_near_the_limit_wait_for_the_usual_verdict():
    noisy = [100.0, 97.0, 103.0, 99.0, 101.0, 98.0, 102.0, 100.5]
    runs = {"sweep": measurement({1: noisy})}
    base = build_baseline("p", "h", run_values(runs), None, {}, Rule(3, 10)).baseline
    edge = 100.0 * (1 - base.metrics["sweep.c1.per_request_tok_s"].tolerance)
    near = [level_run(1, v, repeat=i) for i, v in enumerate((100.0, edge * 1.02))]
    assert GatePolicy().after_level("sweep", near, base) == "repeat"
    apart = [level_run(1, v, repeat=i) for i, v in enumerate((100.0, 80.0))]  # noisier
    assert GatePolicy().after_level("sweep", apart, base) == "repeat"


@given(st.lists(st.floats(50, 150), min_size=2, max_size=2), st.integers(0, 1), st.floats(1, 3))
@settings(max_examples=200, deadline=None)
def test_improving_a_run_never_undoes_an_early_pass(runs, index, factor):
    noise = Noise(0.03, 21)
    worst, better = limits(100.0, 0.15, "higher")

    def passes(values: list[float]) -> bool:
        cmp = comparison(values, 100.0, worst, better, "higher", 8, noise)
        return early_pass(cmp, len(values), RULE)

    improved = list(runs)
    improved[index] *= factor
    if passes(runs):
        assert passes(improved)
