"""The server under test: started or attached, its twin, its GPUs, its facts and log."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from perfgate.correctness.golden import Greedy
from perfgate.correctness.twin import twin_greedy
from perfgate.diagnose.causes import Diagnosis, diagnose
from perfgate.diagnose.observe import read_facts, rejected_extras
from perfgate.engines import Facts
from perfgate.engines.server_metrics import VOCABULARY
from perfgate.errors import BackendError, BaselineError
from perfgate.gate.verdict import Check
from perfgate.launch import AttachedBackend, Backend, launch
from perfgate.measure.server import ServerSeries
from perfgate.measure.telemetry import (
    SAMPLE_INTERVAL_S,
    GpuSampler,
    SmiSampler,
    open_nvml,
    smi_command,
)
from perfgate.results.run import RunRecord
from perfgate.run.baselines import BaselineChoice
from perfgate.run.notes import Notes, Progress
from perfgate.run.settings import LOCAL_HOSTS, RunSettings


class ServerControl:
    """Start, watch and stop the backend; read what it says about itself. Starting it
    picks the baseline for its hardware (``choice``)."""

    def __init__(
        self,
        settings: RunSettings,
        choice: BaselineChoice,
        run: RunRecord,
        notes: Notes,
        progress: Progress,
    ) -> None:
        self.settings = settings
        self.engine = settings.engine
        self.choice = choice
        self.run = run
        self.notes = notes
        self.progress = progress
        self.backend: Backend | None = None
        self.error: BackendError | None = None  # why it could not start (raised again)
        # fields every measured request sends to force its output length (dropped, with a
        # note, where a server of unknown kind rejects them)
        self.completion_extras: dict[str, object] = self.engine.completion_extras()
        # the twin's greedy outputs of (prompts, max_tokens), when a twin check is selected
        self.twin_request: tuple[list[str], int] | None = None
        self._twin_result: Greedy | str | None = None  # the twin's outputs, or why none
        self._gpu: GpuSampler | SmiSampler | str | None = None  # the sampler, or why none

    def start(self) -> Backend:
        """Launch (or attach to) the profile's server and wait until it generates a token."""
        if self.error is not None:  # it could not start: no second try, the same error
            raise self.error
        if self.backend is not None:
            return self.backend
        if self.twin_request is not None and self._twin_result is None:
            self._run_twin_alone(*self.twin_request)
        s = self.settings
        try:
            backend = self._launch()
            self.backend = backend
            self.progress(f"perfgate: waiting for {self.engine.name} at {backend.base_url} ...")
            backend.wait_ready(s.profile.timeouts.startup_s)
        except BackendError as exc:
            self.error = exc
            self.notes.keep(f"backend failed: {exc}")
            self.stop()
            raise
        with s.http.client(backend.base_url, timeout=10.0, headers=backend.headers) as client:
            self.run.engine_version = self.engine.version(client)
        self.run.base_url = backend.base_url
        try:
            self.run.baseline = self.choice.resolve(backend.hardware())
        except BaselineError as exc:
            raise BackendError(str(exc)) from exc
        self.run.hardware = self.choice.hardware
        self.notes.keep(self.choice.tier_note())
        self.collect_facts()
        if not self.engine.features_known:
            self._probe_features(backend)
        self.progress(
            f"perfgate: {self.engine.name} {self.run.engine_version} ready at {backend.base_url}"
        )
        return backend

    def stop(self, *, for_now: bool = False) -> None:
        """Stop the backend if perfgate started it. ``for_now``: the next :meth:`start`
        launches it again (an A/B run whose server lifetimes alternate)."""
        if self.backend is not None:
            self.backend.stop()
            if for_now:
                self.backend = None

    def _launch(self) -> Backend:
        s = self.settings
        if s.base_url:
            return AttachedBackend(
                s.base_url,
                engine=self.engine,
                model=s.profile.model.name,
                log_path=s.server_log,
                headers=s.headers,
                clients=s.http,
            )
        if s.profile.launcher != "attach":
            self.progress(
                f"perfgate: starting {self.engine.name} for profile {s.profile.name} "
                f"({s.profile.launcher} launcher)"
            )
        return launch(s.profile, self.engine, s.output_dir / "logs", owner=s.owner)

    def _probe_features(self, backend: Backend) -> None:
        """For a server of unknown kind: without the fields that force output length,
        say so and measure what it generates."""
        why = rejected_extras(
            backend.base_url,
            self.settings.profile.model.name,
            self.completion_extras,
            backend.headers,
            self.settings.http,
        )
        if why:
            self.completion_extras = {}
            self.notes.warn(why)

    # -- the GPUs ----------------------------------------------------------------------
    def gpu_sampler(self) -> GpuSampler | SmiSampler | None:
        """The serving host's GPU sampler, opened once: NVML here, or ``nvidia-smi``'s loop
        through the ssh launcher's connection; None with a note (in the run JSON, and said
        once) where NVML is absent or the server runs on a host perfgate cannot reach."""
        if isinstance(self._gpu, GpuSampler | SmiSampler):
            return self._gpu
        if self._gpu is None:
            base_url = self.settings.base_url
            host = urlsplit(base_url).hostname if base_url else None
            remote = getattr(self.backend, "remote_argv", None)
            if remote is not None and not base_url:
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
        self.notes.say(note)

    def server_metrics_absent(self, series: ServerSeries) -> None:
        """Say once which words of the server-metrics vocabulary this server did not
        report (absent, never 0), and why where the engine knows."""
        metric_map = self.engine.metric_map
        absent = [w for w in VOCABULARY if w not in series.sources]
        if not absent:
            return
        whys = sorted({metric_map.notes[w] for w in absent if w in metric_map.notes})
        self.notes.say(
            f"server metrics not reported by {self.engine.name}: {', '.join(absent)} "
            f"(absent, not 0)" + "".join(f"; {why}" for why in whys)
        )

    # -- the twin ----------------------------------------------------------------------
    def _run_twin_alone(self, prompts: list[str], max_tokens: int) -> None:
        """The twin's greedy outputs, computed before this profile's server starts: one
        server at a time (two large models rarely fit one host), the twin on a port of
        its own, stopped before the profile's server starts."""
        s = self.settings
        name = s.profile.correctness.twin_profile
        if name is None:
            return
        if s.base_url:
            self._twin_result = (
                f"the server under test is attached (--perf-base-url), so perfgate cannot stop it "
                f"to run the twin {name} alone; check losslessness with a profile perfgate "
                "launches"
            )
            self.notes.warn(self._twin_result)
            return
        self._twin_result = twin_greedy(
            name,
            s.root / "profiles",
            prompts,
            max_tokens,
            log_dir=s.output_dir / "logs",
            owner=s.owner,
            before=s.profile.name,
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
            clients=self.settings.http,
        )
        return self.run.facts

    def diagnosis(self, checks: Sequence[Check] = ()) -> Diagnosis:
        """Why figures may have regressed: ranked causes, facts that differ from the
        baseline's, and the matching server log lines."""
        log = self.backend.logs() if self.backend is not None else ""
        facts = self.collect_facts(log)
        baseline = self.choice.baseline
        old = baseline.facts if baseline is not None else None
        return diagnose(facts, old, checks, log, self.engine.log_grep)

    def evidence(self) -> str:
        """Server state and log tail, for failure messages."""
        if self.backend is None:
            return ""
        state = "alive" if self.backend.alive() else f"exited ({self.backend.exit_code()})"
        log = self.backend.log_tail(15)
        return f"server {state}" + (f"; last log lines:\n{log}" if log else "")
