"""The spread between hosts of one hardware key (issue #33): a baseline recorded on one
host judges a healthy server on another without failing it on the host's difference, and
still fails a really slowed one. Checked by simulation against known distributions: runs
lognormal at 5% within a host, hosts lognormal at DEFAULT_HOST_SIGMA between them."""

from __future__ import annotations

import math
import random

import pytest

from perfgate.gate.baseline import DEFAULT_HOST_SIGMA, MIN_HOST_DF, Baseline, Expectation
from perfgate.gate.policy import GatePolicy, reach
from perfgate.gate.recording import build_baseline, merged_host_spread
from perfgate.gate.verdict import compare
from perfgate.stats.decide import Rule

FIGURES = {  # key: value on the recording host
    "sweep.c1.agg_tok_s": 58.0,
    "sweep.c2.agg_tok_s": 75.0,
    "sweep.c1.ttft_s": 0.21,
    "sweep.c2.ttft_s": 0.40,
}
WITHIN = 0.05  # run-to-run noise on one host (sd of ln)
POLICY = GatePolicy(min_runs=3, max_runs=10)


def slower(key: str, factor: float) -> float:
    """A figure's value on a server ``factor`` times slower (tok/s down, seconds up)."""
    return FIGURES[key] / factor if key.endswith("tok_s") else FIGURES[key] * factor


def runs(rng: random.Random, key: str, factor: float, n: int) -> list[float]:
    return [slower(key, factor) * math.exp(rng.gauss(0, WITHIN)) for _ in range(n)]


def recorded(rng: random.Random, host_id: str = "host-a") -> Baseline:
    values = {key: runs(rng, key, 1.0, 8) for key in FIGURES}
    rule = POLICY.rule(None)
    recording = build_baseline(
        "p", "hw", values, None, {}, rule, min_tolerance=0.25, host_id=host_id
    )
    return recording.baseline


def build_fails(
    rng: random.Random, baseline: Baseline, policy: GatePolicy, factors: dict[str, float]
) -> bool:
    """One gate run as the session runs it: every figure measured again while any is near
    its limit, up to max_runs, then judged."""
    measured = {key: runs(rng, key, factors[key], policy.max_runs) for key in FIGURES}
    host = {"another_host": policy.another_host}
    n = policy.min_runs
    while n < policy.max_runs and any(
        compare(k, v[:n], baseline.metrics[k], policy.rule(baseline), **host)[1]
        for k, v in measured.items()
    ):
        n += 1
    rule = policy.rule(baseline, n)
    return any(
        compare(k, v[:n], baseline.metrics[k], rule, **host)[0].failed for k, v in measured.items()
    )


def failure_rate(
    policy: GatePolicy, slowdown: float, trials: int, seed: int, only: str | None = None
) -> float:
    """Builds failed: each trial records on one host, then gates on another whose host
    effect is drawn at DEFAULT_HOST_SIGMA (every figure of a host moves together); the
    server is ``slowdown`` times slower in every figure, or in figure ``only``."""
    rng = random.Random(seed)
    failed = 0
    for _ in range(trials):
        baseline = recorded(rng)
        host = math.exp(rng.gauss(0, DEFAULT_HOST_SIGMA))
        factors = {k: host * (slowdown if only in (None, k) else 1.0) for k in FIGURES}
        failed += build_fails(rng, baseline, policy, factors)
    return failed / trials


def test_a_healthy_server_on_another_host_fails_within_the_family_rate():
    """The same host effects fail more than one healthy build in ten when judged as if on
    the recording host (the old gate; 10x its 1% family-wise rate), and at most that 1%
    when the spread between hosts is allowed for (600 trials: 1% has a 3-sigma bound of
    2.2%)."""
    same_host_rule = failure_rate(POLICY, 1.0, 300, seed=1)
    across = failure_rate(GatePolicy(min_runs=3, max_runs=10, another_host=True), 1.0, 600, 2)
    assert same_host_rule > 0.1, same_host_rule
    assert across <= 0.022, across


def test_a_three_times_slower_server_on_another_host_still_fails():
    policy = GatePolicy(min_runs=3, max_runs=10, another_host=True)
    assert failure_rate(policy, 3.0, 300, seed=3) >= 0.99


