"""Kept run JSON re-renders to the same text: the tables, CSV, Markdown summary, the
verdicts of ``perfgate compare`` (a baseline built from one run, the other judged against
it), the plots' points and the history table, each compared with a file kept next to the
runs (``tests/data/runs/rendered/``).

It holds behaviour still while code moves (issue #29: "the same run JSON re-renders to the
same tables and verdicts before and after"). A change that means to alter an output
regenerates the files (``PERFGATE_REGENERATE_GOLDEN=1 pytest tests/unit/test_rerender_golden.py``)
and the diff shows what changed, in review.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from perfgate import cli
from perfgate.render.history import render_history
from perfgate.render.plots.points import figure_points, tpot_points, ttft_points
from perfgate.results.history import entry_from_run
from perfgate.results.run import load_run
from tests.helpers import ROOT

RUNS = Path("tests/data/runs")  # relative: the outputs name the files as a user typed them
PASSED = RUNS / "llamacpp-gemma3-270m-passed.json.gz"
FAILED = RUNS / "llamacpp-gemma3-270m-failed-slow-server.json.gz"
RENDERED = ROOT / RUNS / "rendered"
REGENERATE = os.environ.get("PERFGATE_REGENERATE_GOLDEN") == "1"


def perfgate(*argv: str | Path) -> str:
    """``perfgate ARGV`` from the project root: exit code and standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([str(a) for a in argv])
    return f"$ perfgate {' '.join(str(a) for a in argv)}\n{out.getvalue()}(exit code {code})\n"


def points_text(path: Path) -> str:
    """The plots' data: each measurement's points per figure (level, run, value)."""
    run = load_run(path)
    lines = []
    for name, measurement in run.measurements.items():
        data = measurement.recomputed()
        for figure in ("agg_tok_s", "per_request_tok_s"):
            lines.append(f"{name} {figure}: {figure_points(data, figure)}")
        lines.append(f"{name} ttft: {ttft_points(data)}")
        lines.append(f"{name} tpot: {tpot_points(data)}")
    return "\n".join(lines) + "\n"


def history_text() -> str:
    entries = [entry_from_run(load_run(p), str(p)) for p in (PASSED, FAILED)]
    return render_history([e for e in entries if e is not None]) + "\n"


OUTPUTS = {
    "passed.report.txt": lambda: perfgate("report", PASSED),
    "failed.report.txt": lambda: perfgate("report", FAILED),
    "passed.csv": lambda: perfgate("report", PASSED, "--csv", "-"),
    "failed.csv": lambda: perfgate("report", FAILED, "--csv", "-"),
    "passed.summary.md": lambda: perfgate("report", PASSED, "--markdown"),
    "failed.summary.md": lambda: perfgate("report", FAILED, "--markdown"),
    "failed.junit.xml": lambda: perfgate("report", FAILED, "--format", "junit"),
    "compare.passed-then-failed.txt": lambda: perfgate("compare", PASSED, FAILED),
    "compare.failed-then-passed.txt": lambda: perfgate("compare", FAILED, PASSED),
    "passed.points.txt": lambda: points_text(PASSED),
    "failed.points.txt": lambda: points_text(FAILED),
    "history.txt": history_text,
}


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_kept_runs_render_as_they_did(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "120")
    text = OUTPUTS[name]()
    path = RENDERED / name
    if REGENERATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: PERFGATE_REGENERATE_GOLDEN=1 writes it"
    expected = path.read_text()
    assert text == expected, f"{name} renders differently from {path} (see the diff)"
