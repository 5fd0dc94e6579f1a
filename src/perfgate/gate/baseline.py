"""Baselines: the figures a profile must hold on given hardware.

Baselines live in ``baselines/<profile>/<hardware-key>.json``. Each gated figure
has a key ``<measurement>.c<C>.<figure>`` (e.g. ``sweep.c4.agg_tok_s``), a value, a
relative tolerance, a direction and an optional absolute floor or ceiling."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfgate.errors import BaselineError
from perfgate.facts import Fact
from perfgate.files import write_json_atomic
from perfgate.gate.figures import BY_NAME
from perfgate.gate.values import parse_key
from perfgate.stats.estimate import Direction, Noise

SCHEMA_VERSION = 2


ANY_HARDWARE = "any"  # baselines/<profile>/any.json: targets that hold on any machine


TolSource = Literal["derived", "manual"]


# A tolerance of 10 (1000%) or more gates nothing: recording refuses to derive one.
MAX_TOLERANCE = 10.0


# The spread of a figure between hosts (and days) of one hardware key, as sd of ln, where
# a baseline has not measured its own on MIN_HOST_DF host-to-host differences. Measured on
# this project's 2-core AVX-512 CI hosts: healthy servers ran 8-38% off the recording of
# another host (docs/baselines.md, "Another host of the same key"). Never 0.
DEFAULT_HOST_SIGMA = 0.2


MIN_HOST_DF = 4


class Expectation(BaseModel):
    """One gated figure: the value to hold, how far it may drift, and the noise behind it."""

    model_config = ConfigDict(extra="forbid")
    value: float = Field(
        ge=0,
        description="The baseline figure (median of the recorded runs); 0 only for a count "
        "judged as count + 1 (a queue, preemptions).",
    )
    tolerance: float = Field(
        ge=0, lt=MAX_TOLERANCE, description="Allowed relative drift (0.1 = 10%)."
    )
    direction: Direction = Field(description="Whether higher or lower is better.")
    unit: str = Field("", description="Unit, for messages.")
    floor: float | None = Field(None, ge=0, description="Absolute minimum (higher is better).")
    ceiling: float | None = Field(None, gt=0, description="Absolute maximum (lower is better).")
    runs: int | None = Field(
        None, ge=1, description="Runs the value is the median of; absent for a hand-set target."
    )
    spread: float | None = Field(
        None, ge=0, description="This figure's run-to-run spread when recorded (sd of ln)."
    )
    noise_sigma: float | None = Field(
        None,
        ge=0,
        description="Run-to-run noise the gate judges with: the spread of this kind of "
        "figure pooled over the baseline's levels (sd of ln, about the CV).",
    )
    noise_df: float | None = Field(None, ge=0, description="Degrees of freedom of noise_sigma.")
    host_sigma: float | None = Field(
        None,
        ge=0,
        description="Spread of this figure between hosts of its hardware key (sd of ln), "
        "pooled from recordings on different hosts; added to the noise when a run on "
        "another host than the recording's is judged. Absent: not measured yet.",
    )
    host_df: float | None = Field(None, ge=0, description="Degrees of freedom of host_sigma.")
    detectable: float | None = Field(
        None,
        ge=0,
        description="The smallest drop of this figure the gate fails 95% of the time, its "
        "runs as noisy as recorded (0.2: 20% fewer tok/s, or 1/0.8 times the seconds).",
    )
    tolerance_source: TolSource = Field(
        "manual",
        description="derived: from measured noise when recorded; manual: set by hand (kept "
        "when re-recording).",
    )

    @property
    def fixed(self) -> bool:
        """Whether the tolerance is a contract with the number itself: set by a person
        (``manual``: ``--perf-tolerance``, a hand-written baseline), so the verdict charges
        no error of the recorded value's own. A derived tolerance is sized for that error."""
        return self.tolerance_source == "manual"

    @property
    def judged_runs(self) -> int | None:
        """Runs of the baseline's median whose error the verdict charges: None for a fixed
        number (:attr:`fixed`)."""
        return None if self.fixed else self.runs

    @property
    def between_hosts(self) -> float:
        """The spread between hosts the gate uses on another host: the measured one once
        it rests on :data:`MIN_HOST_DF` host-to-host differences, else never below
        :data:`DEFAULT_HOST_SIGMA`."""
        measured = self.host_sigma if self.host_sigma is not None else 0.0
        if self.host_df is not None and self.host_df >= MIN_HOST_DF:
            return measured
        return max(measured, DEFAULT_HOST_SIGMA)

    def host_spread(self, another_host: bool) -> tuple[float, float]:
        """The spread between hosts (sd of ln) a run adds to its error, and its degrees of
        freedom: none on the baseline's own host or for a hand-set target; the measured
        spread with its df; the stated default as a known value (infinite df)."""
        if not another_host or not self.runs:
            return 0.0, math.inf
        sigma = self.between_hosts
        measured = self.host_df is not None and self.host_df >= MIN_HOST_DF
        return sigma, (
            self.host_df or math.inf
        ) if measured and sigma == self.host_sigma else math.inf

    @property
    def noise(self) -> Noise | None:
        """The recorded noise, where there is one."""
        if self.noise_sigma is None or not self.noise_df:
            return None
        return Noise(self.noise_sigma, self.noise_df)


class Baseline(BaseModel):
    """A profile's baseline on one hardware key (or ``any``: hardware-independent targets)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1, 2] = Field(description="Version of this file's schema.")
    profile: str = Field(description="Profile the figures belong to.")
    hardware: str = Field(description="Hardware key the figures were recorded on, or 'any'.")
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
        if not metrics:
            raise ValueError("a baseline needs at least one figure")
        for key, exp in metrics.items():
            figure = parse_key(key).figure  # an unknown figure is refused here
            if exp.value <= 0 and not figure.shift:
                raise ValueError(
                    f"{key}: value {exp.value:g} has no place on the gate's log scale (only a "
                    "count, such as server_preemptions, may be 0); record it again"
                )
        return metrics


def field_errors(exc: ValidationError) -> str:
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
            f"baseline {path} is invalid: {field_errors(exc)}. Fix it, or re-record it with "
            "`pytest -m perf --perf-update-baselines`."
        ) from exc


def load_profile_baselines(baselines_dir: Path, profile: str) -> dict[str, Baseline]:
    """Every baseline of a profile by hardware key, each validated."""
    directory = baselines_dir / profile
    found: dict[str, Baseline] = {}
    for path in sorted(directory.glob("*.json")):
        if "." in path.stem:  # <key>.golden.json sits next to baselines
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


def key_order(key: str) -> tuple[str, float, int]:
    """Sort key of a figure's key: measurement, level (measurement-wide first), figure order."""
    parsed = parse_key(key)
    level = -1 if parsed.concurrency is None else parsed.concurrency  # measurement-wide first
    return parsed.measurement, level, list(BY_NAME).index(parsed.figure.name)


def save_baseline(path: Path, baseline: Baseline) -> None:
    """Write a baseline atomically."""
    write_json_atomic(path, baseline.model_dump_json(indent=2, exclude_none=True) + "\n")
