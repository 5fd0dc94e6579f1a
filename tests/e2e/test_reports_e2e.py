"""The reports of real runs, as users get them: `pytest -m perf` on the real llama.cpp
server (the tiny default profile), quiet in `-q`, live in a terminal, with the Markdown
summary, JUnit properties, plots and the history."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from perfgate.cli import main as cli
from tests.helpers import JUDGED_PASSED, ROOT, TINY, profile_toml, run_pytest


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The tiny profile with a baseline recorded here. These gate runs are about the
    reports, not the figures, and this host's runs have strayed from a recording: 1.6x on
    tok/s, and once 2.65x on C=1 TTFT (CI on 9e830ec, prompt eval 6 ms a token instead of
    2.5). So tok/s figures get 90% (10x slower fails) and TTFT figures 400% (5x), and each
    gate run takes the median of 3 runs a level (one stalled run, 12x its recording on a
    contended CI host, decides nothing). The perf suite only: correctness has its own tests."""
    directory = tmp_path_factory.mktemp("reports")
    tiny = profile_toml(TINY, directory, name="tiny")
    baselines = directory / "baselines"
    result = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        f"--override-ini=perfgate_baselines_dir={baselines}",
        "--perf-update-baselines",
        "--perf-tolerance=0.9",
        f"--perf-output={directory / 'recording'}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for path in (baselines / "tiny").glob("*.json"):
        if path.name.endswith(".golden.json"):
            continue
        baseline = json.loads(path.read_text())
        for figure in baseline["metrics"].values():
            if figure["direction"] == "lower":
                figure["tolerance"] = 4.0
        path.write_text(json.dumps(baseline, indent=1))
    return tiny, baselines


def _gate_args(recorded, out):
    tiny, baselines = recorded
    return [
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        f"--override-ini=perfgate_baselines_dir={baselines}",
        f"--perf-output={out}",
        "--perf-repeats=3",
    ]


PROGRESS_LINES = ("perfgate: waiting for", "perfgate: sweep C=", "perfgate: single:")


def test_quiet_run_writes_the_summary_junit_properties_plots_and_history(recorded, tmp_path):
    out, summary, github = tmp_path / "out", tmp_path / "summary.md", tmp_path / "gh.md"
    junit = tmp_path / "junit.xml"
    result = run_pytest(
        "-q",
        *_gate_args(recorded, out),
        f"--perf-summary={summary}",
        f"--junitxml={junit}",
        f"--perf-history={tmp_path / 'history'}",
        env={
            "GITHUB_STEP_SUMMARY": str(github),
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "acme/engine",
            "GITHUB_RUN_ID": "42",
        },
    )
    text = result.stdout + result.stderr
    assert result.returncode == 0, text
    # -q: no progress at all, the summary still there
    assert not [ln for ln in text.splitlines() if ln.startswith(PROGRESS_LINES)], text
    assert "[sweep]" in text and JUDGED_PASSED.search(text), text
    # the Markdown summary, to the option's path and to $GITHUB_STEP_SUMMARY
    markdown = summary.read_text()
    assert markdown.startswith("### ✅ perfgate `tiny`: passed: all ")
    assert "| `sweep.c2.agg_tok_s` |" in markdown and "**Files**: `" in markdown
    assert "([download](https://github.com/acme/engine/actions/runs/42#artifacts))" in markdown
    assert github.read_text() == markdown  # the same summary, appended to both
    # JUnit properties per figure
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["sweep.c2.agg_tok_s.verdict"] == "pass"
    for field in ("measured", "baseline", "limit"):
        assert float(props[f"sweep.c2.agg_tok_s.{field}"]) > 0
    assert props["single.c1.ttft_s.verdict"] == "pass"
    # plots next to the run JSON
    run_json = sorted((out / "runs").glob("*.json"))[-1]
    stem = run_json.name.removesuffix(".json")
    for kind in ("throughput", "latency", "distribution"):
        png = run_json.parent / f"{stem}.{kind}.png"
        assert png.stat().st_size > 10_000, png
        assert png.name in markdown
    # the history: one entry, printed by `perfgate history`
    lines = (tmp_path / "history" / "tiny.jsonl").read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["status"] == "passed" and "sweep.c2.agg_tok_s" in entry["figures"]


