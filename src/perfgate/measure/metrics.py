"""Pure functions from request records to metrics. Every figure is defined here, once.

Definitions (also in docs/metrics.md):

- **output tokens** of a request: ``usage.completion_tokens`` from the server; where a
  server sends no usage, the number of token-bearing chunks.
- **aggregate tok/s** of a level: total output tokens of its successful requests divided
  by the level's wall time (first measured request sent to last one finished).
- **per-request tok/s**: a request's output tokens divided by its end-to-end latency
  (sending to last byte, TTFT included); reported as the mean over successful requests.
- **TTFT**: sending (the request's last byte written) to the first chunk that carries
  content or reasoning text.
- **client delay**: the harness's own time from starting a request to sending it
  (connection setup included); not part of TTFT or latency.
- **open loop** (a request rate): TTFT and latency count from the request's scheduled
  time instead, so a wait before sending (a full cap, a lagging client) is in them, and
  the client delay counts from the scheduled time too.
- **TPOT**: (latency - TTFT) / (output tokens - 1), per request.
- **ITL**: gaps between consecutive token-bearing chunks, pooled over requests.
- **end-to-end latency**: sending to the last byte of the response.
- **request throughput** of a level: its successful requests divided by its wall time.
- **SLO met** (with service levels set): the share of a level's measured requests that
  succeeded with TTFT, TPOT and end-to-end latency each within its level; **goodput
  tok/s**: their output tokens divided by the level's wall time.
- Percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_serializer, field_validator

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.load.level import LevelRun
from perfgate.measure.telemetry import GpuTelemetry
from perfgate.profile import Slo


class Distribution(BaseModel):
    """Mean, median, 90th and 99th percentile of a set of samples (None when empty)."""

    mean: float | None = Field(None, description="Arithmetic mean.")
    p50: float | None = Field(None, description="Median.")
    p90: float | None = Field(None, description="90th percentile (None in run JSONs before it).")
    p99: float | None = Field(None, description="99th percentile.")
    n: int = Field(0, description="Number of samples.")


class LevelMetrics(BaseModel):
    """Figures of one concurrency level."""

    concurrency: int = Field(description="Concurrent requests in flight.")
    ok: int = Field(description="Requests that completed without error.")
    fail: int = Field(description="Requests that failed (error, HTTP status, deadline).")
    output_tokens: int = Field(description="Output tokens of successful requests.")
    input_tokens_mean: float | None = Field(None, description="Mean usage.prompt_tokens.")
    wall_s: float = Field(description="First measured request sent to last one finished.")
    agg_tok_s: float = Field(description="output_tokens / wall_s.")
    per_request_tok_s: Distribution = Field(description="Output tokens / latency, per request.")
    ttft_s: Distribution = Field(description="Time to first token-bearing chunk.")
    tpot_s: Distribution = Field(description="Time per output token after the first.")
    itl_s: Distribution = Field(description="Gaps between token-bearing chunks.")
    latency_s: Distribution = Field(description="End-to-end request latency.")
    client_delay_s: Distribution = Field(
        default_factory=Distribution,
        description="The harness's time from starting a request to sending its last byte.",
    )
    usage_chunk_mismatches: int = Field(
        0,
        description="Successful requests whose usage.completion_tokens differs from the "
        "number of token-bearing chunks (engines may pack several tokens in one chunk).",
    )
    chunks: int = Field(0, description="Token-bearing chunks of successful requests.")
    tokens_per_chunk: float | None = Field(
        None,
        description="Output tokens per token-bearing chunk over successful requests with "
        "usage: 1.0 when each chunk carries one token, more when a speculative engine packs "
        "accepted drafts into one chunk.",
    )
    errors: list[str] = Field(default_factory=list, description="Distinct error messages.")
    reconnects: int = Field(
        0,
        description="Requests sent again at once because their kept connection had been "
        "closed by the server (before any response byte).",
    )


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted samples, linear interpolation."""
    if not sorted_samples:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_samples) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def distribution(samples: Sequence[float]) -> Distribution:
    """Summary of samples."""
    if not samples:
        return Distribution()
    ordered = sorted(samples)
    return Distribution(
        mean=sum(ordered) / len(ordered),
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        p99=percentile(ordered, 99),
        n=len(ordered),
    )


