"""A reasoning model that thinks longer before it answers, gated on the time to the first
answer token (``ttfa_s``), on the simulator, whose timing is exact: the first token (a
thinking one) comes as soon as before, so TTFT does not move; the answer comes 160 ms
later, and ``ttfa_s`` and ``reasoning_tokens`` fail. (The large effect on a real engine:
tests/e2e/test_model_kinds_e2e.py, llama.cpp with a longer reasoning budget.)

The baseline is recorded here, from the simulator, seconds before it is gated."""

from __future__ import annotations

from perfgate.sim import SimConfig, SimProcess
from tests.helpers import sim_profile
from tests.sim.test_gate_on_sim import gate

# chat: the first 4 of 16 output tokens are reasoning (reasoning_content), 20 ms apart
THINKS = SimConfig(ttft_s=0.05, itl_s=0.02, reasoning_tokens=4)
PROFILE = sim_profile(
    "sim-reasoning",
    """
[workload]
api = "chat"
input_len = 16
output_len = 16
levels = [4]
rounds = 2
single_requests = 3
warmup = 1

[gate]
repeats = 3
max_extra_repeats = 0
record_repeats = 3
min_tolerance = 0.1
figures = ["ttfa_s", "ttfa_p99_s", "reasoning_tokens"]
""",
)


def test_thinking_longer_fails_ttfa_and_reasoning_tokens_while_ttft_passes(tmp_path):
    profile = tmp_path / "sim-reasoning.toml"
    profile.write_text(PROFILE)
    baselines = tmp_path / "baselines"
    with SimProcess(THINKS) as sim:
        code, out, checks = gate(
            profile, baselines, sim, tmp_path / "rec", "--perf-update-baselines"
        )
    assert code == 0 and "perfgate: baseline written to" in out, out
    # TTFA 50 + 4 x 20 ms = 130 ms; 4 reasoning tokens a request (the chunks: no usage detail)
    ttfa = checks["sweep.c4.ttfa_s"]["measured"]
    assert 0.12 < ttfa < 0.2, checks["sweep.c4.ttfa_s"]
    assert checks["sweep.c4.reasoning_tokens"]["measured"] == 4

    # 12 of the 16 tokens now thinking: the answer starts 8 x 20 ms = 160 ms later
    with SimProcess(THINKS.with_changes(reasoning_tokens=12)) as sim:
        code, out, checks = gate(profile, baselines, sim, tmp_path / "gate")
    assert code == 1, out
    for level in ("single.c1", "sweep.c4"):
        ttfa, ttft = checks[f"{level}.ttfa_s"], checks[f"{level}.ttft_s"]
        assert ttfa["verdict"] == "regressed", ttfa
        assert 2.0 < ttfa["measured"] / ttfa["baseline"] < 3.0, ttfa  # 290 ms / 130 ms
        assert ttft["verdict"] in ("pass", "improved"), ttft  # the first token: as before
        assert checks[f"{level}.per_request_tok_s"]["verdict"] in ("pass", "improved")
        thought = checks[f"{level}.reasoning_tokens"]
        assert thought["verdict"] == "regressed" and thought["measured"] == 12, thought
    assert "sweep.c4.ttfa_s: measured" in out and "REGRESSED" in out
    assert "TTFA(s)" in out  # the chosen figure's column
