"""The measurer: levels in order with repeats (a sweep of concurrencies or request rates),
sequential single requests, and the capacity search; each level run through one
:class:`~perfgate.run.window.MeasuredWindow`, decided by the run's gate policy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from perfgate.client import RequestRecord
from perfgate.client.monitor import timing_warning
from perfgate.errors import BackendError, ProfileError, WorkloadError
from perfgate.gate.capacity import search_capacity
from perfgate.gate.values import level_name
from perfgate.launch import Backend
from perfgate.load.level import LevelRun, RateShape, RoundRunner, Tally, plain_rounds
from perfgate.load.rayshards import RayShardPool
from perfgate.load.shards import ShardPool
from perfgate.load.sweep import Decision, run_sweep
from perfgate.load.workers import (
    HttpxWorkers,
    RequestPlan,
    SequentialClient,
    WireWorkers,
    Workers,
)
from perfgate.measure.data import CapacitySearch, LevelData, Measurement, Probe
from perfgate.render.live import ProgressView
from perfgate.results.run import RunRecord
from perfgate.run.baselines import BaselineChoice
from perfgate.run.notes import Notes
from perfgate.run.prompting import PromptSource
from perfgate.run.requests import behind_schedule, rate_text, request_plan, short_output_problem
from perfgate.run.server import ServerControl
from perfgate.run.settings import RunSettings
from perfgate.run.window import MeasuredWindow
from perfgate.workload.prompts import Prompt


class Measurer:
    """Measures on the run's server, into the run record: each measurement's level runs
    are saved as they end. Built from the settings, the baseline choice (its policy decides
    repeats and the early abort), the server control and the prompt source."""

    def __init__(
        self,
        settings: RunSettings,
        choice: BaselineChoice,
        server: ServerControl,
        prompts: PromptSource,
        run: RunRecord,
        notes: Notes,
        view: ProgressView,
        save: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.profile = settings.profile
        self.choice = choice
        self.server = server
        self.prompt_source = prompts
        self.run = run
        self.notes = notes
        self.view = view
        self.progress = view.message
        self.save = save  # writes the run JSON as it stands

    # -- what each request sends -------------------------------------------------------
    @property
    def forced(self) -> bool:
        """Whether requests force their output length (``ignore_eos``)."""
        return "ignore_eos" in self.server.completion_extras

    def plan(self) -> RequestPlan:
        """What each measured request sends."""
        return request_plan(self.settings, self.server.completion_extras)

    def prompts(self, name: str, concurrency: int | float, repeat: int, count: int) -> list[Prompt]:
        """``count`` seeded prompts for run ``repeat`` of test ``name``'s level ``concurrency``
        (starting the backend: its tokenizer counts them)."""
        backend = self.server.start()
        return self.prompt_source.draw(
            backend.base_url, name, concurrency, repeat, count, headers=backend.headers
        )

    def shard_pool_for(self) -> Callable[[str], ShardPool]:
        """The sweep's client shards: processes on this host, or Ray actors over the
        cluster the profile names (``workload.client_ray``)."""
        address = self.profile.workload.client_ray
        if address is None:
            return ShardPool
        return lambda base_url: RayShardPool(base_url, address)

    def workers_for(self, base_url: str) -> Workers:
        """This process's workers of measured requests: lean wire connections, or httpx
        on the run's injected transport."""
        http = self.settings.http
        if not http.injected:
            return WireWorkers(base_url)
        timeout = self.profile.timeouts.request_s
        return HttpxWorkers(lambda: http.async_client(base_url, timeout=timeout))

    def _window(self, backend: Backend) -> MeasuredWindow:
        return MeasuredWindow(self.server, backend, self.profile, self.notes)

    def _closed(self, window: MeasuredWindow, run: LevelRun, repeat: int) -> LevelData:
        """A level run's data from its window, its output lengths checked."""
        data = window.close(run, repeat)
        kind = self.prompt_source.kind
        if why := short_output_problem(self.profile, kind, data, self.forced):
            self.notes.warn(why)
        return data

    # -- deciding after a run ----------------------------------------------------------
    def after_run(
        self,
        name: str,
        measurement: Measurement,
        done: Sequence[LevelData],
        stopping: str,
        again: str,
    ) -> Decision:
        """After a run of a level (``done``: its runs so far): stop the measurement when
        its first run is far below the baseline (early abort, saying ``stopping``), measure
        the level again while a figure is undecided (saying ``again`` once the minimum
        runs are done), else go on."""
        policy, baseline = self.choice.policy, self.choice.baseline
        if len(done) == 1 and (reason := policy.abort_reason(name, done[0], baseline)):
            measurement.aborted = reason
            self.progress(f"perfgate: {reason}; {stopping}")
            return "stop"
        first = [d for d in measurement.levels if d.level == 1]
        step = policy.after_level(name, list(done), baseline, first)
        if step == "repeat" and len(done) >= policy.min_runs:
            self.progress(f"perfgate: {again}")
        return step

    # -- a sweep -----------------------------------------------------------------------
    def measure(
        self,
        name: str,
        levels: Sequence[int | float],
        requests_at: Callable[[int | float], int],
    ) -> Measurement:
        """Run levels in order with repeats, re-measure inconclusive levels, stop early when
        far below the baseline. A float level is a request rate, run open-loop on the
        workload's arrival schedule. The run JSON is saved after every level run."""
        backend = self.server.start()
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
            self.save()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BackendError(
                f"{name}: could not prepare the next level ({exc}); levels not run: "
                f"{measurement.not_run}. {self.server.evidence()}"
            ) from exc
        if measurement.not_run and measurement.aborted:
            measurement.aborted += f"; levels not run: {measurement.not_run}"
        harness = [(level_name(lv.level), lv.harness) for lv in measurement.levels if lv.harness]
        if (warning := timing_warning(name, harness)) is not None:
            self.notes.warn(warning)
        self.save()
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
        kind = self.prompt_source.kind
        window = self._window(backend)
        run_of: dict[str, int | float] = {"repeat": 0, "level": 0}

        def show_progress(tally: Tally) -> None:
            level, repeat = level_name(run_of["level"]), run_of["repeat"] + 1
            label = f"{name} {level} {run_word} {repeat} {tally.phase}"
            rate = rate_text(self.profile, kind, tally, self.forced)
            self.view.show(label, tally.total, tally.done, tally.failed, rate)

        def prompts_for(c: int | float, repeat: int) -> list[Prompt]:
            run_of["repeat"], run_of["level"] = first_repeat + repeat, c
            total = requests_at(c)
            self.progress(
                f"perfgate: {name} {level_name(c)} {run_word} {first_repeat + repeat + 1}: {total} "
                f"requests ({kind.lengths(w)}, {warmup} warmup)"
            )
            return self.prompts(name, c, first_repeat + repeat, total + warmup)

        def on_record(_: int, record: RequestRecord) -> None:
            if not record.ok:
                self.progress(f"perfgate:   request failed: {record.error}")

        def on_level(level: LevelRun, repeat: int) -> None:
            self.view.close_shown()
            data = self._closed(window, level, first_repeat + repeat)
            collected.append(data)
            if data.rate is not None and (late := behind_schedule(self.profile, name, data)):
                self.notes.warn(late)
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
            self.save()

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
                    workers_for=self.workers_for,
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

    # -- single requests ---------------------------------------------------------------
    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        """Sequential single requests at C=1, one per round of ``runner`` (pytest-benchmark's
        ``pedantic`` or a plain loop); inconclusive figures get extra rounds."""
        backend = self.server.start()
        warmup = self.profile.workload.warmup
        plan = self.plan()
        policy = self.choice.policy
        prompts = self.prompts(name, 1, 0, warmup + rounds * policy.max_runs)
        measurement = Measurement()
        self.run.measurements[name] = measurement
        self.progress(f"perfgate: {name}: {rounds} sequential requests a run, {warmup} warmup")
        client = SequentialClient(backend.base_url, plan, self.workers_for(backend.base_url))
        records: list[RequestRecord] = []
        queue = iter(prompts)
        run_of = {"first": 0, "repeat": 0}

        def send() -> RequestRecord:
            prompt = next(queue)
            return client.send(prompt.text, prompt.output_len, prompt.history)

        def one_round() -> None:
            records.append(send())
            run = records[run_of["first"] :]  # after the record: no figure times a redraw
            label = f"{name} run {run_of['repeat'] + 1}"
            self.view.show(label, rounds, len(run), sum(not r.ok for r in run))

        window = self._window(backend)

        def start_run(first: int, repeat: int) -> None:
            run_of["first"], run_of["repeat"] = first, repeat
            window.open()

        def close_run(first: int, repeat: int) -> list[LevelData]:
            self.view.close_shown()
            batch = records[first:]
            run = LevelRun(concurrency=1, records=batch, start=batch[0].start, end=batch[-1].end)
            measurement.levels.append(self._closed(window, run, repeat))
            self.save()
            return measurement.levels

        try:
            for _ in range(warmup):
                send()
            start_run(0, 0)
            runner(one_round, rounds)  # the first run through pytest-benchmark, if given
            if not records:  # a runner that ran nothing (e.g. benchmarks disabled oddly)
                plain_rounds(one_round, rounds)
            runs = close_run(0, 0)
            again = f"{name} near its limit; {rounds} more requests"
            while self.after_run(name, measurement, runs, "no more runs", again) == "repeat":
                first = len(records)
                start_run(first, len(runs))
                plain_rounds(one_round, rounds)
                runs = close_run(first, len(runs))
        finally:
            self.view.close_shown()
            client.close()
            window.stop()
        return measurement

    # -- the capacity search -----------------------------------------------------------
    def measure_capacity(self, name: str) -> Measurement:
        """The capacity search (``[capacity]``), repeated like a level's runs: at least
        ``gate.repeats`` searches, more while the capacity is near its limit. Each probe is
        one level run judged against ``[slo]``; the run JSON is saved after every probe."""
        spec = self.profile.capacity
        if spec is None:
            raise ProfileError(f"profile {self.profile.name} sets no [capacity] search")
        backend = self.server.start()
        measurement = Measurement()
        self.run.measurements[name] = measurement
        policy = self.choice.policy
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
            self.save()

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
                self.save()
                if not backend.alive():
                    measurement.aborted = "the server is no longer running"
                    break
                step = policy.after_search(name, measurement, self.choice.baseline)
                if step == "repeat" and len(measurement.searches) >= policy.min_runs:
                    self.progress(f"perfgate: {name} near its limit; searching again")
        except WorkloadError as exc:
            measurement.aborted = f"could not prepare a probe ({exc})"
            self.save()
            raise BackendError(f"{name}: {measurement.aborted}. {self.server.evidence()}") from exc
        finally:
            self.save()
        return measurement
