"""Baseline files, the compare step, and verdicts with noise."""

import json

import pytest

from perfgate.baseline import (
    Expectation,
    baseline_path,
    build_baseline,
    compare,
    diff_lines,
    load_baseline,
    load_profile_baselines,
    save_baseline,
)
from perfgate.errors import BaselineError


def test_seed_example_73_5_within_10_percent():
    exp = Expectation(value=73.5, tolerance=0.10, direction="higher", unit="tok/s")
    assert compare("single.c1.per_request_tok_s", [70.0], exp).verdict == "pass"
    regressed = compare("single.c1.per_request_tok_s", [17.5, 17.7, 17.9], exp)
    assert regressed.verdict == "regressed" and regressed.failed
    msg = regressed.message()
    for part in (
        "single.c1.per_request_tok_s",
        "measured 17.7",
        "95% CI 17.5..17.9",
        "n=3",
        "baseline 73.5",
        "tolerance 10%",
        "min 66.15",
        "-75.9%",
        "REGRESSED",
    ):
        assert part in msg, msg


def test_interval_straddling_the_limit_is_inconclusive_not_regressed():
    exp = Expectation(value=100.0, tolerance=0.10, direction="higher")
    check = compare("k.c1.agg_tok_s", [80.0, 88.0, 95.0, 99.0, 85.0], exp)
    assert check.low < 90.0 < check.high
    assert check.verdict == "inconclusive" and check.failed
    assert "INCONCLUSIVE" in check.message()


def test_clearly_better_is_improved_and_passes():
    exp = Expectation(value=100.0, tolerance=0.10, direction="higher")
    check = compare("k.c1.agg_tok_s", [130.0, 131.0, 129.0], exp)
    assert check.verdict == "improved" and not check.failed


def test_lower_is_better():
    exp = Expectation(value=0.2, tolerance=0.5, direction="lower", unit="s")
    assert compare("k.c1.ttft_s", [0.29], exp).verdict == "pass"
    assert compare("k.c1.ttft_s", [0.31], exp).verdict == "regressed"
    assert compare("k.c1.ttft_s", [0.05], exp).verdict == "improved"


def test_absolute_floor_and_ceiling_tighten_the_limit():
    floor = Expectation(value=100.0, tolerance=0.5, direction="higher", floor=80.0)
    assert compare("k.c1.agg_tok_s", [79.0], floor).verdict == "regressed"
    assert compare("k.c1.agg_tok_s", [81.0], floor).verdict == "pass"
    ceiling = Expectation(value=1.0, tolerance=1.0, direction="lower", ceiling=1.5)
    assert compare("k.c1.ttft_s", [1.6], ceiling).verdict == "regressed"


def test_missing_figure_is_not_a_failure():
    check = compare("sweep.c8.agg_tok_s", [10.0], None)
    assert check.verdict == "no-baseline" and not check.failed


def test_load_missing_returns_none(tmp_path):
    assert load_baseline(tmp_path / "none.json") is None


GOOD = {
    "schema_version": 1,
    "profile": "p",
    "hardware": "h",
    "metrics": {"sweep.c1.agg_tok_s": {"value": 1, "tolerance": 0.1, "direction": "higher"}},
}


def variant(**changes):
    data = json.loads(json.dumps(GOOD))
    metric = data["metrics"]["sweep.c1.agg_tok_s"]
    for key, value in changes.items():
        if key in metric:
            metric[key] = value
        elif key == "metric_key":
            data["metrics"] = {value: metric}
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        (variant(schema_version=2), "schema_version"),
        (variant(tolerance=-0.1), "metrics.sweep.c1.agg_tok_s.tolerance"),
        (variant(direction="up"), "metrics.sweep.c1.agg_tok_s.direction"),
        (variant(metric_key="sweep.c1.goodput"), "unknown metric 'sweep.c1.goodput'"),
        (variant(extra_field=1), "extra_field"),
    ],
)
def test_bad_baseline_names_file_and_field(tmp_path, content, needle):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_profile_baselines_by_hardware_and_path_consistency(tmp_path):
    path = baseline_path(tmp_path, "p", "h")
    path.parent.mkdir()
    path.write_text(json.dumps(GOOD))
    (path.parent / "h.run.json").write_text("{}")  # the kept run JSON is not a baseline
    assert list(load_profile_baselines(tmp_path, "p")) == ["h"]
    (path.parent / "other.json").write_text(json.dumps(GOOD))
    with pytest.raises(BaselineError, match="its path says 'p' on 'other'"):
        load_profile_baselines(tmp_path, "p")


def test_build_uses_medians_keeps_tolerances_and_roundtrips(tmp_path):
    first = build_baseline(
        "p", "h", {"sweep.c1.agg_tok_s": [40.0, 50.0, 70.0]}, None, {"git_commit": "x"}
    )
    assert first.metrics["sweep.c1.agg_tok_s"].value == 50.0
    assert first.metrics["sweep.c1.agg_tok_s"].tolerance == 0.35
    first.metrics["sweep.c1.agg_tok_s"].tolerance = 0.2
    second = build_baseline("p", "h", {"sweep.c1.agg_tok_s": [60.0]}, first, {})
    assert second.metrics["sweep.c1.agg_tok_s"].tolerance == 0.2
    assert diff_lines(first, second) == ["  sweep.c1.agg_tok_s: 50 → 60 tok/s (+20.0%)"]
    third = build_baseline("p", "h", {"sweep.c1.agg_tok_s": [60.0]}, second, {}, tolerance=0.1)
    assert diff_lines(second, third) == [
        "  sweep.c1.agg_tok_s: 60 → 60 tok/s (+0.0%, tolerance 20% → 10%)"
    ]
    path = tmp_path / "b" / "p.json"
    save_baseline(path, second)
    assert load_baseline(path) == second
    assert json.loads(path.read_text())["schema_version"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temp file left
