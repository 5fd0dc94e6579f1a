"""Workloads and figures that catch what medians of random prompts cannot, shown on the
real llama.cpp server as users run it (`pytest -m perf --profile ...`):

- a prefix-cache regression (the same server with prompt caching off) fails the
  shared-prefix workload on TTFT, while the random-prompt workload passes both ways;
- a tail regression (fewer slots than requests in flight: some requests wait for a
  slot) fails the p99 TTFT gate while the median TTFT gate passes;
- under a TTFT service level, the share of requests that met it and goodput fall with
  the prefix cache off.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import TINY, profile_toml, run_pytest

pytestmark = pytest.mark.engine

ARGS_LINE = (
    "args = { threads = 2, threads-batch = 2, parallel = 4, ctx-size = 4096, metrics = true }"
)
# Gemma 3 attends through a sliding window: llama.cpp reuses a cached prefix only with
# the full-size window cache (--swa-full; without it every prompt is prefilled anew)
SWA_FULL = ARGS_LINE.replace("metrics = true", "metrics = true, swa-full = true")
CACHE = {ARGS_LINE: SWA_FULL}
NO_CACHE = {ARGS_LINE: SWA_FULL + '\nextra_args = ["--no-cache-prompt"]'}


def _sweep(profile: Path, baselines: Path, out: Path, *extra: str):
    """The perf suite's sweep of ``profile``, as a user runs it."""
    return run_pytest(
        "-m",
        "perf",
        "suites/perf/test_perf.py::test_concurrency_sweep",
        f"--profile={profile}",
        f"--override-ini=perfgate_baselines_dir={baselines}",
        f"--perf-output={out}",
        *extra,
    )


def _checks(out: Path) -> dict[str, dict]:
    [run] = (out / "runs").glob("*.json")
    return {c["key"]: c for c in json.loads(run.read_text())["checks"]}


SHARED = {
    **TINY,
    'name = "tiny"': 'name = "shared"',
    "input_len = 32": 'input_len = 320\nprompts = "shared-prefix"\nprefix_len = 288',
    "levels = [1, 2]": "levels = [2]",
    "rounds = 1": "rounds = 3",
    # llama.cpp caches per slot: a warmup request per slot in flight primes each of them
    "warmup = 1": "warmup = 2",
}
RANDOM = {**TINY, 'name = "tiny"': 'name = "random"', "levels = [1, 2]": "levels = [2]"}


@pytest.mark.parametrize(
    ("workload", "fails"), [(SHARED, True), (RANDOM, False)], ids=["shared-prefix", "random"]
)
def test_prefix_cache_off_fails_the_shared_prefix_workload_on_ttft(tmp_path, workload, fails):
    cached = profile_toml({**workload, **CACHE}, tmp_path)
    uncached_dir = tmp_path / "uncached"
    uncached_dir.mkdir()
    uncached = profile_toml({**workload, **NO_CACHE}, uncached_dir)
    baselines = tmp_path / "baselines"
    record = _sweep(
        cached, baselines, tmp_path / "rec", "--update-baselines", "--perf-tolerance=0.5"
    )
    assert record.returncode == 0, record.stdout + record.stderr
    same = _sweep(cached, baselines, tmp_path / "same")
    assert same.returncode == 0, same.stdout + same.stderr  # the cached server passes
    gate = _sweep(uncached, baselines, tmp_path / "gate")
    out = gate.stdout + gate.stderr
    checks = _checks(tmp_path / "gate")
    ttft = checks["sweep.c2.ttft_s"]
    if fails:
        assert gate.returncode == 1, out
        assert ttft["verdict"] == "regressed", ttft
        assert ttft["measured"] > 3 * ttft["baseline"], ttft  # the whole prefix prefilled
        assert "sweep.c2.ttft_s: measured" in out and "REGRESSED" in out
        assert "prompt (prefix) cache" in out  # the diagnosis names the flag
    else:
        assert gate.returncode == 0, out
        assert ttft["verdict"] in ("pass", "improved"), ttft


