"""The Markdown summary of real runs of the default profile (tests/data/runs/README.md)."""

from __future__ import annotations

import pytest

from perfgate.render.markdown import markdown_summary
from perfgate.results.run import load_run
from tests.helpers import ROOT

RUNS = ROOT / "tests" / "data" / "runs"
PASSED = RUNS / "llamacpp-gemma3-270m-passed.json.gz"
FAILED = RUNS / "llamacpp-gemma3-270m-failed-slow-server.json.gz"


def test_summary_of_a_real_passing_run_fits_on_one_screen():
    run = load_run(PASSED)
    text = markdown_summary(run, run_json="runs/x.json", files=["runs/x.throughput.png"])
    lines = text.splitlines()
    assert lines[0] == (
        "### ✅ perfgate `llamacpp-gemma3-270m`: passed: all 12 figures within tolerance"
    )
    # provenance: engine version, hardware, the gating baseline, the git commit
    assert run.engine_version in lines[2] and "`cpu-2x-amd-epyc-avx512`" in lines[2]
    assert "exact baseline `baselines/llamacpp-gemma3-270m/cpu-2x-amd-epyc-avx512.json`" in text
    assert f"commit `{run.git_commit[:12]}`" in lines[2]
    assert "Failed figures" not in text and "Likely causes" not in text
    # one row per level, each figure with its value, Δ and mark
    assert "| 4 | 96.62 tok/s (+18.5%) ✅ | 24.17 tok/s (+19.0%) ✅ | 0.653 s (-17.1%) ✅ |" in text
    # every figure, folded: baseline, measured, interval, limit, Δ, verdict
    assert "<details><summary>Every figure (14)</summary>" in text
    assert (
        "| `sweep.c4.agg_tok_s` | 81.55 tok/s | 96.62 tok/s | 95% CI 91.04..102.6, n=3 | "
        "65.24 tok/s | +18.5% | ✅ pass |" in text
    )
    assert "harness's timing error passed 2 ms" in text  # the run's warning
    assert "**Files**: `runs/x.json`, `runs/x.throughput.png`" in text
    visible = text.split("<details>")[0] + text.split("</details>")[-1]
    assert len(visible.splitlines()) <= 30  # one screen; the full table is folded


def test_summary_of_a_real_failing_run_shows_failures_causes_and_fact_diff_first():
    run = load_run(FAILED)
    text = markdown_summary(run, run_json="runs/y.json", artifact_url="https://ci/artifact/1")
    assert text.startswith(
        "### ❌ perfgate `llamacpp-gemma3-270m`: failed: 12 regressed of 14 figures"
    )
    failed = text.index("**Failed figures**")
    assert failed < text.index("<details><summary>Every figure")  # failures come first
    assert "| figure | baseline | measured | interval | limit | Δ | verdict | why |" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `sweep.c4.agg_tok_s`"))
    c4 = next(c for c in run.checks if c.key == "sweep.c4.agg_tok_s")
    assert f"{c4.measured:.4g} tok/s" in row and f"{c4.delta_pct:+.1f}%" in row
    assert "❌ regressed" in row and "past the limit" in row
    assert "**Likely causes**, most likely first:\n\n1. threads 1 (baseline 2)" in text
    assert "2. parallel slots 1 (baseline 4)" in text
    assert "- `threads: 2 → 1`" in text and "- `slots: 4 → 1`" in text
    assert "n_threads = 1" in text  # the server's own log line, folded
    assert "([download](https://ci/artifact/1))" in text


def test_interrupted_and_unjudged_runs_say_so():
    run = load_run(PASSED).model_copy(update={"status": "interrupted"})
    assert markdown_summary(run).startswith("### ⚠️ perfgate `llamacpp-gemma3-270m`: interrupted")
    bare = load_run(PASSED).model_copy(update={"checks": []})
    text = markdown_summary(bare)
    assert text.startswith("### ✅ perfgate `llamacpp-gemma3-270m`: passed (no figure gated)")
    assert "Every figure" not in text


