"""One perfgate run: start or attach the backend, measure, judge, record, stop.

The pytest plugin and fixtures are thin wrappers around this object; it imports no
pytest so the same run can be driven from a script.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from perfgate import __version__
from perfgate.baseline import (
    Baseline,
    Check,
    GoldenOutputs,
    baseline_path,
    build_baseline,
    compare_samples,
    diff_lines,
    golden_path,
    level_samples,
    load_golden,
    load_profile_baselines,
    measurement_samples,
    save_baseline,
    save_golden,
)
from perfgate.client import RequestRecord, SimpleClient, request_body, stream_request
from perfgate.diagnose import Diagnosis, diagnose
from perfgate.engines import Engine, Facts, get_engine
from perfgate.errors import BackendError, WorkloadError
from perfgate.launch import AttachedBackend, Backend, describe_local_hardware, launch
from perfgate.load import Decision, LevelRun, RequestPlan, pooled_client, run_sweep
from perfgate.metrics import LevelData, Measurement
from perfgate.observe import SpecWindow, read_facts, rejected_extras, short_outputs
from perfgate.profile import Profile, load_profile
from perfgate.report import RunRecord, render_table
from perfgate.stats import median
from perfgate.workload import Prompt, Tokenizer, approximate_prompts, build_prompts

Progress = Callable[[str], None]
RoundRunner = Callable[[Callable[[], None], int], None]


def git_commit(root: Path) -> str | None:
    """The project's current commit, where it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def plain_rounds(one_round: Callable[[], None], rounds: int) -> None:
    """Run rounds one after another (pytest-benchmark's ``pedantic`` is the other runner)."""
    for _ in range(rounds):
        one_round()


