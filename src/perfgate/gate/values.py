"""Figure keys (``<measurement>.c<C>.<figure>``) and the values a run gives them: one per
run of a level, from each figure's one definition (:mod:`perfgate.gate.figures`)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from perfgate.gate.figures import BY_NAME, SCALING, SEARCH_FIGURES, Figure, judged_figures
from perfgate.measure.data import LevelData, Measurement

KEY_PATTERN = re.compile(
    r"^(?P<measurement>[a-z][a-z0-9_]*)\."
    r"(?:(?:c(?P<c>[1-9][0-9]*)|r(?P<r>[0-9]+(?:\.[0-9]+)?))\.)?(?P<figure>\w+)$"
)


def level_tag(level: int | float) -> str:
    """A level in a figure key: ``c4`` (concurrency 4), ``r2.5`` (2.5 requests a second,
    open loop)."""
    return f"r{level:g}" if isinstance(level, float) else f"c{level}"


def level_name(level: int | float) -> str:
    """A level in words: ``C=4``, ``2.5 req/s``."""
    return f"{level:g} req/s" if isinstance(level, float) else f"C={level}"


def figure_key(measurement: str, concurrency: int | float | None, figure: str) -> str:
    """The key of one gated figure, e.g. ``sweep.c4.agg_tok_s``, ``rate.r2.ttft_p99_s``
    (a float level is a request rate), ``capacity.max_req_s`` (no level: measurement-wide)."""
    if concurrency is None:
        return f"{measurement}.{figure}"
    return f"{measurement}.{level_tag(concurrency)}.{figure}"


@dataclass(frozen=True, slots=True)
class Key:
    """A parsed figure key."""

    measurement: str
    # the level: a concurrency, a request rate (a float), or None (measurement-wide)
    concurrency: int | float | None
    figure: Figure


def parse_key(key: str) -> Key:
    """Split a key into measurement, level and figure (ValueError when unknown)."""
    match = KEY_PATTERN.match(key)
    figure = BY_NAME.get(match["figure"]) if match else None
    leveled = bool(match and (match["c"] or match["r"]))
    if match is None or figure is None or leveled == (figure.search is not None):
        raise ValueError(
            f"unknown figure {key!r}: keys are <measurement>.c<C>.<figure> (or .r<rate>. "
            f"for a request rate) with figure one of "
            f"{', '.join(n for n, f in BY_NAME.items() if f.search is None)}, or "
            f"<measurement>.<figure> with figure one of {', '.join(f.name for f in SEARCH_FIGURES)}"
        )
    level = (int(match["c"]) if match["c"] else float(match["r"])) if leveled else None
    return Key(match["measurement"], level, figure)


def level_values(
    measurement: str, runs: list[LevelData], chosen: Collection[str] = ()
) -> dict[str, list[float]]:
    """Per-run values of every figure one level produced (the ``chosen`` ones too)."""
    c = runs[0].level
    out = {}
    for figure in judged_figures(chosen):
        if values := figure.run_values(runs):
            out[figure_key(measurement, c, figure.name)] = values
    return out


def search_values(name: str, measurement: Measurement) -> dict[str, list[float]]:
    """Per-search values of the measurement-wide figures (the capacity searches')."""
    out = {}
    for figure in SEARCH_FIGURES:
        assert figure.search is not None
        if values := [v for s in measurement.searches if (v := figure.search(s)) is not None]:
            out[figure_key(name, None, figure.name)] = values
    return out


def measurement_values(
    name: str, measurement: Measurement, chosen: Collection[str] = ()
) -> dict[str, list[float]]:
    """Per-run values of every figure of a measurement (the ``chosen`` ones too)."""
    out: dict[str, list[float]] = {}
    out.update(search_values(name, measurement))
    levels = measurement.by_concurrency()
    for runs in levels.values():
        out.update(level_values(name, runs, chosen))
    if any(isinstance(c, float) for c in levels):
        return out  # request rates: no concurrency to scale with
    for runs in levels.values():
        out.update(scaling_values(name, runs, levels.get(1, [])))
    return out


def scaling_values(
    name: str, runs: list[LevelData], first: list[LevelData]
) -> dict[str, list[float]]:
    """The ``scaling`` runs of one level above C=1: each run's aggregate tok/s over that of
    the same run of C=1 (``first``), paired so runs stay independent samples."""
    c = runs[0].level if runs else 1
    if isinstance(c, float) or c <= 1:
        return {}
    pairs = [(SCALING.value(a), SCALING.value(b)) for a, b in zip(runs, first, strict=False)]
    values = [a / b for a, b in pairs if a is not None and b]
    return {figure_key(name, c, SCALING.name): values} if values else {}


def run_values(
    measurements: dict[str, Measurement], chosen: Collection[str] = ()
) -> dict[str, list[float]]:
    """Per-run values of every figure of every measurement of a run (the ``chosen`` ones
    too)."""
    out: dict[str, list[float]] = {}
    for name, measurement in measurements.items():
        out.update(measurement_values(name, measurement, chosen))
    return out


def timing_error_bounds(
    measurements: dict[str, Measurement],
) -> dict[tuple[str, int | float], float]:
    """The harness's timing error bound of each (measurement, level): the largest of its
    runs' loop-lag 99th percentiles (levels run without a monitor are left out)."""
    out: dict[tuple[str, int | float], float] = {}
    for name, measurement in measurements.items():
        for c, runs in measurement.by_concurrency().items():
            bounds = [r.harness.error_bound_s for r in runs if r.harness is not None]
            if bounds:
                out[(name, c)] = max(bounds)
    return out
