"""A server that ignores ``response_format`` (no guided decoding) returns free text: the
simulator is one (its text is words, whatever the request asks), so the structured-output
check must fail on it, naming the answers that are not JSON. (The real engines that pass:
tests/e2e/test_model_kinds_e2e.py, tests/engines/test_engine_vllm.py.)"""

from __future__ import annotations

from perfgate.sim import SimConfig, SimProcess
from tests.helpers import run_pytest, sim_profile

PROFILE = sim_profile(
    "sim-structured",
    """
[workload]
api = "chat"
input_len = 16
output_len = 16
levels = [1]

[correctness]
prompt_style = "chat"
structured_output = true
""",
)


def test_a_server_that_ignores_response_format_fails_the_structured_check(tmp_path):
    profile = tmp_path / "sim-structured.toml"
    profile.write_text(PROFILE)
    with SimProcess(SimConfig(ttft_s=0.001, itl_s=0.001)) as sim:
        done = run_pytest(
            "suites/correctness/test_structured.py",
            "-m",
            "correctness",
            f"--perf-profile={profile}",
            f"--perf-base-url={sim.base_url}",
            f"--perf-output={tmp_path / 'out'}",
            "-p",
            "no:cacheprovider",
        )
    out = done.stdout + done.stderr
    assert done.returncode == 12, out[-4000:]  # a correctness failure's own exit code
    assert "2 failed" in out, out[-4000:]
    assert "structured output: 0% of 4 answers valid against their JSON Schema" in out
    assert "capital (not streamed): not JSON" in out and "capital (streamed): not JSON" in out
    assert "JSON-object mode (not streamed): not JSON" in out
