"""``perfgate import``: peers' benchmark results as perfgate run JSON.

- ``vllm bench serve --save-result --save-detailed``: one JSON object per run, with each
  request's ``start_times``, ``ttfts``, ``itls``, ``latencies`` (seconds), ``input_lens``,
  ``output_lens`` and ``errors``. Every request becomes a perfgate record whose token
  times are its first token and then vLLM's inter-token gaps, so each figure is computed
  by perfgate's own definitions (``metrics.py``).
- AIPerf's ``profile_export.jsonl``: one record per request, with ``request_start_ns``,
  ``request_end_ns`` and per-request metrics (``time_to_first_token``,
  ``inter_chunk_latency``, ``output_sequence_length``...). The format is taken from
  AIPerf's documentation ("Working with Profile Export Files"), not from a file AIPerf
  wrote here. Token times are the first token, then each chunk's gap; a record with only
  the mean gap (``inter_token_latency``) has them spread evenly to its end.

Each file is one run of one level: files at the same concurrency (or request rate) are
repeats of it, so several files give a figure several runs, as ``--perf-repeats`` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perfgate import __version__
from perfgate.client.stream import RequestRecord
from perfgate.errors import PerfgateError
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData, Measurement
from perfgate.results.run import RunRecord

Format = Literal["vllm", "aiperf"]


@dataclass(frozen=True)
class ImportedLevel:
    """One imported file: its level run, what wrote it, the client's backend and the
    model it named."""

    run: LevelRun
    source: str
    engine: str
    model: str


def _error(path: Path, why: str) -> PerfgateError:
    return PerfgateError(f"perfgate import {path}: {why}")


def detect_format(path: Path, text: str) -> Format:
    """``vllm`` for a JSON object with vLLM's keys, ``aiperf`` for JSON lines of records."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            if "ttfts" in data or "num_prompts" in data:
                return "vllm"
            if "metrics" in data and "metadata" in data:
                return "aiperf"  # a single-record JSONL file
        first = stripped.splitlines()[0]
        try:
            record = json.loads(first)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict) and "metrics" in record:
            return "aiperf"
    raise _error(
        path,
        "neither a `vllm bench serve` result JSON nor AIPerf's profile_export.jsonl "
        "(pass --format vllm or --format aiperf to say which)",
    )


