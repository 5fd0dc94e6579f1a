"""What a measurement runs next. Each kind of measurement is a plan: ``next(done)`` gives
the next level run (a :class:`Step`) from the level runs done so far, or None when the
measurement is over. One loop (:meth:`perfgate.run.measuring.Measurer.run_plan`) pulls
from any plan and measures each step through one measured window.

A new kind of measurement is a new plan, here or in a module of its own: the loop, the
window and the recording stay as they are (tests/unit/test_run_parts.py adds one)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from perfgate.gate.capacity import capacity_of, next_probe
from perfgate.measure.data import CapacitySearch, LevelData, Measurement, Probe
from perfgate.profile.workload import CapacitySpec

Decision = Literal["next", "repeat", "stop"]  # after a level's run: what the plan does


@dataclass(frozen=True)
class Step:
    """One level run to measure."""

    level: int | float  # requests in flight, or requests a second (a float)
    repeat: int  # the run's number at its level (a capacity probe: its search's number)
    requests: int  # measured requests (the workload's warmup comes first)
    word: str = "run"  # how progress lines name a repeat ("search": a capacity probe)
    sequential: bool = False  # one request at a time on one connection (single requests)
    side: str = ""  # an A/B run's side ("A" or "B"); "" for a run with one server
    discard: bool = False  # a warm-up run: measured, never judged
    warmup: int | None = None  # unmeasured requests before the run's (None: the workload's)

    @property
    def number(self) -> int:
        """The step's number in progress lines, from 1: its repeat's, or an A/B run's
        pair's (pair k is repeat k, after the side's warm-up, repeat 0)."""
        return self.repeat if self.side and not self.discard else self.repeat + 1


class Plan(Protocol):
    """A measurement's plan: the loop calls ``next`` with every level run done so far."""

    @property
    def not_run(self) -> list[int | float]:
        """The levels the plan stopped before."""
        ...

    def next(self, done: Sequence[LevelData]) -> Step | None: ...


@dataclass
class SweepPlan:
    """Levels in order, each run again while ``decide`` says "repeat" (a figure near its
    limit), the rest skipped once it says "stop" (the early abort).
    ``decide(level, runs)`` sees the level's runs so far; ``requests_at(level)`` gives a
    run's measured requests. ``sequential``: one request at a time (single requests)."""

    levels: Sequence[int | float]
    requests_at: Callable[[int | float], int]
    decide: Callable[[int | float, list[LevelData]], Decision]
    sequential: bool = False
    not_run: list[int | float] = field(default_factory=list)
    _position: int = 0
    _runs: list[LevelData] = field(default_factory=list)
    _seen: int = 0

    def _step(self, repeat: int) -> Step:
        level = self.levels[self._position]
        return Step(level, repeat, self.requests_at(level), sequential=self.sequential)

    def next(self, done: Sequence[LevelData]) -> Step | None:
        new, self._seen = done[self._seen :], len(done)
        if not new:  # the first step
            return self._step(0) if self.levels else None
        self._runs += new
        level = self.levels[self._position]
        decision = self.decide(level, list(self._runs))
        if decision == "repeat":
            return self._step(len(self._runs))
        self._position += 1
        self._runs = []
        if decision == "stop" or self._position >= len(self.levels):
            self.not_run = list(self.levels[self._position :]) if decision == "stop" else []
            return None
        return self._step(0)


@dataclass
class CapacityPlan:
    """Capacity searches (``[capacity]``), each probing levels until the highest that met
    the target is bracketed (:func:`perfgate.gate.capacity.next_probe`); another search
    while ``again()`` says "repeat". Each probe is one level run, kept as a
    :class:`Probe` of the current :class:`CapacitySearch` in ``measurement``. ``said``
    hears what a progress line reports: a search started, a probe judged, a search ended."""

    spec: CapacitySpec
    measurement: Measurement
    requests_at: Callable[[int | float], int]
    again: Callable[[], Decision]
    said: Callable[[str, CapacitySearch, Probe | None], None] = lambda *_: None
    not_run: list[int | float] = field(default_factory=list)
    _met: dict[int | float, bool] = field(default_factory=dict)
    _seen: int = 0

    def _search(self) -> CapacitySearch:
        spec = self.spec
        search = CapacitySearch(by=spec.by, target=spec.target, high=spec.high)
        self.measurement.searches.append(search)
        self._met = {}
        self.said("search", search, None)
        return search

    def next(self, done: Sequence[LevelData]) -> Step | None:
        spec, searches = self.spec, self.measurement.searches
        new, self._seen = done[self._seen :], len(done)
        search = searches[-1] if new else self._search()
        if new:
            probe = Probe.of(new[-1], spec.target)
            search.probes.append(probe)
            self._met[probe.level] = probe.met
            self.said("probe", search, probe)
        level = next_probe(
            self._met,
            low=spec.low,
            high=spec.high,
            precision=spec.precision,
            integer=spec.by == "concurrency",
        )
        if level is None:  # this search is over
            search.capacity = capacity_of(self._met)
            self.said("found", search, None)
            if self.again() != "repeat":
                return None
            search = self._search()
            level = next_probe(
                {}, low=spec.low, high=spec.high, precision=spec.precision,
                integer=spec.by == "concurrency",
            )  # fmt: skip
            assert level is not None  # an empty search always has a first probe
        return Step(level, len(searches) - 1, self.requests_at(level), word="search")


