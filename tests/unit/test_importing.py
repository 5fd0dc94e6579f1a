"""`perfgate import`: peers' result files as perfgate runs. AIPerf's format here comes from
its documentation (tests/data/peers/README.md says so); vLLM's from real `vllm bench
serve` files (captured by the vLLM engine test, which also checks the import against
vLLM's own summary and perfgate's own run of the same server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.errors import PerfgateError
from perfgate.importing import imported_run, read_file
from perfgate.results.run import load_run

PEERS = Path(__file__).resolve().parents[1] / "data" / "peers"
AIPERF = PEERS / "aiperf_profile_export.from-docs.jsonl"


def test_an_aiperf_export_becomes_records_with_its_own_timings():
    level = read_file(AIPERF)
    ok = [r for r in level.run.records if r.ok]
    failed = [r for r in level.run.records if not r.ok]
    assert len(ok) == 2 and len(failed) == 1
    assert "cancelled" in (failed[0].error or "")
    first = ok[0]
    assert first.ttft == pytest.approx(0.255886568, abs=1e-9)
    assert first.output_tokens == 9 and first.prompt_tokens == 550
    assert len(first.token_times) == 9  # the first token, then each chunk's gap
    # AIPerf's own request_latency (297.5 ms), which its first token and gaps add up to
    assert first.latency == pytest.approx(0.297525228, abs=1e-6)
    assert first.token_times[-1] == pytest.approx(first.start + 0.255886568 + 0.04163856)
    # the record with only the mean gap: spread evenly to its end
    second = ok[1]
    gaps = [b - a for a, b in zip(second.token_times, second.token_times[1:], strict=False)]
    assert max(gaps) - min(gaps) < 1e-9 and second.token_times[-1] == pytest.approx(second.end)
    assert level.run.concurrency == 2  # the most requests in flight at once


def test_files_at_one_level_are_its_runs_and_compare_reads_them(tmp_path, capsys):
    out = tmp_path / "aiperf.json"
    assert main(["import", str(AIPERF), str(AIPERF), "--out", str(out), "--name", "x"]) == 0
    run = load_run(out)
    sweep = run.measurements["sweep"]
    assert [(lv.concurrency, lv.repeat) for lv in sweep.levels] == [(2, 0), (2, 1)]
    assert sweep.levels[0].metrics.ok == 2 and sweep.levels[0].metrics.fail == 1
    assert run.status == "imported" and "2 request(s) failed" in " ".join(run.notes)
    # the same run twice: no regression, every figure judged
    assert main(["compare", str(out), str(out)]) == 0
    assert "no regression" in capsys.readouterr().out


def test_a_file_of_neither_kind_is_refused_with_what_to_pass(tmp_path):
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"hello": 1}))
    with pytest.raises(PerfgateError, match="pass --format vllm or --format aiperf"):
        imported_run([odd], "x")
    summary_only = tmp_path / "summary.json"
    summary_only.write_text(json.dumps({"num_prompts": 4, "duration": 1.0}))
    with pytest.raises(PerfgateError, match="--save-detailed"):
        imported_run([summary_only], "x")


@pytest.mark.parametrize("name", ["vllm_bench_c1.json", "vllm_bench_c2.json"])
def test_an_imported_vllm_bench_file_gives_vllms_own_figures(name):
    """Real files: perfgate's figures from the imported requests equal vLLM's summary of
    the same requests (its medians and means; its throughput counts from before the
    first request was sent, so perfgate's window is that much shorter)."""
    path = PEERS / name
    vllm = json.loads(path.read_text())
    run = imported_run([path], "v")
    (level,) = run.measurements["sweep"].levels
    m = level.metrics
    assert level.concurrency == vllm["max_concurrency"]
    assert m.ok == vllm["completed"] and m.fail == vllm["failed"] == 0
    assert m.output_tokens == vllm["total_output_tokens"]
    assert m.ttft_s.p50 == pytest.approx(vllm["median_ttft_ms"] / 1e3, abs=1e-6)
    assert m.ttft_s.mean == pytest.approx(vllm["mean_ttft_ms"] / 1e3, abs=1e-6)
    assert m.tpot_s.mean == pytest.approx(vllm["mean_tpot_ms"] / 1e3, abs=1e-6)
    assert m.latency_s.mean == pytest.approx(sum(vllm["latencies"]) / m.ok, abs=1e-6)
    assert m.wall_s <= vllm["duration"] and m.wall_s == pytest.approx(vllm["duration"], rel=0.01)
    assert m.agg_tok_s == pytest.approx(vllm["output_throughput"], rel=0.01)
