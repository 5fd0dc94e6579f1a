"""Runs of a level and speculative counters on the real llama.cpp server, through the
session's API. (The gate on a really slowed server, early abort included, runs as users
run it in tests/e2e/test_plugin_e2e.py.)"""

from __future__ import annotations

from perfgate.gate.values import measurement_values
from perfgate.profile import DEFAULT_PROFILE, load_profile
from perfgate.run.session import PerfgateSession
from perfgate.run.settings import GateOptions
from tests.helpers import ONE_THREAD, ROOT


def sweep_profile(repeats=1, max_extra=0):
    profile = load_profile(DEFAULT_PROFILE, ROOT / "profiles")
    workload = profile.workload.model_copy(
        update={"input_len": 64, "output_len": 32, "levels": [1, 2, 4, 8], "rounds": 2, "warmup": 1}
    )
    # no early look (gate.min_repeats past repeats): each level runs exactly as asked
    gate = profile.gate.model_copy(
        update={"repeats": repeats, "max_extra_repeats": max_extra, "min_repeats": 99}
    )
    return profile.model_copy(update={"workload": workload, "gate": gate}).with_server_args(
        **ONE_THREAD
    )


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
    profile = profile.with_server_args(**ONE_THREAD)
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
