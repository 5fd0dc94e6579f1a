"""The performance suite: single-request speed and the concurrency sweep, gated on baselines/."""

import pytest

pytestmark = pytest.mark.perf


def test_single_request(measure, perf_gate, perfgate_session):
    """Sequential requests at C=1: per-request tok/s and TTFT against the baseline."""
    workload = perfgate_session.profile.workload
    measure("single", [1], lambda c: workload.single_requests)
    perf_gate("single")


def test_concurrency_sweep(measure, perf_gate, perfgate_session):
    """The profile's levels in order: aggregate and per-request tok/s at each."""
    workload = perfgate_session.profile.workload
    measure("sweep", workload.levels, lambda c: c * workload.rounds)
    perf_gate("sweep")
