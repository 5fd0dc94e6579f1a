"""The capacity search, pure: which level to probe next, and the capacity it found.

A search raises the load (requests a second, or requests in flight) from ``low``,
doubling while each probed level meets the target share of good requests (``slo_met``)
and up to ``high``, then bisects between the highest level met and the lowest level above
it that was missed: down to one request in flight, or to ``precision`` of the level met
for a rate. The capacity is the highest level met (0 when even ``low`` was missed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from perfgate.load.level import Level
from perfgate.measure.data import CapacitySearch, Probe
from perfgate.profile import CapacitySpec


def _rounded_rate(rate: float) -> float:
    """A probed rate to three significant figures (short level names, e.g. 6.25)."""
    return float(f"{rate:.3g}")


def next_probe(
    met: Mapping[Level, bool], *, low: float, high: float, precision: float, integer: bool
) -> Level | None:
    """The next level to probe, given the probes so far (level -> met the target), or None
    when the search is done."""
    if not met:
        return int(low) if integer else float(low)
    good = max((level for level, ok in met.items() if ok), default=None)
    if good is None:
        return None  # the lowest level probed was already missed
    bad = min((level for level, ok in met.items() if not ok and level > good), default=None)
    if bad is None:
        if good >= high:
            return None
        return int(min(good * 2, high)) if integer else float(min(good * 2, high))
    if integer:
        return int(good + bad) // 2 if bad - good > 1 else None
    if bad <= good * (1 + precision):
        return None
    mid = _rounded_rate((good + bad) / 2)
    return mid if good < mid < bad else None


def capacity_of(met: Mapping[Level, bool]) -> float:
    """The highest level that met the target (0 when none did)."""
    return float(max((level for level, ok in met.items() if ok), default=0))


def search_capacity(
    found: CapacitySearch,
    spec: CapacitySpec,
    probe: Callable[[Level], Probe],
    on_probe: Callable[[CapacitySearch], None] | None = None,
) -> CapacitySearch:
    """Run one search into ``found``: ``probe(level)`` runs a level against the service
    levels; ``on_probe`` sees the search after each probe. ``found.capacity`` is set only
    when the search finishes."""
    met: dict[Level, bool] = {}
    integer = spec.by == "concurrency"
    while (
        level := next_probe(
            met, low=spec.low, high=spec.high, precision=spec.precision, integer=integer
        )
    ) is not None:
        result = probe(level)
        found.probes.append(result)
        met[level] = result.met
        if on_probe is not None:
            on_probe(found)
    found.capacity = capacity_of(met)
    return found
