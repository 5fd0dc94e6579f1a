"""Metrics are pure functions of the records; definitions checked on exact inputs."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.client import RequestRecord
from perfgate.load.level import LevelRun
from perfgate.measure.metrics import distribution, level_metrics, percentile


def record(index, start, token_times, end, completion=None, error=None, prompt=10):
    return RequestRecord(
        index=index,
        start=start,
        end=end,
        token_times=list(token_times),
        completion_tokens=completion,
        prompt_tokens=prompt,
        finish_reason=None if error else "length",
        error=error,
    )


def test_level_metrics_definitions():
    records = [
        record(0, 0.0, [0.5, 1.0, 1.5, 2.0], 2.0, completion=4),
        record(1, 1.0, [1.2, 1.4, 1.6], 3.0, completion=3),
        record(2, 1.0, [], 1.1, error="HTTP 500: boom"),
    ]
    m = level_metrics(LevelRun(concurrency=2, records=records, start=0.0, end=3.0))
    assert (m.ok, m.fail, m.output_tokens) == (2, 1, 7)
    assert m.wall_s == 3.0
    assert m.agg_tok_s == pytest.approx(7 / 3.0)
    assert m.per_request_tok_s.mean == pytest.approx((4 / 2.0 + 3 / 2.0) / 2)
    assert m.ttft_s.mean == pytest.approx((0.5 + 0.2) / 2)
    assert m.tpot_s.mean == pytest.approx(((2.0 - 0.5) / 3 + (2.0 - 0.2) / 2) / 2)
    assert m.itl_s.n == 5 and m.itl_s.mean == pytest.approx((0.5 * 3 + 0.2 * 2) / 5)
    assert m.errors == ["HTTP 500: boom"]
    assert m.usage_chunk_mismatches == 0
    assert m.input_tokens_mean == 10


def test_usage_is_preferred_and_mismatch_is_reported():
    # an engine that packs two tokens per chunk: usage says 4, chunks say 2
    r = record(0, 0.0, [0.5, 1.0], 1.0, completion=4)
    m = level_metrics(LevelRun(concurrency=1, records=[r], start=0.0, end=1.0))
    assert m.output_tokens == 4
    assert m.usage_chunk_mismatches == 1
    assert m.chunks == 2 and m.tokens_per_chunk == 2.0


def test_tokens_per_chunk_counts_only_requests_with_usage():
    one_per_chunk = record(0, 0.0, [0.5, 1.0], 1.0, completion=2)
    no_usage = record(1, 0.0, [0.5, 1.0, 1.5], 2.0, completion=None)
    m = level_metrics(LevelRun(concurrency=2, records=[one_per_chunk, no_usage], start=0, end=2))
    assert m.tokens_per_chunk == 1.0 and m.chunks == 5


def test_no_usage_falls_back_to_chunks():
    r = record(0, 0.0, [0.5, 1.0, 1.5], 2.0, completion=None)
    m = level_metrics(LevelRun(concurrency=1, records=[r], start=0.0, end=2.0))
    assert m.output_tokens == 3


def test_all_failed_level_has_zero_throughput_and_empty_distributions():
    r = record(0, 0.0, [], 0.1, error="ConnectError")
    m = level_metrics(LevelRun(concurrency=1, records=[r], start=0.0, end=0.0))
    assert m.agg_tok_s == 0.0 and m.ttft_s.n == 0 and m.ttft_s.mean is None


def test_percentile_matches_linear_interpolation():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_distribution_is_ordered(samples):
    d = distribution(samples)
    assert min(samples) <= d.p50 <= d.p99 <= max(samples)
    assert min(samples) - 1e-6 <= d.mean <= max(samples) + 1e-6
