"""One perfgate run: start or attach the backend, measure, judge, record, stop.

The pytest plugin and fixtures are thin wrappers around this object; it imports no
pytest so the same run can be driven from a script.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from perfgate import __version__
from perfgate.client import RequestRecord
from perfgate.client.monitor import timing_warning
from perfgate.correctness.golden import (
    GoldenOutputs,
    Greedy,
    compare_golden,
    golden_path,
    load_golden,
    save_golden,
)
from perfgate.correctness.twin import twin_greedy
from perfgate.diagnose.causes import Diagnosis, diagnose
from perfgate.diagnose.observe import SpecWindow, read_facts, rejected_extras, short_outputs
from perfgate.engines import Engine, Facts, get_engine
from perfgate.errors import BackendError, BaselineError, ProfileError, WorkloadError
from perfgate.gate.baseline import (
    ANY_HARDWARE,
    Baseline,
    baseline_path,
    load_profile_baselines,
    save_baseline,
)
from perfgate.gate.capacity import search_capacity
from perfgate.gate.creep import apply_creep_rule
from perfgate.gate.figures import CHOSEN, SLO_FIGURES, unknown_figures
from perfgate.gate.policy import GatePolicy, Reach, Verdicts, choose_baseline, reach
from perfgate.gate.recording import build_baseline, diff_lines
from perfgate.gate.values import level_name, run_values
from perfgate.gate.verdict import Check
from perfgate.launch import AttachedBackend, Backend, launch
from perfgate.load.level import LevelRun, RateShape, RoundRunner, Tally, plain_rounds
from perfgate.load.rayshards import RayShardPool
from perfgate.load.shards import ShardPool
from perfgate.load.sweep import Decision, run_sweep
from perfgate.load.workers import RequestPlan, SequentialClient
from perfgate.measure.data import CapacitySearch, LevelData, Measurement, Probe
from perfgate.measure.telemetry import (
    SAMPLE_INTERVAL_S,
    GpuSampler,
    GpuTelemetry,
    SmiSampler,
    open_nvml,
    smi_command,
)
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.render.markdown import markdown_summary
from perfgate.render.plots.charts import render_run_plots
from perfgate.render.plots.common import PlotsUnavailable, load_baseline_run
from perfgate.render.table import render_table
from perfgate.results.history import append_entry, entry_from_run, history_path, load_history
from perfgate.results.run import BaselineRef, RunRecord, git_commit
from perfgate.run.prompting import PromptSource
from perfgate.workload.prompts import Prompt

Progress = Callable[[str], None]


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")  # a server NVML here can read


@dataclass(frozen=True)
class GateOptions:
    """Command-line overrides of the profile's gate settings."""

    repeats: int | None = None
    abort_below: float | None = None
    tolerance: float | None = None  # used when writing baselines
    hardware: str | None = None  # the serving host's key where perfgate cannot read it
    allow_no_baseline: bool = False  # skip instead of failing where no baseline applies
    accept_golden: bool = False  # recording may replace golden outputs that changed


BEHIND_SCHEDULE_S = 0.010  # an open-loop level whose requests left later than this is behind
SLO_NAMES = tuple(f.name for f in SLO_FIGURES)  # gated whenever a profile sets [slo]


def gate_policy(
    profile: Profile,
    repeats: int,
    *,
    abort_below: float = 0.0,
    recording: bool = False,
    another_host: bool = False,
) -> GatePolicy:
    """The gate policy of a profile's ``[gate]`` settings, ``repeats`` runs a level first."""
    gate = profile.gate
    return GatePolicy(
        min_runs=repeats,
        max_runs=max(repeats, repeats + gate.max_extra_repeats),
        abort_below=abort_below,
        false_failure_rate=gate.false_failure_rate,
        retired=tuple(gate.retired),
        recording=recording,
        figures=tuple(gate.figures) + (SLO_NAMES if profile.slo else ()),
        another_host=another_host,
    )


