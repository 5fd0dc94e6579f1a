"""The gate policy, pure: when to stop a sweep, when to measure a level again, what to
judge, and whether a run may become a baseline.

No I/O and no server: every method takes measurements and a baseline and returns a
decision, so the policy is unit-tested on synthetic runs and replayed by the gate study
(``benchmarks/gate_study.py``).
"""

from __future__ import annotations

import enum
import fnmatch
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from perfgate.gate.baseline import ANY_HARDWARE, DEFAULT_HOST_SIGMA, Baseline
from perfgate.gate.figures import BY_NAME
from perfgate.gate.values import (
    figure_key,
    level_name,
    level_tag,
    level_values,
    parse_key,
    run_values,
    scaling_values,
    search_values,
    timing_error_bounds,
)
from perfgate.gate.verdict import Check, compare, missing
from perfgate.measure.data import LevelData, Measurement
from perfgate.stats.decide import Rule, comparison
from perfgate.stats.distributions import t_quantile
from perfgate.stats.estimate import limits
from perfgate.stats.power import detectable_drop

Step = Literal["repeat", "next"]


class GateExit(enum.IntEnum):
    """The exit codes of ``pytest -m perf``, beside pytest's own (2 interrupted, 3 internal
    error, 4 usage error, 5 no tests collected), which are kept as they are."""

    PASSED = 0
    REGRESSED = 1  # a figure regressed, crept or is untrusted; or another test failed
    TOO_NOISY = 10  # the only failures: figures too noisy to decide (measure again)
    MISSING = 11  # a baseline figure was not measured, or no baseline applies
    CORRECTNESS = 12  # the server answered wrongly


def exit_code(
    pytest_status: int, checks: Sequence[Check], *, correctness_failed: bool, no_baseline: bool
) -> int:
    """The session's exit code: pytest's own for an interrupted, broken or empty session;
    else the most serious failure: correctness, regression, missing, too noisy."""
    if pytest_status not in (0, 1):
        return pytest_status
    verdicts = {c.verdict for c in checks}
    if correctness_failed:
        return GateExit.CORRECTNESS
    if verdicts & {"regressed", "creep", "untrusted"}:
        return GateExit.REGRESSED
    if "missing" in verdicts or no_baseline:
        return GateExit.MISSING
    if "too-noisy" in verdicts:
        return GateExit.TOO_NOISY
    return pytest_status


Tier = Literal["exact", "any", "none"]
MIN_RECORD_RUNS = 3


