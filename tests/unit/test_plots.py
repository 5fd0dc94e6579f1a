"""PNG plots of real runs: every recorded baseline run, the gated runs kept under
tests/data/runs/, and a real run judged by perfgate's own gate against another engine's
baseline (it fails: the engine switch of DESIGN.md's story)."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from perfgate.cli import main
from perfgate.gate.baseline import load_baseline
from perfgate.gate.policy import GatePolicy
from perfgate.gate.verdict import Check
from perfgate.render.plots.charts import not_by_concurrency, render_run_plots
from perfgate.render.plots.common import (
    INSTALL_HINT,
    PlotsUnavailable,
    concurrency_scale,
    load_baseline_run,
    require_matplotlib,
    run_failed,
    run_stem,
)
from perfgate.render.plots.draw import concurrency_axis
from perfgate.results.run import BaselineRef, RunRecord, load_run
from tests.helpers import ROOT

RUNS = sorted((ROOT / "baselines").glob("*/*.run.json.gz")) + sorted(
    p for p in (ROOT / "tests" / "data" / "runs").glob("*.json*") if p.suffix in (".json", ".gz")
)
GEMMA = "baselines/llamacpp-gemma3-270m/cpu-2x-amd-epyc-avx512"  # the default profile's
GEMMA_RUN = ROOT / f"{GEMMA}.run.json.gz"
VLLM_RUN = ROOT / "baselines" / "vllm-cpu-gemma3-270m" / "cpu-2x-amd-epyc-avx512.run.json.gz"
PLOTS = ("throughput", "latency", "distribution")


def judged_against_gemma(path: Path) -> RunRecord:
    """A real run gated by perfgate's own policy against the default profile's exact
    baseline, with the baseline's kept run named as a gated run names it."""
    run = load_run(path)
    baseline = load_baseline(ROOT / f"{GEMMA}.json")
    planned = {name: sorted(m.by_concurrency()) for name, m in run.measurements.items()}
    checks = GatePolicy().judge(run.measurements, baseline, planned).checks
    return run.model_copy(
        update={
            "checks": checks,
            "status": "failed" if any(c.failed for c in checks) else "passed",
            "baseline": BaselineRef(
                hardware_key="cpu-2x-amd-epyc-avx512",
                tier="exact",
                path=f"{GEMMA}.json",
                run_json=f"{GEMMA}.run.json.gz",
            ),
        }
    )


