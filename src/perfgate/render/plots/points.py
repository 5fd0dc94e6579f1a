"""The plotted values: each gated figure's runs per level, as the gate judges them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from perfgate.gate.figures import BY_NAME
from perfgate.gate.values import parse_key
from perfgate.gate.verdict import Check
from perfgate.measure.data import Measurement
from perfgate.stats.distributions import median


@dataclass(frozen=True)
class Point:
    """One level of one quantity: a value per run, their median, and (TTFT, TPOT) the
    median over the runs of each run's p99: the gated ``*_p99_s`` figure."""

    concurrency: int | float
    runs: list[float]
    median: float
    p99: float | None = None


def figure_points(measurement: Measurement, figure: str) -> list[Point]:
    """A gated figure's per-run values at each level (levels without any left out)."""
    points = []
    for c, runs in sorted(measurement.by_concurrency().items()):
        values = BY_NAME[figure].run_values(runs)
        if values:
            points.append(Point(c, values, median(values)))
    return points


def _quantity_points(measurement: Measurement, median_figure: str, p99_figure: str) -> list[Point]:
    """Per level: each run's value of ``median_figure``, their median, and the median
    over the runs of ``p99_figure``: the gated figures, as the gate judges them."""
    points = []
    for c, runs in sorted(measurement.by_concurrency().items()):
        values = BY_NAME[median_figure].run_values(runs)
        if values:
            p99s = BY_NAME[p99_figure].run_values(runs)
            points.append(Point(c, values, median(values), median(p99s) if p99s else None))
    return points


def ttft_points(measurement: Measurement) -> list[Point]:
    """TTFT (s) per level: the runs' medians (``ttft_s``) and their p99 (``ttft_p99_s``)."""
    return _quantity_points(measurement, "ttft_s", "ttft_p99_s")


def tpot_points(measurement: Measurement) -> list[Point]:
    """TPOT (s) per level: each run's median (``tpot_p50_s``), their median, and their p99
    (``tpot_p99_s``)."""
    return _quantity_points(measurement, "tpot_p50_s", "tpot_p99_s")


def checks_of(
    checks: Iterable[Check], measurement: str, figure: str
) -> list[tuple[int | float, Check]]:
    """(concurrency, check) of one measurement's figure, by concurrency."""
    out: list[tuple[int | float, Check]] = []
    for check in checks:
        try:
            key = parse_key(check.key)
        except ValueError:
            continue
        if key.measurement == measurement and key.figure.name == figure:
            assert key.concurrency is not None  # the plotted figures are per level
            out.append((key.concurrency, check))
    return sorted(out, key=lambda item: item[0])


def plotted_levels(
    measurements: Mapping[str, Measurement], checks: Iterable[Check], figure: str
) -> set[int | float]:
    """Every level to put on the x axis: measured, not run, or judged by a check of ``figure``."""
    levels = {c for m in measurements.values() for c in (*m.by_concurrency(), *m.not_run)}
    for name in measurements:
        levels.update(c for c, _ in checks_of(checks, name, figure))
    return levels


def seconds_unit(values: Iterable[float | None]) -> tuple[str, float]:
    """ms for values under a second, else s: (unit, factor from seconds)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return ("ms", 1000.0) if not finite or max(finite) < 1.0 else ("s", 1.0)
