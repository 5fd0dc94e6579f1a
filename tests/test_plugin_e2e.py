"""End to end, as a user runs it: `pytest -m perf` in a subprocess on the real llama.cpp server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.session import PerfgateSession
from tests.helpers import ROOT, owned_server_pids, profile_toml, run_pytest

pytestmark = pytest.mark.engine

TINY = {
    'name = "llamacpp-gemma3-270m"': 'name = "tiny"',
    "input_len = 128": "input_len = 32",
    "output_len = 64": "output_len = 8",
    "levels = [1, 2, 4]": "levels = [1, 2]",
    "rounds = 3": "rounds = 1",
    "single_requests = 5": "single_requests = 2",
}


def runs_in(directory):
    return sorted((directory / "runs").glob("*.json"))


def test_perf_gate_fails_when_the_server_really_is_slower(tmp_path):
    """Same engine, same workload, one thread and one slot: the shipped baseline catches it.

    On 2 cores this halves aggregate tok/s at C=4 and queues requests behind one slot.
    """
    slow = profile_toml(
        {
            "threads = 2, threads-batch = 2, parallel = 4": (
                "threads = 1, threads-batch = 1, parallel = 1"
            )
        },
        tmp_path,
    )
    before = owned_server_pids()
    result = run_pytest("-m", "perf", f"--profile={slow}", f"--perf-output={tmp_path / 'out'}")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "REGRESSIONS" in out
    for key, parts in {
        "sweep.c4.agg_tok_s": ("tolerance 35%", "higher is better"),
        "sweep.c4.ttft_s": ("tolerance 75%", "lower is better"),
    }.items():
        line = next((ln for ln in out.splitlines() if f"{key}: measured" in ln), None)
        assert line is not None, out
        for part in ("baseline", "REGRESSED", *parts):
            assert part in line, line
    assert "5 passed" not in out and "failed" in out
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["status"] == "failed"
    assert any(c["verdict"] == "regressed" for c in run["checks"])
    assert not (owned_server_pids() - before)


def test_server_that_cannot_start_gives_a_clear_error_and_leaves_nothing(tmp_path):
    bad = profile_toml(
        {**TINY, "metrics = true": "metrics = true, no-such-flag = true"}, tmp_path, name="tiny"
    )
    before = owned_server_pids()
    t0 = time.monotonic()
    result = run_pytest("-m", "perf", f"--profile={bad}", f"--perf-output={tmp_path / 'out'}")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert time.monotonic() - t0 < 60
    assert "backend unavailable: llamacpp server exited with code" in out
    assert "no-such-flag" in out  # the log tail is in the message
    assert not (owned_server_pids() - before)


def test_invalid_profile_is_rejected_before_any_server_starts(tmp_path):
    bad = profile_toml({**TINY, "rounds = 1": "rounds = 1\nroundz = 2"}, tmp_path, name="tiny")
    result = run_pytest("-m", "perf", f"--profile={bad}")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # pytest's usage error
    assert "workload.roundz: unknown field" in out and str(bad) in out
    assert "starting llamacpp" not in out


def test_ctrl_c_stops_the_server_and_keeps_the_run_json(tmp_path):
    tiny = profile_toml({**TINY, "rounds = 1": "rounds = 50"}, tmp_path, name="tiny")
    before = owned_server_pids()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "perf",
            f"--profile={tiny}",
            f"--perf-output={tmp_path / 'out'}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "sweep C=1: 50 requests" in line:
                break
        assert owned_server_pids() - before, "".join(lines)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, "".join(lines) + out
    assert "KeyboardInterrupt" in out
    assert not (owned_server_pids() - before)
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["status"] == "interrupted"
    assert run["measurements"]["single"]["levels"][0]["metrics"]["ok"] == 2


def test_attach_with_base_url_measures_and_leaves_the_server_running(tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    owner = PerfgateSession(
        load_profile(DEFAULT_PROFILE, ROOT / "profiles"),
        root=ROOT,
        baselines_dir=tmp_path,
        output_dir=tmp_path / "own",
        progress=lambda _: None,
    )
    try:
        backend = owner.start_backend()
        result = run_pytest(
            "-m",
            "perf",
            f"--profile={tiny}",
            f"--base-url={backend.base_url}",
            f"--perf-output={tmp_path / 'out'}",
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        assert backend.alive(), "attach mode must not stop a server it did not start"
        assert "starting llamacpp" not in out
        run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
        assert run["launcher"] == "attach" and run["base_url"] == backend.base_url
        assert [lv["concurrency"] for lv in run["measurements"]["sweep"]["levels"]] == [1, 2]
        assert "no baseline at" in out
    finally:
        owner.stop_backend()
