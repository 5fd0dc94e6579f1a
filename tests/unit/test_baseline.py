"""Baseline files, the compare step, and verdicts with noise."""

import json

import pytest

from perfgate.errors import BaselineError
from perfgate.gate.baseline import (
    Expectation,
    baseline_path,
    load_baseline,
    load_profile_baselines,
    save_baseline,
)
from perfgate.gate.recording import build_baseline, diff_lines
from perfgate.gate.verdict import compare
from perfgate.stats.decide import Rule

RULE = Rule(min_runs=3, max_runs=3, figures=1)


def judge(key, runs, exp):
    return compare(key, runs, exp, RULE)[0]


def test_seed_example_73_5_within_10_percent_message():
    exp = Expectation(value=73.5, tolerance=0.10, direction="higher", unit="tok/s")
    assert judge("single.c1.per_request_tok_s", [70.0, 71.0, 69.0], exp).verdict == "pass"
    regressed = judge("single.c1.per_request_tok_s", [17.5, 17.7, 17.9], exp)
    assert regressed.verdict == "regressed" and regressed.failed
    msg = regressed.message()
    # a t interval of the log median from the runs' own spread (no recorded noise)
    for part in ("measured 17.7 tok/s", "95% CI", "n=3", "baseline 73.5", "tolerance 10.0%",
                 "min 66.15", "-75.9%", "REGRESSED"):  # fmt: skip
        assert part in msg, msg


def test_absolute_floor_and_ceiling_tighten_the_limit():
    floor = Expectation(value=100.0, tolerance=0.5, direction="higher", floor=80.0)
    assert judge("k.c1.agg_tok_s", [79.0, 78.5, 79.5], floor).verdict == "regressed"
    assert judge("k.c1.agg_tok_s", [81.0, 81.5, 80.5], floor).verdict == "pass"
    ceiling = Expectation(value=1.0, tolerance=1.0, direction="lower", ceiling=1.5)
    assert judge("k.c1.ttft_s", [1.6, 1.61, 1.62], ceiling).verdict == "regressed"


def test_a_figure_without_baseline_is_listed_not_failed():
    check = judge("sweep.c8.agg_tok_s", [10.0], None)
    assert check.verdict == "no-baseline" and not check.failed


def test_an_old_schema_baseline_still_loads_with_hand_set_tolerances(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(GOOD))
    exp = load_baseline(path).metrics["sweep.c1.agg_tok_s"]
    assert exp.tolerance_source == "manual" and exp.runs is None and exp.noise is None


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
        elif key == "metrics":
            data["metrics"] = value
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        (variant(schema_version=3), "schema_version"),
        (variant(metric_key="sweep.c1.agg_tok_s", metrics={}), "at least one figure"),
        (variant(tolerance=-0.1), "metrics.sweep.c1.agg_tok_s.tolerance"),
        (variant(direction="up"), "metrics.sweep.c1.agg_tok_s.direction"),
        (variant(metric_key="sweep.c1.goodput"), "unknown figure 'sweep.c1.goodput'"),
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


