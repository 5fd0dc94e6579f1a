"""One perfgate run: start or attach the backend, measure, judge, record, stop.

The session composes the run's parts, each built from what it needs (settings, the
baseline choice, the server control, the measurer, the recorder), and holds the run record.
The pytest plugin and fixtures forward to it; it imports no pytest, so a script drives the
same run (``docs/examples/gate_script.py``): build it, :meth:`PerfgateSession.measure`,
:meth:`PerfgateSession.gate` each measurement, then :meth:`PerfgateSession.conclude`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from perfgate import __version__
from perfgate.correctness.golden import GoldenOutputs, Greedy
from perfgate.diagnose.causes import Diagnosis
from perfgate.engines import Engine
from perfgate.gate.baseline import Baseline
from perfgate.gate.policy import GatePolicy, Reach, Tier, Verdicts, exit_code
from perfgate.gate.verdict import Check, measurement_problems
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.launch import Backend
from perfgate.load.level import RoundRunner, plain_rounds
from perfgate.load.workers import RequestPlan
from perfgate.measure.data import Measurement
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.render.table import render_table
from perfgate.results.run import RunRecord, git_commit
from perfgate.run.baselines import BaselineChoice
from perfgate.run.measuring import Measurer
from perfgate.run.notes import Notes, Progress
from perfgate.run.prompting import PromptSource
from perfgate.run.recording import Recorder
from perfgate.run.server import ServerControl
from perfgate.run.settings import GateOptions, RunSettings
from perfgate.workload.prompts import Prompt

PASSED, TESTS_FAILED, INTERRUPTED = 0, 1, 2  # pytest's exit codes the gate reads


@dataclass
class Gated:
    """One measurement judged: its checks, and what fails it ([] when it passes)."""

    checks: list[Check]
    problems: list[str] = field(default_factory=list)
    text: str = ""  # the failure message: problems, the table, the diagnosis, the evidence

    @property
    def failed(self) -> bool:
        return bool(self.problems)


@dataclass
class Outcome:
    """How the run ended: the process's exit code, and the lines to print."""

    exit_code: int
    lines: list[str] = field(default_factory=list)


