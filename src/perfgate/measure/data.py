"""What the run JSON keeps of each level run: its request records (a compact codec of
integer microsecond gaps), metrics, goodput, acceptance and telemetry, and the
measurement of levels or capacity searches they belong to."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_serializer, field_validator

from perfgate.client import RequestRecord
from perfgate.client.monitor import HarnessStats
from perfgate.engines import SpecStats
from perfgate.load.level import LevelRun
from perfgate.measure.metrics import Goodput, LevelMetrics, goodput, level_metrics
from perfgate.measure.server import ServerSeries
from perfgate.measure.telemetry import GpuTelemetry
from perfgate.profile import Slo

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
    server: ServerSeries | None = Field(
        None, description="The server's own metrics during the measured requests, when read."
    )
    samples: dict[str, Any] | None = Field(
        None,
        description="Plug-in samplers' readings over the measured requests, by sampler name "
        "(perfgate.measure.samplers.SAMPLERS); None when no plug-in sampler read anything.",
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
        server: ServerSeries | None = None,
        samples: dict[str, Any] | None = None,
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
            server=server,
            samples=samples or None,
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
