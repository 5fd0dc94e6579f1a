"""Pure functions from request records to metrics. Every figure is defined here, once.

Definitions (also in docs/metrics.md):

- **output tokens** of a request: ``usage.completion_tokens`` from the server; where a
  server sends no usage, the number of token-bearing chunks.
- **aggregate tok/s** of a level: total output tokens of its successful requests divided
  by the level's wall time (first measured request sent to last one finished).
- **per-request tok/s**: a request's output tokens divided by its end-to-end latency
  (sending to last byte, TTFT included); gated as the median over a run's successful
  requests.
- **TTFT**: sending (the request's last byte written) to the first chunk that carries
  content or reasoning text.
- **TTFA** (time to the first answer token): sending to the first chunk that carries
  answer text (``content``; a completion's text), a reasoning model's thinking skipped;
  the same as TTFT for a model that does not reason.
- **reasoning tokens** of a request: ``usage.completion_tokens_details.reasoning_tokens``
  where the server gives it, else the chunks that carried reasoning text; a level has
  them only where some request reasoned.
- **schema valid rate** (a workload whose requests carry a ``response_format``: prompts
  ``structured``): the share of a level's successful requests whose answer is JSON valid
  against the schema asked; **tool-call valid rate** (requests that offer ``tools``:
  prompts ``tool-calls``): the share whose answer is a parsed call, each call of an
  offered function with arguments valid against its parameters, and no call text left
  in the content. A level has them only where its requests asked.
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
- Percentiles interpolate linearly between order statistics (numpy's default)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from perfgate.client import RequestRecord
from perfgate.load.level import LevelRun
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
    ttfa_s: Distribution = Field(
        default_factory=Distribution,
        description="Time to the first chunk carrying answer text, reasoning skipped.",
    )
    reasoning_tokens: Distribution = Field(
        default_factory=Distribution,
        description="Reasoning tokens per request (only where some request reasoned).",
    )
    latency_s: Distribution = Field(description="End-to-end request latency.")
    schema_valid_rate: float | None = Field(
        None,
        description="Share of successful requests whose answer is JSON valid against the "
        "response_format asked (None: the requests asked for none).",
    )
    tool_call_valid_rate: float | None = Field(
        None,
        description="Share of successful requests whose answer is a valid call of an "
        "offered function, no call text in its content (None: no tools offered).",
    )
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


def valid_rate(flags: Sequence[bool | None]) -> float | None:
    """The share of True among the judged (not None) answers; None when none was judged."""
    judged = [flag for flag in flags if flag is not None]
    return sum(judged) / len(judged) if judged else None


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
    ttfa = [v for r in ok if (v := r.ttfa) is not None]
    reasoned = any(r.reasoning_chunks or r.reasoning_tokens for r in ok)
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
        ttfa_s=distribution(ttfa),
        reasoning_tokens=distribution([r.thinking_tokens for r in ok] if reasoned else []),
        latency_s=distribution([r.latency for r in ok]),
        schema_valid_rate=valid_rate([r.schema_valid for r in ok]),
        tool_call_valid_rate=valid_rate([r.tool_call_valid for r in ok]),
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