def request_tok_s(record: RequestRecord) -> float | None:
    """Output tokens per second of one request, end to end."""
    return record.output_tokens / record.latency if record.latency > 0 else None


def request_tpot(record: RequestRecord) -> float | None:
    """Time per output token after the first, of one request."""
    ttft = record.ttft
    if ttft is None or record.output_tokens < 2:
        return None
    return (record.latency - ttft) / (record.output_tokens - 1)


def inter_token_latencies(record: RequestRecord) -> list[float]:
    """Gaps between consecutive token-bearing chunks."""
    times = record.token_times
    return [b - a for a, b in itertools.pairwise(times)]


def tokens_per_chunk(records: Sequence[RequestRecord]) -> float | None:
    """Usage tokens over token-bearing chunks, over the records that report usage."""
    counted = [r for r in records if r.completion_tokens is not None and r.token_times]
    chunks = sum(len(r.token_times) for r in counted)
    return sum(r.completion_tokens or 0 for r in counted) / chunks if chunks else None


def level_metrics(level: LevelRun) -> LevelMetrics:
    """All figures of one level from its raw records."""
    ok = [r for r in level.records if r.ok]
    failed = [r for r in level.records if not r.ok]
    tokens = sum(r.output_tokens for r in ok)
    wall = level.wall_s
    tok_s = [v for r in ok if (v := request_tok_s(r)) is not None]
    ttft = [v for r in ok if (v := r.ttft) is not None]
    tpot = [v for r in ok if (v := request_tpot(r)) is not None]
    itl = [gap for r in ok for gap in inter_token_latencies(r)]
    prompt_tokens = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    mismatches = sum(
        1
        for r in ok
        if r.completion_tokens is not None and r.completion_tokens != len(r.token_times)
    )
    return LevelMetrics(
        concurrency=level.concurrency,
        ok=len(ok),
        fail=len(failed),
        output_tokens=tokens,
        input_tokens_mean=sum(prompt_tokens) / len(prompt_tokens) if prompt_tokens else None,
        wall_s=wall,
        agg_tok_s=tokens / wall if wall > 0 else 0.0,
        per_request_tok_s=distribution(tok_s),
        ttft_s=distribution(ttft),
        tpot_s=distribution(tpot),
        itl_s=distribution(itl),
        latency_s=distribution([r.latency for r in ok]),
        client_delay_s=distribution(
            [d for r in level.records if (d := r.client_delay) is not None]
        ),
        usage_chunk_mismatches=mismatches,
        chunks=sum(len(r.token_times) for r in ok),
        tokens_per_chunk=tokens_per_chunk(ok),
        errors=sorted({r.error for r in failed if r.error}),
        reconnects=sum(r.reconnects for r in level.records),
    )


def meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether a request succeeded and met every service level set (a one-token output
    has no TPOT to miss)."""
    if not record.ok:
        return False
    ttft, tpot = record.ttft, request_tpot(record)
    return not (
        (slo.ttft_s is not None and (ttft is None or ttft > slo.ttft_s))
        or (slo.tpot_s is not None and tpot is not None and tpot > slo.tpot_s)
        or (slo.latency_s is not None and record.latency > slo.latency_s)
    )


class Goodput(BaseModel):
    """How many of a level run's measured requests met the service levels, and their
    output tokens per second of the run's wall time."""

    slo: Slo = Field(description="The service levels judged.")
    requests: int = Field(description="Measured requests, failed ones included.")
    met: int = Field(description="Requests that succeeded and met every service level.")
    good_tokens: int = Field(description="Output tokens of the requests that met them.")
    wall_s: float = Field(description="The level run's wall time.")

    @property
    def met_share(self) -> float | None:
        """met / requests."""
        return self.met / self.requests if self.requests else None

    @property
    def goodput_tok_s(self) -> float | None:
        """good_tokens / wall_s."""
        return self.good_tokens / self.wall_s if self.wall_s > 0 else None


