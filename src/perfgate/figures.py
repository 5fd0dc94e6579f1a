"""The gated figures, each defined once.

A figure gives one value per run of a level (the sampling unit of every verdict):

- ``agg_tok_s``: the run's aggregate tok/s (output tokens / wall time);
- ``per_request_tok_s``: the median over the run's requests of their tok/s;
- ``ttft_s``: the median over the run's requests of their TTFT;
- ``accept_rate``: speculative acceptance over the run's measured window;

A figure read off token timestamps (``timing``) is only as exact as the harness: a
level's timing error bound (its event loop's lag, ``HarnessStats``) can move it, and
the gate says when that could change its verdict.
- ``scaling`` (levels above C=1): the aggregate tok/s of run i of the level over that of
  run i of C=1 (paired, so runs stay independent samples): the shape of concurrency
  scaling, which holds across machines where absolute tok/s does not. It is a
  hand-set, hardware-independent target (``any.json``); recording leaves it out, as an
  exact baseline holds every level's tok/s already.

The table, the gate, ``perfgate compare``, early abort, recording and the diagnosis
all read :data:`FIGURES`. Keys name a figure of one level of one measurement:
``<measurement>.c<C>.<figure>``, e.g. ``sweep.c4.agg_tok_s``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from perfgate.metrics import LevelData, Measurement
from perfgate.stats import Direction

KEY_PATTERN = re.compile(
    r"^(?P<measurement>[a-z][a-z0-9_]*)\.c(?P<c>[1-9][0-9]*)\.(?P<figure>\w+)$"
)


@dataclass(frozen=True, slots=True)
class Figure:
    """One gated figure: what it is, which way is better, and its value in one run."""

    name: str
    title: str
    unit: str
    direction: Direction
    min_tolerance: float  # the floor of a tolerance derived from noise
    absent_when: str  # why a run may not produce it
    value: Callable[[LevelData], float | None]
    recorded: bool = True  # False: a hand-set target only, left out of recorded baselines
    timing: bool = False  # read off token timestamps: the harness's timing error applies

    def run_values(self, runs: Iterable[LevelData]) -> list[float]:
        """One value per run that produced this figure."""
        return [v for run in runs if (v := self.value(run)) is not None]


def _agg(run: LevelData) -> float | None:
    return run.metrics.agg_tok_s if run.metrics.ok else None


def _per_request(run: LevelData) -> float | None:
    return run.metrics.per_request_tok_s.p50


def _ttft(run: LevelData) -> float | None:
    return run.metrics.ttft_s.p50


def _accept(run: LevelData) -> float | None:
    return run.spec.accept_rate if run.spec is not None else None


FIGURES: tuple[Figure, ...] = (
    Figure(
        "agg_tok_s", "Agg tok/s", "tok/s", "higher", 0.02, "no request of the level succeeded", _agg
    ),
    Figure(
        "per_request_tok_s",
        "Per-req tok/s",
        "tok/s",
        "higher",
        0.02,
        "no request of the level succeeded",
        _per_request,
    ),
    Figure(
        "ttft_s", "TTFT(s)", "s", "lower", 0.05, "no request streamed a token", _ttft, timing=True
    ),
    Figure(
        "accept_rate",
        "Accept%",
        "",
        "higher",
        0.02,
        "no speculative-decoding counters were read (speculation off, or the engine's "
        "counters renamed or gone)",
        _accept,
    ),
)
SCALING = Figure(
    "scaling",
    "Scaling",
    "x",
    "higher",
    0.05,
    "the measurement has no successful C=1 run to pair with",
    _agg,  # divided by the paired C=1 run's in measurement_values
    recorded=False,
)
BY_NAME: dict[str, Figure] = {f.name: f for f in (*FIGURES, SCALING)}


def figure_key(measurement: str, concurrency: int, figure: str) -> str:
    """The key of one gated figure, e.g. ``sweep.c4.agg_tok_s``."""
    return f"{measurement}.c{concurrency}.{figure}"


@dataclass(frozen=True, slots=True)
class Key:
    """A parsed figure key."""

    measurement: str
    concurrency: int
    figure: Figure


def parse_key(key: str) -> Key:
    """Split a key into measurement, concurrency and figure (ValueError when unknown)."""
    match = KEY_PATTERN.match(key)
    if not match or match["figure"] not in BY_NAME:
        raise ValueError(
            f"unknown figure {key!r}: keys are <measurement>.c<C>.<figure> with figure one "
            f"of {', '.join(BY_NAME)}"
        )
    return Key(match["measurement"], int(match["c"]), BY_NAME[match["figure"]])


def level_values(measurement: str, runs: list[LevelData]) -> dict[str, list[float]]:
    """Per-run values of every figure one level produced."""
    c = runs[0].concurrency
    out = {}
    for figure in FIGURES:
        if values := figure.run_values(runs):
            out[figure_key(measurement, c, figure.name)] = values
    return out


def measurement_values(name: str, measurement: Measurement) -> dict[str, list[float]]:
    """Per-run values of every figure of a measurement."""
    out: dict[str, list[float]] = {}
    levels = measurement.by_concurrency()
    for runs in levels.values():
        out.update(level_values(name, runs))
    c1 = levels.get(1, [])
    for c, runs in levels.items():
        pairs = [(SCALING.value(a), SCALING.value(b)) for a, b in zip(runs, c1, strict=False)]
        if c > 1 and (values := [a / b for a, b in pairs if a is not None and b]):
            out[figure_key(name, c, SCALING.name)] = values
    return out


def run_values(measurements: dict[str, Measurement]) -> dict[str, list[float]]:
    """Per-run values of every figure of every measurement of a run."""
    out: dict[str, list[float]] = {}
    for name, measurement in measurements.items():
        out.update(measurement_values(name, measurement))
    return out


def timing_error_bounds(measurements: dict[str, Measurement]) -> dict[tuple[str, int], float]:
    """The harness's timing error bound of each (measurement, level): the largest of its
    runs' loop-lag 99th percentiles (levels run without a monitor are left out)."""
    out: dict[tuple[str, int], float] = {}
    for name, measurement in measurements.items():
        for c, runs in measurement.by_concurrency().items():
            bounds = [r.harness.error_bound_s for r in runs if r.harness is not None]
            if bounds:
                out[(name, c)] = max(bounds)
    return out