@dataclass(frozen=True)
class GatePolicy:
    """What the gate decides, from the profile's ``[gate]`` settings.

    - ``min_runs``: runs of each level before a verdict (``gate.repeats``);
    - ``max_runs``: at most, for a level near its limit (+ ``gate.max_extra_repeats``);
    - ``early_runs``: the fewest runs a level may take when every figure passes early
      (``gate.min_repeats``; :func:`perfgate.stats.decide.early_pass`);
    - ``abort_below``: stop a sweep at once when a tok/s figure of a level's first run is
      below this share of the baseline, beyond noise (0: never);
    - ``false_failure_rate``: the family-wise rate of noise failures for a whole profile;
    - ``retired``: baseline keys (glob patterns) the profile no longer measures;
    - ``figures``: figures the profile chose to gate besides the default ones
      (``gate.figures``: percentiles, request throughput);
    - ``another_host``: the baseline was recorded on another host than this run's (or
      names none), so each figure's spread between hosts adds to its noise.
    """

    min_runs: int = 3
    max_runs: int = 10
    early_runs: int = 2
    abort_below: float = 0.5
    false_failure_rate: float = 0.01
    retired: tuple[str, ...] = ()
    recording: bool = False
    figures: tuple[str, ...] = ()
    another_host: bool = False

    def chosen(self, baseline: Baseline | None) -> set[str]:
        """Figures measured besides the default ones: the profile's, and any its baseline
        holds (so a figure recorded once is judged until retired)."""
        held = {parse_key(k).figure.name for k in baseline.metrics} if baseline else set()
        return set(self.figures) | held

    def rule(self, baseline: Baseline | None, runs: int | None = None) -> Rule:
        """The statistical rule for a baseline's family of figures; ``runs``: force the
        final decision at this many runs (no more can be measured)."""
        figures = len(baseline.metrics) if baseline else 1
        most = self.max_runs if runs is None else runs
        return Rule(
            self.min_runs, most, figures, self.false_failure_rate, early_runs=self.early_runs
        )

    # -- during a sweep --------------------------------------------------------------
    def abort_reason(self, name: str, run: LevelData, baseline: Baseline | None) -> str | None:
        """Why a sweep should stop right after this first run of a level: a tok/s figure
        under ``abort_below`` of the baseline, and beyond the noise the baseline knows."""
        if baseline is None or self.abort_below <= 0 or self.recording:
            return None
        rule = self.rule(baseline)
        for key, values in level_values(name, [run], self.chosen(baseline)).items():
            exp = baseline.metrics.get(key)
            if exp is None or exp.direction != "higher" or parse_key(key).figure.unit != "tok/s":
                continue
            value = values[0]
            if value >= self.abort_below * exp.value:
                continue
            worst, better = limits(exp.value, exp.tolerance, exp.direction)
            host = exp.host_spread(self.another_host)
            cmp = comparison(
                values, exp.value, worst, better, exp.direction, exp.judged_runs, exp.noise, *host
            )
            if cmp.recorded is not None:
                sd, df = cmp.error(1)
                z = t_quantile(1 - rule.per_figure_rate, df)
                if cmp.drift + z * sd + cmp.host_allowance(1 - rule.per_figure_rate) >= 0:
                    continue  # this far below is within the recorded noise: measure on
            return (
                f"early abort at {level_name(run.level)}: {key} {value:.4g} {exp.unit} is below "
                f"{self.abort_below:.0%} of the baseline {exp.value:.4g} {exp.unit}"
            )
        return None

    def after_level(
        self,
        name: str,
        runs: Sequence[LevelData],
        baseline: Baseline | None,
        first: Sequence[LevelData] = (),
    ) -> Step:
        """Measure this level again, or move on: the minimum runs first; then again while
        any figure is undecided (near its limit, or noisier than recorded), up to
        ``max_runs``. ``first``: the measurement's C=1 runs, for the level's scaling."""
        values = level_values(name, list(runs), self.chosen(baseline))
        values.update(scaling_values(name, list(runs), list(first)))
        return self._again(values, len(runs), baseline)

    def after_search(self, name: str, measurement: Measurement, baseline: Baseline | None) -> Step:
        """Search for the capacity again, or stop: as :meth:`after_level`, a search being
        one run of the measurement's capacity figure."""
        values = search_values(name, measurement)
        return self._again(values, len(measurement.searches), baseline)

    def _again(
        self, values: Mapping[str, list[float]], runs: int, baseline: Baseline | None
    ) -> Step:
        if self.recording or baseline is None:
            return "repeat" if runs < self.min_runs else "next"
        if runs >= self.max_runs:
            return "next"
        if runs < self.min_runs and (not values or any(k not in baseline.metrics for k in values)):
            return "repeat"  # a figure with no baseline to pass early against
        rule = self.rule(baseline)
        for key, figure_values in values.items():
            exp = baseline.metrics.get(key)
            if (
                exp is not None
                and compare(key, figure_values, exp, rule, another_host=self.another_host)[1]
            ):
                return "repeat"
        return "next"

    # -- at the end ------------------------------------------------------------------
    def judge(
        self,
        measurements: Mapping[str, Measurement],
        baseline: Baseline | None,
        planned: Mapping[str, Sequence[int | float]],
    ) -> Verdicts:
        """Every baseline figure judged: measured ones against their limits, the others
        MISSING with the reason; figures measured without a baseline are listed too. A
        timing figure whose verdict the harness's own timing error could flip is
        UNTRUSTED (:func:`harness_verdict`)."""
        values = run_values(dict(measurements), self.chosen(baseline))
        bounds = timing_error_bounds(dict(measurements))
        expected = baseline.metrics if baseline else {}
        checks: list[Check] = []
        retired: list[str] = []
        for key, exp in expected.items():
            if any(fnmatch.fnmatchcase(key, pattern) for pattern in self.retired):
                retired.append(key)
            elif key in values:
                n = len(values[key])
                check = compare(
                    key, values[key], exp, self.rule(baseline, n), another_host=self.another_host
                )[0]
                parsed = parse_key(key)
                level = parsed.concurrency  # None (measurement-wide) has no bound
                error = None if level is None else bounds.get((parsed.measurement, level))
                checks.append(harness_verdict(check, error) if parsed.figure.timing else check)
            else:
                checks.append(missing(key, missing_reason(key, measurements, planned), exp))
        for key in (k for k in values if k not in expected):  # in measured order
            checks.append(compare(key, values[key], None, self.rule(None))[0])
        return Verdicts(checks, retired)

    def recording_problems(
        self,
        measurements: Mapping[str, Measurement],
        *,
        status: str,
        correctness_failures: Sequence[str],
    ) -> list[str]:
        """Why this run must not become a baseline ([] when it may)."""
        problems = []
        if status != "passed":
            problems.append(f"the run {status}; only a passed, complete run is recorded")
        if correctness_failures:
            problems.append(f"correctness failed ({'; '.join(correctness_failures)})")
        if not measurements:
            problems.append("nothing was measured")
        for name, m in measurements.items():
            if m.aborted or m.not_run:
                problems.append(f"{name}: levels not run: {m.not_run} {m.aborted or ''}".strip())
            failed = sum(lv.metrics.fail for lv in m.levels)
            if failed:
                problems.append(f"{name}: {failed} requests failed")
            if any(s.capacity is None for s in m.searches):
                problems.append(f"{name}: a capacity search did not finish")
            if any(s.capacity == 0 for s in m.searches):
                problems.append(
                    f"{name}: a capacity search met its target at no level (capacity 0); "
                    "lower capacity.low or loosen [slo]"
                )
            if m.searches and len(m.searches) < MIN_RECORD_RUNS:
                problems.append(
                    f"{name}: {len(m.searches)} capacity searches; a baseline needs at least "
                    f"{MIN_RECORD_RUNS} to measure their noise (--perf-repeats 5)"
                )
            for c, runs in m.by_concurrency().items():
                if len(runs) < MIN_RECORD_RUNS:
                    problems.append(
                        f"{name} {level_name(c)}: {len(runs)} runs; a baseline needs at least "
                        f"{MIN_RECORD_RUNS} to measure its noise (--perf-repeats 5)"
                    )
        return problems


