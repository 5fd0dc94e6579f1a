"""Baselines: the figures a profile must hold, and the compare step.

A baseline file is ``baselines/<profile>.json``. Each gated figure has a key
``<measurement>.c<C>.<figure>`` (e.g. ``sweep.c4.agg_tok_s``), a value, a relative
tolerance and a direction. ``compare`` is the one place that decides pass or fail.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfgate.errors import BaselineError
from perfgate.metrics import LevelMetrics

SCHEMA_VERSION = 1
Direction = Literal["higher", "lower"]
Verdict = Literal["pass", "regressed", "improved", "no-baseline"]

# figure name -> (direction, unit, default relative tolerance)
GATED_FIGURES: dict[str, tuple[Direction, str, float]] = {
    "agg_tok_s": ("higher", "tok/s", 0.35),
    "per_request_tok_s": ("higher", "tok/s", 0.35),
    "ttft_s": ("lower", "s", 0.75),
}


class Expectation(BaseModel):
    """One gated figure: the value to hold and how far it may drift."""

    model_config = ConfigDict(extra="forbid")
    value: float = Field(gt=0, description="The baseline figure.")
    tolerance: float = Field(ge=0, lt=10, description="Allowed relative drift (0.1 = 10%).")
    direction: Direction = Field(description="Whether higher or lower is better.")
    unit: str = Field("", description="Unit, for messages.")


class Baseline(BaseModel):
    """A profile's baseline file."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = Field(description="Version of this file's schema.")
    profile: str = Field(description="Profile the figures belong to.")
    hardware: str = Field(description="Hardware label of the profile when recorded.")
    provenance: dict[str, object] = Field(
        default_factory=dict, description="Where the figures came from."
    )
    metrics: dict[str, Expectation] = Field(description="Gated figures by key.")


class Check(BaseModel):
    """The outcome of comparing one measured figure with its baseline."""

    key: str
    measured: float
    verdict: Verdict
    baseline: float | None = None
    tolerance: float | None = None
    direction: Direction = "higher"
    unit: str = ""
    delta_pct: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this check fails the build."""
        return self.verdict == "regressed"

    def message(self) -> str:
        """One line naming metric, measured, baseline, tolerance and delta."""
        unit = f" {self.unit}" if self.unit else ""
        if self.baseline is None or self.tolerance is None or self.delta_pct is None:
            return f"{self.key}: measured {self.measured:.4g}{unit} (no baseline figure)"
        better = "higher" if self.direction == "higher" else "lower"
        limit = threshold(self.baseline, self.tolerance, self.direction)
        bound = "min" if self.direction == "higher" else "max"
        return (
            f"{self.key}: measured {self.measured:.4g}{unit}, baseline {self.baseline:.4g}{unit} "
            f"(tolerance {self.tolerance:.0%}, {better} is better, {bound} {limit:.4g}), "
            f"Δ {self.delta_pct:+.1f}% → {self.verdict.upper()}"
        )


def threshold(value: float, tolerance: float, direction: Direction) -> float:
    """The worst acceptable figure."""
    return value * (1 - tolerance) if direction == "higher" else value * (1 + tolerance)


def compare(key: str, measured: float, expectation: Expectation | None) -> Check:
    """Judge one figure against its expectation."""
    if expectation is None:
        direction, unit, _ = GATED_FIGURES.get(key.rsplit(".", 1)[-1], ("higher", "", 0.0))
        return Check(
            key=key, measured=measured, verdict="no-baseline", direction=direction, unit=unit
        )
    value, tol, direction = expectation.value, expectation.tolerance, expectation.direction
    delta = (measured - value) / value * 100.0
    limit = threshold(value, tol, direction)
    better_limit = value * (1 + tol) if direction == "higher" else value * (1 - tol)
    if (direction == "higher" and measured < limit) or (direction == "lower" and measured > limit):
        verdict: Verdict = "regressed"
    elif (direction == "higher" and measured > better_limit) or (
        direction == "lower" and measured < better_limit
    ):
        verdict = "improved"
    else:
        verdict = "pass"
    return Check(
        key=key,
        measured=measured,
        verdict=verdict,
        baseline=value,
        tolerance=tol,
        direction=direction,
        unit=expectation.unit,
        delta_pct=delta,
    )


def figure_key(measurement: str, concurrency: int, figure: str) -> str:
    """The key of one gated figure, e.g. ``sweep.c4.agg_tok_s``."""
    return f"{measurement}.c{concurrency}.{figure}"


def gated_figures(measurement: str, level: LevelMetrics) -> dict[str, float]:
    """The figures of a level that baselines hold (means for per-request figures)."""
    values = {
        "agg_tok_s": level.agg_tok_s,
        "per_request_tok_s": level.per_request_tok_s.mean,
        "ttft_s": level.ttft_s.mean,
    }
    return {
        figure_key(measurement, level.concurrency, name): v
        for name, v in values.items()
        if v is not None and v > 0
    }


def compare_level(measurement: str, level: LevelMetrics, baseline: Baseline | None) -> list[Check]:
    """Every gated figure of a level, judged."""
    expected = baseline.metrics if baseline else {}
    return [
        compare(key, value, expected.get(key))
        for key, value in gated_figures(measurement, level).items()
    ]


def _field_path(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
        for err in exc.errors()
    )


def load_baseline(path: Path) -> Baseline | None:
    """Read a baseline file; None when it does not exist yet."""
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not valid JSON: {exc}") from exc
    try:
        return Baseline.model_validate(raw)
    except ValidationError as exc:
        raise BaselineError(
            f"baseline {path} is invalid: {_field_path(exc)}. Fix it, or re-record it with "
            "`pytest -m perf --update-baselines`."
        ) from exc


def build_baseline(
    profile: str,
    hardware: str,
    measured: dict[str, float],
    previous: Baseline | None,
    provenance: dict[str, object],
) -> Baseline:
    """A new baseline from measured figures, keeping earlier tolerances where they exist."""
    metrics: dict[str, Expectation] = {}
    for key, value in measured.items():
        direction, unit, default_tol = GATED_FIGURES[key.rsplit(".", 1)[-1]]
        old = previous.metrics.get(key) if previous else None
        metrics[key] = Expectation(
            value=round(value, 6),
            tolerance=old.tolerance if old else default_tol,
            direction=direction,
            unit=unit,
        )
    prov = {"recorded_at": datetime.now(UTC).isoformat(timespec="seconds"), **provenance}
    return Baseline(
        schema_version=SCHEMA_VERSION,
        profile=profile,
        hardware=hardware,
        provenance=prov,
        metrics=metrics,
    )


def write_json_atomic(path: Path, payload: str) -> None:
    """Write a file so readers see the old or the new content, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_baseline(path: Path, baseline: Baseline) -> None:
    """Write a baseline atomically."""
    write_json_atomic(path, baseline.model_dump_json(indent=2) + "\n")


def diff_lines(old: Baseline | None, new: Baseline) -> list[str]:
    """Old → new, one line per figure."""
    lines = []
    for key, exp in new.metrics.items():
        prev = old.metrics.get(key) if old else None
        if prev is None:
            lines.append(f"  {key}: (new) → {exp.value:.4g} {exp.unit}")
        else:
            pct = (exp.value - prev.value) / prev.value * 100
            lines.append(f"  {key}: {prev.value:.4g} → {exp.value:.4g} {exp.unit} ({pct:+.1f}%)")
    return lines
