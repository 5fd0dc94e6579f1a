"""``plots``: the run's PNG plots (throughput, latency, its distribution, the server's
metrics, and against the baseline's recorded run when it failed), next to the run JSON;
matplotlib is an optional extra (``pip install 'perfgate[plots]'``)."""

from __future__ import annotations

from pathlib import Path

from perfgate.render.formats import Context, Format, register
from perfgate.render.plots.charts import render_run_plots
from perfgate.render.plots.common import load_baseline_run, run_failed, run_stem
from perfgate.results.run import RunRecord


def write_plots(run: RunRecord, run_path: Path, context: Context) -> list[Path]:
    """:func:`~perfgate.render.plots.charts.render_run_plots` next to ``run_path``; a
    failed run is also drawn against its baseline's recorded run, found under the
    project's root."""
    baseline_run = None
    if run_failed(run) and context.root is not None:
        baseline_run = load_baseline_run(run, context.root)
    return render_run_plots(run, run_path.parent, run_stem(run_path), baseline_run=baseline_run)


register(
    Format(
        "plots",
        "PNG plots next to the run JSON (pip install 'perfgate[plots]')",
        files=write_plots,
        nothing="they draw levels of concurrency, and this run measured none (request rates "
        "and capacity searches are in the tables)",
    )
)
