"""The compare step and the baseline file's validation."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.baseline import (
    Expectation,
    build_baseline,
    compare,
    diff_lines,
    load_baseline,
    save_baseline,
)
from perfgate.errors import BaselineError


def test_seed_example_73_5_within_10_percent():
    exp = Expectation(value=73.5, tolerance=0.10, direction="higher", unit="tok/s")
    assert compare("single.c1.per_request_tok_s", 70.0, exp).verdict == "pass"
    regressed = compare("single.c1.per_request_tok_s", 17.7, exp)
    assert regressed.failed
    msg = regressed.message()
    for part in ("single.c1.per_request_tok_s", "17.7", "73.5", "10%", "-75.9%", "REGRESSED"):
        assert part in msg


def test_lower_is_better():
    exp = Expectation(value=0.2, tolerance=0.5, direction="lower", unit="s")
    assert compare("k.ttft_s", 0.29, exp).verdict == "pass"
    assert compare("k.ttft_s", 0.31, exp).verdict == "regressed"
    assert compare("k.ttft_s", 0.05, exp).verdict == "improved"


def test_missing_figure_is_not_a_failure():
    check = compare("sweep.c8.agg_tok_s", 10.0, None)
    assert check.verdict == "no-baseline" and not check.failed


@given(
    st.floats(0.1, 1e4),
    st.floats(0.0, 0.9),
    st.floats(0.0, 2e4),
    st.floats(0.0, 2e4),
    st.sampled_from(["higher", "lower"]),
)
def test_worse_never_passes_where_better_failed(value, tol, a, b, direction):
    exp = Expectation(value=value, tolerance=tol, direction=direction)
    better, worse = (max(a, b), min(a, b)) if direction == "higher" else (min(a, b), max(a, b))
    if compare("k", better, exp).failed:
        assert compare("k", worse, exp).failed


def test_load_missing_returns_none(tmp_path):
    assert load_baseline(tmp_path / "none.json") is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema_version": 2, "profile": "p", "hardware": "h", "metrics": {}}', "schema_version"),
        (
            '{"schema_version": 1, "profile": "p", "hardware": "h", "metrics": {"k": '
            '{"value": 1, "tolerance": -0.1, "direction": "higher"}}}',
            "metrics.k.tolerance",
        ),
        (
            '{"schema_version": 1, "profile": "p", "hardware": "h", "metrics": {"k": '
            '{"value": 1, "tolerance": 0.1, "direction": "up"}}}',
            "metrics.k.direction",
        ),
    ],
)
def test_bad_baseline_names_file_and_field(tmp_path, content, needle):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_build_keeps_tolerances_and_roundtrips(tmp_path):
    first = build_baseline("p", "cpu", {"sweep.c1.agg_tok_s": 50.0}, None, {"git_commit": "x"})
    assert first.metrics["sweep.c1.agg_tok_s"].tolerance == 0.35
    first.metrics["sweep.c1.agg_tok_s"].tolerance = 0.2
    second = build_baseline("p", "cpu", {"sweep.c1.agg_tok_s": 60.0}, first, {})
    assert second.metrics["sweep.c1.agg_tok_s"].tolerance == 0.2
    assert diff_lines(first, second) == ["  sweep.c1.agg_tok_s: 50 → 60 tok/s (+20.0%)"]
    path = tmp_path / "b" / "p.json"
    save_baseline(path, second)
    assert load_baseline(path) == second
    assert json.loads(path.read_text())["schema_version"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temp file left
