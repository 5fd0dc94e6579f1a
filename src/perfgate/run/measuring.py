"""The measurer: one loop over a plan (:mod:`perfgate.run.plans`: a sweep of concurrencies
or request rates, sequential single requests, capacity searches), each level run through
one :class:`~perfgate.run.window.MeasuredWindow` and saved as it ends; the run's gate
policy decides repeats and the early abort."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence

from perfgate.client import RequestRecord
from perfgate.client.monitor import timing_warning
from perfgate.errors import BackendError, ProfileError, WorkloadError
from perfgate.gate.values import level_name
from perfgate.launch import Backend
from perfgate.load.level import LevelRun, RateShape, RoundRunner, Tally, plain_rounds
from perfgate.load.rayshards import RayShardPool
from perfgate.load.shards import ShardPool
from perfgate.load.sweep import LevelRunner
from perfgate.load.workers import (
    HttpxWorkers,
    RequestPlan,
    WireWorkers,
    Workers,
)
from perfgate.measure.data import CapacitySearch, LevelData, Measurement, Probe
from perfgate.render import progress
from perfgate.render.live import ProgressView
from perfgate.results.run import RunRecord
from perfgate.run.baselines import BaselineChoice
from perfgate.run.notes import Notes
from perfgate.run.plans import CapacityPlan, Decision, Plan, Step, SweepPlan
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
        forcing = "ignore_eos" in self.server.completion_extras
        return forcing and not self.prompt_source.kind.ends_on_its_own

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

    def window(self, backend: Backend) -> MeasuredWindow:
        return MeasuredWindow(self.server, backend, self.profile, self.notes)

    def closed(self, window: MeasuredWindow, run: LevelRun, repeat: int) -> LevelData:
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
        what: str,
        again: str,
    ) -> Decision:
        """After a run of a level (``done``: its runs so far): stop the measurement when
        its first run is far below the baseline (early abort, saying ``stopping``), measure
        ``what`` again while a figure is undecided (saying ``again`` once the minimum runs
        are done), else go on."""
        gate = self.choice.gate
        if len(done) == 1 and (reason := gate.abort_reason(name, done[0])):
            measurement.aborted = reason
            self.progress(progress.stopped(reason, stopping))
            return "stop"
        first = [d for d in measurement.levels if d.level == 1]
        step = gate.after_level(name, list(done), first)
        if step == "repeat" and len(done) >= gate.policy.min_runs:
            self.progress(progress.near_limit(what, again))
        return step

    # -- the one loop ------------------------------------------------------------------
    @contextlib.contextmanager
    def lane(
        self,
        name: str,
        aio: asyncio.Runner,
        *,
        prompts: Sequence[Prompt] | None = None,
        runner: RoundRunner = plain_rounds,
        label: str = "",
    ) -> Iterator[Lane]:
        """This server's lane for measurement ``name``: connections and client processes
        kept across its steps, one measured window; closed on leaving. ``label``: how
        progress lines name the measurement (default: ``name``; an A/B run names the side)."""
        backend = self.server.start()
        lane = Lane(self, name, aio, backend, prompts=prompts, runner=runner, label=label)
        try:
            yield lane
        finally:
            lane.close()

    def run_plan(
        self,
        name: str,
        plan: Plan,
        collected: list[LevelData],
        *,
        prompts: Sequence[Prompt] | None = None,
        runner: RoundRunner = plain_rounds,
    ) -> None:
        """Measure the plan's steps in order until it says no more, on one lane
        (:meth:`lane`): each level run appended to ``collected`` and saved. ``prompts``:
        one queue drawn beforehand, for sequential steps, one request a round of ``runner``
        (pytest-benchmark's rounds for the first run, then plain ones)."""
        with asyncio.Runner() as aio, self.lane(name, aio, prompts=prompts, runner=runner) as lane:
            done: list[LevelData] = []
            while (step := plan.next(done)) is not None:
                done.append(lane.run(step))
                collected.append(done[-1])

    # -- the measurements --------------------------------------------------------------
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

        def decide(level: int | float, runs: list[LevelData]) -> Decision:
            if not backend.alive():
                self.progress(progress.stopped("server is no longer running", "stopping the sweep"))
                return "stop"
            what = f"{name} {level_name(level)}"
            return self.after_run(
                name, measurement, runs, "stopping the sweep", what, "measuring again"
            )

        plan = SweepPlan(levels, requests_at, decide)
        try:
            self.run_plan(name, plan, measurement.levels)
            measurement.not_run = plan.not_run
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

    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        """Sequential single requests at C=1, one per round of ``runner`` (pytest-benchmark's
        ``pedantic`` or a plain loop); inconclusive figures get extra rounds."""
        self.server.start()
        warmup = self.profile.workload.warmup
        prompts = self.prompts(name, 1, 0, warmup + rounds * self.choice.policy.max_runs)
        measurement = Measurement()
        self.run.measurements[name] = measurement
        self.progress(progress.sequential_starts(name, rounds, warmup))
        again = f"{rounds} more requests"

        def decide(level: int | float, runs: list[LevelData]) -> Decision:
            return self.after_run(name, measurement, runs, "no more runs", name, again)

        plan = SweepPlan([1], lambda _: rounds, decide, sequential=True)
        self.run_plan(name, plan, measurement.levels, prompts=prompts, runner=runner)
        return measurement

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
        gate = self.choice.gate
        w = self.profile.workload

        def requests_at(level: int | float) -> int:
            if spec.requests is not None:
                return spec.requests
            return w.rate_requests if spec.by == "rate" else int(level) * w.rounds

        def again() -> Decision:
            self.save()
            if not backend.alive():
                measurement.aborted = "the server is no longer running"
                return "stop"
            step = gate.after_search(name, measurement)
            if step == "repeat" and len(measurement.searches) >= gate.policy.min_runs:
                self.progress(progress.near_limit(name, "searching again"))
            return step

        def said(what: str, search: CapacitySearch, probe: Probe | None) -> None:
            number = len(measurement.searches)
            self.progress(progress.search_event(name, spec, what, search, number, probe))

        plan = CapacityPlan(spec, measurement, requests_at, again, said)
        try:
            self.run_plan(name, plan, [])
        except WorkloadError as exc:
            measurement.aborted = f"could not prepare a probe ({exc})"
            self.save()
            raise BackendError(f"{name}: {measurement.aborted}. {self.server.evidence()}") from exc
        finally:
            self.save()
        return measurement


class Lane:
    """One server's measuring lane for one measurement: its backend, its level runner
    (connections and client processes kept across steps) and one measured window. A plan's
    steps run on it one at a time (:meth:`run`); an A/B run holds one lane a side."""

    def __init__(
        self,
        measurer: Measurer,
        name: str,
        aio: asyncio.Runner,
        backend: Backend,
        *,
        prompts: Sequence[Prompt] | None = None,
        runner: RoundRunner = plain_rounds,
        label: str = "",
    ) -> None:
        self.measurer = measurer
        self.profile = profile = measurer.profile
        self.name = name  # the measurement: with the level and repeat, it seeds the prompts
        self.label = label = label or name
        self.aio = aio
        self.view = measurer.view
        self.progress = measurer.progress
        self.window = measurer.window(backend)
        # sequential steps' prompts, drawn beforehand (None: each run draws its own)
        self.queue = iter(prompts) if prompts is not None else None
        self.runner = runner
        self.current: list[Step] = []  # the step in progress (the live display's label)
        w = profile.workload
        kind = measurer.prompt_source.kind

        def show_progress(tally: Tally) -> None:
            step = self.current[-1]
            text = progress.live_label(label, step.level, step.word, step.number, tally.phase)
            rate = rate_text(profile, kind, tally, measurer.forced)
            self.view.show(text, tally.total, tally.done, tally.failed, rate)

        def on_record(_: int, record: RequestRecord) -> None:
            if not record.ok:
                self.progress(progress.request_failed(record))

        self.levels = LevelRunner(
            backend.base_url,
            measurer.plan(),
            warmup=w.warmup,
            level_timeout_s=profile.timeouts.level_s,
            on_record=on_record,
            on_progress=show_progress,
            processes=w.client_processes,
            rate_shape=RateShape(
                arrival=w.arrival, burstiness=w.burstiness, max_in_flight=w.max_in_flight,
                seed=w.seed,
            ),
            pool_for=measurer.shard_pool_for(),
            workers_for=measurer.workers_for,
        )  # fmt: skip

    def run(self, step: Step) -> LevelData:
        """Measure one step: its prompts drawn, run, read through the window, saved."""
        self.current.append(step)
        if step.sequential:
            run = self._sequential(step)
            self.runner = plain_rounds  # pytest-benchmark times the first run only
        else:
            run = self._level_run(step)
        return self._ended(step, run)

    def close(self) -> None:
        """Stop the window's samplers and close the connections."""
        try:
            self.view.close_shown()
            self.window.stop()
        finally:
            self.aio.run(self.levels.aclose())

    def _level_run(self, step: Step) -> LevelRun:
        """One run of a level: its prompts drawn (warmup first), run, the window open
        over its measured requests."""
        w, name = self.profile.workload, self.name
        lengths = self.measurer.prompt_source.kind.lengths(w)
        warmup = self._warmup(step)
        self.progress(
            progress.run_starts(
                self.label, step.level, step.word, step.number, step.requests, lengths, warmup
            )
        )
        drawn = self.measurer.prompts(name, step.level, step.repeat, step.requests + warmup)
        run = self.levels.run(step.level, drawn, on_measure_start=self.window.open, warmup=warmup)
        return self.aio.run(run)

    def _warmup(self, step: Step) -> int:
        """The step's unmeasured requests before its own: its plan's, else the workload's."""
        return self.profile.workload.warmup if step.warmup is None else step.warmup

    def _ended(self, step: Step, run: LevelRun) -> LevelData:
        """A level run ended: its data from the window, checked, said and saved."""
        self.view.close_shown()
        measurer = self.measurer
        data = measurer.closed(self.window, run, step.repeat)
        if data.rate is not None and (late := behind_schedule(self.profile, self.name, data)):
            measurer.notes.warn(late)
        if not step.sequential or step.side:  # an A/B run says each run, single ones too
            self.progress(progress.level_ended(self.label, data))
        measurer.save()
        return data

    def _sequential(self, step: Step) -> LevelRun:
        """One run of sequential requests, one a round of ``runner``; the workload's
        warmup requests go first, before the first run only. Without a queue drawn
        beforehand, the run draws its own, seeded by its repeat (an A/B run: pair k's
        prompts the same on both sides, however many warm-ups each side ran)."""
        aio, levels, queue = self.aio, self.levels, self.queue
        warmup = self._warmup(step) if step.repeat == 0 else 0
        if queue is None:
            queue = iter(self.measurer.prompts(self.name, 1, step.repeat, warmup + step.requests))
        for _ in range(warmup):
            aio.run(levels.send(next(queue)))
        records: list[RequestRecord] = []

        def one_round() -> None:
            records.append(aio.run(levels.send(next(queue))))
            # after the record: no figure times a redraw
            label = f"{self.name} {step.word} {step.number}"
            self.view.show(label, step.requests, len(records), sum(not r.ok for r in records))

        self.window.open()
        self.runner(one_round, step.requests)
        if not records:  # a runner that ran nothing (e.g. benchmarks disabled oddly)
            plain_rounds(one_round, step.requests)
        return LevelRun(concurrency=1, records=records, start=records[0].start, end=records[-1].end)