def goodput(level: LevelRun, slo: Slo) -> Goodput:
    """A level run's requests judged against ``slo``."""
    good = [r for r in level.records if meets(r, slo)]
    return Goodput(
        slo=slo,
        requests=len(level.records),
        met=len(good),
        good_tokens=sum(r.output_tokens for r in good),
        wall_s=level.wall_s,
    )


class SpecStats(BaseModel):
    """Speculative decoding over exactly one measured level run (counter deltas)."""

    drafts: float = Field(description="Draft rounds.")
    draft_tokens: float = Field(description="Tokens proposed by the drafter.")
    accepted: float = Field(description="Proposed tokens the target model accepted.")
    accepted_per_position: list[float] = Field(
        default_factory=list, description="Accepted tokens by draft position."
    )

    @property
    def accept_rate(self) -> float | None:
        """accepted / draft tokens."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_accept_length(self) -> float | None:
        """1 + accepted / drafts: tokens gained per target forward pass."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_rates(self) -> list[float]:
        """Acceptance rate at each draft position (accepted there / drafts)."""
        return [a / self.drafts for a in self.accepted_per_position] if self.drafts else []


MICROSECONDS = 1_000_000


def _offsets_us(record: RequestRecord) -> list[int]:
    return [round((t - record.start) * MICROSECONDS) for t in record.token_times]


def _times(start: float, offsets_us: Sequence[int]) -> list[float]:
    return [start + offset / MICROSECONDS for offset in offsets_us]


def quantized(record: RequestRecord) -> RequestRecord:
    """The record with its token times rounded to whole microseconds after its start,
    exactly as the run JSON stores them (so stored metrics recompute identically)."""
    return dataclasses.replace(record, token_times=_times(record.start, _offsets_us(record)))


def stored_record(record: RequestRecord) -> dict[str, Any]:
    """A record as the run JSON keeps it: token times as ``token_gaps_us``, integer
    microseconds (the first from ``start``, then between chunks)."""
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    offsets = _offsets_us(record)
    del data["token_times"]
    data["token_gaps_us"] = [b - a for a, b in itertools.pairwise([0, *offsets])]
    return data


def loaded_record(data: dict[str, Any]) -> RequestRecord:
    """A record read back from :func:`stored_record` (or schema 1's ``token_times``)."""
    data = dict(data)
    if "token_gaps_us" in data:
        data["token_times"] = _times(
            data["start"], list(itertools.accumulate(data.pop("token_gaps_us")))
        )
    return RequestRecord(**data)


