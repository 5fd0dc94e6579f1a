"""The performance suite: single-request speed and the concurrency sweep, gated on baselines/."""

import pytest

pytestmark = pytest.mark.perf


def test_single_request(measure, perf_gate, perfgate_session, request):
    """Sequential requests at C=1: per-request tok/s and TTFT against the baseline. With
    pytest-benchmark installed (perfgate[benchmark]), one request per benchmark round, so
    --benchmark-autosave / --benchmark-compare work too (not side by side: A and B each
    time their own rounds)."""
    workload = perfgate_session.profile.workload
    if measure.side_by_side or not request.config.pluginmanager.hasplugin("benchmark"):
        measure.single("single", workload.single_requests)
        perf_gate("single")
        return
    benchmark = request.getfixturevalue("benchmark")
    benchmark.extra_info["profile"] = perfgate_session.profile.name

    def rounds(one_request, n):
        benchmark.pedantic(one_request, rounds=n, iterations=1)

    measure.single("single", workload.single_requests, rounds)
    perf_gate("single")


def test_concurrency_sweep(measure, perf_gate, perfgate_session):
    """The profile's levels in order: aggregate and per-request tok/s at each."""
    workload = perfgate_session.profile.workload
    measure("sweep", workload.levels, lambda c: c * workload.rounds)
    perf_gate("sweep")


def test_request_rate(measure, perf_gate, perfgate_session):
    """Open loop: the profile's request rates in order, each request sent on its
    scheduled time whether or not earlier ones were answered (latency counts from it)."""
    workload = perfgate_session.profile.workload
    if not workload.rates:
        pytest.skip("the profile sets no workload.rates (open-loop request rates)")
    measure("rate", [float(r) for r in workload.rates], lambda _: workload.rate_requests)
    perf_gate("rate")


def test_capacity(measure, perf_gate, perfgate_session):
    """The highest request rate or concurrency at which the target share of requests
    meets the profile's service levels ([capacity], [slo]): one figure, searched again
    on every run and gated like the others."""
    if perfgate_session.profile.capacity is None:
        pytest.skip("the profile sets no [capacity] search")
    measure.capacity("capacity")
    perf_gate("capacity")
