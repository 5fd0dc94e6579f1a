"""The gate on a really slowed llama.cpp server: early abort, re-measure, baselines."""

from __future__ import annotations

import time

import pytest

from perfgate.baseline import baseline_path, build_baseline, measurement_samples, save_baseline
from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.report import load_run
from perfgate.session import GateOptions, PerfgateSession
from tests.helpers import ROOT, CpuThrottle, can_throttle_cpu

pytestmark = pytest.mark.engine


def sweep_profile(repeats=1, max_extra=0):
    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 64, "output_len": 32, "levels": [1, 2, 4, 8], "rounds": 2, "warmup": 1}
    )
    gate = profile.gate.model_copy(update={"repeats": repeats, "max_extra_repeats": max_extra})
    return profile.model_copy(update={"workload": workload, "gate": gate})


def new_session(profile, tmp_path, name, **kw):
    return PerfgateSession(
        profile,
        root=ROOT,
        baselines_dir=tmp_path / "baselines",
        output_dir=tmp_path / name,
        progress=lambda _: None,
        **kw,
    )


def sweep(session, profile):
    return session.measure("sweep", profile.workload.levels, lambda c: c * profile.workload.rounds)


@pytest.mark.skipif(
    not can_throttle_cpu(),
    reason="no writable cgroup v1 cpu controller here to slow a real server down",
)
def test_a_4x_slower_server_is_aborted_within_20_percent_of_the_sweep(tmp_path):
    profile = sweep_profile()
    normal = new_session(profile, tmp_path, "normal")
    try:
        t0 = time.monotonic()
        measured = sweep(normal, profile)
        full_wall = time.monotonic() - t0
    finally:
        normal.stop_backend()
    assert not measured.not_run
    samples = measurement_samples("sweep", measured)
    save_baseline(
        baseline_path(tmp_path / "baselines", profile.name, normal.hardware_key),
        build_baseline(profile.name, normal.hardware_key, samples, None, {}),
    )

    slow = new_session(profile, tmp_path, "slow")
    assert slow.baseline is not None
    backend = slow.start_backend()
    throttle = CpuThrottle(backend.pid, cpus=0.5)  # it uses 2 CPUs unthrottled
    try:
        t0 = time.monotonic()
        aborted = sweep(slow, profile)
        decided = time.monotonic() - t0
    finally:
        slow.stop_backend()
        throttle.close()
    assert aborted.aborted and aborted.aborted.startswith("early abort at C=1")
    assert "below 50% of the baseline" in aborted.aborted
    assert aborted.not_run == [2, 4, 8]
    base_agg = normal.run.measurements["sweep"].levels[0].metrics.agg_tok_s
    slowdown = base_agg / aborted.levels[0].metrics.agg_tok_s
    assert slowdown >= 3, f"the throttled server is only {slowdown:.1f}x slower"
    print(f"full sweep {full_wall:.1f}s; slowed {slowdown:.1f}x; decided in {decided:.1f}s")
    # the whole sweep at this speed would take about slowdown x the normal sweep
    assert decided <= 0.2 * slowdown * full_wall, (decided, slowdown, full_wall)
    # the run JSON holds what was measured, and says why it stopped
    saved = load_run(slow.run_path).measurements["sweep"]
    assert saved.aborted == aborted.aborted and len(saved.levels) == 1
    # the same two runs through `perfgate compare`, as a CI job after an engine upgrade
    normal.finish("passed")
    gate = compare_cli(normal.run_path, slow.run_path)
    assert gate.returncode == 1, gate.stdout
    agg = next(ln for ln in gate.stdout.splitlines() if ln.startswith("sweep.c1.agg_tok_s"))
    assert agg.endswith("REGRESSED"), gate.stdout
    assert "sweep.c8.agg_tok_s" in gate.stdout and "not run" in gate.stdout
    same = compare_cli(normal.run_path, normal.run_path)
    assert same.returncode == 0 and "no regression" in same.stdout, same.stdout


def compare_cli(old, new):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "perfgate.cli", "compare", str(old), str(new)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_inconclusive_levels_are_measured_again_up_to_the_bound(tmp_path, monkeypatch):
    profile = sweep_profile(repeats=1, max_extra=2)
    profile = profile.model_copy(
        update={"workload": profile.workload.model_copy(update={"levels": [1, 2], "output_len": 8})}
    )
    session = new_session(profile, tmp_path, "run")
    asked = []

    def always_inconclusive(name, runs):
        asked.append((runs[0].concurrency, len(runs)))
        return True

    monkeypatch.setattr(session, "_still_inconclusive", always_inconclusive)
    try:
        measured = sweep(session, profile)
    finally:
        session.stop_backend()
    assert [(lv.concurrency, lv.repeat) for lv in measured.levels] == [
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (2, 1),
        (2, 2),
    ]
    assert asked == [(1, 1), (1, 2), (2, 1), (2, 2)]


def test_repeats_option_runs_each_level_that_many_times(tmp_path):
    profile = sweep_profile(repeats=1)
    profile = profile.model_copy(
        update={"workload": profile.workload.model_copy(update={"levels": [1], "output_len": 8})}
    )
    session = new_session(profile, tmp_path, "run", options=GateOptions(repeats=3))
    try:
        measured = sweep(session, profile)
    finally:
        session.stop_backend()
    assert [lv.repeat for lv in measured.levels] == [0, 1, 2]
    prompts = [r.text for lv in measured.levels for r in lv.records]
    assert len(prompts) == 6
    samples = measurement_samples("sweep", measured)
    assert len(samples["sweep.c1.agg_tok_s"]) == 3  # one per repeat
    assert len(samples["sweep.c1.ttft_s"]) == 6  # one per request


def test_spec_acceptance_is_measured_over_the_window_and_matches_the_server(tmp_path):
    profile = load_profile("llamacpp-gemma3-270m-spec", ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 32, "output_len": 24, "levels": [1, 2], "rounds": 2, "warmup": 1}
    )
    gate = profile.gate.model_copy(update={"repeats": 1, "max_extra_repeats": 0})
    profile = profile.model_copy(update={"workload": workload, "gate": gate})
    session = new_session(profile, tmp_path, "spec")
    try:
        measured = sweep(session, profile)
    finally:
        session.stop_backend()
    for level in measured.levels:
        spec = level.spec
        assert spec is not None and spec.draft_tokens > 0
        # the server's per-response timings over the measured requests (warmup excluded)
        drafted = sum(r.server_timings["draft_n"] for r in level.records)
        accepted = sum(r.server_timings["draft_n_accepted"] for r in level.records)
        assert (spec.draft_tokens, spec.accepted) == (drafted, accepted)
        assert 0 < spec.accept_rate <= 1 and spec.mean_accept_length > 1
    samples = measurement_samples("sweep", measured)
    assert "sweep.c1.accept_rate" in samples and "sweep.c2.accept_rate" in samples
    assert "Accept%" in session.table("sweep")
