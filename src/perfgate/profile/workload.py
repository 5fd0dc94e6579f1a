"""What load to put on the server: the workload, its service levels, the capacity search."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from perfgate.profile.base import Strict

# Workload shapes shipped by name (``workload.preset``); a profile's own settings win.
PRESETS: dict[str, dict[str, object]] = {
    # the seeds' sweep: the shape that found a 4x speculative-decoding regression
    "seeds": {"input_len": 1000, "output_len": 500, "levels": [1, 2, 4, 8, 16, 32, 64, 100]},
}


class WorkloadSpec(Strict):
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
    prompts: Literal[
        "random", "shared-prefix", "dataset", "multi-turn", "structured", "tool-calls"
    ] = Field(
        "random",
        description="random: seeded words, no two prompts share a prefix; shared-prefix: "
        "every prompt of a level run starts with the same prefix_len tokens (a long common "
        "system prompt) and ends with its own words (exercises a prefix cache); dataset: "
        "first user turns of a ShareGPT-style JSONL file, each asking for as many tokens "
        "as its reply there had; multi-turn: its conversations replayed turn after turn, "
        "each turn resending the earlier ones (a worker sends a conversation's turns in "
        "order, each after the previous answer); structured: seeded questions about a "
        "city, each request asking for a JSON answer with a response_format (its JSON "
        "Schema), every answer judged against it (schema_valid_rate, gated); tool-calls: "
        "seeded weather questions, each request offering a get_weather function (tools, "
        "tool_choice auto), every answer judged a valid call or not (tool_call_valid_rate, "
        "gated). structured and tool-calls ask through chat (api = 'chat').",
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
        if self.prompts in ("structured", "tool-calls") and self.api != "chat":
            raise ValueError(
                f'prompts = "{self.prompts}" asks through chat (response_format and tools '
                'are chat fields): set api = "chat" in [workload]'
            )
        if self.prompts in ("structured", "tool-calls") and self.range_ratio:
            raise ValueError(
                f'range_ratio does not apply to prompts = "{self.prompts}" (questions of '
                "their own length, answers that end on their own)"
            )
        return self


class Slo(Strict):
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


class CapacitySpec(Strict):
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
