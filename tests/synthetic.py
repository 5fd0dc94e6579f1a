"""Synthetic level runs with exactly chosen figures, for the gate policy's tests and study."""

from __future__ import annotations

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.engines import SpecStats
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData, Measurement

TOKENS = 10


def level_run(
    c: int,
    tok_s: float,
    ttft_s: float = 0.1,
    *,
    repeat: int = 0,
    accept: float | None = None,
    fail: int = 0,
    harness_lag_s: float | None = None,
) -> LevelData:
    """One run of level C: c requests side by side, each with ``tok_s`` end to end (so the
    run's aggregate tok/s is c x tok_s) and TTFT ``ttft_s``; ``fail`` failed requests."""
    latency = TOKENS / tok_s
    records = [
        RequestRecord(
            index=i,
            start=0.0,
            end=latency,
            token_times=[ttft_s + (latency - ttft_s) * k / (TOKENS - 1) for k in range(TOKENS)],
            completion_tokens=TOKENS,
            prompt_tokens=8,
            finish_reason="length",
        )
        for i in range(c)
    ]
    records += [
        RequestRecord(index=c + i, start=0.0, end=0.1, error="HTTP 500") for i in range(fail)
    ]
    spec = None
    if accept is not None:
        spec = SpecStats(drafts=100, draft_tokens=400, accepted=400 * accept)
    harness = None if harness_lag_s is None else harness_stats(harness_lag_s * 1000)
    run = LevelRun(concurrency=c, records=records, start=0.0, end=latency, harness=harness)
    return LevelData.from_run(run, repeat, spec=spec)


def harness_stats(lag_ms: float, cpu_share: float = 0.01, processes: int = 1) -> HarnessStats:
    """The harness's own figures of a level run: loop lag p99 ``lag_ms`` (p50 half of it),
    ``cpu_share`` of a core over 10 s, in ``processes`` client processes."""
    lag = lag_ms / 1000
    return HarnessStats(
        loop_lag_p50_s=lag / 2,
        loop_lag_p99_s=lag,
        loop_lag_max_s=lag,
        ticks=100,
        cpu_s=cpu_share * 10,
        wall_s=10,
        processes=processes,
    )


def measurement(levels: dict[int, list[float]], **kwargs) -> Measurement:
    """A measurement whose level C has one run per given per-request tok/s."""
    m = Measurement()
    for c, values in levels.items():
        m.levels += [level_run(c, v, repeat=i, **kwargs) for i, v in enumerate(values)]
    return m