def _in_flight_peak(records: Sequence[RequestRecord]) -> int:
    """The most requests that were in flight at once."""
    events = sorted(
        [(r.start, 1) for r in records] + [(r.end, -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _level_run(records: list[RequestRecord], concurrency: int, rate: float | None) -> LevelRun:
    return LevelRun(
        concurrency=concurrency,
        records=records,
        start=min(r.start for r in records),
        end=max(r.end for r in records),
        rate=rate,
    )


def read_vllm_bench(path: Path, data: dict[str, Any]) -> ImportedLevel:
    """A ``vllm bench serve --save-result --save-detailed`` result."""
    missing = [k for k in ("start_times", "ttfts", "itls", "output_lens") if k not in data]
    if missing:
        raise _error(
            path,
            f"no per-request timings ({', '.join(missing)} missing): save the run with "
            "`vllm bench serve --save-result --save-detailed` (vLLM 0.11 or later keeps "
            "start_times)",
        )
    n = len(data["ttfts"])
    errors = data.get("errors") or [""] * n
    inputs = data.get("input_lens") or [None] * n
    records = []
    for i in range(n):
        start = float(data["start_times"][i])
        if errors[i]:  # vLLM's failed request: ttft 0, no gaps, its error's text
            records.append(RequestRecord(index=i, start=start, end=start, error=errors[i]))
            continue
        times = [start + float(data["ttfts"][i])]
        for gap in data["itls"][i]:
            times.append(times[-1] + float(gap))
        latencies = data.get("latencies")  # to the stream's end, past its last token
        records.append(
            RequestRecord(
                index=i,
                start=start,
                end=start + float(latencies[i]) if latencies else times[-1],
                token_times=times,
                prompt_tokens=inputs[i],
                completion_tokens=int(data["output_lens"][i]),
                finish_reason="unknown",
            )
        )
    rate = data.get("request_rate")
    rate = None if rate in (None, "inf") or not math.isfinite(float(rate)) else float(rate)
    limit = data.get("max_concurrency")
    concurrency = int(limit) if limit else (0 if rate is not None else len(records))
    return ImportedLevel(
        _level_run(records, concurrency, rate),
        f"vllm bench serve ({data.get('date', 'undated')})",
        str(data.get("backend") or data.get("endpoint_type") or "openai"),
        str(data.get("model_id", "")),
    )


def _metric(record: dict[str, Any], name: str) -> float | None:
    """An AIPerf record metric in seconds (or its plain value for counts)."""
    entry = (record.get("metrics") or {}).get(name)
    if entry is None:
        return None
    value = float(entry["value"] if isinstance(entry, dict) else entry)
    unit = entry.get("unit", "") if isinstance(entry, dict) else ""
    return value * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}.get(unit, 1.0)


def read_aiperf(path: Path, lines: Iterable[str], concurrency: int | None) -> ImportedLevel:
    """AIPerf's ``profile_export.jsonl`` (format from AIPerf's documentation)."""
    records = []
    model = ""
    rows = [json.loads(line) for line in lines if line.strip()]
    # epoch nanoseconds, counted from the first request so float seconds keep every digit
    origin = min((int(r["metadata"]["request_start_ns"]) for r in rows), default=0)
    for i, row in enumerate(rows):
        meta = row.get("metadata") or {}
        if meta.get("benchmark_phase", "profiling") == "warmup":
            continue
        start = (int(meta["request_start_ns"]) - origin) * 1e-9
        model = model or str(meta.get("model_name") or "")
        if row.get("error"):
            error = row["error"]
            message = (
                (error.get("message") or error.get("type")) if isinstance(error, dict) else None
            )
            records.append(
                RequestRecord(index=i, start=start, end=start, error=message or str(error))
            )
            continue
        latency = _metric(row, "request_latency")  # agrees with its token timings; the
        # epoch end can lie milliseconds later (AIPerf's documented example: 8 ms)
        end = start + latency if latency else (int(meta["request_end_ns"]) - origin) * 1e-9
        ttft = _metric(row, "time_to_first_token")
        tokens = _metric(row, "output_sequence_length")
        if ttft is None or tokens is None:
            raise _error(path, f"line {i + 1}: no time_to_first_token or output_sequence_length")
        first, count = start + ttft, max(int(tokens), 1)
        gaps = (row["metrics"].get("inter_chunk_latency") or {}).get("value")
        if isinstance(gaps, list):  # each chunk's gap (ms): the token times as they came
            times = [first]
            for gap in gaps:
                times.append(times[-1] + float(gap) * 1e-3)
        else:  # only the mean gap: spread evenly from the first token to the end
            step = (end - first) / (count - 1) if count > 1 else 0.0
            times = [first + k * step for k in range(count)]
        records.append(
            RequestRecord(
                index=i,
                start=start,
                end=end,
                token_times=times,
                prompt_tokens=(
                    int(v) if (v := _metric(row, "input_sequence_length")) is not None else None
                ),
                completion_tokens=count,
                finish_reason="unknown",
            )
        )
    if not records:
        raise _error(path, "no profiling records")
    level = concurrency or _in_flight_peak(records)
    return ImportedLevel(_level_run(records, level, None), "AIPerf", "openai", model)


def read_file(
    path: Path, fmt: Format | None = None, concurrency: int | None = None
) -> ImportedLevel:
    """One peer result file as one level run."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _error(path, f"cannot read it: {exc}") from exc
    fmt = fmt or detect_format(path, text)
    try:
        if fmt == "vllm":
            return read_vllm_bench(path, json.loads(text))
        return read_aiperf(path, text.splitlines(), concurrency)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise _error(path, f"not a readable {fmt} result ({type(exc).__name__}: {exc})") from exc


def imported_run(
    paths: Sequence[Path],
    name: str,
    fmt: Format | None = None,
    concurrency: int | None = None,
    hardware: str = "",
) -> RunRecord:
    """A perfgate run from peer result files: closed-loop levels under ``sweep``,
    request rates under ``rate``; files at the same level are its repeats, in order."""
    if not paths:
        raise PerfgateError("perfgate import: no file given")
    imported = [read_file(p, fmt, concurrency) for p in paths]
    measurements: dict[str, Measurement] = {}
    repeats: dict[tuple[str, float], int] = {}
    for item in imported:
        kind = "rate" if item.run.rate is not None else "sweep"
        level = item.run.rate if item.run.rate is not None else item.run.concurrency
        repeat = repeats.get((kind, level), 0)
        repeats[(kind, level)] = repeat + 1
        measurement = measurements.setdefault(kind, Measurement())
        measurement.levels.append(LevelData.from_run(item.run, repeat=repeat))
    for measurement in measurements.values():
        measurement.levels.sort(key=lambda lv: (lv.level, lv.repeat))
    engines = sorted({i.engine for i in imported})
    models = sorted({i.model for i in imported if i.model})
    sources = sorted({i.source for i in imported})
    failed = sum(lv.metrics.fail for m in measurements.values() for lv in m.levels)
    return RunRecord(
        perfgate_version=__version__,
        status="imported",
        profile={"name": name, "model": {"name": ", ".join(models)}, "imported": True},
        profile_digest="",
        engine=engines[0] if len(engines) == 1 else ", ".join(engines),
        launcher="imported",
        hardware={"key": hardware} if hardware else {},
        measurements=measurements,
        notes=[
            f"imported by perfgate {__version__} from {len(paths)} file(s): "
            + ", ".join(str(p) for p in paths)
            + f" ({'; '.join(sources)})",
            *([f"{failed} request(s) failed in the imported runs"] if failed else []),
        ],
    )