def test_in_a_terminal_progress_is_drawn_in_place(recorded, tmp_path):
    """pytest in a pseudo-terminal: the live display redraws one line (carriage returns
    and erase-line codes), and pytest's own output stays intact."""
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *_gate_args(recorded, tmp_path / "out")],
        cwd=ROOT,
        env=env,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 600)
            if not ready:
                break
            try:
                data = os.read(primary, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        process.wait(timeout=600)
        os.close(primary)
    text = b"".join(chunks).decode(errors="replace")
    assert process.returncode == 0, text
    assert "\r\x1b[2Kperfgate: sweep C=2 run 1" in text  # the line erased and redrawn
    assert "requests" in text and "elapsed" in text  # the display's status
    assert "perfgate: sweep C=2:" in text  # each level's result line stays
    assert JUDGED_PASSED.search(text), text
    assert "passed" in text.splitlines()[-1]


def test_a_slow_creep_fails_on_the_nth_run_in_a_row_and_not_before(recorded, tmp_path, capsys):
    """A real creep: the baseline's tok/s figures three times what this server did when
    they were recorded (as if it had lost two thirds since, a little at a time), with a
    95% tolerance and early abort off, so every single run passes. With
    ``gate.creep_runs = 3`` the third run in a row fails as CREEP, and the history shows
    all three.

    The margins are wide on purpose: the recording and the three runs share this noisy
    host, where runs have come out 1.6x faster, and 1.6x slower, than the recording. Here
    they would have to be 2.9x faster than the recording to escape the creep rule, or 6x
    slower to fail the tolerance."""
    tiny, baselines = recorded
    creeping = tmp_path / "baselines"
    shutil.copytree(baselines, creeping)
    for path in (creeping / "tiny").glob("*.json"):
        if path.name.endswith((".golden.json", ".run.json")):
            continue
        baseline = json.loads(path.read_text())
        for key, figure in baseline["metrics"].items():
            figure["value"] *= 3.0  # TTFT too: three times slower, so noise cannot fail it
            if key.endswith("tok_s"):
                figure["tolerance"] = 0.95
        path.write_text(json.dumps(baseline, indent=1))
    profile = tmp_path / "tiny.toml"
    profile.write_text(tiny.read_text().replace("[gate]\n", "[gate]\ncreep_runs = 3\n"))
    args = [
        "suites/perf",
        "-m",
        "perf",
        "--perf-repeats=3",
        f"--perf-profile={profile}",
        f"--override-ini=perfgate_baselines_dir={creeping}",
        f"--perf-history={tmp_path / 'history'}",
        "--perf-abort-below=0",
    ]
    for n in (1, 2):
        result = run_pytest(*args, f"--perf-output={tmp_path / f'out{n}'}")
        assert result.returncode == 0, result.stdout + result.stderr  # within tolerance
        assert "CREEP" not in result.stdout
        # not a terminal: plain progress lines, no cursor movement
        assert "perfgate: sweep C=2 run 1: 2 requests" in result.stdout
        assert "perfgate: sweep C=2: " in result.stdout and "\x1b[" not in result.stdout
    third = run_pytest(
        *args,
        f"--perf-output={tmp_path / 'out3'}",
        "--perf-summary=" + str(tmp_path / "summary.md"),
    )
    out = third.stdout + third.stderr
    assert third.returncode == 1, out
    assert "CREEP: worse than the baseline run after run" in out
    line = next(ln for ln in out.splitlines() if "sweep.c2.agg_tok_s: measured" in ln)
    assert "→ CREEP" in line and "in 3 runs in a row" in line, line
    assert "FAILED suites/perf/test_perf.py::test_concurrency_sweep" in out
    assert "❌ creep" in (tmp_path / "summary.md").read_text()
    history = (tmp_path / "history" / "tiny.jsonl").read_text().splitlines()
    assert [json.loads(h)["status"] for h in history] == ["passed", "passed", "failed"]
    # `perfgate history` prints the trend: a row per run
    assert cli(["history", "tiny", f"--history-dir={tmp_path / 'history'}"]) == 0
    table = capsys.readouterr().out
    assert table.count("passed") >= 2 and "failed" in table and "sweep.c2.agg_tok_s" in table
