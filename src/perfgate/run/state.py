"""What every part of a run shares: the command line's gate options, the policy they make,
and the run's state (:class:`SessionState`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfgate.correctness.golden import GoldenOutputs, Greedy
from perfgate.engines import Engine
from perfgate.errors import BackendError
from perfgate.gate.baseline import Baseline
from perfgate.gate.creep import HistoryEntry
from perfgate.gate.figures import SLO_FIGURES
from perfgate.gate.policy import GatePolicy
from perfgate.launch import Backend
from perfgate.measure.telemetry import GpuSampler, SmiSampler
from perfgate.profile import Profile
from perfgate.render.live import ProgressView
from perfgate.results.run import RunRecord
from perfgate.run.prompting import PromptSource

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
        early_runs=gate.min_repeats,
        abort_below=abort_below,
        false_failure_rate=gate.false_failure_rate,
        retired=tuple(gate.retired),
        recording=recording,
        figures=tuple(gate.figures) + (SLO_NAMES if profile.slo else ()),
        another_host=another_host,
    )


class SessionState:
    """The state of one run, shared by the parts of :class:`~perfgate.run.session.PerfgateSession`
    (settings, backend, measuring, recording): each part is a class of its own module
    over this state, and the session puts them together."""

    # set by PerfgateSession.__init__ (see there); the mixins of perfgate.run share them
    profile: Profile
    engine: Engine
    headers: dict[str, str]
    root: Path
    base_url: str | None
    server_log: Path | None
    update_baselines: bool
    options: GateOptions
    view: ProgressView
    progress: Progress
    output_dir: Path
    history_dir: Path
    history: list[HistoryEntry]
    baselines_dir: Path
    known_baselines: dict[str, Baseline]
    hardware: dict[str, object]
    hardware_key: str
    baseline: Baseline | None
    baseline_tier: str
    baseline_path: Path
    golden: GoldenOutputs | None
    golden_outputs: GoldenOutputs | None
    recording_refused: bool
    owner: str
    run_path: Path
    backend: Backend | None
    twin_request: tuple[list[str], int] | None
    _twin_result: Greedy | str | None
    backend_error: BackendError | None
    _gpu: GpuSampler | SmiSampler | str | None
    completion_extras: dict[str, object]
    prompt_source: PromptSource
    run: RunRecord
    warnings: list[str]
    correctness_failures: list[str]

    def degraded(self, message: str) -> None:
        """Say once, in the output and the run JSON, what perfgate could not do as usual."""
        if message not in self.run.notes:
            self.run.notes.append(message)
            self.warnings.append(message)  # repeated in the terminal summary
            self.progress(f"perfgate: warning: {message}")

    # -- recording ---------------------------------------------------------------------
    def save_run(self) -> None:
        """Write the run JSON as it stands."""
        self.run.write(self.run_path)

    def _relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)