def assert_readable_png(path: Path) -> np.ndarray:
    """A PNG large enough to read, with a plot drawn in it (not just blank axes)."""
    assert path.is_file(), path
    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert width >= 1000 and height >= 600, (path.name, width, height)
    rgb = image[..., :3]
    ink = (rgb < 0.95).any(axis=-1)
    assert ink.mean() > 0.02, f"{path.name}: almost blank"
    codes = (rgb * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    colours = np.unique(codes)
    assert len(colours) > 100, f"{path.name}: only {len(colours)} colours"
    saturated = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.15  # data, not text or grid
    assert saturated.sum() > 500, f"{path.name}: no data drawn"
    # data across the plot, not only in a legend or a corner (the height is free: a flat
    # series may sit at the top of its axes)
    middle = saturated[height // 10 : 9 * height // 10, width // 3 : 2 * width // 3]
    assert middle.sum() > 100, f"{path.name}: no data in the middle third of the image"
    return rgb


def red_in_plot_area(rgb: np.ndarray) -> int:
    """Red pixels (failed-figure marks) between the title and the legend."""
    height = rgb.shape[0]
    band = rgb[int(height * 0.15) : int(height * 0.8)]
    return int(((band[..., 0] > 0.7) & (band[..., 1] < 0.35) & (band[..., 2] < 0.35)).sum())


def test_there_are_real_runs_to_plot():
    assert len(RUNS) >= 6, RUNS


@pytest.mark.parametrize("path", RUNS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_real_run_renders_readable_plots(path, tmp_path):
    run = load_run(path)
    baseline_run = load_baseline_run(run, ROOT) if run_failed(run) else None
    written = render_run_plots(run, tmp_path, run_stem(path), baseline_run=baseline_run)
    names = [*PLOTS, *(["vs-baseline"] if baseline_run else [])]
    assert written == [tmp_path / f"{run_stem(path)}.{name}.png" for name in names]
    images = [assert_readable_png(png) for png in written]
    assert plt.get_fignums() == []  # every figure closed
    if run_failed(run) and run.baseline and run.baseline.run_json:
        assert baseline_run is not None  # the gated runs name the kept run of the baseline
    if any(c.failed for c in run.checks if c.key.endswith(".agg_tok_s")):
        assert red_in_plot_area(images[0]) > 300  # the failed figures are marked


def test_a_failed_run_is_marked_and_drawn_against_its_baseline_run(tmp_path):
    run = judged_against_gemma(VLLM_RUN)
    verdicts = {c.key: c.verdict for c in run.checks}
    assert verdicts["sweep.c1.agg_tok_s"] == "regressed"
    assert verdicts["sweep.c4.agg_tok_s"] == "missing"  # the vLLM profile stops at C=2
    assert verdicts["sweep.c1.ttft_s"] == "improved"
    baseline_run = load_baseline_run(run, ROOT)
    assert baseline_run is not None and baseline_run.engine == "llamacpp"

    written = render_run_plots(run, tmp_path, "failed", baseline_run=baseline_run)
    assert [p.name for p in written] == [
        "failed.throughput.png",
        "failed.latency.png",
        "failed.distribution.png",
        "failed.vs-baseline.png",
    ]
    images = {p.name: assert_readable_png(p) for p in written}
    assert red_in_plot_area(images["failed.throughput.png"]) > 300
    assert red_in_plot_area(images["failed.vs-baseline.png"]) > 300

    passed = render_run_plots(load_run(GEMMA_RUN), tmp_path, "passed")
    assert red_in_plot_area(assert_readable_png(passed[0])) < 50


def test_a_regressed_configuration_renders_with_its_checks(tmp_path):
    # vLLM on CPU, judged against the default llama.cpp profile's baseline: slower at C=1
    run = judged_against_gemma(VLLM_RUN)
    assert run.status == "failed"
    verdicts = {c.key: c.verdict for c in run.checks}
    assert verdicts["sweep.c1.agg_tok_s"] == verdicts["single.c1.agg_tok_s"] == "regressed"
    for png in render_run_plots(run, tmp_path, "vllm", baseline_run=load_baseline_run(run, ROOT)):
        assert_readable_png(png)


def test_the_baseline_run_is_none_when_absent_or_unreadable(tmp_path):
    run = judged_against_gemma(VLLM_RUN)
    assert load_baseline_run(load_run(VLLM_RUN).model_copy(update={"baseline": None}), ROOT) is None
    assert load_baseline_run(run, tmp_path) is None  # not under this root
    ref = run.baseline.model_copy(update={"run_json": None})
    assert load_baseline_run(run.model_copy(update={"baseline": ref}), ROOT) is None
    broken = tmp_path / GEMMA
    broken.parent.mkdir(parents=True)
    broken.with_suffix(".run.json.gz").write_bytes(b"not gzip")
    assert load_baseline_run(run, tmp_path) is None
    assert load_baseline_run(run, ROOT).created_at == load_run(GEMMA_RUN).created_at


def test_cli_plot_writes_next_to_the_run_and_prints_the_paths(tmp_path, capsys, monkeypatch):
    passed = tmp_path / "ok.run.json.gz"
    passed.write_bytes(GEMMA_RUN.read_bytes())
    assert main(["plot", str(passed)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / f"ok.run.{name}.png") for name in PLOTS]
    for png in printed:
        assert_readable_png(Path(png))

    failed = tmp_path / "runs" / "failed.json"
    failed.parent.mkdir()
    judged_against_gemma(VLLM_RUN).write(failed)
    out = tmp_path / "plots"
    assert main(["plot", str(failed), "--out", str(out), "--root", str(ROOT)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / f"failed.{name}.png") for name in (*PLOTS, "vs-baseline")]

    # not found under the default root (the current directory): no vs-baseline, said why
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(failed), "--out", str(tmp_path / "noroot")]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.split()) == 3 and "--baseline-run" in captured.err

    # an explicit baseline run, for any run
    assert main(["plot", str(passed), "--out", str(out), "--baseline-run", str(VLLM_RUN)]) == 0
    assert capsys.readouterr().out.split()[-1] == str(out / "ok.run.vs-baseline.png")


def test_without_matplotlib_the_message_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    with pytest.raises(PlotsUnavailable, match=INSTALL_HINT.replace("[", r"\[")):
        require_matplotlib()
    assert main(["plot", str(GEMMA_RUN), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfgate: ") and "pip install 'perfgate[plots]'" in err
    assert list(tmp_path.iterdir()) == []


def test_concurrency_axis_is_log_over_a_factor_of_ten():
    assert concurrency_scale([1, 2, 4, 8, 16, 32, 64, 100]) == "log"
    assert concurrency_scale(range(1, 101)) == "log"
    assert concurrency_scale([1, 10]) == "log"
    assert concurrency_scale([1, 2, 4]) == "linear"
    assert concurrency_scale([1, 2, 3, 4]) == "linear"
    assert concurrency_scale([8, 64]) == "linear"
    assert concurrency_scale([]) == "linear"


def test_the_concurrency_axis_ticks_are_the_levels():
    levels = [1, 2, 4, 8, 16, 32, 64, 100]
    fig, ax = plt.subplots()
    try:
        concurrency_axis(ax, levels)
        assert ax.get_xscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(c) for c in levels]
        concurrency_axis(ax2 := fig.add_subplot(212), [1, 2, 4])
        assert ax2.get_xscale() == "linear"
    finally:
        plt.close(fig)


def test_run_stem():
    assert run_stem(Path("a/b.run.json.gz")) == "b.run"
    assert run_stem(Path("gate.json")) == "gate"
    assert run_stem(Path("x.txt")) == "x.txt"


def test_only_request_rates_and_capacity_searches_are_left_out_of_the_plots():
    """A chosen ``req_s`` figure (``single.c1.req_s``) must not pass for a request-rate
    level: its measurement is still drawn. Rate levels and capacity keys are left out."""
    run = load_run(GEMMA_RUN)
    chosen = Check(key="single.c1.req_s", verdict="no-baseline", direction="higher", unit="req/s")
    rated = Check(key="rate.r2.5.ttft_s", verdict="missing", direction="lower", unit="s")
    capacity = Check(key="capacity.max_req_s", verdict="missing", direction="higher", unit="")
    run = run.model_copy(update={"checks": [*run.checks, chosen, rated, capacity]})
    assert not_by_concurrency(run) == {"rate", "capacity"}
    assert {"single", "sweep"} <= set(run.measurements)
