"""What every engine module provides, plus helpers they share."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfgate.errors import EngineUnavailable
from perfgate.profile import ArgValue, ModelSpec, Profile


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


def resolve_model_path(model: ModelSpec) -> str:
    """The local path of the model weights: ``path`` as given, or ``package.assemble()``."""
    if model.path:
        if not Path(model.path).exists():
            raise EngineUnavailable(f"model path {model.path} does not exist")
        return model.path
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


@dataclass(frozen=True)
class Engine:
    """An engine's facts. Subclasses override what differs."""

    name: str = "openai"
    health_path: str | None = "/health"
    tokenize_path: str | None = None
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    metrics_path: str | None = None
    spec_prefix: str | None = None  # Prometheus name prefix of spec-decode counters

    def launch_command(self, profile: Profile, host: str, port: int) -> list[str]:
        """The argv that starts this engine for the profile."""
        raise EngineUnavailable(f"engine {self.name!r} cannot be launched; attach with --base-url")

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        """JSON body for the tokenize endpoint (special tokens included)."""
        return {"model": model, "prompt": text}

    def detokenize(self, client: httpx.Client, tokens: list[int], model: str) -> str | None:
        """Text of token ids, or None where the engine has no detokenize endpoint."""
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

    def deterministic_extras(self) -> dict[str, Any]:
        """Request fields that make greedy output reproducible (no reuse of cached state)."""
        return {}

    def completion_extras(self) -> dict[str, Any]:
        """Request fields that force exactly ``max_tokens`` of output."""
        return {"ignore_eos": True}
