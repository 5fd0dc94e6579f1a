"""A figure is defined once: added to the registry, it shows in the terminal table, the
CSV, the verdicts and the Markdown summary with no other change (issue #29)."""

from __future__ import annotations

import csv
import io
import statistics

import pytest

from perfgate.gate.figures import BY_NAME, FIGURES, Figure, register, unregister
from perfgate.gate.policy import GatePolicy
from perfgate.gate.recording import build_baseline
from perfgate.gate.values import run_values
from perfgate.measure.data import LevelData
from perfgate.render.markdown import markdown_summary
from perfgate.render.table import csv_text, render_table
from perfgate.results.run import load_run
from tests.unit.test_rerender_golden import FAILED, PASSED, perfgate


def _run_wall(run: LevelData) -> float | None:
    return run.metrics.wall_s if run.metrics.ok else None


RUN_WALL = Figure(
    "run_wall_s",
    "Run wall(s)",
    "s",
    "lower",
    0.05,
    "no request of the level succeeded",
    _run_wall,
    width=11,
    decimals=2,
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.chdir(FAILED.parents[3])  # the project root: the runs' relative paths
    register(RUN_WALL)
    yield RUN_WALL
    unregister(RUN_WALL.name)
    assert RUN_WALL not in FIGURES and RUN_WALL.name not in BY_NAME


def test_a_registered_figure_is_in_the_table_csv_verdicts_and_markdown(registered):
    passed, failed = load_run(PASSED), load_run(FAILED)
    sweep = failed.measurements["sweep"].recomputed()
    c4_walls = [lv.metrics.wall_s for lv in sweep.levels if lv.level == 4]

    header, _, *rows = render_table("sweep", sweep, None).splitlines()
    assert "| Run wall(s) |" in header
    c4 = next(r for r in rows if r.startswith("   4 |"))
    assert f"| {statistics.median(c4_walls):>11.2f} |" in c4  # the median over its runs

    table = list(csv.DictReader(io.StringIO(csv_text(failed))))
    assert {"run_wall_s", "baseline_run_wall_s", "delta_pct_run_wall_s"} <= set(table[0])

    # verdicts: the passing run recorded as the baseline, the slow server's run judged
    compare = perfgate("compare", PASSED, FAILED)
    line = next(ln for ln in compare.splitlines() if ln.startswith("sweep.c4.run_wall_s"))
    assert "REGRESSED" in line, compare

    old = {n: m.recomputed() for n, m in passed.measurements.items()}
    new = {n: m.recomputed() for n, m in failed.measurements.items()}
    policy = GatePolicy()
    recorded = build_baseline("p", "cpu", run_values(old), None, {}, policy.rule(None))
    assert "sweep.c4.run_wall_s" in recorded.baseline.metrics
    verdicts = policy.judge(
        new, recorded.baseline, {n: sorted(m.by_concurrency()) for n, m in old.items()}
    )
    failed.checks = verdicts.checks
    markdown = markdown_summary(failed)
    assert "| C | Agg tok/s | Per-req tok/s | TTFT(s) | Run wall(s) |" in markdown
    row = next(ln for ln in markdown.splitlines() if ln.startswith("| `sweep.c4.run_wall_s` |"))
    assert "❌ regressed" in row and " s | " in row  # its unit, from its definition


def test_a_figure_name_is_registered_once(registered):
    with pytest.raises(ValueError, match="already registered"):
        register(registered)
