"""Baselines: the figures a profile must hold on given hardware, and the compare step.

Baselines live in ``baselines/<profile>/<hardware-key>.json``. Each gated figure
has a key ``<measurement>.c<C>.<figure>`` (e.g. ``sweep.c4.agg_tok_s``), a value, a
relative tolerance, a direction and an optional absolute floor or ceiling.
``compare`` is the one place that turns samples into a verdict.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfgate.engines import Fact
from perfgate.errors import BaselineError
from perfgate.metrics import LevelData, Measurement, request_tok_s
from perfgate.stats import Direction, Verdict, decide, estimate, limits

SCHEMA_VERSION = 1
CheckVerdict = Verdict | Literal["no-baseline"]

# figure name -> (direction, unit, default relative tolerance)
GATED_FIGURES: dict[str, tuple[Direction, str, float]] = {
    "agg_tok_s": ("higher", "tok/s", 0.35),
    "per_request_tok_s": ("higher", "tok/s", 0.35),
    "ttft_s": ("lower", "s", 0.75),
    "accept_rate": ("higher", "", 0.2),
}
KEY_PATTERN = re.compile(
    r"^(?P<measurement>[a-z][a-z0-9_]*)\.c(?P<c>[1-9][0-9]*)\.(?P<figure>\w+)$"
)


class Expectation(BaseModel):
    """One gated figure: the value to hold and how far it may drift."""

    model_config = ConfigDict(extra="forbid")
    value: float = Field(gt=0, description="The baseline figure (median when recorded).")
    tolerance: float = Field(ge=0, lt=10, description="Allowed relative drift (0.1 = 10%).")
    direction: Direction = Field(description="Whether higher or lower is better.")
    unit: str = Field("", description="Unit, for messages.")
    floor: float | None = Field(None, ge=0, description="Absolute minimum (higher is better).")
    ceiling: float | None = Field(None, gt=0, description="Absolute maximum (lower is better).")


class Baseline(BaseModel):
    """A profile's baseline on one hardware key."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = Field(description="Version of this file's schema.")
    profile: str = Field(description="Profile the figures belong to.")
    hardware: str = Field(description="Hardware key the figures were recorded on.")
    provenance: dict[str, object] = Field(
        default_factory=dict, description="Where the figures came from."
    )
    metrics: dict[str, Expectation] = Field(description="Gated figures by key.")
    facts: dict[str, Fact] = Field(
        default_factory=dict,
        description="The server's configuration when recorded (from its log, command line "
        "and endpoints, plus measured acceptance), compared by the diagnosis of a failure.",
    )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, metrics: dict[str, Expectation]) -> dict[str, Expectation]:
        for key in metrics:
            match = KEY_PATTERN.match(key)
            if not match or match["figure"] not in GATED_FIGURES:
                raise ValueError(
                    f"unknown metric {key!r}: keys are <measurement>.c<C>.<figure> with figure "
                    f"one of {', '.join(GATED_FIGURES)}"
                )
        return metrics


