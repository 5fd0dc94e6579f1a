"""SGLang (``python -m sglang.launch_server``). Not runnable here: tested on fixtures of its
documented log, /server_info and /metrics formats."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfgate.engines.argv import server_argv
from perfgate.engines.base import Engine
from perfgate.engines.chat import chat_messages
from perfgate.engines.converted import engine_python, served_model
from perfgate.engines.facts import LogPattern, arg_values, facts_from_args, log_pattern
from perfgate.engines.identify import Identified, ServerProbe
from perfgate.engines.prometheus import SpecStats
from perfgate.engines.server_metrics import MetricMap
from perfgate.facts import Fact, Facts, FactValue
from perfgate.profile import Profile

SGLANG_PYTHON_ENV = "PERFGATE_SGLANG_PYTHON"
LOCAL_SGLANG_VENV = Path(".venv-sglang/bin/python")  # where scripts/install-sglang-cpu.sh puts it


def sglang_python() -> str:
    """The Python that has SGLang: $PERFGATE_SGLANG_PYTHON, else this interpreter when
    SGLang is importable here, else ./.venv-sglang/bin/python (scripts/install-sglang-cpu.sh)."""
    return engine_python(
        "sglang", SGLANG_PYTHON_ENV, LOCAL_SGLANG_VENV, "scripts/install-sglang-cpu.sh"
    )


_ARG = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|[^,()]+)")


def parse_server_args(text: str) -> dict[str, Any]:
    """``ServerArgs(model_path='...', tp_size=2, ...)`` as logged, into a dict."""
    args: dict[str, Any] = {}
    for name, raw in _ARG.findall(text):
        try:
            args[name] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            args[name] = raw.strip()
    return args


def _server_args(match: re.Match[str]) -> dict[str, FactValue]:
    return arg_values(parse_server_args(match[1]))


def _server_args_dict(match: re.Match[str]) -> dict[str, FactValue]:
    """0.5.x logs ``server_args={'model_path': ...}``, a dict's repr."""
    try:
        args = ast.literal_eval(match[1])
    except (ValueError, SyntaxError):
        args = parse_server_args(match[1].replace("': ", "=").replace(", '", ", ").strip("{}'"))
    return arg_values(args) if isinstance(args, dict) else {}


# SGLang log lines (srt/server_args.py, mem_cache/memory_pool.py, managers/scheduler.py,
# model_executor/model_runner.py)
SGLANG_LOG: tuple[LogPattern, ...] = (
    log_pattern(r"server_args=ServerArgs\((.*)\)", _server_args),
    log_pattern(r"server_args=(\{.*\})\s*$", _server_args_dict),
    log_pattern(  # 0.5.23: "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, ..."
        r"KV Cache is allocated\..*?#tokens: (\d+)", lambda m: {"kv_cache_tokens": int(m[1])}
    ),
    log_pattern(
        r"max_total_num_tokens=(\d+).*max_running_requests=(\d+)",
        lambda m: {"max_running_requests": int(m[2])},
    ),
    log_pattern(r"(?i)Capture (?:[\w ]+ )?cuda graph end", lambda m: {"cuda_graphs": True}),
    log_pattern(r"using nccl==([\d.]+)", lambda m: {"nccl_version": m[1]}),
    log_pattern(
        r"Custom allreduce is disabled because (.*)", lambda m: {"custom_all_reduce": False}
    ),
    log_pattern(
        r"Decode batch.*(?:cuda|cpu|npu) graph: (True|False)",
        lambda m: {"cuda_graphs": m[1] == "True"},
        last=True,
    ),
    log_pattern(
        r"Decode batch.*accept len: ([\d.]+)",
        lambda m: {"log_mean_accept_len": float(m[1])},
        last=True,
    ),
    log_pattern(
        r"Decode batch.*accept rate: ([\d.]+)",
        lambda m: {"log_accept_rate": float(m[1])},
        last=True,
    ),
)

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def _metric_totals(text: str, names: tuple[str, ...]) -> dict[str, float]:
    totals = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    return totals


def spec_counters_from(server_info: dict[str, Any], metrics_text: str) -> SpecStats | None:
    """Lifetime counters in vLLM's terms from SGLang's figures.

    SGLang reports a lifetime *average* accept length A (tokens per verify step, the bonus
    token included), so the verify-step count is derived: steps = decoded tokens / A, where
    decoded tokens = ``generation_tokens_total`` minus one prefill token per request. With
    ``sglang:spec_verify_calls_total`` (newer releases) steps are counted directly. Deltas of
    two readings then give the window. The average is refreshed at each decode log interval,
    so a window shorter than that interval reads stale.
    """
    states = server_info.get("internal_states") or [{}]
    accept_len = states[0].get("avg_spec_accept_length")
    steps_per_draft = server_info.get("speculative_num_steps")
    if not accept_len or not server_info.get("speculative_algorithm"):
        return None
    totals = _metric_totals(
        metrics_text,
        (
            "sglang:generation_tokens_total",
            "sglang:num_requests_total",
            "sglang:spec_verify_calls_total",
        ),
    )
    decoded = totals["sglang:generation_tokens_total"] - totals["sglang:num_requests_total"]
    steps = totals["sglang:spec_verify_calls_total"] or decoded / float(accept_len)
    per_step = int(server_info.get("speculative_num_draft_tokens") or 0) - 1
    if per_step <= 0:
        per_step = int(steps_per_draft or 1)
    return SpecStats(
        drafts=steps,
        draft_tokens=steps * per_step,
        accepted=decoded - steps,
        accepted_per_position=[],
    )


