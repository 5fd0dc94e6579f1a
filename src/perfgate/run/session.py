"""One perfgate run: start or attach the backend, measure, judge, record, stop.

The pytest plugin and fixtures are thin wrappers around this object; it imports no
pytest so the same run can be driven from a script."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from perfgate import __version__
from perfgate.correctness.golden import GoldenOutputs, Greedy
from perfgate.engines import Engine, get_engine
from perfgate.errors import BackendError, ProfileError
from perfgate.gate.baseline import ANY_HARDWARE, Baseline, baseline_path, load_profile_baselines
from perfgate.gate.figures import CHOSEN, unknown_figures
from perfgate.gate.policy import Verdicts
from perfgate.gate.verdict import Check
from perfgate.launch import Backend
from perfgate.measure.telemetry import GpuSampler
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.render.table import render_table
from perfgate.results.history import history_path, load_history
from perfgate.results.run import RunRecord, git_commit
from perfgate.run.backend import BackendControl
from perfgate.run.baselines import BaselineSettings
from perfgate.run.measuring import Measuring
from perfgate.run.prompting import PromptSource
from perfgate.run.recording import Recording
from perfgate.run.requests import RequestChecks
from perfgate.run.single import SingleRequests
from perfgate.run.state import GateOptions, Progress


class PerfgateSession(
    BaselineSettings, BackendControl, RequestChecks, Measuring, SingleRequests, Recording
):
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
        try:
            self.engine: Engine = get_engine(profile.engine)
        except ProfileError as exc:
            raise ProfileError(f"profile {profile.name!r}: {exc}") from None
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
