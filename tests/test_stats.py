"""Properties of the verdict: monotone in the measurement, exact at tolerance edges."""

from hypothesis import assume, given
from hypothesis import strategies as st

from perfgate.stats import bootstrap_interval, decide, estimate, limits, median

RANK = {"regressed": 0, "inconclusive": 1, "pass": 2, "improved": 3}
sample_lists = st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=8)


def verdict(samples, value, tol, direction):
    worst, better = limits(value, tol, direction)
    return decide(estimate(samples), worst, better, direction)


@given(
    sample_lists,
    st.floats(0.0, 500.0),
    st.floats(1.0, 1000.0),
    st.floats(0.0, 0.9),
    st.sampled_from(["higher", "lower"]),
)
def test_a_worse_measurement_never_judges_better(samples, shift, value, tol, direction):
    sign = -1 if direction == "higher" else 1
    worse = [s + sign * shift for s in samples]
    assume(all(w > 0 for w in worse))
    assert (
        RANK[verdict(worse, value, tol, direction)] <= RANK[verdict(samples, value, tol, direction)]
    )


@given(st.floats(1.0, 1000.0), st.floats(0.01, 0.9))
def test_tolerance_edges_higher_is_better(value, tol):
    worst, better = limits(value, tol, "higher")
    assert verdict([worst], value, tol, "higher") == "pass"  # exactly at the limit passes
    assert verdict([worst * 0.999], value, tol, "higher") == "regressed"
    assert verdict([value], value, tol, "higher") == "pass"
    assert verdict([better * 1.001], value, tol, "higher") == "improved"


@given(st.floats(0.01, 100.0), st.floats(0.01, 0.9))
def test_tolerance_edges_lower_is_better(value, tol):
    worst, better = limits(value, tol, "lower")
    assert verdict([worst], value, tol, "lower") == "pass"
    assert verdict([worst * 1.001], value, tol, "lower") == "regressed"
    assert verdict([better * 0.999], value, tol, "lower") == "improved"


@given(sample_lists)
def test_interval_contains_the_median_and_is_deterministic(samples):
    low, high = bootstrap_interval(samples)
    assert low <= median(samples) <= high
    assert (low, high) == bootstrap_interval(samples)
    assert min(samples) <= low and high <= max(samples)


def test_zero_tolerance_and_single_sample_are_decisive():
    assert verdict([100.0], 100.0, 0.0, "higher") == "pass"
    assert verdict([99.9], 100.0, 0.0, "higher") == "regressed"
