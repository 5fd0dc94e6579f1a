"""Real SGLang (PyPI sglang 0.5.23 on this CPU: scripts/install-sglang-cpu.sh; attention on
its torch-native backend, perfgate's stand-in for its one CPU kernel op) through perfgate,
as a user runs it: both suites pass on the healthy profile (recorded as the baseline),
one running request at a time fails the gate with the cause named, and a server that
cannot start says why."""

from __future__ import annotations

import json
import re
import subprocess

from tests.helpers import ROOT, owned_server_pids, require_sglang, run_pytest, runs_in

PROFILE = ROOT / "profiles" / "sglang-cpu-smollm2.toml"


def variant(directory, old: str, new: str):
    text = PROFILE.read_text()
    assert old in text, old
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / PROFILE.name
    path.write_text(text.replace(old, new))
    return path


def test_sglang_passes_both_suites_and_one_running_request_fails_naming_it(tmp_path):
    require_sglang()
    before = owned_server_pids()
    baselines = f"--override-ini=perfgate_baselines_dir={tmp_path / 'baselines'}"
    record = run_pytest(
        "-m", "perf or correctness", f"--perf-profile={PROFILE}", baselines,
        "--perf-update-baselines", "--perf-tolerance=0.5", f"--perf-output={tmp_path / 'rec'}",
        "-p", "no:cacheprovider", "-rfEs", timeout=1500,
    )  # fmt: skip
    out = record.stdout + record.stderr
    assert record.returncode == 0, out[-6000:]
    assert "perfgate: sglang 0.5.23 ready" in out
    # structured output through its grammar backend: every answer valid, the backend said
    assert "perfgate: structured output: guided-decoding backend xgrammar" in out
    assert "SKIPPED [1] suites/correctness/test_structured.py" not in out
    run = json.loads(runs_in(tmp_path / "rec")[-1].read_text())
    assert run["status"] == "passed" and run["engine"] == "sglang"
    facts = {key: fact["value"] for key, fact in run["facts"].items()}
    assert facts["kv_cache_tokens"] == 4096 and facts["attention_backend"] == "torch_native"
    levels = run["measurements"]["sweep"]["levels"]
    for level in levels:  # SGLang's own count of generated tokens is the client's
        server = level["server"]
        generated = server["after"]["server_generated_tokens"]
        generated -= server["before"]["server_generated_tokens"]
        assert generated == level["metrics"]["output_tokens"], server
        assert server["sources"]["running"] == "sglang:num_running_reqs"

    one = variant(
        tmp_path / "one",
        "enable-metrics = true }",
        "enable-metrics = true, max-running-requests = 1 }",
    )
    gate = run_pytest(
        "-m", "perf", "-k", "sweep", f"--perf-profile={one}", baselines,
        f"--perf-output={tmp_path / 'gate'}", "-p", "no:cacheprovider", timeout=1500,
    )  # fmt: skip
    out = gate.stdout + gate.stderr
    assert gate.returncode == 1, out[-6000:]
    assert re.search(r"sweep\.c2\.\w+: measured .*REGRESSED", out), out[-6000:]
    causes = json.loads(runs_in(tmp_path / "gate")[-1].read_text())["diagnosis"]["causes"]
    assert causes[0] == "maximum running requests 1 (baseline 2048)", causes
    assert not (owned_server_pids() - before)


def test_sglang_that_cannot_start_says_why_from_its_log(tmp_path):
    require_sglang()
    before = owned_server_pids()
    bad = variant(
        tmp_path, 'attention-backend = "torch_native"', 'attention-backend = "no_such_backend"'
    )
    done = run_pytest(
        "-m", "perf", "-k", "sweep", f"--perf-profile={bad}",
        f"--perf-output={tmp_path / 'out'}", "-p", "no:cacheprovider", timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    assert "no_such_backend" in out and "exited" in out, out[-4000:]
    assert not (owned_server_pids() - before)


def test_the_seed_mtp_profiles_flags_are_ones_the_installed_sglang_takes():
    """The seeds' SGLang profile (a GPU deployment: it cannot run here) against the
    installed SGLang's own `--help`: every flag it passes, its reasoning parser and its
    speculative algorithm."""
    python = require_sglang()
    from perfgate.engines import get_engine
    from perfgate.profile import load_profile

    profile = load_profile("qwen36-27b-sglang-mtp", ROOT / "profiles")
    argv = get_engine(profile.engine).launch_command(profile, "127.0.0.1", 30000, "/m")
    shown = subprocess.run(
        [python, "-m", "sglang.launch_server", "--help"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    offered = {ln.split()[0].rstrip(",") for ln in shown.splitlines() if ln[:4] == "  --"}
    assert [a for a in argv[3:] if a.startswith("--") and a not in offered] == []
    assert "qwen3," in shown.split("--reasoning-parser {")[1].split("}")[0] + ","
    assert " NEXTN," in shown.split("Builtins:")[1]