@pytest.mark.parametrize("figure", ["sweep.c2.agg_tok_s", "sweep.c1.ttft_s"])
def test_the_detectable_drop_the_summary_names_fails_95_percent_of_the_time(figure):
    """reach() names the smallest drop a cross-host comparison fails 95% of the time: a
    server with that one figure worse by it, on hosts drawn at the spread between hosts,
    fails at least 95% of the builds (less a 2% sampling margin); one worse by half that
    drop (in log) fails less often. One host sees smaller drops."""
    policy = GatePolicy(min_runs=3, max_runs=10, another_host=True)
    baseline = recorded(random.Random(4))
    drop = reach(baseline, "exact", policy).detectable
    assert drop is not None and 0.3 < drop < 0.8, drop
    factor = 1 / (1 - drop)
    at = failure_rate(policy, factor, 400, seed=5, only=figure)
    assert at >= 0.93, (drop, at)
    half = failure_rate(policy, math.sqrt(factor), 300, seed=6, only=figure)
    assert half < at, (drop, half)
    same = reach(baseline, "exact", POLICY)
    assert same.scope == "same host" and same.detectable is not None and same.detectable < drop
    assert reach(baseline, "any", policy).scope.startswith("floors only")


def test_recording_on_another_host_adds_a_host_to_host_difference():
    """Host A records, host B records 20% slower: one difference, sigma = |ln 0.8|/sqrt 2
    at 1 df; a re-recording on B keeps it; a third host pools into it."""
    rule = Rule(3, 10, 1)
    first = build_baseline(
        "p", "hw", {"sweep.c1.agg_tok_s": [50.0] * 3}, None, {}, rule, tolerance=0.2, host_id="a"
    )
    assert first.baseline.provenance["hosts"] == ["a"]
    assert first.baseline.metrics["sweep.c1.agg_tok_s"].host_sigma is None
    second = build_baseline(
        "p",
        "hw",
        {"sweep.c1.agg_tok_s": [40.0] * 3},
        first.baseline,
        {},
        rule,
        tolerance=0.2,
        host_id="b",
    ).baseline
    exp = second.metrics["sweep.c1.agg_tok_s"]
    assert exp.host_sigma == pytest.approx(abs(math.log(0.8)) / math.sqrt(2), abs=1e-6)
    assert exp.host_df == 1 and second.provenance["hosts"] == ["a", "b"]
    again = build_baseline(
        "p", "hw", {"sweep.c1.agg_tok_s": [44.0] * 3}, second, {}, rule, tolerance=0.2, host_id="b"
    ).baseline
    assert again.metrics["sweep.c1.agg_tok_s"].host_sigma == exp.host_sigma  # same host
    third = build_baseline(
        "p", "hw", {"sweep.c1.agg_tok_s": [44.0] * 3}, again, {}, rule, tolerance=0.2, host_id="c"
    ).baseline
    pooled = math.sqrt((exp.host_sigma**2 + math.log(44 / 44) ** 2 / 2) / 2)
    assert third.metrics["sweep.c1.agg_tok_s"].host_sigma == pytest.approx(pooled, abs=1e-6)
    assert third.metrics["sweep.c1.agg_tok_s"].host_df == 2
    assert third.provenance["hosts"] == ["a", "b", "c"]


def test_the_gate_uses_the_default_spread_until_enough_hosts_are_measured():
    exp = Expectation(value=1.0, tolerance=0.2, direction="higher", runs=8)
    assert exp.between_hosts == DEFAULT_HOST_SIGMA  # nothing known: never 0
    few = exp.model_copy(update={"host_sigma": 0.01, "host_df": MIN_HOST_DF - 1})
    assert few.between_hosts == DEFAULT_HOST_SIGMA
    wide = exp.model_copy(update={"host_sigma": 0.5, "host_df": 1})
    assert wide.between_hosts == 0.5  # a measured spread wider than the default counts
    known = exp.model_copy(update={"host_sigma": 0.08, "host_df": MIN_HOST_DF})
    assert known.between_hosts == 0.08
    hand_set = Expectation(value=1.0, tolerance=0.2, direction="higher")
    assert merged_host_spread(hand_set, 2.0, moved=True) == (None, None)