ABDecide = Callable[[int | float, list[LevelData], list[LevelData]], Decision]


@dataclass
class ABPlan:
    """A side-by-side run: each level on both sides, first one warm-up run a side
    (discarded), then blocks A B B A while ``decide(level, a_runs, b_runs)`` says "repeat"
    (after each block; the runs pair up in order). "stop" ends the run (B far worse).
    Pair k's runs draw the same prompts on both sides (the same repeat number)."""

    levels: Sequence[int | float]
    requests_at: Callable[[int | float], int]
    decide: ABDecide
    sequential: bool = False  # single requests: one at a time (each run its own prompts)
    warmup: int | None = None  # each pair's run's unmeasured requests (None: the workload's)
    not_run: list[int | float] = field(default_factory=list)
    runs: dict[str, list[LevelData]] = field(default_factory=lambda: {"A": [], "B": []})
    _position: int = 0
    _queue: list[Step] = field(default_factory=list)
    _issued: Step | None = None
    _seen: int = 0

    def _block(self, level: int | float, pairs: int) -> list[Step]:
        requests, warm = self.requests_at(level), self.warmup
        return [
            Step(level, pairs + offset + 1, requests, "pair", self.sequential, side, warmup=warm)
            for offset, side in ((0, "A"), (0, "B"), (1, "B"), (1, "A"))
        ]

    def _level(self) -> list[Step]:
        level = self.levels[self._position]
        requests, sequential = self.requests_at(level), self.sequential
        warm = [Step(level, 0, requests, "warm-up", sequential, side=s, discard=True) for s in "AB"]
        return warm + self._block(level, 0)

    def next(self, done: Sequence[LevelData]) -> Step | None:
        new, self._seen = done[self._seen :], len(done)
        if new and self._issued is not None and not self._issued.discard:
            self.runs[self._issued.side].append(new[-1])
        if not new:  # the first step
            if not self.levels:
                return None
            self._queue = self._level()
        elif not self._queue:  # a block ended: decide
            level = self.levels[self._position]
            decision = self.decide(level, list(self.runs["A"]), list(self.runs["B"]))
            if decision == "repeat":
                self._queue = self._block(level, len(self.runs["A"]))
            else:
                self._position += 1
                self.runs = {"A": [], "B": []}
                if decision == "stop" or self._position >= len(self.levels):
                    stopped = decision == "stop"
                    self.not_run = list(self.levels[self._position :]) if stopped else []
                    return None
                self._queue = self._level()
        self._issued = self._queue.pop(0)
        return self._issued


@dataclass
class ABLifetimesPlan:
    """A side-by-side run whose two servers do not both fit: whole server lifetimes
    alternate, A, B, A, B, ... (a change of side is a restart). Each lifetime runs every
    undecided level: one warm-up run (discarded: the server is fresh), then one run in the
    first lifetime and two in each later one, so each level's runs still go A B B A A B
    B A. From the second lifetime on, ``decide(level, a_runs, b_runs)`` after each: each
    lifetime adds one pair a level. "next" retires the level, "stop" ends the run (B far
    worse). Pair k draws the same prompts on both sides (the same repeat number)."""

    levels: Sequence[int | float]
    requests_at: Callable[[int | float], int]
    decide: ABDecide
    sequential: bool = False  # single requests: one at a time (each run its own prompts)
    warmup: int | None = None  # each pair's run's unmeasured requests (None: the workload's)
    not_run: list[int | float] = field(default_factory=list)
    lifetimes: int = 0  # begun so far
    _undecided: list[int | float] = field(default_factory=list)
    _runs: dict[tuple[str, int | float], list[LevelData]] = field(default_factory=dict)
    _queue: list[Step] = field(default_factory=list)
    _issued: Step | None = None
    _seen: int = 0

    def runs(self, side: str, level: int | float) -> list[LevelData]:
        """One side's kept runs of a level so far."""
        return self._runs.setdefault((side, level), [])

    def _lifetime(self) -> list[Step]:
        side = "AB"[self.lifetimes % 2]
        count = 1 if self.lifetimes == 0 else 2
        self.lifetimes += 1
        steps = []
        for level in self._undecided:
            requests, kept = self.requests_at(level), len(self.runs(side, level))
            seq = self.sequential
            steps.append(Step(level, 0, requests, "warm-up", seq, side=side, discard=True))
            steps += [Step(level, kept + n, requests, "pair", seq, side, warmup=self.warmup)
                      for n in (1, 2)[:count]]  # fmt: skip
        return steps

    def next(self, done: Sequence[LevelData]) -> Step | None:
        new, self._seen = done[self._seen :], len(done)
        if new and self._issued is not None and not self._issued.discard:
            self.runs(self._issued.side, self._issued.level).append(new[-1])
        if not new:  # the first step
            self._undecided = list(self.levels)
        if not self._queue:  # a lifetime ended (or none began): decide, then the next
            if self.lifetimes >= 2:
                for level in list(self._undecided):
                    decision = self.decide(level, self.runs("A", level), self.runs("B", level))
                    if decision == "stop":
                        return None
                    if decision == "next":
                        self._undecided.remove(level)
            if not self._undecided:
                return None
            self._queue = self._lifetime()
        self._issued = self._queue.pop(0)
        return self._issued