class LevelData(BaseModel):
    """One level of a measurement: raw records and the metrics derived from them."""

    concurrency: int
    repeat: int = Field(0, description="Repeat index of this level (0 = first run).")
    start: float = Field(description="perf_counter seconds when measured requests began.")
    end: float = Field(description="perf_counter seconds when the last one ended.")
    deadline_hit: bool = False
    warmup_requests: int = 0
    records: list[RequestRecord]
    metrics: LevelMetrics
    spec: SpecStats | None = Field(None, description="Speculative decoding in this run.")
    harness: HarnessStats | None = Field(
        None, description="The harness's own loop lag and CPU during the measured requests."
    )
    goodput: Goodput | None = Field(
        None, description="Requests that met the profile's service levels (when it sets them)."
    )
    rate: float | None = Field(
        None,
        description="Open loop: requests a second sent on schedule (concurrency is then the "
        "cap on requests in flight, 0 for none).",
    )
    gpu: GpuTelemetry | None = Field(
        None, description="The host's GPUs during the measured requests (NVML), when read."
    )

    @property
    def level(self) -> int | float:
        """What identifies the level in its measurement: its request rate (open loop),
        else its concurrency."""
        return self.concurrency if self.rate is None else self.rate

    @field_serializer("records")
    def _store_records(self, records: list[RequestRecord]) -> list[dict[str, Any]]:
        return [stored_record(r) for r in records]

    @field_validator("records", mode="before")
    @classmethod
    def _load_records(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [loaded_record(r) if isinstance(r, dict) else r for r in value]
        return value

    @classmethod
    def from_run(
        cls,
        level: LevelRun,
        repeat: int = 0,
        spec: SpecStats | None = None,
        slo: Slo | None = None,
        gpu: GpuTelemetry | None = None,
    ) -> LevelData:
        """Keep a level's raw records (token times to the microsecond) with its metrics
        (and its goodput, given service levels)."""
        level = dataclasses.replace(level, records=[quantized(r) for r in level.records])
        return cls(
            goodput=goodput(level, slo) if slo is not None else None,
            spec=spec,
            concurrency=level.concurrency,
            repeat=repeat,
            start=level.start,
            end=level.end,
            deadline_hit=level.deadline_hit,
            warmup_requests=len(level.warmup_records),
            records=level.records,
            metrics=level_metrics(level),
            harness=level.harness,
            rate=level.rate,
            gpu=gpu,
        )

    def recomputed(self) -> LevelMetrics:
        """Metrics recomputed from the stored records."""
        return level_metrics(
            LevelRun(
                concurrency=self.concurrency,
                records=self.records,
                start=self.start,
                end=self.end,
                deadline_hit=self.deadline_hit,
            )
        )


class Probe(BaseModel):
    """One level a capacity search ran: its requests against the service levels."""

    level: int | float = Field(description="Requests in flight, or requests a second.")
    goodput: Goodput
    ttft_p99_s: float | None = None
    latency_p99_s: float | None = None
    met: bool = Field(description="slo_met reached the search's target.")

    @classmethod
    def of(cls, data: LevelData, target: float) -> Probe:
        """A probe from its level run (which was judged against the service levels)."""
        assert data.goodput is not None, "a capacity probe needs service levels"
        share = data.goodput.met_share
        return cls(
            level=data.level,
            goodput=data.goodput,
            ttft_p99_s=data.metrics.ttft_s.p99,
            latency_p99_s=data.metrics.latency_s.p99,
            met=share is not None and share >= target,
        )


class CapacitySearch(BaseModel):
    """One capacity search: the levels it probed, in order, and what it found."""

    by: str = Field(description="'rate' (requests a second) or 'concurrency'.")
    target: float = Field(description="The share of requests that had to meet [slo].")
    high: float = Field(description="The highest level the search would probe.")
    probes: list[Probe] = Field(default_factory=list)
    capacity: float | None = Field(
        None, description="The highest level probed whose slo_met reached the target."
    )

    @property
    def at_high(self) -> bool:
        """The search's highest level still met the target: the capacity is at least it."""
        return self.capacity is not None and self.capacity >= self.high

    def level_text(self, level: float) -> str:
        """A level of this search in words: ``C=4``, ``6.25 req/s``."""
        return f"C={level:g}" if self.by == "concurrency" else f"{level:g} req/s"

    def describe(self) -> str:
        """What the search found, in words."""
        if self.capacity is None:
            return f"did not finish ({len(self.probes)} levels probed)"
        probed = ", ".join(
            f"{self.level_text(p.level)} {p.goodput.met_share or 0:.2f}" for p in self.probes
        )
        if self.capacity == 0:
            found = f"no level met the target {self.target:.2f}"
        else:
            found = f"capacity {self.level_text(self.capacity)}"
            if self.at_high:
                found += " (its highest level still met the target: at least this)"
        return f"{found}; slo_met by level: {probed}"


class Measurement(BaseModel):
    """A named measurement (``single``, ``sweep``): its level runs (repeats included);
    a capacity measurement holds its searches instead."""

    levels: list[LevelData] = Field(default_factory=list)
    searches: list[CapacitySearch] = Field(
        default_factory=list, description="Capacity searches, one per run (repeats included)."
    )
    not_run: list[int | float] = Field(default_factory=list)
    aborted: str | None = Field(None, description="Why the sweep stopped early, if it did.")

    def by_concurrency(self) -> dict[int | float, list[LevelData]]:
        """Level runs grouped by level (concurrency, or an open-loop level's rate: a
        float), in the order they ran."""
        groups: dict[int | float, list[LevelData]] = {}
        for level in self.levels:
            groups.setdefault(level.level, []).append(level)
        return groups

    def recomputed(self) -> Measurement:
        """The same measurement with every level's metrics recomputed from its records."""
        levels = [lv.model_copy(update={"metrics": lv.recomputed()}) for lv in self.levels]
        return self.model_copy(update={"levels": levels})
