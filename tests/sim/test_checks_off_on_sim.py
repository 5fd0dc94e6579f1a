"""A check the profile turns off by name says so as a skip, and asks nothing: the
degeneracy check (``correctness.degeneracy_check = false``) on the simulator, against the
same profile with it on, which asks its six sampled answers."""

from __future__ import annotations

import json

from perfgate.sim import SimConfig, SimProcess
from tests.helpers import ROOT, run_pytest, sim_profile

PROFILE = sim_profile(
    "sim-checks",
    """
[workload]
input_len = 16
output_len = 16
levels = [1]

[correctness]
degeneracy_check = {on}
""",
)


def degeneracy_check(tmp_path, on: bool) -> tuple[str, int]:
    """The degeneracy check's output on a fresh simulator, and the requests it answered."""
    profile = tmp_path / f"{on}" / "sim-checks.toml"
    profile.parent.mkdir()
    profile.write_text(PROFILE.format(on=str(on).lower()))
    with SimProcess(SimConfig(ttft_s=0.001, itl_s=0.001)) as sim:
        done = run_pytest(
            "suites/correctness/test_degeneracy.py",
            "-m",
            "correctness",
            "-rs",
            f"--perf-profile={profile}",
            f"--perf-base-url={sim.base_url}",
            f"--perf-output={tmp_path / f'{on}' / 'out'}",
            "-p",
            "no:cacheprovider",
        )
        answered = len(sim.records())
    return done.stdout + done.stderr, answered


def test_the_degeneracy_check_turned_off_skips_saying_so_and_asks_nothing(tmp_path):
    prompts = json.loads((ROOT / "suites/correctness/data/open_prompts.json").read_text())
    on, asked = degeneracy_check(tmp_path, on=True)
    assert "test_sampled_answers_are_not_degenerate" in on and "SKIPPED" not in on, on[-4000:]
    off, asked_off = degeneracy_check(tmp_path, on=False)
    assert "1 skipped" in off, off[-4000:]
    assert "the profile turns the check off (correctness.degeneracy_check = false)" in off
    assert asked - asked_off == len(prompts["prompts"]) == 6, (asked, asked_off)
