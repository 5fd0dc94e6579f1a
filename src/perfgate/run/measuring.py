"""Measuring levels: a sweep of concurrencies or request rates, and the capacity search."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from perfgate.client import RequestRecord
from perfgate.client.monitor import timing_warning
from perfgate.errors import BackendError, ProfileError, WorkloadError
from perfgate.gate.capacity import search_capacity
from perfgate.gate.values import level_name
from perfgate.launch import Backend
from perfgate.load.level import LevelRun, RateShape, Tally
from perfgate.load.sweep import Decision, run_sweep
from perfgate.measure.data import CapacitySearch, LevelData, Measurement, Probe
from perfgate.run.state import SessionState
from perfgate.run.window import MeasuredWindow
from perfgate.workload.prompts import Prompt


class Measuring(SessionState):
    """Levels in order with repeats, re-measured while near their limit, stopped early when
    far below the baseline; capacity searches."""

    def measure(
        self,
        name: str,
        levels: Sequence[int | float],
        requests_at: Callable[[int | float], int],
    ) -> Measurement:
        """Run levels in order with repeats, re-measure inconclusive levels, stop early when
        far below the baseline. A float level is a request rate, run open-loop on the
        workload's arrival schedule. The run JSON is saved after every level run."""
        backend = self.start_backend()
        measurement = Measurement()
        self.run.measurements[name] = measurement

        def after_level(c: int | float, done: list[LevelData]) -> Decision:
            again = f"{name} {level_name(c)} near its limit; measuring again"
            return self.after_run(name, measurement, done, "stopping the sweep", again)

        try:
            measurement.not_run = self._run_levels(
                backend, name, levels, requests_at, measurement.levels, after_level
            )
        except (KeyboardInterrupt, WorkloadError) as exc:  # Ctrl-C or SIGTERM, or no prompts
            ran = {lv.level for lv in measurement.levels}
            measurement.not_run = [c for c in levels if c not in ran]
            self.save_run()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BackendError(
                f"{name}: could not prepare the next level ({exc}); levels not run: "
                f"{measurement.not_run}. {self.evidence()}"
            ) from exc
        if measurement.not_run and measurement.aborted:
            measurement.aborted += f"; levels not run: {measurement.not_run}"
        harness = [(level_name(lv.level), lv.harness) for lv in measurement.levels if lv.harness]
        if (warning := timing_warning(name, harness)) is not None:
            self.degraded(warning)
        self.save_run()
        return measurement

    def _run_levels(
        self,
        backend: Backend,
        name: str,
        levels: Sequence[int | float],
        requests_at: Callable[[int | float], int],
        collected: list[LevelData],
        after_level: Callable[[int | float, list[LevelData]], Decision],
        first_repeat: int = 0,
        run_word: str = "run",
    ) -> list[int | float]:
        """Run levels in order, each level run appended to ``collected`` (and the run JSON
        saved) as it ends; ``after_level`` decides on a level's runs so far. Returns the
        levels not run. ``run_word`` names a repeat in progress lines ("search": the
        capacity search a probe belongs to)."""
        w = self.profile.workload
        warmup = w.warmup
        window = MeasuredWindow(self, backend)
        run_of: dict[str, int | float] = {"repeat": 0, "level": 0}

        def show_progress(tally: Tally) -> None:
            level, repeat = level_name(run_of["level"]), run_of["repeat"] + 1
            label = f"{name} {level} {run_word} {repeat} {tally.phase}"
            self.view.show(label, tally.total, tally.done, tally.failed, self._rate(tally))

        def prompts_for(c: int | float, repeat: int) -> list[Prompt]:
            run_of["repeat"], run_of["level"] = first_repeat + repeat, c
            total = requests_at(c)
            self.progress(
                f"perfgate: {name} {level_name(c)} {run_word} {first_repeat + repeat + 1}: {total} "
                f"requests ({self._lengths_text()}, {warmup} warmup)"
            )
            return self.prompts(name, c, first_repeat + repeat, total + warmup)

        def on_record(_: int, record: RequestRecord) -> None:
            if not record.ok:
                self.progress(f"perfgate:   request failed: {record.error}")

        def on_level(level: LevelRun, repeat: int) -> None:
            self.view.close_shown()
            data = window.close(level, first_repeat + repeat)
            collected.append(data)
            if data.rate is not None:
                self._check_schedule(name, data)
            m = data.metrics
            self.progress(
                f"perfgate: {name} {level_name(data.level)}: {m.agg_tok_s:.1f} tok/s agg, "
                f"{m.per_request_tok_s.p50 or 0:.1f} tok/s per request (median), "
                f"ok {m.ok}, fail {m.fail}, wall {m.wall_s:.1f}s"
                + (
                    f", {m.tokens_per_chunk:.2f} tokens per chunk"
                    if m.tokens_per_chunk is not None and m.tokens_per_chunk > 1.005
                    else ""
                )
                + (f"; {level.harness.describe()}" if level.harness else "")
                + (f"; {data.server.describe()}" if data.server else "")
            )
            self.save_run()

        def decide(c: int | float, runs: list[LevelRun]) -> Decision:
            if not backend.alive():
                self.progress("perfgate: server is no longer running; stopping the sweep")
                return "stop"
            return after_level(c, [d for d in collected if d.level == c][-len(runs) :])

        try:
            sweep = asyncio.run(
                run_sweep(
                    backend.base_url,
                    self.plan(),
                    levels,
                    prompts_for,
                    warmup=warmup,
                    level_timeout_s=self.profile.timeouts.level_s,
                    after_level=decide,
                    on_record=on_record,
                    on_level=on_level,
                    on_measure_start=window.open,
                    on_progress=show_progress,
                    processes=w.client_processes,
                    pool_for=self.shard_pool_for(),
                    rate_shape=RateShape(
                        arrival=w.arrival,
                        burstiness=w.burstiness,
                        max_in_flight=w.max_in_flight,
                        seed=w.seed,
                    ),
                )
            )
        finally:
            self.view.close_shown()
            window.stop()
        return sweep.not_run

    def measure_capacity(self, name: str) -> Measurement:
        """The capacity search (``[capacity]``), repeated like a level's runs: at least
        ``gate.repeats`` searches, more while the capacity is near its limit. Each probe is
        one level run judged against ``[slo]``; the run JSON is saved after every probe."""
        spec = self.profile.capacity
        if spec is None:
            raise ProfileError(f"profile {self.profile.name} sets no [capacity] search")
        backend = self.start_backend()
        measurement = Measurement()
        self.run.measurements[name] = measurement
        policy = self.policy
        w = self.profile.workload

        def requests_at(level: int | float) -> int:
            if spec.requests is not None:
                return spec.requests
            return w.rate_requests if spec.by == "rate" else int(level) * w.rounds

        def probe(level: int | float) -> Probe:
            runs: list[LevelData] = []
            first = len(measurement.searches) - 1
            self._run_levels(
                backend, name, [level], requests_at, runs, lambda *_: "next", first, "search"
            )
            if not runs:
                raise BackendError(f"{name}: the probe at {level_name(level)} did not run")
            found = Probe.of(runs[-1], spec.target)
            share = found.goodput.met_share or 0.0
            self.progress(
                f"perfgate: {name} {level_name(level)}: slo_met {share:.2f} "
                f"{'>=' if found.met else '<'} target {spec.target:.2f}"
            )
            return found

        def on_probe(search: CapacitySearch) -> None:
            self.save_run()

        try:
            step: str = "repeat"
            while step == "repeat":
                found = CapacitySearch(by=spec.by, target=spec.target, high=spec.high)
                measurement.searches.append(found)
                self.progress(
                    f"perfgate: {name}: search {len(measurement.searches)}: the highest "
                    f"{'request rate' if spec.by == 'rate' else 'concurrency'} from "
                    f"{spec.low:g} to {spec.high:g} with slo_met >= {spec.target:.2f}"
                )
                search_capacity(found, spec, probe, on_probe)
                self.progress(
                    f"perfgate: {name}: search {len(measurement.searches)}: {found.describe()}"
                )
                self.save_run()
                if not backend.alive():
                    measurement.aborted = "the server is no longer running"
                    break
                step = policy.after_search(name, measurement, self.baseline)
                if step == "repeat" and len(measurement.searches) >= policy.min_runs:
                    self.progress(f"perfgate: {name} near its limit; searching again")
        except WorkloadError as exc:
            measurement.aborted = f"could not prepare a probe ({exc})"
            self.save_run()
            raise BackendError(f"{name}: {measurement.aborted}. {self.evidence()}") from exc
        finally:
            self.save_run()
        return measurement