class Check(BaseModel):
    """The outcome of comparing one measured figure with its baseline."""

    key: str
    verdict: CheckVerdict
    measured: float = Field(description="Median of the samples.")
    low: float = Field(description="Lower end of the 95% bootstrap interval.")
    high: float = Field(description="Upper end of the 95% bootstrap interval.")
    samples: int = 1
    baseline: float | None = None
    tolerance: float | None = None
    limit: float | None = Field(None, description="Worst acceptable figure.")
    direction: Direction = "higher"
    unit: str = ""
    delta_pct: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this check fails the build (regressed, or still inconclusive)."""
        return self.verdict in ("regressed", "inconclusive")

    def message(self) -> str:
        """One line naming metric, measured (with interval), baseline, tolerance and Δ%."""
        unit = f" {self.unit}" if self.unit else ""
        spread = (
            f" [95% CI {self.low:.4g}..{self.high:.4g}, n={self.samples}]"
            if self.samples > 1
            else " (n=1)"
        )
        measured = f"measured {self.measured:.4g}{unit}{spread}"
        if self.baseline is None or self.delta_pct is None or self.limit is None:
            return f"{self.key}: {measured} (no baseline figure)"
        better = "higher" if self.direction == "higher" else "lower"
        bound = "min" if self.direction == "higher" else "max"
        return (
            f"{self.key}: {measured}, baseline {self.baseline:.4g}{unit} "
            f"(tolerance {self.tolerance:.0%}, {better} is better, {bound} {self.limit:.4g}), "
            f"Δ {self.delta_pct:+.1f}% → {self.verdict.upper()}"
        )


def compare(key: str, samples: list[float], expectation: Expectation | None) -> Check:
    """Judge one figure's samples against its expectation."""
    est = estimate(samples)
    base = {"key": key, "measured": est.median, "low": est.low, "high": est.high, "samples": est.n}
    if expectation is None:
        direction, unit, _ = GATED_FIGURES.get(key.rsplit(".", 1)[-1], ("higher", "", 0.0))
        return Check(**base, verdict="no-baseline", direction=direction, unit=unit)
    exp = expectation
    worst, better = limits(
        exp.value, exp.tolerance, exp.direction, floor=exp.floor, ceiling=exp.ceiling
    )
    return Check(
        **base,
        verdict=decide(est, worst, better, exp.direction),
        baseline=exp.value,
        tolerance=exp.tolerance,
        limit=worst,
        direction=exp.direction,
        unit=exp.unit,
        delta_pct=(est.median - exp.value) / exp.value * 100.0,
    )


def figure_key(measurement: str, concurrency: int, figure: str) -> str:
    """The key of one gated figure, e.g. ``sweep.c4.agg_tok_s``."""
    return f"{measurement}.c{concurrency}.{figure}"


def level_samples(measurement: str, runs: list[LevelData]) -> dict[str, list[float]]:
    """Samples of each gated figure of one level: aggregate tok/s once per repeat,
    per-request tok/s and TTFT once per successful request."""
    c = runs[0].concurrency
    records = [r for run in runs for r in run.records if r.ok]
    samples = {
        "agg_tok_s": [run.metrics.agg_tok_s for run in runs if run.metrics.ok],
        "per_request_tok_s": [v for r in records if (v := request_tok_s(r))],
        "ttft_s": [v for r in records if (v := r.ttft) is not None],
        "accept_rate": [
            rate for run in runs if run.spec and (rate := run.spec.accept_rate) is not None
        ],
    }
    return {figure_key(measurement, c, name): v for name, v in samples.items() if v}


def measurement_samples(name: str, measurement: Measurement) -> dict[str, list[float]]:
    """Samples of every gated figure of a measurement."""
    out: dict[str, list[float]] = {}
    for runs in measurement.by_concurrency().values():
        out.update(level_samples(name, runs))
    return out


def compare_samples(samples: dict[str, list[float]], baseline: Baseline | None) -> list[Check]:
    """Every figure judged."""
    expected = baseline.metrics if baseline else {}
    return [compare(key, values, expected.get(key)) for key, values in samples.items()]


def _field_errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
        for err in exc.errors()
    )


def baseline_path(baselines_dir: Path, profile: str, hardware: str) -> Path:
    """Where the baseline of a profile on a hardware key lives."""
    return baselines_dir / profile / f"{hardware}.json"


def load_baseline(path: Path) -> Baseline | None:
    """Read and validate a baseline file; None when it does not exist."""
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
            f"baseline {path} is invalid: {_field_errors(exc)}. Fix it, or re-record it with "
            "`pytest -m perf --update-baselines`."
        ) from exc


def load_profile_baselines(baselines_dir: Path, profile: str) -> dict[str, Baseline]:
    """Every baseline of a profile by hardware key, each validated."""
    directory = baselines_dir / profile
    found: dict[str, Baseline] = {}
    for path in sorted(directory.glob("*.json")):
        if "." in path.stem:  # <key>.run.json, <key>.golden.json sit next to baselines
            continue
        baseline = load_baseline(path)
        assert baseline is not None
        if baseline.hardware != path.stem or baseline.profile != profile:
            raise BaselineError(
                f"baseline {path} says profile {baseline.profile!r} on hardware "
                f"{baseline.hardware!r}; its path says {profile!r} on {path.stem!r}"
            )
        found[baseline.hardware] = baseline
    return found