def test_build_derives_tolerances_keeps_hand_set_ones_and_roundtrips(tmp_path):
    key = "sweep.c1.agg_tok_s"
    first = build_baseline("p", "h", {key: [40.0, 50.0, 70.0]}, None, {"git_commit": "x"}, Rule())
    exp = first.baseline.metrics[key]
    assert exp.value == 50.0 and exp.runs == 3 and exp.tolerance_source == "derived"
    assert exp.noise_sigma == pytest.approx(0.28171, abs=1e-4)  # statistics.stdev of ln(40, 50, 70)
    hand = first.baseline.model_copy(deep=True)
    hand.metrics[key].tolerance, hand.metrics[key].tolerance_source = 0.2, "manual"
    second = build_baseline("p", "h", {key: [60.0, 61.0, 59.0]}, hand, {}, Rule())
    assert second.baseline.metrics[key].tolerance == 0.2
    assert diff_lines(hand, second) == [
        "  changed sweep.c1.agg_tok_s: 50 → 60 tok/s (+20.0%; ±20.0% manual; "
        "catches a 21% drop at 95%; noise supports ±5%)"
    ]
    with pytest.raises(BaselineError, match="at least 3 repeats"):
        build_baseline("p", "h", {key: [60.0]}, None, {}, Rule())
    path = tmp_path / "b" / "p.json"
    save_baseline(path, second.baseline)
    assert load_baseline(path) == second.baseline
    assert json.loads(path.read_text())["schema_version"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temp file left


def test_a_figure_at_0_in_a_run_is_left_out_and_does_not_widen_the_others():
    """A level where no request met the service level in some run (slo_met and goodput 0)
    cannot be judged on the gate's log scale: it is left out of the baseline, said so,
    and the kind's noise comes from the other levels. (It once made every slo_met and
    goodput tolerance 100%: never failing. All runs at 0 crashed on validation.)"""
    values = {
        "sweep.c1.slo_met": [1.0, 0.96, 1.0],
        "sweep.c2.slo_met": [0.92, 0.96, 0.94],
        "sweep.c4.slo_met": [0.5, 0.0, 0.25],
        "sweep.c8.slo_met": [0.0, 0.0, 0.0],
        "sweep.c1.goodput_tok_s": [20.0, 19.0, 20.5],
        "sweep.c4.goodput_tok_s": [10.0, 0.0, 5.0],
    }
    recorded = build_baseline("p", "h", values, None, {}, Rule())
    metrics = recorded.baseline.metrics
    assert set(metrics) == {"sweep.c1.slo_met", "sweep.c2.slo_met", "sweep.c1.goodput_tok_s"}
    assert recorded.left_out == {
        k: values[k] for k in ("sweep.c4.slo_met", "sweep.c8.slo_met", "sweep.c4.goodput_tok_s")
    }
    assert all(exp.tolerance < 0.5 for exp in metrics.values()), metrics  # was 100%
    lines = diff_lines(None, recorded)
    assert "  left out sweep.c8.slo_met: runs 0, 0, 0 (0 in a run: not judged)" in lines
    assert "  left out sweep.c4.goodput_tok_s: runs 10, 0, 5 (0 in a run: not judged)" in lines
    sound = {**values, "sweep.c4.slo_met": [0.5, 0.45, 0.55], "sweep.c8.slo_met": [0.2] * 3}
    before = build_baseline("p", "h", sound, None, {}, Rule()).baseline
    again = build_baseline("p", "h", values, before, {}, Rule())
    assert again.kept == []  # measured, not kept from the old baseline
    assert "sweep.c4.slo_met" not in again.baseline.metrics
    changes = diff_lines(before, again)
    assert "  left out sweep.c4.slo_met: runs 0.5, 0, 0.25 (0 in a run: not judged)" in changes
    assert not any("removed sweep.c4.slo_met" in line for line in changes)


def test_runs_too_spread_to_gate_refuse_the_recording_saying_what_to_do():
    """A contended host's three recording runs of a TTFT (0.2 s, 4.3 s, 0.3 s: one stalled
    for seconds) would derive a tolerance past 1000%, which gates nothing: recording refuses
    with the figure and its runs, instead of crashing on the baseline's own validation."""
    values = {"sweep.c4.ttft_s": [0.2, 4.3, 0.3], "sweep.c4.agg_tok_s": [90.0, 88.0, 91.0]}
    with pytest.raises(BaselineError) as err:
        build_baseline("p", "h", values, None, {}, Rule())
    message = str(err.value)
    assert message.startswith("sweep.c4.ttft_s: its runs (0.2, 4.3, 0.3)")
    assert "too spread to gate" in message and "--perf-repeats" in message
    # a hand-set tolerance records them
    assert build_baseline("p", "h", values, None, {}, Rule(), tolerance=0.5).baseline.metrics
