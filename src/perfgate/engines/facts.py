"""Reading configuration facts (:class:`perfgate.facts.Fact`) the way engines find them: in
a server's log (by patterns), on the command line that started it (by flag), and in the
engine arguments vLLM and SGLang report."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.facts import Fact, Facts, FactValue
from perfgate.profile import is_secret_name, redact_text

# What the seeds' manual grep of a server log looked for; engines may add to it.
DIAGNOSIS_GREP = r"accept|spec|draft|NCCL|P2P|attention|KV cache|cuda ?graph|graph captur|mamba"


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
    put("structured_output_backend", args.get("grammar_backend"))  # SGLang's
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
