"""The slow-creep rule over the run history (``gate.creep_runs``/``gate.creep_margin``).

A figure within its tolerance fails as CREEP when it has been worse than the same
baseline value by more than the margin in N runs in a row. Noise alone does that with
chance ``P(one run worse than the margin) ** N`` (1% noise, 2% margin, N=5: about 6e-9);
a real 3% loss inside a 10% tolerance does it in about 8 runs at that noise."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from perfgate.gate.verdict import Check
from perfgate.stats.estimate import Direction

CREEP_APPLIES = ("pass", "improved")  # a failing or missing figure keeps its verdict


_EPS_PCT = 1e-9  # "more than the margin": a delta exactly at it (float noise) is not worse


class FigurePoint(BaseModel):
    """One figure of one run, as judged against its baseline."""

    measured: float = Field(description="The run's figure (median of its runs of the level).")
    baseline: float = Field(description="The baseline value it was judged against.")
    limit: float | None = Field(None, description="Worst acceptable figure.")
    tolerance: float | None = Field(None, description="Relative tolerance (0.1 = 10%).")
    delta_pct: float = Field(description="(measured - baseline) / baseline, in percent.")
    verdict: str = Field(description="The verdict (pass, improved, regressed, creep, ...).")
    direction: Direction = "higher"
    unit: str = ""


class HistoryEntry(BaseModel):
    """One run of a profile: provenance and its judged figures (one line of the history)."""

    created_at: str
    profile: str
    status: str = Field(description="passed or failed.")
    engine: str
    engine_version: str = "unknown"
    git_commit: str | None = None
    hardware_key: str | None = None
    baseline_tier: str | None = Field(None, description="exact or any.")
    baseline_path: str | None = None
    run_json: str = Field("", description="The run JSON this entry was taken from.")
    figures: dict[str, FigurePoint] = Field(default_factory=dict)


def _worse(delta_pct: float, direction: Direction, margin: float) -> bool:
    """Whether a figure is worse than its baseline by more than ``margin`` (a fraction)."""
    threshold = margin * 100.0 + _EPS_PCT
    return delta_pct < -threshold if direction == "higher" else delta_pct > threshold


def same_baseline(a: float, b: float) -> bool:
    """Whether two recorded baseline values are the same baseline (equal but for rounding)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def apply_creep_rule(
    checks: Sequence[Check],
    history: Sequence[HistoryEntry],
    *,
    runs: int,
    margin: float,
    hardware_key: str | None = None,
) -> list[Check]:
    """This run's checks with the slow-creep rule applied.

    ``history`` holds the profile's earlier entries, oldest first. A passing (or
    improved) figure becomes CREEP when this run and the ``runs - 1`` entries right
    before it all have it worse than the same baseline value by more than ``margin``
    (0.02 = 2%). With ``hardware_key``, entries of other hardware are left out. Other
    verdicts stay. The input checks are not changed.
    """
    if runs < 2:
        raise ValueError(f"creep runs must be >= 2, got {runs}")
    if not 0 < margin < 1:
        raise ValueError(f"creep margin must be a fraction between 0 and 1, got {margin}")
    earlier = [e for e in history if hardware_key is None or e.hardware_key == hardware_key]
    window = earlier[len(earlier) - (runs - 1) :] if len(earlier) >= runs - 1 else None
    out: list[Check] = []
    for check in checks:
        deltas = _streak(check, window, margin) if window is not None else None
        if deltas is None:
            out.append(check.model_copy())
            continue
        shown = ", ".join(f"{d:+.1f}%" for d in deltas)
        why = (
            f"worse than the baseline by more than {margin:.1%} in {runs} runs in a row "
            f"({shown}): a slow creep; if it is accepted, re-record the baseline "
            "(--perf-update-baselines)"
        )
        out.append(check.model_copy(update={"verdict": "creep", "why": why}))
    return out


def _streak(check: Check, window: Sequence[HistoryEntry], margin: float) -> list[float] | None:
    """The deltas (oldest first) when the check and every entry of the window have the
    figure worse than the same baseline by more than the margin; else None."""
    if (
        check.verdict not in CREEP_APPLIES
        or check.baseline is None
        or check.delta_pct is None
        or not _worse(check.delta_pct, check.direction, margin)
    ):
        return None
    deltas: list[float] = []
    for entry in window:
        point = entry.figures.get(check.key)
        if (
            point is None
            or point.direction != check.direction
            or not same_baseline(point.baseline, check.baseline)
            or not _worse(point.delta_pct, point.direction, margin)
        ):
            return None
        deltas.append(point.delta_pct)
    return [*deltas, check.delta_pct]