@dataclass(frozen=True)
class BaselineGate:
    """The gate policy bound to the baseline chosen for a run (None: no baseline applies),
    built once the serving host is known: the run's questions during and after measuring,
    none of which takes the baseline again."""

    policy: GatePolicy
    baseline: Baseline | None = None

    def chosen(self) -> set[str]:
        """Figures measured besides the default ones (:meth:`GatePolicy.chosen`)."""
        return self.policy.chosen(self.baseline)

    def abort_reason(self, name: str, run: LevelData) -> str | None:
        """Why a sweep stops after this first run of a level (:meth:`GatePolicy.abort_reason`)."""
        return self.policy.abort_reason(name, run, self.baseline)

    def after_level(
        self, name: str, runs: Sequence[LevelData], first: Sequence[LevelData] = ()
    ) -> Step:
        """Measure this level again, or move on (:meth:`GatePolicy.after_level`)."""
        return self.policy.after_level(name, runs, self.baseline, first)

    def after_search(self, name: str, measurement: Measurement) -> Step:
        """Search for the capacity again, or stop (:meth:`GatePolicy.after_search`)."""
        return self.policy.after_search(name, measurement, self.baseline)

    def judge(
        self, measurements: Mapping[str, Measurement], planned: Mapping[str, Sequence[int | float]]
    ) -> Verdicts:
        """Every baseline figure judged (:meth:`GatePolicy.judge`)."""
        return self.policy.judge(measurements, self.baseline, planned)


def harness_verdict(check: Check, error_s: float | None) -> Check:
    """A timing figure's verdict stands only if it holds with the measured value moved by
    the harness's timing error bound either way: a regression past the limit by more
    than the error, a pass within it by more than the error. Otherwise UNTRUSTED: the
    harness cannot tell the engine's time from its own."""
    if (
        error_s is None
        or check.verdict not in ("pass", "improved", "regressed")
        or check.measured is None
        or check.limit is None
    ):
        return check
    sign = 1.0 if check.direction == "lower" else -1.0  # + : worse
    past = sign * (check.measured - check.limit)  # > 0: past the limit
    if abs(past) > error_s:
        return check
    side = "past" if past > 0 else "within"
    why = (
        f"{check.why}; but the harness's timing error at this level is up to "
        f"{error_s * 1000:.2f} ms (event-loop lag p99), more than the {abs(past) * 1000:.2f} "
        f"ms the figure is {side} its limit: rerun on a quieter client, or with fewer "
        "requests in flight per client process"
    )
    return check.model_copy(update={"verdict": "untrusted", "why": why})


