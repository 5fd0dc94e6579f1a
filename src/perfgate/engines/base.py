"""The :class:`Engine` every engine module subclasses: what it provides, with defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from perfgate.engines.facts import DIAGNOSIS_GREP, LogPattern, facts_from_flags, facts_from_log
from perfgate.engines.identify import Identified, ServerProbe
from perfgate.engines.prometheus import SpecStats, parse_spec_counters
from perfgate.engines.server_metrics import MetricMap
from perfgate.engines.weights import resolve_model_path
from perfgate.errors import EngineUnavailable
from perfgate.facts import Facts
from perfgate.profile import Profile


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
    title: ClassVar[str | None] = None  # how a profile's description names it (default: name)
    version_source: ClassVar[str] = "the server"  # where version() reads it, for perfgate init
    # how to start the server so that calls come back parsed (the tool-call check's advice)
    tool_call_setup: ClassVar[str] = "turn on the server's tool-call parsing for this model"

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

    def identify(self, probe: ServerProbe) -> Identified | None:
        """Whether the probed server is this engine, from its answers (``perfgate init``
        asks every registered engine; a server none claims is any OpenAI-compatible one).
        None by default: an engine that can tell itself overrides this."""
        return None

    def spec_counters(self, client: httpx.Client) -> SpecStats | None:
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
