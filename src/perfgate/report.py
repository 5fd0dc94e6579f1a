"""Rendering only: the concurrency table and the run JSON. Decides nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from perfgate.baseline import Baseline, Check, figure_key, write_json_atomic
from perfgate.engines import Fact
from perfgate.errors import PerfgateError
from perfgate.metrics import LevelMetrics, Measurement

RUN_SCHEMA_VERSION = 1
HEADER = (
    f"{'C':>4} | {'Agg tok/s':>10} | {'Per-req tok/s':>14} | {'TTFT(s)':>8} | "
    f"{'Tokens':>8} | {'Wall(s)':>8} | {'Ok':>4} | {'Fail':>4}"
)
ACCEPT_HEADER = f" | {'Accept%':>7}"
BASELINE_HEADER = f" | {'Base agg':>9} | {'Δ agg%':>7} | {'Base per-req':>12} | {'Δ per-req%':>10}"


class RunRecord(BaseModel):
    """Everything one perfgate run measured, enough to recompute every metric."""

    schema_version: int = RUN_SCHEMA_VERSION
    perfgate_version: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    status: str = Field("running", description="running, passed, failed or interrupted.")
    profile: dict[str, Any]
    profile_digest: str
    engine: str
    engine_version: str = "unknown"
    launcher: str
    base_url: str = ""
    hardware: dict[str, Any] = Field(default_factory=dict)
    git_commit: str | None = None
    measurements: dict[str, Measurement] = Field(default_factory=dict)
    checks: list[Check] = Field(default_factory=list)
    facts: dict[str, Fact] = Field(
        default_factory=dict, description="The server's configuration facts (see diagnose)."
    )
    notes: list[str] = Field(default_factory=list)

    def write(self, path: Path) -> None:
        """Write atomically as JSON."""
        write_json_atomic(path, self.model_dump_json(indent=1) + "\n")


def load_run(path: Path) -> RunRecord:
    """Read a run JSON (a clear error when the file is not one this version can read)."""
    try:
        return RunRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        first = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise PerfgateError(
            f"{path} is not a perfgate run JSON of schema {RUN_SCHEMA_VERSION} "
            f"({exc.error_count()} problems, first: {first})"
        ) from exc


def _fmt(value: float | None, width: int, decimals: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


def _delta(measured: float | None, base: float | None) -> str:
    if measured is None or base is None:
        return "-"
    return f"{(measured - base) / base * 100:+.1f}"


def render_table(
    measurement: str,
    levels: list[LevelMetrics],
    baseline: Baseline | None,
    not_run: list[int] | None = None,
    accept_rates: list[float | None] | None = None,
) -> str:
    """The concurrency table, one row per level, with baseline and Δ% where one exists."""
    expected = baseline.metrics if baseline else {}
    spec = accept_rates is not None and any(r is not None for r in accept_rates)
    header = HEADER + (BASELINE_HEADER if baseline else "") + (ACCEPT_HEADER if spec else "")
    lines = [header, "-" * len(header)]
    for index, m in enumerate(levels):
        row = (
            f"{m.concurrency:>4} | {m.agg_tok_s:>10.2f} | "
            f"{_fmt(m.per_request_tok_s.mean, 14, 2)} | {_fmt(m.ttft_s.mean, 8, 3)} | "
            f"{m.output_tokens:>8} | {m.wall_s:>8.2f} | {m.ok:>4} | {m.fail:>4}"
        )
        if baseline:
            agg = expected.get(figure_key(measurement, m.concurrency, "agg_tok_s"))
            per = expected.get(figure_key(measurement, m.concurrency, "per_request_tok_s"))
            agg_v = agg.value if agg else None
            per_v = per.value if per else None
            row += (
                f" | {_fmt(agg_v, 9, 2)} | {_delta(m.agg_tok_s, agg_v):>7} | "
                f"{_fmt(per_v, 12, 2)} | {_delta(m.per_request_tok_s.mean, per_v):>10}"
            )
        if spec and accept_rates is not None:
            rate = accept_rates[index]
            row += f" | {_fmt(None if rate is None else rate * 100, 7, 1)}"
        lines.append(row)
    for c in not_run or []:
        lines.append(f"{c:>4} | {'not run':>10} |")
    return "\n".join(lines)