@dataclass(frozen=True)
class Reach:
    """What a comparison with a baseline can catch: its scope in words, the spread between
    hosts it allows for, and the smallest drop of a figure the gate fails 95% of the time
    (0.2: 20% fewer tok/s, or 1/0.8 times the seconds; the median over the baseline's
    figures, their runs as noisy as recorded)."""

    scope: str
    host_spread: float | None
    detectable: float | None

    def describe(self) -> str:
        if self.detectable is None:
            return self.scope
        return f"{self.scope}; fails a figure {self.detectable:.0%} worse 95% of the time"


def reach(baseline: Baseline | None, tier: Tier, policy: GatePolicy) -> Reach:
    """The scope of the gate's comparison, and the smallest drop it fails 95% of the time."""
    if baseline is None or tier == "none":
        return Reach("no baseline", None, None)
    if tier == "any":
        return Reach("floors only (hardware-independent targets)", None, None)
    rule = policy.rule(baseline)
    drops, spreads = [], []
    for key, exp in baseline.metrics.items():
        if exp.noise is None or not exp.runs:
            continue
        drifts = parse_key(key).figure.host_drift  # a share of valid answers takes none
        host = exp.host_spread(policy.another_host and drifts)
        if drifts:
            spreads.append(host[0])
        drops.append(
            detectable_drop(
                exp.noise, rule, exp.runs, exp.tolerance, exp.direction, *host, fixed=exp.fixed
            )
        )
    drop = round(statistics.median(drops), 4) if drops else None
    if not policy.another_host:
        return Reach("same host", 0.0, drop)
    spread = statistics.median(spreads) if spreads else DEFAULT_HOST_SIGMA
    scope = f"same hardware, another host (host-to-host spread {spread:.0%})"
    return Reach(scope, spread, drop)


def choose_baseline(known: Mapping[str, Baseline], key: str) -> tuple[Baseline | None, Tier]:
    """The baseline that gates a run on hardware ``key``: the exact key's, else the
    profile's hardware-independent targets (``any``), else none."""
    if (exact := known.get(key)) is not None:
        return exact, "exact"
    if (fallback := known.get(ANY_HARDWARE)) is not None:
        return fallback, "any"
    return None, "none"


@dataclass(frozen=True)
class Verdicts:
    """Every check of a run, and the baseline figures the profile retired."""

    checks: list[Check]
    retired: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        """Checks that fail the build."""
        return [c for c in self.checks if c.failed]

    def of(self, verdict: str) -> list[Check]:
        """Checks with one verdict."""
        return [c for c in self.checks if c.verdict == verdict]

    @property
    def judged(self) -> list[Check]:
        """Checks against a baseline figure that was measured."""
        return [c for c in self.checks if c.verdict not in ("missing", "no-baseline")]


NOT_RUN_WHY = "test deselected with -k or -m, skipped, --benchmark-skip, or failed before measuring"


def missing_reason(
    key: str,
    measurements: Mapping[str, Measurement],
    planned: Mapping[str, Sequence[int | float]],
) -> str:
    """Why a run produced no value for a baseline figure."""
    parsed = parse_key(key)
    name, c = parsed.measurement, parsed.concurrency
    if name not in planned:
        return (
            f"the profile has no {name!r} measurement; retire the figure with gate.retired "
            "or re-record the baseline"
        )
    m = measurements.get(name)
    if c is None:  # a measurement-wide figure (the capacity search)
        if m is None:
            return f"the {name} measurement did not run in this session ({NOT_RUN_WHY})"
        why = f": {m.aborted}" if m.aborted else ""
        return f"{name}: {parsed.figure.absent_when}{why}"
    if c not in planned[name]:
        return (
            f"{level_name(c)} is not one of the profile's {name} levels "
            f'{list(planned[name])}; retire it with gate.retired = ["{name}.{level_tag(c)}.*"] '
            "or re-record the baseline"
        )
    if m is None:
        return f"the {name} measurement did not run in this session ({NOT_RUN_WHY})"
    if c in m.not_run or c not in m.by_concurrency():
        why = f"; {m.aborted}" if m.aborted else ""
        return f"level {level_name(c)} did not run{why}"
    figure = BY_NAME[parsed.figure.name]
    assert figure_key(name, c, figure.name) == key
    return f"level {level_name(c)} ran but produced no {figure.name}: {figure.absent_when}"