class PerfgateSession:
    """State of one run. Create with a validated profile; the backend starts lazily."""

    def __init__(
        self,
        profile: Profile,
        *,
        root: Path,
        baselines_dir: Path,
        output_dir: Path,
        base_url: str | None = None,
        server_log: Path | None = None,
        update_baselines: bool = False,
        options: GateOptions | None = None,
        progress: Progress | ProgressView = print,
        history_dir: Path | None = None,
    ) -> None:
        if unknown := unknown_figures(profile.gate.figures):
            choosable = ", ".join(f.name for f in CHOSEN)
            raise ProfileError(
                f"profile {profile.name!r}: gate.figures has unknown {', '.join(unknown)}; "
                f"a profile can choose {choosable}"
            )
        self.profile = profile
        # the server's API key and extra headers: read now, so a missing one stops the run
        # before anything starts; never written anywhere
        self.headers = profile.request_headers()
        self.engine: Engine = get_engine(profile.engine)
        self.root = root
        self.base_url = base_url
        self.server_log = server_log
        self.update_baselines = update_baselines
        self.options = options or GateOptions()
        # progress lines and live displays (a plain callable: lines only)
        self.view = progress if isinstance(progress, ProgressView) else ProgressView(progress)
        self.progress = self.view.message
        self.output_dir = output_dir
        self.history_dir = history_dir or output_dir / "history"
        # the earlier runs the slow-creep rule reads: checked now, before any server starts
        self.history = (
            load_history(history_path(self.history_dir, profile.name))
            if profile.gate.creep_runs
            else []
        )
        self.baselines_dir = baselines_dir
        self.known_baselines = load_profile_baselines(baselines_dir, profile.name)
        # resolved once the server runs: its hardware key picks the baseline
        self.hardware: dict[str, object] = {"label": profile.hardware}
        self.hardware_key = ""
        self.baseline: Baseline | None = None
        self.baseline_tier = "none"  # "exact", "any" or "none"
        self.baseline_path = baseline_path(baselines_dir, profile.name, ANY_HARDWARE)
        self.golden: GoldenOutputs | None = None
        self.golden_outputs: GoldenOutputs | None = None  # produced by this run
        self.recording_refused = False  # --perf-update-baselines wrote nothing: the build fails
        self.owner = f"perfgate-{uuid.uuid4().hex[:12]}"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.run_path = output_dir / "runs" / f"{profile.name}-{stamp}-{self.owner[-6:]}.json"
        self.backend: Backend | None = None
        # the twin's greedy outputs of (prompts, max_tokens), when a twin check is selected
        self.twin_request: tuple[list[str], int] | None = None
        self._twin_result: Greedy | str | None = None  # the twin's outputs, or why none
        self.backend_error: BackendError | None = None
        self._gpu: GpuSampler | str | None = None  # the NVML sampler, or why none (once known)
        self.unusable: list[str] = []  # correctness failures that make perf meaningless
        self.answered_wrongly = False  # a correctness check ran and failed (exit 12)
        self.perf_selected = False  # whether this session runs perf tests (set by the plugin)
        self.prompt_source = PromptSource(
            profile,
            self.engine,
            root=root,
            view=self.view,
            degraded=self.degraded,
            nonce=self.owner if base_url else "",  # attached servers may cache prompts
        )
        self.completion_extras = self.engine.completion_extras()
        self.run = RunRecord(
            perfgate_version=__version__,
            profile=profile.public_dump(),
            profile_digest=profile.digest(),
            engine=profile.engine,
            launcher="attach" if base_url else profile.launcher,
            git_commit=git_commit(root),
            hardware=self.hardware,
        )
        self.warnings = self.run.warnings  # what perfgate could not do as usual
        self.correctness_failures = self.run.correctness_failures

    # -- settings ----------------------------------------------------------------------
    @property
    def repeats(self) -> int:
        """Runs of each level before a verdict (when recording: ``gate.record_repeats``)."""
        if self.options.repeats:
            return self.options.repeats
        gate = self.profile.gate
        return gate.record_repeats if self.update_baselines else gate.repeats

    @property
    def abort_below(self) -> float:
        """Fraction of the baseline's tok/s under which a sweep stops at once (never while
        recording a new baseline: a slower engine may be accepted on purpose)."""
        if self.update_baselines:
            return 0.0
        if self.options.abort_below is not None:
            return self.options.abort_below
        return self.profile.gate.abort_below

    @property
    def policy(self) -> GatePolicy:
        """The gate policy from the profile's settings and the command line."""
        return gate_policy(
            self.profile,
            self.repeats,
            abort_below=self.abort_below,
            recording=self.update_baselines,
            another_host=self.another_host,
        )

    @property
    def reach(self) -> Reach:
        """What this run's comparison can catch: same host, another host, floors only."""
        return reach(self.baseline, self.baseline_tier, self.policy)

    @property
    def another_host(self) -> bool:
        """Whether the exact baseline was recorded on another host than this run's server
        (or either host is unknown): the spread between hosts then adds to the noise."""
        if self.baseline is None or self.baseline_tier != "exact":
            return False
        here = str(self.hardware.get("host_id") or "")
        return not here or self.baseline.provenance.get("host_id") != here

    def planned(self) -> dict[str, list[int | float]]:
        """The levels each measurement of the perf suite runs (``rate``: request rates)."""
        w = self.profile.workload
        planned: dict[str, list[int | float]] = {"single": [1], "sweep": list(w.levels)}
        if w.rates:
            planned["rate"] = [float(r) for r in w.rates]
        if self.profile.capacity is not None:
            planned["capacity"] = []  # measurement-wide: no levels
        return planned

    def record_command(self) -> str:
        """The command that records a baseline for this profile here."""
        extra = f" --perf-base-url {self.base_url}" if self.base_url else ""
        hw = f" --perf-hardware {self.hardware_key}" if self.options.hardware else ""
        return f"perfgate run {self.profile.name}{extra}{hw} --perf-update-baselines"

    def resolve_baseline(self, hardware: dict[str, object]) -> None:
        """Pick the baseline for the serving host's hardware: the exact key, else the
        profile's hardware-independent ``any`` targets, else none."""
        key = self.options.hardware or str(hardware.get("key") or "")
        if not key:
            key = self.profile.hardware
            hardware = {**hardware, "key": key, "key_from": "profile hardware label"}
        self.hardware = {**hardware, "key": key, "label": self.profile.hardware}
        self.hardware_key = key
        self.run.hardware = self.hardware
        self.baseline, self.baseline_tier = choose_baseline(self.known_baselines, key)
        self.baseline_path = baseline_path(self.baselines_dir, self.profile.name, key)
        self.golden = load_golden(golden_path(self.baseline_path))
        self.run.notes.append(self.tier_note())
        kept = self.baseline.provenance.get("run_json") if self.baseline else None
        gating = self.baseline_path
        if self.baseline_tier == "any":
            gating = baseline_path(self.baselines_dir, self.profile.name, ANY_HARDWARE)
        reach = self.reach
        self.run.baseline = BaselineRef(
            hardware_key=key,
            tier=self.baseline_tier,
            path=self._relative(gating),
            run_json=str(kept) if kept and self.baseline_tier == "exact" else None,
            scope=reach.scope,
            host_spread=reach.host_spread,
            detectable=reach.detectable,
        )

    def tier_note(self) -> str:
        """Which baseline gates this run, and how to get an exact one."""
        where = f"hardware key {self.hardware_key!r}"
        if self.hardware.get("key_from"):  # a remote attached server: perfgate cannot look
            where += (
                f" (the profile's label: the server at {self.base_url} is on another host; "
                "name its key with --perf-hardware KEY)"
            )
        if self.baseline_tier == "exact":
            return (
                f"gated by the exact baseline for {where} ({self._relative(self.baseline_path)})"
                f": {self.reach.describe()}"
            )
        others = sorted(k for k in self.known_baselines if k != ANY_HARDWARE)
        recorded = f"; baselines exist for {', '.join(others)}" if others else ""
        if self.baseline_tier == "any":
            return (
                f"no exact baseline for {where}{recorded}: gated by the profile's "
                f"hardware-independent targets ({ANY_HARDWARE}.json). Record an exact one "
                f"with: {self.record_command()}"
            )
        return f"no baseline for {where}{recorded}. Record one with: {self.record_command()}"

    def hardware_mismatch(self) -> str | None:
        """Why figures cannot be judged here, or None (a baseline applies, or one is being
        recorded)."""
        if self.baseline is not None or self.update_baselines:
            return None
        return (
            f"no baseline for profile {self.profile.name} on this hardware "
            f"({self.hardware_key}). A different machine is not a regression, but nothing "
            f"was gated. Record one with: {self.record_command()} (or pass "
            "--perf-allow-no-baseline to skip the perf tests instead of failing)"
        )

    # -- backend -----------------------------------------------------------------------
    def start_backend(self) -> Backend:
        """Launch (or attach to) the profile's server and wait until it generates a token."""
        if self.backend is not None:
            return self.backend
        if self.backend_error is not None:
            raise self.backend_error
        if self.twin_request is not None and self._twin_result is None:
            self._run_twin_alone(*self.twin_request)
        try:
            backend = self._launch()
            self.backend = backend
            self.progress(f"perfgate: waiting for {self.engine.name} at {backend.base_url} ...")
            backend.wait_ready(self.profile.timeouts.startup_s)
        except BackendError as exc:
            self.backend_error = exc
            self.run.notes.append(f"backend failed: {exc}")
            self.stop_backend()
            raise
        with httpx.Client(
            base_url=backend.base_url, timeout=10.0, headers=backend.headers
        ) as client:
            self.run.engine_version = self.engine.version(client)
        self.run.base_url = backend.base_url
        try:
            self.resolve_baseline(backend.hardware())
        except BaselineError as exc:
            raise BackendError(str(exc)) from exc
        self.collect_facts()
        if not self.engine.features_known:
            self._probe_features(backend)
        self.progress(
            f"perfgate: {self.engine.name} {self.run.engine_version} ready at {backend.base_url}"
        )
        return backend

    def gpu_sampler(self) -> GpuSampler | SmiSampler | None:
        """The serving host's GPU sampler, opened once: NVML here, or ``nvidia-smi``'s loop
        through the ssh launcher's connection; None with a note (in the run JSON, and said
        once) where NVML is absent or the server runs on a host perfgate cannot reach."""
        if isinstance(self._gpu, GpuSampler | SmiSampler):
            return self._gpu
        if self._gpu is None:
            host = urlsplit(self.base_url).hostname if self.base_url else None
            remote = getattr(self.backend, "remote_argv", None)
            if remote is not None and not self.base_url:
                self._gpu = SmiSampler(remote(smi_command(SAMPLE_INTERVAL_S)), SAMPLE_INTERVAL_S)
                return self._gpu
            if host is not None and host not in LOCAL_HOSTS:
                why = f"the server ({host}) is not on this host; NVML reads this host's GPUs"
            else:
                nvml, why = open_nvml()
                if nvml is not None:
                    self._gpu = GpuSampler(nvml, SAMPLE_INTERVAL_S)
                    return self._gpu
            self.no_gpu_telemetry(why)
        return None

    def no_gpu_telemetry(self, why: str) -> None:
        """Say once, in the output and the run JSON, why there is no GPU telemetry."""
        note = why if why.startswith("no GPU telemetry") else f"no GPU telemetry: {why}"
        self._gpu = note
        if note not in self.run.notes:
            self.run.notes.append(note)
            self.progress(f"perfgate: {note}")

    def gpu_stopped(self, sampler: GpuSampler | SmiSampler | None) -> GpuTelemetry | None:
        """A level's GPU telemetry; a remote loop that gave no sample stops the sampling
        for the run, with a note saying what it said."""
        if sampler is None:
            return None
        telemetry = sampler.stop()
        if telemetry is None and isinstance(sampler, SmiSampler):
            self.no_gpu_telemetry(
                f"nvidia-smi on the server's host gave no sample ({sampler.problem or 'no output'})"
            )
        return telemetry

    def degraded(self, message: str) -> None:
        """Say once, in the output and the run JSON, what perfgate could not do as usual."""
        if message not in self.run.notes:
            self.run.notes.append(message)
            self.warnings.append(message)  # repeated in the terminal summary
            self.progress(f"perfgate: warning: {message}")

    def _probe_features(self, backend: Backend) -> None:
        """For a server of unknown kind: without the fields that force output length,
        say so and measure what it generates."""
        why = rejected_extras(
            backend.base_url, self.profile.model.name, self.completion_extras, backend.headers
        )
        if why:
            self.completion_extras = {}
            self.degraded(why)

    def _check_output_lengths(self, data: LevelData) -> None:
        forced = "ignore_eos" in self.completion_extras
        if forced:
            return  # short outputs fail their requests (RequestPlan.output_problem)
        w = self.profile.workload
        if w.prompts in ("dataset", "multi-turn") or w.range_ratio:
            return  # lengths vary by request: no one length to compare with
        if why := short_outputs(data.metrics, self.profile.workload.output_len, forced):
            self.degraded(why)

    def _launch(self) -> Backend:
        model = self.profile.model.name
        if self.base_url:
            return AttachedBackend(
                self.base_url,
                engine=self.engine,
                model=model,
                log_path=self.server_log,
                headers=self.headers,
            )
        if self.profile.launcher != "attach":
            self.progress(
                f"perfgate: starting {self.engine.name} for profile {self.profile.name} "
                f"({self.profile.launcher} launcher)"
            )
        return launch(self.profile, self.engine, self.output_dir / "logs", owner=self.owner)

    def stop_backend(self) -> None:
        """Stop the backend if perfgate started it."""
        if self.backend is not None:
            self.backend.stop()

    def _run_twin_alone(self, prompts: list[str], max_tokens: int) -> None:
        """The twin's greedy outputs, computed before this profile's server starts: one
        server at a time (two large models rarely fit one host), the twin on a port of
        its own, stopped before the profile's server starts."""
        name = self.profile.correctness.twin_profile
        if name is None:
            return
        if self.base_url:
            self._twin_result = (
                f"the server under test is attached (--perf-base-url), so perfgate cannot stop it "
                f"to run the twin {name} alone; check losslessness with a profile perfgate "
                "launches"
            )
            self.degraded(self._twin_result)
            return
        self._twin_result = twin_greedy(
            name,
            self.root / "profiles",
            prompts,
            max_tokens,
            log_dir=self.output_dir / "logs",
            owner=self.owner,
            before=self.profile.name,
            progress=self.progress,
        )

    def twin_problem(self) -> str:
        """Why the twin's outputs are missing ('' when they are there)."""
        return "" if isinstance(self._twin_result, Greedy) else str(self._twin_result or "")

    def twin_outputs(self) -> Greedy:
        """The twin's greedy outputs (computed before the profile's server started);
        raises :class:`BackendError` saying why there are none."""
        if isinstance(self._twin_result, Greedy):
            return self._twin_result
        raise BackendError(self._twin_result or "no twin check was selected when the run began")

    # -- diagnosis ---------------------------------------------------------------------
    def collect_facts(self, log: str | None = None) -> Facts:
        """The server's configuration facts now (see :func:`read_facts`), kept in the run
        JSON; ``log``: the server's log where the caller has already read it."""
        backend = self.backend
        if log is None:
            log = backend.logs() if backend is not None else ""
        self.run.facts = read_facts(
            self.engine,
            backend,
            engine_version=self.run.engine_version,
            log=log,
            previous=self.run.facts,
            measurements=self.run.measurements,
        )
        return self.run.facts

    def diagnosis(self, checks: Sequence[Check] = ()) -> Diagnosis:
        """Why figures may have regressed: ranked causes, facts that differ from the
        baseline's, and the matching server log lines."""
        log = self.backend.logs() if self.backend is not None else ""
        facts = self.collect_facts(log)
        old = self.baseline.facts if self.baseline is not None else None
        return diagnose(facts, old, checks, log, self.engine.log_grep)

    def evidence(self) -> str:
        """Server state and log tail, for failure messages."""
        if self.backend is None:
            return ""
        state = "alive" if self.backend.alive() else f"exited ({self.backend.exit_code()})"
        log = self.backend.log_tail(15)
        return f"server {state}" + (f"; last log lines:\n{log}" if log else "")

    # -- measuring ---------------------------------------------------------------------
    def plan(self) -> RequestPlan:
        """What each measured request sends."""
        w = self.profile.workload
        return RequestPlan(
            api=w.api,
            model=self.profile.model.name,
            output_len=w.output_len,
            request_timeout_s=self.profile.timeouts.request_s,
            extras={
                "temperature": 0,
                **self.completion_extras,
                **self.profile.server.request_fields,
            },
            reasoning_fields=self.engine.reasoning_fields,
            headers=self.headers,
        )

    def prompts(self, name: str, concurrency: int | float, repeat: int, count: int) -> list[Prompt]:
        """``count`` seeded prompts for run ``repeat`` of test ``name``'s level ``concurrency``
        (starting the backend: its tokenizer counts them)."""
        backend = self.start_backend()
        return self.prompt_source.draw(
            backend.base_url, name, concurrency, repeat, count, headers=backend.headers
        )

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
        policy = self.policy

        def after_level(c: int | float, done: list[LevelData]) -> Decision:
            if len(done) == 1 and (reason := policy.abort_reason(name, done[0], self.baseline)):
                measurement.aborted = reason
                self.progress(f"perfgate: {reason}; stopping the sweep")
                return "stop"
            first = [d for d in measurement.levels if d.level == 1]
            step = policy.after_level(name, done, self.baseline, first)
            if step == "repeat" and len(done) >= policy.min_runs:
                self.progress(f"perfgate: {name} {level_name(c)} near its limit; measuring again")
            return step

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
        spec_window = SpecWindow(self.engine, backend.base_url, backend.headers)
        gpu = self.gpu_sampler()
        run_of: dict[str, int | float] = {"repeat": 0, "level": 0}

        def measure_start() -> None:
            spec_window.open()
            if gpu is not None:
                gpu.start()

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
            data = LevelData.from_run(
                level,
                first_repeat + repeat,
                spec=spec_window.close(),
                slo=self.profile.slo,
                gpu=self.gpu_stopped(gpu),
            )
            collected.append(data)
            self._check_output_lengths(data)
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
                    on_measure_start=measure_start,
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
            if gpu is not None:
                gpu.stop()  # interrupted mid-level: the thread ends
        return sweep.not_run

    def shard_pool_for(self) -> Callable[[str], ShardPool]:
        """The sweep's client shards: processes on this host, or Ray actors over the
        cluster the profile names (``workload.client_ray``)."""
        address = self.profile.workload.client_ray
        if address is None:
            return ShardPool
        return lambda base_url: RayShardPool(base_url, address)

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

    def _check_schedule(self, name: str, data: LevelData) -> None:
        """Say when an open-loop level's requests left the client late (p99 of the wait
        from their scheduled time past :data:`BEHIND_SCHEDULE_S`), and why: the cap on
        requests in flight was full, or the client itself lagged."""
        wait = data.metrics.client_delay_s
        if wait.p99 is None or wait.p99 <= BEHIND_SCHEDULE_S:
            return
        cap = self.profile.workload.max_in_flight
        if cap is not None:
            why = f"all {cap} requests in flight allowed (workload.max_in_flight) were busy"
        else:
            why = "the client could not send on time" + (
                f" ({data.harness.describe()})" if data.harness else ""
            )
        self.degraded(
            f"{name} {level_name(data.level)}: the client fell behind its schedule: requests "
            f"left up to {(wait.p99 or 0) * 1000:.0f} ms (p99; mean {(wait.mean or 0) * 1000:.0f}"
            f" ms) after their scheduled time; {why}. That wait is in their TTFT and latency, "
            "which count from the scheduled time"
        )

    def _lengths_text(self) -> str:
        """The workload's lengths in words, e.g. '128 in / 64 out tokens'."""
        w = self.profile.workload
        if w.prompts in ("dataset", "multi-turn"):
            turns = " turns" if w.prompts == "multi-turn" else ""
            return f"{w.dataset}{turns}, at most {w.input_len} in / {w.output_len} out tokens"
        spread = f" ±{w.range_ratio:.0%}" if w.range_ratio else ""
        shared = f", {w.prefix_len} shared" if w.prefix_len else ""
        return f"{w.input_len}{spread} in{shared} / {w.output_len}{spread} out tokens"

    def _rate(self, tally: Tally) -> str:
        """The phase's rate so far: tokens a second where every request streams exactly
        output_len (forced, one length), else requests a second."""
        elapsed = time.perf_counter() - tally.started
        if elapsed <= 0 or not tally.done:
            return ""
        w = self.profile.workload
        fixed = w.prompts in ("random", "shared-prefix") and not w.range_ratio
        if "ignore_eos" in self.completion_extras and fixed:
            return f"≈{tally.done * self.profile.workload.output_len / elapsed:.0f} tok/s"
        return f"{tally.done / elapsed:.2f} req/s"

    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        """Sequential single requests at C=1, one per round of ``runner`` (pytest-benchmark's
        ``pedantic`` or a plain loop); inconclusive figures get extra rounds."""
        backend = self.start_backend()
        warmup = self.profile.workload.warmup
        plan = self.plan()
        policy = self.policy
        prompts = self.prompts(name, 1, 0, warmup + rounds * policy.max_runs)
        measurement = Measurement()
        self.run.measurements[name] = measurement
        self.progress(f"perfgate: {name}: {rounds} sequential requests a run, {warmup} warmup")
        client = SequentialClient(backend.base_url, plan)
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

        gpu = self.gpu_sampler()

        def start_run(first: int, repeat: int) -> None:
            run_of["first"], run_of["repeat"] = first, repeat
            spec_window.open()
            if gpu is not None:
                gpu.start()

        def close_run(first: int, repeat: int) -> list[LevelData]:
            self.view.close_shown()
            batch = records[first:]
            run = LevelRun(concurrency=1, records=batch, start=batch[0].start, end=batch[-1].end)
            measurement.levels.append(
                LevelData.from_run(
                    run,
                    repeat,
                    spec=spec_window.close(),
                    slo=self.profile.slo,
                    gpu=self.gpu_stopped(gpu),
                )
            )
            self._check_output_lengths(measurement.levels[-1])
            self.save_run()
            return measurement.levels

        spec_window = SpecWindow(self.engine, backend.base_url, backend.headers)
        try:
            for _ in range(warmup):
                send()
            start_run(0, 0)
            runner(one_round, rounds)  # the first run through pytest-benchmark, if given
            if not records:  # a runner that ran nothing (e.g. benchmarks disabled oddly)
                plain_rounds(one_round, rounds)
            runs = close_run(0, 0)
            if reason := policy.abort_reason(name, runs[0], self.baseline):
                measurement.aborted = reason
                self.progress(f"perfgate: {reason}; no more runs")
                return measurement
            while policy.after_level(name, runs, self.baseline) == "repeat":
                if len(runs) >= policy.min_runs:
                    self.progress(f"perfgate: {name} near its limit; {rounds} more requests")
                first = len(records)
                start_run(first, len(runs))
                plain_rounds(one_round, rounds)
                runs = close_run(first, len(runs))
        finally:
            self.view.close_shown()
            client.close()
            if gpu is not None:
                gpu.stop()
        return measurement

    def verdicts(self) -> Verdicts:
        """Every baseline figure judged against this run (MISSING where not produced)."""
        return self.policy.judge(self.run.measurements, self.baseline, self.planned())

    def judge(self, name: str) -> list[Check]:
        """The checks of one measurement's figures (its missing ones included); all checks
        of the run so far go into the run JSON."""
        verdicts = self.verdicts()
        self.run.checks = verdicts.checks
        self.apply_creep_rule()
        self.collect_facts()
        self.save_run()
        return [c for c in self.run.checks if c.key.startswith(f"{name}.")]

    def table(self, name: str) -> str:
        """The concurrency table of one measurement."""
        m = self.run.measurements[name]
        return render_table(name, m, self.baseline, self.policy.chosen(self.baseline))

    # -- recording ---------------------------------------------------------------------
    def save_run(self) -> None:
        """Write the run JSON as it stands."""
        self.run.write(self.run_path)

    def record_baseline(self) -> list[str]:
        """Write a new baseline from this run, all or nothing; returns the lines to print.

        Only a passed run with every measurement complete is recorded. Its figures are
        merged into the existing baseline (figures it did not measure are kept).
        """
        refuse = "perfgate: baseline NOT updated: "
        problems = self.policy.recording_problems(
            self.run.measurements,
            status=self.run.status,
            correctness_failures=self.correctness_failures,
        )
        golden_only = (
            not self.run.measurements
            and self.golden_outputs is not None
            and self.run.status == "passed"
            and not self.correctness_failures
        )
        if problems and golden_only:  # e.g. `pytest -m correctness --perf-update-baselines`
            return [
                "perfgate: no performance measured in this run: baseline figures unchanged",
                *self._record_golden(),
            ]
        if problems:
            self.recording_refused = True
            lines = [refuse + problems[0], *(f"  also: {p}" for p in problems[1:])]
            regressed = [c.key for c in self.run.checks if c.verdict == "regressed"]
            exact = self.baseline_tier == "exact"
            if regressed and exact and not self.correctness_failures:
                named = ", ".join(regressed[:3]) + (", ..." if len(regressed) > 3 else "")
                lines.append(
                    f"  it regressed against {self._relative(self.baseline_path)} ({named}). "
                    "To accept slower figures on purpose, remove that file (git keeps the old "
                    "one) and record again."
                )
            return lines
        previous = self.known_baselines.get(self.hardware_key)
        kept_run = self.baseline_path.with_suffix(".run.json.gz")
        try:
            recorded = build_baseline(
                self.profile.name,
                self.hardware_key,
                run_values(self.run.measurements, self.policy.chosen(previous)),
                previous,
                rule=self.policy.rule(None),
                tolerance=self.options.tolerance,
                facts=self.run.facts,
                min_tolerance=self.profile.gate.min_tolerance,
                host_id=str(self.hardware.get("host_id") or ""),
                provenance={
                    "perfgate_version": __version__,
                    "git_commit": self.run.git_commit,
                    "profile": self.run.profile,
                    "profile_digest": self.run.profile_digest,
                    "engine": self.run.engine,
                    "engine_version": self.run.engine_version,
                    "model": self.profile.model.name,
                    "hardware": self.hardware,
                    "run_json": self._relative(kept_run),
                },
            )
        except BaselineError as exc:
            self.recording_refused = True
            return [refuse + str(exc)]
        save_baseline(self.baseline_path, recorded.baseline)
        self.run.write_compressed(kept_run)  # the raw records, compact, beside the figures
        lines = [
            f"perfgate: baseline written to {self._relative(self.baseline_path)} "
            f"({len(recorded.baseline.metrics)} figures; tolerances from "
            f"{self.repeats} runs a level):",
            *diff_lines(previous, recorded),
        ]
        lines += self._record_golden()
        # self.baseline stays the old one: the summary table shows old vs measured
        return lines

    def _record_golden(self) -> list[str]:
        """Write this run's golden outputs next to the baseline; the lines to print (each
        changed output, with where it changed)."""
        if self.golden_outputs is None:
            return []
        lines = []
        path = golden_path(self.baseline_path)
        if self.golden is not None:  # the file recording replaces, read at start
            changed = [
                d for d in compare_golden(self.golden, self.golden_outputs.outputs) if not d.exact
            ]
            lines += [f"perfgate: golden output changed: {d.message()}" for d in changed]
        save_golden(path, self.golden_outputs)
        lines.append(
            f"perfgate: {len(self.golden_outputs.outputs)} golden greedy outputs "
            f"written to {self._relative(path)}"
        )
        return lines

    def apply_creep_rule(self) -> None:
        """The slow-creep rule (when the profile sets ``gate.creep_runs``): this run's
        passing figures that have been worse than the baseline by more than the margin
        for that many runs in a row, in the profile's history, become CREEP."""
        gate = self.profile.gate
        if gate.creep_runs and self.run.checks and not self.update_baselines:
            self.run.checks = apply_creep_rule(
                self.run.checks,
                self.history,
                runs=gate.creep_runs,
                margin=gate.creep_margin,
                hardware_key=self.hardware_key,
            )

    def append_history(self) -> list[str]:
        """This run's judged figures and provenance appended to the profile's history;
        returns the lines to print. Interrupted runs and recordings add nothing."""
        path = history_path(self.history_dir, self.profile.name)
        if self.update_baselines or self.run.status in ("interrupted", "running"):
            return []
        entry = entry_from_run(self.run, self._relative(self.run_path))
        if entry is None:
            return []
        try:
            append_entry(path, entry)
        except OSError as exc:
            return [f"perfgate: could not append to the history {path}: {exc}"]
        return [f"perfgate: history appended to {self._relative(path)}"]

    def write_reports(
        self,
        *,
        summary_paths: Sequence[Path] = (),
        plots: bool = True,
        artifact_url: str | None = None,
    ) -> list[str]:
        """The run's plots (next to the run JSON) and its Markdown summary (appended to
        each of ``summary_paths``, e.g. ``$GITHUB_STEP_SUMMARY``; ``artifact_url``: where
        CI keeps the files), all computed from the run JSON; returns the lines to print."""
        lines: list[str] = []
        files: list[str] = []
        if plots and self.run.measurements:
            baseline_run = None
            if self.run.status == "failed":
                baseline_run = load_baseline_run(self.run, self.root)
            try:
                written = render_run_plots(
                    self.run,
                    self.run_path.parent,
                    self.run_path.name.removesuffix(".json"),
                    baseline_run=baseline_run,
                )
            except (PlotsUnavailable, OSError) as exc:
                lines.append(f"perfgate: no plots: {exc}")
            else:
                files = [self._relative(path) for path in written]
                if files:
                    lines.append(f"perfgate: plots written: {', '.join(files)}")
                else:
                    lines.append(
                        "perfgate: no plots: they draw levels of concurrency, and this run "
                        "measured none (request rates and capacity searches are in the tables)"
                    )
        markdown = markdown_summary(
            self.run, run_json=self._relative(self.run_path), files=files, artifact_url=artifact_url
        )
        for path in summary_paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as out:
                    out.write(markdown + "\n")
            except OSError as exc:
                lines.append(f"perfgate: could not write the Markdown summary to {path}: {exc}")
            else:
                lines.append(f"perfgate: Markdown summary written to {path}")
        return lines

    def _relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def finish(self, status: str) -> None:
        """Final status, the last facts and (when figures failed or a sweep stopped
        early) the diagnosis into the run JSON."""
        if self.backend is not None:
            self.collect_facts()
        failed = [c for c in self.run.checks if c.failed]
        if failed or any(m.aborted for m in self.run.measurements.values()):
            self.run.diagnosis = self.diagnosis(failed).record()
        self.run.status = status
        self.save_run()