def test_report_cli_exports_csv_and_markdown_from_the_run_json(tmp_path, capsys):
    import csv

    from perfgate.cli import main

    assert main(["report", str(PASSED), f"--csv={tmp_path / 't.csv'}"]) == 0
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["measurement"], r["concurrency"]) for r in rows] == [
        ("single", "1"),
        ("sweep", "1"),
        ("sweep", "2"),
        ("sweep", "4"),
    ]
    c4 = rows[-1]
    check = next(c for c in load_run(PASSED).checks if c.key == "sweep.c4.agg_tok_s")
    # the table's figure (median of runs, recomputed from the raw records) = the gate's
    assert float(c4["agg_tok_s"]) == pytest.approx(check.measured, rel=1e-9)
    assert float(c4["baseline_agg_tok_s"]) == check.baseline
    assert float(c4["delta_pct_agg_tok_s"]) == pytest.approx(check.delta_pct, rel=1e-9)
    assert c4["runs"] == "3" and c4["fail"] == "0"
    capsys.readouterr()
    assert main(["report", str(FAILED), "--markdown", "--artifact-url=https://x/1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### ❌ perfgate `llamacpp-gemma3-270m`: failed") and "https://x/1" in out


def test_acceptance_reads_as_a_percentage():
    run = load_run(ROOT / "baselines/llamacpp-gemma3-270m-spec/cpu-2x-amd-epyc-avx512.run.json.gz")
    rate = next(c for c in run.checks if c.key == "single.c1.accept_rate")
    text = markdown_summary(run)
    assert f"| `single.c1.accept_rate` | - | {rate.measured:.1%} |" in text


def test_facts_not_known_for_the_run_are_listed_once_and_not_as_differences():
    run = load_run(FAILED)
    why = run.diagnosis.model_copy(update={"unknown": ["threads", "threads_batch"]})
    text = markdown_summary(run.model_copy(update={"diagnosis": why}))
    assert (
        text.count("Facts not known for this run (not reported): `threads`, `threads_batch`") == 1
    )


def test_a_run_gated_by_floors_only_says_so_and_how_much_slower_would_pass():
    """Issue 27: the real passing run judged against the default profile's
    hardware-independent floors (any.json) passes, and so would the same server 70%
    slower; neither says ✅ or "within tolerance", and each says how much slower its server
    could be unseen."""
    from perfgate.gate.baseline import load_baseline
    from perfgate.gate.policy import GatePolicy
    from perfgate.render.markdown import floors_only_line
    from perfgate.results.run import BaselineRef

    floors = load_baseline(ROOT / "baselines" / "llamacpp-gemma3-270m" / "any.json")
    assert floors is not None
    run = load_run(PASSED)
    planned = {name: sorted({lv.concurrency for lv in m.levels})
               for name, m in run.measurements.items()}  # fmt: skip
    healthy = GatePolicy().judge(run.measurements, floors, planned).checks
    assert healthy and not any(c.failed for c in healthy), healthy
    slower = {"higher": 0.3, "lower": 1 / 0.3}  # 70% slower; batching (scaling) unchanged
    slowed = [
        c.model_copy(update={"measured": c.measured * slower[c.direction]})
        if c.unit != "x" and c.measured is not None else c
        for c in healthy
    ]  # fmt: skip
    run.baseline = BaselineRef(
        hardware_key="cpu-2x-amd-epyc-avx512", tier="any", path="any.json", scope="floors"
    )
    run.notes = ["no exact baseline for hardware key 'x': gated by ... Record: CMD"]
    headlines, lines = [], []
    for checks in (healthy, slowed):
        run.checks = checks
        text = markdown_summary(run)
        headlines.append(text.splitlines()[0])
        assert "> no exact baseline for hardware key 'x'" in text  # with the record command
        lines.append(floors_only_line(len(checks), checks, "CMD"))
    for headline, line in zip(headlines, lines, strict=True):
        assert headline.startswith("### ⚠️ perfgate `llamacpp-gemma3-270m`: passed against floors")
        assert "within tolerance" not in headline and "✅" not in headline
        assert "floors only" in line and line.endswith("Record an exact baseline with: CMD")
    unseen = [float(h.split("up to ")[1].split("x")[0]) for h in headlines]
    assert unseen[0] > 3.3 * unseen[1] * 0.95 and unseen[1] > 1.0, headlines
    assert f"up to {unseen[0]:.1f}x slower would still pass" in lines[0]