TAIL = {
    **TINY,
    'name = "tiny"': 'name = "tail"',
    "levels = [1, 2]": "levels = [4]",
    "rounds = 1": "rounds = 3",
    "[gate]\n": '[gate]\nfigures = ["ttft_p90_s", "ttft_p99_s", "latency_p99_s"]\n',
}
THREE_SLOTS = {ARGS_LINE: ARGS_LINE.replace("parallel = 4", "parallel = 3")}


def test_fewer_slots_than_requests_fails_the_p99_ttft_gate_not_the_median(tmp_path):
    """Four requests in flight on three slots: one request in four waits for a slot, so
    the tail of TTFT grows by a whole request's time while its median does not."""
    full = profile_toml(TAIL, tmp_path)
    starved_dir = tmp_path / "starved"
    starved_dir.mkdir()
    starved = profile_toml({**TAIL, **THREE_SLOTS}, starved_dir)
    baselines = tmp_path / "baselines"
    record = _sweep(full, baselines, tmp_path / "rec", "--update-baselines", "--perf-tolerance=0.5")
    assert record.returncode == 0, record.stdout + record.stderr
    recorded = json.loads(next((baselines / "tail").glob("cpu-*[!n].json")).read_text())
    assert {"sweep.c4.ttft_p99_s", "sweep.c4.ttft_p90_s"} <= recorded["metrics"].keys()
    gate = _sweep(starved, baselines, tmp_path / "gate")
    out = gate.stdout + gate.stderr
    checks = _checks(tmp_path / "gate")
    print({k: (c["verdict"], c["measured"], c["baseline"]) for k, c in checks.items()})
    assert gate.returncode == 1, out
    assert checks["sweep.c4.ttft_p99_s"]["verdict"] == "regressed", out
    assert checks["sweep.c4.ttft_s"]["verdict"] in ("pass", "improved"), out
    assert "TTFT p99(s)" in out  # the chosen figures' table


def test_goodput_under_a_ttft_service_level_falls_when_the_prefix_cache_is_off(tmp_path):
    """A service level of three times the cached server's slowest TTFT (measured first, on
    this host): every request of the cached server meets it, most of the uncached one's
    miss it; the share that met it and goodput tok/s both fail the gate."""
    calibration = _sweep(
        profile_toml({**SHARED, **CACHE}, tmp_path),
        tmp_path / "calibration-baselines",
        tmp_path / "cal",
        "--update-baselines",
    )
    assert calibration.returncode == 0, calibration.stdout + calibration.stderr
    [cal] = (tmp_path / "cal" / "runs").glob("*.json")
    levels = json.loads(cal.read_text())["measurements"]["sweep"]["levels"]
    ttft = max(level["metrics"]["ttft_s"]["p99"] for level in levels)
    slo = f"\n[slo]\nttft_s = {3 * ttft:.3f}\n"
    cached = profile_toml({**SHARED, **CACHE}, tmp_path)
    cached.write_text(cached.read_text() + slo)
    (tmp_path / "uncached").mkdir()
    uncached = profile_toml({**SHARED, **NO_CACHE}, tmp_path / "uncached")
    uncached.write_text(uncached.read_text() + slo)
    baselines = tmp_path / "baselines"
    record = _sweep(
        cached, baselines, tmp_path / "rec", "--update-baselines", "--perf-tolerance=0.5"
    )
    assert record.returncode == 0, record.stdout + record.stderr
    met = _checks(tmp_path / "rec")["sweep.c2.slo_met"]["measured"]
    assert met == 1.0
    gate = _sweep(uncached, baselines, tmp_path / "gate")
    out = gate.stdout + gate.stderr
    checks = _checks(tmp_path / "gate")
    assert gate.returncode == 1, out
    assert checks["sweep.c2.slo_met"]["measured"] < 0.5, out  # (most miss it)
    assert checks["sweep.c2.slo_met"]["verdict"] == "regressed", out
    assert checks["sweep.c2.goodput_tok_s"]["verdict"] == "regressed", out
    assert "SLO met" in out and "Goodput tok/s" in out  # the chosen figures' table