def build_baseline(
    profile: str,
    hardware: str,
    samples: dict[str, list[float]],
    previous: Baseline | None,
    provenance: dict[str, object],
    tolerance: float | None = None,
    facts: dict[str, Fact] | None = None,
) -> Baseline:
    """A new baseline from measured samples (medians). Tolerances: ``tolerance`` if
    given, else the previous baseline's, else the figure's default."""
    metrics: dict[str, Expectation] = {}
    for key, values in samples.items():
        direction, unit, default_tol = GATED_FIGURES[key.rsplit(".", 1)[-1]]
        old = previous.metrics.get(key) if previous else None
        tol = tolerance if tolerance is not None else (old.tolerance if old else default_tol)
        metrics[key] = Expectation(
            value=round(estimate(values).median, 6),
            tolerance=tol,
            direction=direction,
            unit=unit,
            floor=old.floor if old else None,
            ceiling=old.ceiling if old else None,
        )
    prov = {"recorded_at": datetime.now(UTC).isoformat(timespec="seconds"), **provenance}
    return Baseline(
        schema_version=SCHEMA_VERSION,
        profile=profile,
        hardware=hardware,
        provenance=prov,
        metrics=metrics,
        facts=facts or {},
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
    write_json_atomic(path, baseline.model_dump_json(indent=2, exclude_none=True) + "\n")


def diff_lines(old: Baseline | None, new: Baseline) -> list[str]:
    """Old → new, one line per figure."""
    lines = []
    for key, exp in new.metrics.items():
        prev = old.metrics.get(key) if old else None
        if prev is None:
            lines.append(f"  {key}: (new) → {exp.value:.4g} {exp.unit}")
        else:
            pct = (exp.value - prev.value) / prev.value * 100
            tol = (
                f", tolerance {prev.tolerance:.0%} → {exp.tolerance:.0%}"
                if prev.tolerance != exp.tolerance
                else ""
            )
            lines.append(
                f"  {key}: {prev.value:.4g} → {exp.value:.4g} {exp.unit} ({pct:+.1f}%{tol})"
            )
    return lines


class GoldenOutputs(BaseModel):
    """Greedy outputs for a fixed prompt set, recorded with a baseline."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = Field(description="Version of this file's schema.")
    max_tokens: int = Field(gt=0, description="Output length the outputs were generated with.")
    outputs: dict[str, str] = Field(description="Greedy output text by prompt.")


@dataclass(frozen=True, slots=True)
class GoldenDiff:
    """How one output compares with its golden output."""

    prompt: str
    exact: bool
    first_divergence: int | None  # character index, None when exact
    expected: str
    actual: str

    def message(self) -> str:
        """Where the texts part, with a little context."""
        if self.exact or self.first_divergence is None:
            return f"{self.prompt[:40]!r}: identical"
        at = self.first_divergence
        return (
            f"{self.prompt[:40]!r}: differs at character {at}: expected "
            f"{self.expected[max(0, at - 10) : at + 30]!r}, got "
            f"{self.actual[max(0, at - 10) : at + 30]!r}"
        )


def first_divergence(expected: str, actual: str) -> int | None:
    """Index of the first differing character (None when equal)."""
    if expected == actual:
        return None
    for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return i
    return min(len(expected), len(actual))


def compare_golden(golden: GoldenOutputs, actual: dict[str, str]) -> list[GoldenDiff]:
    """Each golden prompt's output compared with the one produced now."""
    diffs = []
    for prompt, expected in golden.outputs.items():
        got = actual.get(prompt, "")
        at = first_divergence(expected, got)
        diffs.append(
            GoldenDiff(
                prompt=prompt, exact=at is None, first_divergence=at, expected=expected, actual=got
            )
        )
    return diffs


def golden_path(baseline_file: Path) -> Path:
    """The golden outputs kept next to a baseline file."""
    return baseline_file.with_suffix(".golden.json")


def load_golden(path: Path) -> GoldenOutputs | None:
    """Read golden outputs; None when none were recorded."""
    if not path.exists():
        return None
    try:
        return GoldenOutputs.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise BaselineError(f"golden outputs {path} are invalid: {_field_errors(exc)}") from exc


def save_golden(path: Path, golden: GoldenOutputs) -> None:
    """Write golden outputs atomically."""
    write_json_atomic(path, golden.model_dump_json(indent=2) + "\n")