ACCEPT_GAUGES = {
    "sglang:spec_accept_length": "log_mean_accept_len",
    "sglang:spec_accept_rate": "log_accept_rate",
}


def acceptance_gauges(metrics_text: str) -> Facts:
    """SGLang's recent-window acceptance gauges (not deltas: facts, not gated figures)."""
    facts: Facts = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            key = ACCEPT_GAUGES.get(sample.name)
            if key is not None:
                facts[key] = Fact(value=sample.value, source="endpoint", evidence=sample.name)
    return facts


@dataclass(frozen=True)
class SGLang(Engine):
    """SGLang: /health_generate, /server_info, /metrics; reasoning in ``reasoning_content``."""

    name: str = "sglang"
    health_path: str | None = "/health_generate"  # runs a real forward pass server-side
    tokenize_path: str | None = "/v1/tokenize"  # 0.5.x: prompt or messages, as vLLM's
    reasoning_fields: tuple[str, ...] = ("reasoning_content",)
    metrics_path: str | None = "/metrics"  # needs --enable-metrics
    spec_prefix: str | None = None
    metric_map: ClassVar[MetricMap] = MetricMap(
        {  # with --enable-metrics; "sglang_" is how some exporters respell "sglang:"
            word: (f"sglang:{name}", f"sglang_{name}")
            for word, name in (
                ("running", "num_running_reqs"),
                ("waiting", "num_queue_reqs"),
                ("kv_usage", "token_usage"),
                ("prefix_hits", "cached_tokens_total"),
                ("prefix_queries", "prompt_tokens_total"),
                ("server_generated_tokens", "generation_tokens_total"),
            )
        },
        notes={
            "preemptions": "SGLang counts no preemptions: it shows retracted requests only as "
            "a gauge (num_retracted_reqs)",
        },
    )
    log_patterns: ClassVar[tuple[LogPattern, ...]] = SGLANG_LOG
    title: ClassVar[str | None] = "SGLang"
    tool_call_setup: ClassVar[str] = "start SGLang with --tool-call-parser <the model's parser>"
    version_source: ClassVar[str] = "/server_info"

    def prepare_model(self, profile: Profile) -> str:
        """The weights' path; a GGUF converted to a Hugging Face directory (once, cached)
        when the profile says ``hf_from_gguf`` (SGLang's GGUF loader has no CPU kernels)."""
        return served_model(profile, sglang_python)

    def launch_command(
        self, profile: Profile, host: str, port: int, model: str | None = None
    ) -> list[str]:
        model = model or self.prepare_model(profile)
        program = profile.server.command or [sglang_python(), "-m", "sglang.launch_server"]
        model_args = ["--model-path", model]
        return server_argv(program, model_args, "--served-model-name", profile, host, port, model)

    def metrics_hint(self) -> str:
        return "; start SGLang with --enable-metrics"

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        return {"model": model, "prompt": text, "add_special_tokens": True}

    def chat_tokenize_body(
        self, client: httpx.Client, text: str, model: str
    ) -> dict[str, Any] | None:
        """SGLang's /v1/tokenize renders messages as for a chat completion when
        add_generation_prompt is left out."""
        return {"model": model, "messages": chat_messages(text)}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        body = {"model": model, "tokens": tokens, "skip_special_tokens": False}
        response = client.post("/v1/detokenize", json=body)
        response.raise_for_status()
        return str(response.json()["text"])

    def server_info(self, client: httpx.Client) -> dict[str, Any]:
        """/server_info (older releases: /get_server_info), or {}."""
        for path in SERVER_INFO_PATHS:
            try:
                response = client.get(path)
            except httpx.HTTPError:
                return {}
            if response.status_code == 200:
                try:
                    body = response.json()
                except ValueError:
                    return {}
                return body if isinstance(body, dict) else {}
        return {}

    def version(self, client: httpx.Client) -> str:
        return str(self.server_info(client).get("version", "unknown"))

    def identify(self, probe: ServerProbe) -> Identified | None:
        """SGLang's /metrics names ``sglang:*`` (with --enable-metrics); without them, an
        answer from /server_info (older: /get_server_info) suggests SGLang, uncertain
        (another server may answer it too): another engine's certain claim wins."""
        found = probe.by_metrics("sglang:")
        if found is None and any(probe.json(path) for path in SERVER_INFO_PATHS):
            return Identified("/server_info", certain=False)
        return found

    def spec_counters(self, client: httpx.Client) -> SpecStats | None:
        info = self.server_info(client)
        try:
            metrics = client.get(self.metrics_path or "/metrics")
        except httpx.HTTPError:
            return None
        if metrics.status_code != 200:
            return None
        return spec_counters_from(info, metrics.text)

    def command_facts(self, argv: list[str]) -> Facts:
        """SGLang logs its full ServerArgs; the command line adds nothing."""
        return {}

    def endpoint_facts(self, client: httpx.Client) -> Facts:
        """Server arguments from /server_info, and the acceptance gauges of /metrics."""
        info = self.server_info(client)
        args = {k: v for k, v in info.items() if k not in ("internal_states", "version")}
        facts = facts_from_args(args, "endpoint", "/server_info") if args else {}
        try:
            metrics = client.get(self.metrics_path or "/metrics")
        except httpx.HTTPError:
            return facts
        if metrics.status_code == 200:
            facts.update(acceptance_gauges(metrics.text))
        return facts


ENGINE = SGLang()  # found by perfgate.engines: an engine is this one file
