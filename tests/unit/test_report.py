"""The table's format and the run JSON's round trip."""

from perfgate.client import RequestRecord
from perfgate.gate.recording import build_baseline
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData, Measurement
from perfgate.render.table import render_table, table_header
from perfgate.results.run import RunRecord, load_run
from perfgate.stats.decide import Rule


def level(c):
    records = [
        RequestRecord(
            index=i,
            start=0.0,
            end=2.0,
            token_times=[0.5, 1.0, 2.0],
            completion_tokens=3,
            prompt_tokens=8,
            finish_reason="length",
        )
        for i in range(c)
    ]
    return LevelData.from_run(LevelRun(concurrency=c, records=records, start=0.0, end=2.0))


def test_header_is_the_seeds_format():
    assert table_header() == (
        "   C |  Agg tok/s |  Per-req tok/s |  TTFT(s) |   Tokens |  Wall(s) |   Ok | Fail"
    )


def test_table_shows_the_median_of_runs_and_baseline_columns():
    runs = Measurement(levels=[level(1), level(2), level(2)])
    runs.levels[2] = runs.levels[2].model_copy(update={"repeat": 1})
    plain = render_table("sweep", runs, None).splitlines()
    assert plain[0].startswith(table_header()) and plain[0].endswith("| Runs | Lag(ms)")
    assert plain[2].startswith(
        "   1 |       1.50 |           1.50 |    0.500 |        3 |     2.00 |    1 |    0 |    1"
    )
    assert plain[3].startswith("   2 |       3.00 |")  # median of two runs of 3.00
    assert plain[3].endswith("|    4 |    0 |    2 |       -")  # no harness stats here
    base = build_baseline("p", "cpu", {"sweep.c2.agg_tok_s": [2.0, 2.1, 1.9]}, None, {}, Rule())
    runs.not_run = [4]
    with_base = render_table("sweep", runs, base.baseline).splitlines()
    assert "Base Agg tok/s" in with_base[0] and "Δ%" in with_base[0]
    assert "|            2.00 |  +50.0 |" in with_base[3]
    assert with_base[4].startswith("   4 |    not run")


def test_run_json_roundtrip_recomputes_the_same_metrics(tmp_path):
    run = RunRecord(
        perfgate_version="t",
        profile={"name": "p"},
        profile_digest="d",
        engine="llamacpp",
        launcher="process",
        measurements={"sweep": Measurement(levels=[level(2)])},
    )
    path = tmp_path / "run.json"
    run.write(path)
    loaded = load_run(path)
    stored = loaded.measurements["sweep"].levels[0]
    assert stored.records[0].token_times == [0.5, 1.0, 2.0]
    assert stored.recomputed() == stored.metrics


def test_table_marks_a_level_whose_harness_timing_error_is_above_the_bound():
    from tests.synthetic import harness_stats

    quiet, busy = level(1), level(2)
    quiet.harness, busy.harness = harness_stats(0.4), harness_stats(12.3)
    lines = render_table("sweep", Measurement(levels=[quiet, busy]), None).splitlines()
    assert lines[2].endswith("|    0.40")
    assert lines[3].endswith("|  12.30!")


def test_number_arrays_go_on_one_line_but_strings_keep_their_text():
    import json

    from perfgate.results.run import one_line_number_arrays

    data = {"gaps": [1, 20, -3, 1.5e-05], "why": "levels not run: [2, 4]", "nested": [[1, 2]]}
    text = one_line_number_arrays(json.dumps(data, indent=1))
    assert json.loads(text) == data
    assert '"gaps": [1,20,-3,1.5e-05]' in text and '"levels not run: [2, 4]"' in text
