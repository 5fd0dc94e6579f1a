"""The capacity search, pure: probe order, what it finds, and the gate on its figure.

Probes come from simulated servers with known capacities (a step, or a noisy slope
whose good-request share is drawn per probe): exact timings no engine gives on demand.
tests/e2e/test_workloads_e2e.py runs the search on the real llama.cpp server."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.errors import ProfileError
from perfgate.gate.capacity import capacity_of, next_probe, search_capacity
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import parse_key, run_values
from perfgate.measure.data import CapacitySearch, Measurement, Probe
from perfgate.measure.metrics import Goodput
from perfgate.profile import CapacitySpec, Slo, load_profile
from perfgate.stats.decide import Rule
from tests.unit.test_profile import VALID, write

SLO = Slo(ttft_s=1.0)


def probe_of(level: float, share: float, target: float, requests: int = 100) -> Probe:
    """A probe whose requests met the service levels in ``share`` of cases."""
    met = round(share * requests)
    goodput = Goodput(slo=SLO, requests=requests, met=met, good_tokens=met * 10, wall_s=1.0)
    return Probe(level=level, goodput=goodput, met=met / requests >= target)


def step_search(spec: CapacitySpec, capacity: float) -> CapacitySearch:
    """A search on a server whose every request meets the service levels up to
    ``capacity`` and none above it."""
    found = CapacitySearch(by=spec.by, target=spec.target, high=spec.high)

    def probe(level: float) -> Probe:
        return probe_of(level, 1.0 if level <= capacity else 0.0, spec.target)

    return search_capacity(found, spec, probe)


def test_a_concurrency_search_doubles_then_bisects():
    spec = CapacitySpec(by="concurrency", low=1, high=64)
    found = step_search(spec, 5)
    # 1, 2, 4 met; 8 missed; between 4 and 8: 6 missed, 5 met; 4..6 leaves only 5
    assert [p.level for p in found.probes] == [1, 2, 4, 8, 6, 5]
    assert found.capacity == 5 and not found.at_high
    assert all(isinstance(p.level, int) for p in found.probes)


@given(st.integers(0, 150), st.integers(1, 8), st.integers(1, 100))
def test_a_concurrency_search_finds_a_step_servers_capacity_exactly(capacity, low, span):
    spec = CapacitySpec(by="concurrency", low=low, high=low + span)
    found = step_search(spec, capacity)
    expected = 0 if capacity < low else min(capacity, spec.high)
    assert found.capacity == expected
    assert found.at_high == (capacity >= spec.high)
    levels = [p.level for p in found.probes]
    assert len(levels) == len(set(levels)), "a level probed twice"
    # doubling from low to high, then halving a bracket at most high / 2 wide
    doubling = math.ceil(math.log2(spec.high / low)) + 1
    assert len(levels) <= doubling + math.ceil(math.log2(spec.high))


@given(st.floats(0.05, 500), st.sampled_from([0.05, 0.1, 0.25]))
def test_a_rate_search_brackets_a_step_servers_capacity_within_its_precision(capacity, p):
    spec = CapacitySpec(by="rate", low=0.5, high=256, precision=p)
    found = step_search(spec, capacity)
    assert found.capacity is not None
    if capacity < spec.low:
        assert found.capacity == 0
    elif capacity >= spec.high:
        assert found.capacity == spec.high and found.at_high
    else:
        missed = min(pr.level for pr in found.probes if not pr.met)
        assert found.capacity <= capacity < missed
        # rates are probed to 3 significant figures: the last step may stop a hair wider
        assert missed <= found.capacity * (1 + p) * 1.01


def test_the_lowest_level_missed_ends_the_search_at_zero():
    spec = CapacitySpec(by="rate", low=2, high=64)
    found = step_search(spec, 1.0)
    assert [p.level for p in found.probes] == [2.0] and found.capacity == 0
    assert "no level met" in found.describe()


def test_an_unfinished_search_has_no_capacity_and_no_figure():
    found = CapacitySearch(by="rate", target=0.9, high=8, probes=[probe_of(1.0, 1, 0.9)])
    m = Measurement(searches=[found])
    assert run_values({"capacity": m}) == {}
    assert "did not finish" in found.describe()
    problems = GatePolicy(recording=True).recording_problems(
        {"capacity": m}, status="passed", correctness_failures=[]
    )
    assert any("did not finish" in p for p in problems)


def test_next_probe_is_none_once_bracketed():
    assert next_probe({4: True, 5: False}, low=1, high=8, precision=0.1, integer=True) is None
    assert next_probe({4.0: True, 4.3: False}, low=1, high=8, precision=0.1, integer=False) is None
    assert capacity_of({1: True, 2: True, 4: False}) == 2.0


def test_the_capacity_keys_are_measurement_wide():
    assert parse_key("capacity.max_req_s").concurrency is None
    assert parse_key("capacity.max_concurrency").figure.unit == "in flight"
    for bad in ("capacity.c4.max_req_s", "sweep.agg_tok_s"):
        with pytest.raises(ValueError, match="unknown figure"):
            parse_key(bad)


def test_a_profile_asks_for_service_levels_with_a_search(tmp_path):
    text = VALID.format(name="p") + '[capacity]\nby = "rate"\n'
    with pytest.raises(ProfileError, match=r"capacity.*set them in \[slo\]"):
        load_profile("p", write(tmp_path, text).parent)
    with_slo = text + "[slo]\nttft_s = 0.5\n"
    assert load_profile("p", write(tmp_path, with_slo).parent).capacity.by == "rate"
    with pytest.raises(ValueError, match="whole numbers"):
        CapacitySpec(by="concurrency", low=1.5)
    with pytest.raises(ValueError, match="below low"):
        CapacitySpec(low=8, high=4)


# -- the gate on a noisy server ---------------------------------------------------------
TARGET = 0.9


def noisy_search(rng: random.Random, capacity: float, requests: int = 32) -> CapacitySearch:
    """A rate search on a server whose requests meet the service levels with probability
    falling smoothly past ``capacity`` (a logistic of width 5% of it); each probe's share
    is a binomial draw over its requests."""
    spec = CapacitySpec(by="rate", low=1, high=64, precision=0.1, target=TARGET)
    found = CapacitySearch(by="rate", target=TARGET, high=spec.high)

    def probe(level: float) -> Probe:
        p_good = 1 / (1 + math.exp((level - capacity) / (0.05 * capacity)))
        met = sum(rng.random() < p_good for _ in range(requests))
        return probe_of(level, met / requests, TARGET, requests)

    return search_capacity(found, spec, probe)


def gated(rng: random.Random, capacity: float, policy: GatePolicy, base) -> str:
    """One gate run: searches until the policy stops, then the capacity's verdict."""
    m = Measurement()
    while True:
        m.searches.append(noisy_search(rng, capacity))
        if policy.after_search("capacity", m, base) == "next":
            break
    (check,) = policy.judge({"capacity": m}, base, {"capacity": []}).checks
    return check.verdict


def test_the_capacity_gate_rarely_fails_an_unchanged_server_and_catches_a_halved_one():
    """Simulation: baselines recorded from 3 searches on a server of capacity 8 req/s;
    each judges 40 gate runs on the same server and 40 on one of half the capacity."""
    rng = random.Random(7)
    policy = GatePolicy()
    false_failures = caught = trials = 0
    for _ in range(10):
        recording = Measurement(searches=[noisy_search(rng, 8.0) for _ in range(3)])
        values = run_values({"capacity": recording})
        base = build_baseline("p", "h", values, None, {}, Rule(3, 10)).baseline
        for _ in range(40):
            trials += 1
            false_failures += gated(rng, 8.0, policy, base) in ("regressed", "creep")
            caught += gated(rng, 4.0, policy, base) == "regressed"
    assert false_failures / trials <= 0.02, f"{false_failures} of {trials} unchanged runs failed"
    assert caught / trials >= 0.95, f"a halved capacity caught in {caught} of {trials}"
