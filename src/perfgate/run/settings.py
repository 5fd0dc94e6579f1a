"""A run's settings: the profile, the command line's gate options, where files go, and the
runs a level and policy they make. Built first; every other part of the run reads it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.engines import Engine, get_engine
from perfgate.errors import ProfileError
from perfgate.gate.figures import CHOSEN, SLO_FIGURES, unknown_figures
from perfgate.gate.policy import GatePolicy
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.profile import Profile
from perfgate.workload.kinds import prompt_kind

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


def chosen_figures(profile: Profile) -> tuple[str, ...]:
    """Figures judged besides the default ones: the profile's own (``gate.figures``), the
    service levels' where it sets ``[slo]``, and what its prompts' answers are judged on
    (``schema_valid_rate`` for structured prompts, ``tool_call_valid_rate`` for tool
    calls)."""
    return (
        *profile.gate.figures,
        *(SLO_NAMES if profile.slo else ()),
        *prompt_kind(profile.workload.prompts).figures,
    )


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
        figures=chosen_figures(profile),
        another_host=another_host,
    )


@dataclass(frozen=True)
class RunSettings:
    """What one run is asked to do: built from the profile and the command line, checked
    before anything starts."""

    profile: Profile
    engine: Engine
    root: Path  # the project: profiles/, a dataset path and printed paths are relative to it
    baselines_dir: Path
    output_dir: Path
    history_dir: Path
    headers: dict[str, str]  # the server's API key and extra headers; never written anywhere
    base_url: str | None = None  # attach to this server instead of starting one
    server_log: Path | None = None  # an attached server's log
    update_baselines: bool = False
    options: GateOptions = GateOptions()
    http: HttpClients = NETWORK  # how the server is reached (tests: an injected transport)
    owner: str = field(default_factory=lambda: f"perfgate-{uuid.uuid4().hex[:12]}")

    @classmethod
    def build(
        cls,
        profile: Profile,
        *,
        root: Path,
        baselines_dir: Path,
        output_dir: Path,
        base_url: str | None = None,
        server_log: Path | None = None,
        update_baselines: bool = False,
        options: GateOptions | None = None,
        history_dir: Path | None = None,
        http: HttpClients = NETWORK,
    ) -> RunSettings:
        """The settings, checked: chosen figures known, the engine known, the server's
        secrets readable (a missing one stops the run before anything starts); an
        injected transport only with a server to attach to (it reaches no process)."""
        if http.injected and not base_url:
            raise ProfileError("an injected HTTP transport needs base_url: it starts no server")
        if unknown := unknown_figures(profile.gate.figures):
            choosable = ", ".join(f.name for f in CHOSEN)
            raise ProfileError(
                f"profile {profile.name!r}: gate.figures has unknown {', '.join(unknown)}; "
                f"a profile can choose {choosable}"
            )
        headers = profile.request_headers()
        try:
            engine = get_engine(profile.engine)
        except ProfileError as exc:
            raise ProfileError(f"profile {profile.name!r}: {exc}") from None
        return cls(
            profile=profile,
            engine=engine,
            root=root,
            baselines_dir=baselines_dir,
            output_dir=output_dir,
            history_dir=history_dir or output_dir / "history",
            headers=headers,
            base_url=base_url,
            server_log=server_log,
            update_baselines=update_baselines,
            options=options or GateOptions(),
            http=http,
        )

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

    def policy(self, *, another_host: bool = False) -> GatePolicy:
        """The gate policy from the profile's settings and the command line."""
        return gate_policy(
            self.profile,
            self.repeats,
            abort_below=self.abort_below,
            recording=self.update_baselines,
            another_host=another_host,
        )

    def planned(self) -> dict[str, list[int | float]]:
        """The levels each measurement of the perf suite runs (``rate``: request rates)."""
        w = self.profile.workload
        planned: dict[str, list[int | float]] = {"single": [1], "sweep": list(w.levels)}
        if w.rates:
            planned["rate"] = [float(r) for r in w.rates]
        if self.profile.capacity is not None:
            planned["capacity"] = []  # measurement-wide: no levels
        return planned

    def record_command(self, hardware_key: str) -> str:
        """The command that records a baseline for this profile here."""
        extra = f" --perf-base-url {self.base_url}" if self.base_url else ""
        hw = f" --perf-hardware {hardware_key}" if self.options.hardware else ""
        return f"perfgate run {self.profile.name}{extra}{hw} --perf-update-baselines"

    def relative(self, path: Path) -> str:
        """A path as printed: relative to the project where it lies inside it."""
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)