@dataclass(frozen=True)
class GateOptions:
    """Command-line overrides of the profile's gate settings."""

    repeats: int | None = None
    abort_below: float | None = None
    tolerance: float | None = None  # used when writing baselines


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
        progress: Progress = print,
    ) -> None:
        self.profile = profile
        self.engine: Engine = get_engine(profile.engine)
        self.root = root
        self.base_url = base_url
        self.server_log = server_log
        self.update_baselines = update_baselines
        self.options = options or GateOptions()
        self.progress = progress
        self.output_dir = output_dir
        self.baselines_dir = baselines_dir
        if base_url:  # the serving host is not ours to inspect: trust the profile's label
            self.hardware: dict[str, object] = {"key": profile.hardware, "host": "attached"}
        else:
            self.hardware = describe_local_hardware()
        self.hardware["label"] = profile.hardware
        self.hardware_key = str(self.hardware["key"])
        known = load_profile_baselines(baselines_dir, profile.name)
        self.baseline: Baseline | None = known.get(self.hardware_key)
        self.other_hardware = sorted(k for k in known if k != self.hardware_key)
        self.baseline_path = baseline_path(baselines_dir, profile.name, self.hardware_key)
        self.golden = load_golden(golden_path(self.baseline_path))
        self.golden_outputs: GoldenOutputs | None = None  # produced by this run
        self.owner = f"perfgate-{uuid.uuid4().hex[:12]}"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.run_path = output_dir / "runs" / f"{profile.name}-{stamp}-{self.owner[-6:]}.json"
        self.backend: Backend | None = None
        self.twins: dict[str, Backend] = {}
        self.backend_error: BackendError | None = None
        self.correctness_failures: list[str] = []
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

    # -- settings ----------------------------------------------------------------------
    @property
    def repeats(self) -> int:
        """Runs of each sweep level."""
        return self.options.repeats or self.profile.gate.repeats

    @property
    def abort_below(self) -> float:
        """Fraction of the baseline's tok/s under which a sweep stops at once (never while
        recording a new baseline: a slower engine may be accepted on purpose)."""
        if self.update_baselines:
            return 0.0
        if self.options.abort_below is not None:
            return self.options.abort_below
        return self.profile.gate.abort_below

    def hardware_mismatch(self) -> str | None:
        """Why figures cannot be judged on this hardware, or None."""
        if self.baseline is not None or not self.other_hardware:
            return None
        return (
            f"no baseline for profile {self.profile.name} on this hardware "
            f"({self.hardware_key}); baselines exist for {', '.join(self.other_hardware)}. "
            "A different machine is not a regression. Record a baseline for this hardware "
            f"with: pytest -m perf --profile {self.profile.name} --update-baselines"
        )

    # -- backend -----------------------------------------------------------------------
    def start_backend(self) -> Backend:
        """Launch (or attach to) the profile's server and wait until it generates a token."""
        if self.backend is not None:
            return self.backend
        if self.backend_error is not None:
            raise self.backend_error
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
        with httpx.Client(base_url=backend.base_url, timeout=10.0) as client:
            self.run.engine_version = self.engine.version(client)
        self.run.base_url = backend.base_url
        self.collect_facts()
        if not self.engine.features_known:
            self._probe_features(backend)
        self.progress(
            f"perfgate: {self.engine.name} {self.run.engine_version} ready at {backend.base_url}"
        )
        return backend

    def degraded(self, message: str) -> None:
        """Say once, in the output and the run JSON, what perfgate could not do as usual."""
        if message not in self.run.notes:
            self.run.notes.append(message)
            self.progress(f"perfgate: warning: {message}")

    def _probe_features(self, backend: Backend) -> None:
        """For a server of unknown kind: without the fields that force output length,
        say so and measure what it generates."""
        why = rejected_extras(backend.base_url, self.profile.model.name, self.completion_extras)
        if why:
            self.completion_extras = {}
            self.degraded(why)

    def _check_output_lengths(self, data: LevelData) -> None:
        forced = "ignore_eos" in self.completion_extras
        if why := short_outputs(data.metrics, self.profile.workload.output_len, forced):
            self.degraded(why)

    def _launch(self) -> Backend:
        model = self.profile.model.name
        if self.base_url:
            return AttachedBackend(
                self.base_url, engine=self.engine, model=model, log_path=self.server_log
            )
        if self.profile.launcher != "attach":
            self.progress(
                f"perfgate: starting {self.engine.name} for profile {self.profile.name} "
                f"({self.profile.launcher} launcher)"
            )
        return launch(self.profile, self.engine, self.output_dir / "logs", owner=self.owner)

    def stop_backend(self) -> None:
        """Stop the backend (and a twin) if perfgate started them."""
        if self.backend is not None:
            self.backend.stop()
        for twin in self.twins.values():
            twin.stop()

    def twin_client(self, name: str) -> SimpleClient:
        """A client of the profile's twin (started on first use, stopped with the backend)."""
        if name not in self.twins:
            twin = load_profile(name, self.root / "profiles")
            self.progress(f"perfgate: starting twin profile {name}")
            backend = launch(
                twin, get_engine(twin.engine), self.output_dir / "logs", owner=self.owner
            )
            self.twins[name] = backend
            backend.wait_ready(twin.timeouts.startup_s)
        twin_backend = self.twins[name]
        return SimpleClient(
            twin_backend.base_url,
            self.profile.model.name,
            timeout_s=self.profile.timeouts.request_s,
        )

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
            measurements=self.run.measurements.values(),
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
            extras={"temperature": 0, **self.completion_extras},
            reasoning_fields=self.engine.reasoning_fields,
        )

    def _prompts(self, name: str, concurrency: int, repeat: int, count: int) -> list[Prompt]:
        w = self.profile.workload
        backend = self.start_backend()
        seed = random.Random(f"{w.seed}:{name}:{concurrency}:{repeat}").getrandbits(32)
        with httpx.Client(base_url=backend.base_url, timeout=30.0) as client:
            if self.engine.tokenize_path is None:
                prompts, note = approximate_prompts(
                    client, self.profile.model.name, count, w.input_len, seed
                )
                if not any(n.startswith("no tokenize endpoint") for n in self.run.notes):
                    self.degraded(note)  # once: later levels' estimates differ slightly
                return prompts
            tokenizer = Tokenizer(client, self.engine, self.profile.model.name)
            return build_prompts(tokenizer, count, w.input_len, seed)

    def _abort_reason(self, name: str, data: LevelData) -> str | None:
        """Why a sweep should stop right after this level run (far below baseline)."""
        if self.baseline is None or self.abort_below <= 0:
            return None
        for key, samples in level_samples(name, [data]).items():
            exp = self.baseline.metrics.get(key)
            if exp is None or exp.direction != "higher":
                continue
            value = median(samples)
            if value < self.abort_below * exp.value:
                return (
                    f"early abort at C={data.concurrency}: {key} {value:.4g} {exp.unit} is "
                    f"below {self.abort_below:.0%} of the baseline {exp.value:.4g} "
                    f"{exp.unit}"
                )
        return None

    def _still_inconclusive(self, name: str, runs: list[LevelData]) -> bool:
        checks = compare_samples(level_samples(name, runs), self.baseline)
        return any(c.verdict == "inconclusive" for c in checks)

    def measure(
        self, name: str, levels: Sequence[int], requests_at: Callable[[int], int]
    ) -> Measurement:
        """Run levels in order with repeats, re-measure inconclusive levels, stop early when
        far below the baseline. The run JSON is saved after every level run."""
        backend = self.start_backend()
        warmup = self.profile.workload.warmup
        measurement = Measurement()
        self.run.measurements[name] = measurement
        most = self.repeats + self.profile.gate.max_extra_repeats
        spec_window = SpecWindow(self.engine, backend.base_url)

        def prompts_for(c: int, repeat: int) -> list[Prompt]:
            total = requests_at(c)
            self.progress(
                f"perfgate: {name} C={c} run {repeat + 1}: {total} requests "
                f"({self.profile.workload.input_len} in / "
                f"{self.profile.workload.output_len} out tokens, {warmup} warmup)"
            )
            return self._prompts(name, c, repeat, total + warmup)

        def on_record(_: int, record: RequestRecord) -> None:
            if not record.ok:
                self.progress(f"perfgate:   request failed: {record.error}")

        def on_level(level: LevelRun, repeat: int) -> None:
            data = LevelData.from_run(level, repeat, spec=spec_window.close())
            measurement.levels.append(data)
            self._check_output_lengths(data)
            m = data.metrics
            self.progress(
                f"perfgate: {name} C={m.concurrency}: {m.agg_tok_s:.1f} tok/s agg, "
                f"{m.per_request_tok_s.mean or 0:.1f} tok/s per request, "
                f"ok {m.ok}, fail {m.fail}, wall {m.wall_s:.1f}s"
            )
            self.save_run()

        def after_level(c: int, runs: list[LevelRun]) -> Decision:
            if not backend.alive():
                self.progress("perfgate: server is no longer running; stopping the sweep")
                return "stop"
            done = measurement.by_concurrency()[c]  # this level's runs, metrics computed
            if len(runs) == 1 and (reason := self._abort_reason(name, done[0])):
                measurement.aborted = reason
                self.progress(f"perfgate: {reason}; stopping the sweep")
                return "stop"
            if len(runs) < self.repeats:
                return "repeat"
            if len(runs) < most and self._still_inconclusive(name, done):
                self.progress(f"perfgate: {name} C={c} inconclusive; measuring again")
                return "repeat"
            return "next"

        try:
            sweep = asyncio.run(
                run_sweep(
                    backend.base_url,
                    self.plan(),
                    levels,
                    prompts_for,
                    warmup=warmup,
                    level_timeout_s=self.profile.timeouts.level_s,
                    after_level=after_level,
                    on_record=on_record,
                    on_level=on_level,
                    on_measure_start=spec_window.open,
                )
            )
        except WorkloadError as exc:
            ran = {lv.concurrency for lv in measurement.levels}
            measurement.not_run = [c for c in levels if c not in ran]
            self.save_run()
            raise BackendError(
                f"{name}: could not prepare the next level ({exc}); levels not run: "
                f"{measurement.not_run}. {self.evidence()}"
            ) from exc
        measurement.not_run = sweep.not_run
        if measurement.not_run and measurement.aborted:
            measurement.aborted += f"; levels not run: {measurement.not_run}"
        self.save_run()
        return measurement

    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        """Sequential single requests at C=1, one per round of ``runner`` (pytest-benchmark's
        ``pedantic`` or a plain loop); inconclusive figures get extra rounds."""
        backend = self.start_backend()
        warmup = self.profile.workload.warmup
        plan = self.plan()
        extra = self.profile.gate.max_extra_repeats * rounds
        prompts = self._prompts(name, 1, 0, warmup + rounds + extra)
        measurement = Measurement()
        self.run.measurements[name] = measurement
        self.progress(f"perfgate: {name}: {rounds} sequential requests, {warmup} warmup")
        loop = asyncio.new_event_loop()
        client = pooled_client(backend.base_url, 1, plan.request_timeout_s)
        records: list[RequestRecord] = []
        queue = iter(prompts)

        def send() -> RequestRecord:
            body = request_body(
                plan.api, plan.model, next(queue).text, plan.output_len, **plan.extras
            )
            return loop.run_until_complete(
                stream_request(
                    client,
                    body,
                    index=len(records),
                    api=plan.api,
                    timeout_s=plan.request_timeout_s,
                    reasoning_fields=plan.reasoning_fields,
                )
            )

        def one_round() -> None:
            records.append(send())

        def close_level(first: int, repeat: int) -> list[LevelData]:
            batch = records[first:]
            run = LevelRun(concurrency=1, records=batch, start=batch[0].start, end=batch[-1].end)
            measurement.levels.append(LevelData.from_run(run, repeat, spec=spec_window.close()))
            self._check_output_lengths(measurement.levels[-1])
            self.save_run()
            return measurement.levels

        spec_window = SpecWindow(self.engine, backend.base_url)
        try:
            for _ in range(warmup):
                send()
            spec_window.open()
            runner(one_round, rounds)
            if not records:  # a runner that ran nothing (e.g. benchmarks disabled oddly)
                one_round()
            runs = close_level(0, 0)
            repeat = 0
            while repeat < self.profile.gate.max_extra_repeats and self._still_inconclusive(
                name, runs
            ):
                repeat += 1
                self.progress(f"perfgate: {name} inconclusive; {rounds} more requests")
                first = len(records)
                spec_window.open()
                plain_rounds(one_round, rounds)
                runs = close_level(first, repeat)
        finally:
            loop.run_until_complete(client.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())  # streams' generators
            loop.close()
        return measurement

    def judge(self, name: str) -> list[Check]:
        """Compare a measurement's figures with the baseline and remember the checks."""
        checks = compare_samples(
            measurement_samples(name, self.run.measurements[name]), self.baseline
        )
        self.run.checks.extend(checks)
        self.collect_facts()
        self.save_run()
        return checks

    def table(self, name: str) -> str:
        """The concurrency table of one measurement."""
        m = self.run.measurements[name]
        return render_table(name, m.table_rows(), self.baseline, m.not_run, m.accept_rates())

    # -- recording ---------------------------------------------------------------------
    def save_run(self) -> None:
        """Write the run JSON as it stands."""
        self.run.write(self.run_path)

    def failed_requests(self) -> int:
        """Failed requests over all measurements."""
        return sum(lv.metrics.fail for m in self.run.measurements.values() for lv in m.levels)

    def record_baseline(self) -> list[str]:
        """Write a new baseline from this run; returns the lines to print."""
        refuse = "perfgate: baseline NOT updated: "
        if self.correctness_failures:
            return [f"{refuse}correctness failed ({'; '.join(self.correctness_failures)})"]
        if (failed := self.failed_requests()) or not self.run.measurements:
            return [refuse + (f"{failed} requests failed" if failed else "nothing was measured")]
        if any(m.not_run or m.aborted for m in self.run.measurements.values()):
            return [f"{refuse}the sweep did not run every level"]
        samples: dict[str, list[float]] = {}
        for name, m in self.run.measurements.items():
            samples.update(measurement_samples(name, m))
        self.save_run()
        kept_run = self.baseline_path.with_suffix(".run.json")
        new = build_baseline(
            self.profile.name,
            self.hardware_key,
            samples,
            self.baseline,
            tolerance=self.options.tolerance,
            facts=self.run.facts,
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
        save_baseline(self.baseline_path, new)
        shutil.copyfile(self.run_path, kept_run)
        lines = []
        if self.golden_outputs is not None:
            save_golden(golden_path(self.baseline_path), self.golden_outputs)
            lines.append(
                f"perfgate: {len(self.golden_outputs.outputs)} golden greedy outputs "
                f"written to {self._relative(golden_path(self.baseline_path))}"
            )
        # self.baseline stays the old one: the summary table shows old vs measured
        return [
            f"perfgate: baseline written to {self._relative(self.baseline_path)}:",
            *diff_lines(self.baseline, new),
            *lines,
        ]

    def _relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)

    def finish(self, status: str) -> None:
        """Final status (and the last facts) into the run JSON."""
        if self.backend is not None:
            self.collect_facts()
        self.run.status = status
        self.save_run()