class PerfgateSession:
    """One run. Create with a validated profile; the backend starts lazily."""

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
        transport: httpx.MockTransport | None = None,
    ) -> None:
        self.settings = settings = RunSettings.build(
            profile,
            root=root,
            baselines_dir=baselines_dir,
            output_dir=output_dir,
            base_url=base_url,
            server_log=server_log,
            update_baselines=update_baselines,
            options=options,
            history_dir=history_dir,
            http=HttpClients(transport) if transport is not None else NETWORK,
        )
        # progress lines and live displays (a plain callable: lines only)
        self.view = progress if isinstance(progress, ProgressView) else ProgressView(progress)
        self.progress = self.view.message
        self.run = RunRecord(
            perfgate_version=__version__,
            profile=profile.public_dump(),
            profile_digest=profile.digest(),
            engine=profile.engine,
            launcher="attach" if base_url else profile.launcher,
            git_commit=git_commit(root),
            hardware={"label": profile.hardware},
        )
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        owner = settings.owner
        self.run_path = output_dir / "runs" / f"{profile.name}-{stamp}-{owner[-6:]}.json"
        self.notes = Notes(self.run, self.progress)
        self.choice = BaselineChoice(settings)
        self.recorder = Recorder(settings, self.choice, self.run, self.run_path)
        self.server = ServerControl(settings, self.choice, self.run, self.notes, self.progress)
        self.prompt_source = PromptSource(
            profile,
            settings.engine,
            root=root,
            view=self.view,
            degraded=self.notes.warn,
            nonce=owner if base_url else "",  # attached servers may cache prompts
            clients=settings.http,
        )
        self.measurer = Measurer(
            settings,
            self.choice,
            self.server,
            self.prompt_source,
            self.run,
            self.notes,
            self.view,
            self.save_run,
        )
        self._judged: tuple[object, ...] | None = None  # what the last judge() saw
        self.unusable: list[str] = []  # correctness failures that make perf meaningless
        self.answered_wrongly = False  # a correctness check ran and failed (exit 12)
        self.perf_selected = False  # whether this session runs perf tests (set by the plugin)

    # -- what the parts hold, by the names the suites and plug-ins read ---------------
    @property
    def profile(self) -> Profile:
        return self.settings.profile

    @property
    def engine(self) -> Engine:
        return self.settings.engine

    @property
    def options(self) -> GateOptions:
        return self.settings.options

    @property
    def update_baselines(self) -> bool:
        return self.settings.update_baselines

    @property
    def base_url(self) -> str | None:
        return self.settings.base_url

    @property
    def repeats(self) -> int:
        return self.settings.repeats

    @property
    def policy(self) -> GatePolicy:
        """The gate policy, built once the baseline is chosen."""
        return self.choice.policy

    @property
    def baseline(self) -> Baseline | None:
        return self.choice.baseline

    @property
    def baseline_tier(self) -> Tier:
        return self.choice.tier

    @property
    def baseline_path(self) -> Path:
        return self.choice.path

    @property
    def hardware_key(self) -> str:
        return self.choice.hardware_key

    @property
    def reach(self) -> Reach:
        return self.choice.reach

    @property
    def golden(self) -> GoldenOutputs | None:
        """The golden outputs recorded beside the chosen baseline."""
        return self.choice.golden

    @property
    def golden_outputs(self) -> GoldenOutputs | None:
        """The golden outputs this run produced (recorded with the baseline)."""
        return self.recorder.golden_outputs

    @golden_outputs.setter
    def golden_outputs(self, outputs: GoldenOutputs | None) -> None:
        self.recorder.golden_outputs = outputs

    @property
    def backend(self) -> Backend | None:
        return self.server.backend

    @property
    def twin_request(self) -> tuple[list[str], int] | None:
        return self.server.twin_request

    @twin_request.setter
    def twin_request(self, request: tuple[list[str], int] | None) -> None:
        self.server.twin_request = request

    @property
    def warnings(self) -> list[str]:
        """What perfgate could not do as usual (repeated in the terminal summary)."""
        return self.run.warnings

    @property
    def correctness_failures(self) -> list[str]:
        return self.run.correctness_failures

    @property
    def recording_refused(self) -> bool:
        """--perf-update-baselines wrote nothing: the build fails."""
        return self.recorder.refused

    def degraded(self, message: str) -> None:
        """Say once, in the output and the run JSON, what perfgate could not do as usual."""
        self.notes.warn(message)

    def save_run(self) -> None:
        """Write the run JSON as it stands."""
        self.run.write(self.run_path)

    # -- the server --------------------------------------------------------------------
    def start_backend(self) -> Backend:
        """Launch (or attach to) the profile's server and wait until it generates a token;
        picks the baseline for its hardware."""
        return self.server.start()

    def stop_backend(self, *, for_now: bool = False) -> None:
        """Stop the backend if perfgate started it (``for_now``: to start it again)."""
        self.server.stop(for_now=for_now)

    def resolve_baseline(self, hardware: dict[str, object]) -> None:
        """Pick the baseline for a serving host's hardware (done by :meth:`start_backend`)."""
        self.run.baseline = self.choice.resolve(hardware)
        self.run.hardware = self.choice.hardware
        self.notes.keep(self.choice.tier_note())

    def tier_note(self) -> str:
        return self.choice.tier_note()

    def record_command(self) -> str:
        return self.choice.record_command()

    def hardware_mismatch(self) -> str | None:
        return self.choice.hardware_mismatch()

    def planned(self) -> dict[str, list[int | float]]:
        return self.settings.planned()

    def twin_outputs(self) -> Greedy:
        return self.server.twin_outputs()

    def twin_problem(self) -> str:
        return self.server.twin_problem()

    def evidence(self) -> str:
        return self.server.evidence()

    def diagnosis(self, checks: Sequence[Check] = ()) -> Diagnosis:
        return self.server.diagnosis(checks)

    # -- measuring ---------------------------------------------------------------------
    def plan(self) -> RequestPlan:
        return self.measurer.plan()

    def prompts(self, name: str, concurrency: int | float, repeat: int, count: int) -> list[Prompt]:
        return self.measurer.prompts(name, concurrency, repeat, count)

    def refusal(self, *, needs_baseline: bool = True) -> tuple[str, str] | None:
        """Why nothing may be measured: ("skip" or "fail", the reason), or None. Starts the
        server first (its hardware picks the baseline): raises :class:`BackendError` where
        it cannot start. ``needs_baseline``: False where the run is judged against
        something else (a side-by-side run's A)."""
        self.server.start()
        if needs_baseline and (mismatch := self.choice.hardware_mismatch()):
            return ("skip" if self.options.allow_no_baseline else "fail", mismatch)
        if self.unusable:
            return (
                "fail",
                "not measured: the backend is unusable (errors, empty or degenerate output): "
                + ", ".join(self.unusable),
            )
        return None

    def measure(
        self,
        name: str,
        levels: Sequence[int | float],
        requests_at: Callable[[int | float], int],
    ) -> Measurement:
        """A sweep of levels (see :meth:`Measurer.measure`)."""
        return self.measurer.measure(name, levels, requests_at)

    def measure_single(
        self, name: str, rounds: int, runner: RoundRunner = plain_rounds
    ) -> Measurement:
        return self.measurer.measure_single(name, rounds, runner)

    def measure_capacity(self, name: str) -> Measurement:
        return self.measurer.measure_capacity(name)

    # -- judging -----------------------------------------------------------------------
    def verdicts(self) -> Verdicts:
        """Every baseline figure judged against this run (MISSING where not produced)."""
        return self.choice.gate.judge(self.run.measurements, self.planned())

    def judge(self, name: str) -> list[Check]:
        """The checks of one measurement's figures (its missing ones included); all checks
        of the run so far go into the run JSON (the slow-creep rule applied)."""
        self.run.checks = self.verdicts().checks
        self.recorder.apply_creep_rule()
        self._judged = self._measured()
        self.save_run()
        return [c for c in self.run.checks if c.key.startswith(f"{name}.")]

    def _measured(self) -> tuple[object, ...]:
        """What the verdicts depend on that changes during a run: each measurement's
        level runs and searches (the baseline and the plan stay as they are)."""
        return tuple(
            (name, len(m.levels), len(m.searches), m.aborted, tuple(m.not_run))
            for name, m in self.run.measurements.items()
        )

    def gate(self, name: str) -> Gated:
        """One measurement judged, with the failure message when it fails: failed
        requests, a stopped sweep, levels not run, regressed figures (none while
        recording), the table, the diagnosis and the server's evidence."""
        problems = measurement_problems(name, self.run.measurements[name])
        checks = self.judge(name)
        regressed = [] if self.update_baselines else [c for c in checks if c.failed]
        problems += [c.message() for c in regressed]
        if not problems:
            return Gated(checks)
        if self.correctness_failures:
            problems.append(
                "note: these figures come from a backend that FAILED correctness: "
                + ", ".join(self.correctness_failures)
            )
        why = self.diagnosis(regressed).lines()
        evidence = self.evidence()
        text = "\n".join(
            [
                f"perfgate: {name} failed on profile {self.profile.name}:",
                *problems,
                "",
                self.table(name),
                *(["", *why] if why else []),
                *([evidence] if evidence else []),
            ]
        )
        return Gated(checks, problems, text)

    def table(self, name: str) -> str:
        """The concurrency table of one measurement."""
        m = self.run.measurements[name]
        return render_table(name, m, self.baseline, self.choice.gate.chosen())

    def selected(self, *, perf_tests: bool, twin: tuple[list[str], int] | None) -> None:
        """What this run's tests will ask: whether perf tests measure (then every baseline
        figure is judged at the end, deselected ones included), and a twin check's
        (prompts, max_tokens) when one is selected and the profile names a twin."""
        self.perf_selected = perf_tests
        if twin is not None and self.profile.correctness.twin_profile is not None:
            self.twin_request = twin

    def correctness_failed(self, test: str, *, usability: bool, ran: bool) -> None:
        """A correctness check failed: perf figures are flagged; a usability check's
        failure leaves perf unmeasured; one that ran (not a server that never answered)
        fails the run with the correctness exit code."""
        if test not in self.correctness_failures:
            self.correctness_failures.append(test)
        if usability and test not in self.unusable:
            self.unusable.append(test)
        if ran:
            self.answered_wrongly = True

    # -- the end -----------------------------------------------------------------------
    def finish(self, status: str) -> None:
        """Final status, the last facts and (when figures failed or a sweep stopped
        early) the diagnosis into the run JSON."""
        if self.backend is not None:
            self.server.collect_facts()
        failed = [c for c in self.run.checks if c.failed]
        if failed or any(m.aborted for m in self.run.measurements.values()):
            self.run.diagnosis = self.diagnosis(failed).record()
        self.run.status = status
        self.save_run()

    def conclude(
        self,
        status: int = PASSED,
        *,
        summary_paths: Sequence[Path] = (),
        plots: bool = True,
        artifact_url: str | None = None,
        reports: Sequence[str] = (),
    ) -> Outcome:
        """End the run: stop the server, judge every baseline figure (those of deselected
        tests too, when perf tests ran), apply the slow-creep rule, write the run JSON,
        record a baseline when asked, the history and the reports. ``status``: the test
        runner's exit code so far (0 passed, 1 tests failed, 2 interrupted, others its
        own). ``reports``: report formats written next to the run JSON
        (:mod:`perfgate.render.formats`). Returns the exit code
        (:func:`perfgate.gate.policy.exit_code`) and the lines to print."""
        self.stop_backend()
        if self.backend is None and not self.run.measurements:
            return Outcome(status)  # nothing of this run touched a server
        word = {PASSED: "passed", INTERRUPTED: "interrupted"}.get(status, "failed")
        if self._judged != self._measured():  # not judged since the last measurement
            if self.perf_selected and not self.update_baselines and self.baseline is not None:
                self.run.checks = self.verdicts().checks  # every baseline figure
            self.recorder.apply_creep_rule()  # may turn passing figures to CREEP
        if any(c.failed for c in self.run.checks) and word == "passed":
            word, status = "failed", TESTS_FAILED
        self.finish(word)
        lines: list[str] = []
        if self.update_baselines:
            lines += self.recorder.record_baseline()
            if self.recorder.refused and status == PASSED:
                status = TESTS_FAILED  # asked to record; wrote nothing
        if status in (PASSED, TESTS_FAILED):
            no_baseline = (
                self.perf_selected
                and bool(self.hardware_key)  # the baseline was looked for
                and self.baseline is None
                and not self.update_baselines
                and not self.options.allow_no_baseline
            )
            status = exit_code(
                status,
                self.run.checks,
                correctness_failed=self.answered_wrongly,
                no_baseline=no_baseline,
            )
        lines.append(f"perfgate: run JSON written to {self.run_path}")
        lines += self.recorder.append_history()
        lines += self.recorder.write_reports(
            summary_paths=summary_paths, plots=plots, artifact_url=artifact_url, reports=reports
        )
        return Outcome(int(status), lines)

    # recording, the history and the reports, for callers that drive the end themselves
    def record_baseline(self) -> list[str]:
        return self.recorder.record_baseline()

    def apply_creep_rule(self) -> None:
        self.recorder.apply_creep_rule()

    def append_history(self) -> list[str]:
        return self.recorder.append_history()

    def write_reports(
        self,
        *,
        summary_paths: Sequence[Path] = (),
        plots: bool = True,
        artifact_url: str | None = None,
    ) -> list[str]:
        return self.recorder.write_reports(
            summary_paths=summary_paths, plots=plots, artifact_url=artifact_url
        )

    def collect_facts(self) -> None:
        self.server.collect_facts()
