"""The server under test: started or attached, its twin, its GPUs, its facts and log."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

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
    GpuTelemetry,
    SmiSampler,
    open_nvml,
    smi_command,
)
from perfgate.run.state import LOCAL_HOSTS, SessionState


class BackendControl(SessionState):
    """Start, watch and stop the backend; read what it says about itself."""

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

    def server_metrics_note(self, note: str) -> None:
        """Say once, in the output and the run JSON, something about the server's metrics."""
        if note not in self.run.notes:
            self.run.notes.append(note)
            self.progress(f"perfgate: {note}")

    def server_metrics_absent(self, series: ServerSeries) -> None:
        """Say once which words of the server-metrics vocabulary this server did not
        report (absent, never 0), and why where the engine knows."""
        metric_map = self.engine.metric_map
        absent = [w for w in VOCABULARY if w not in series.sources]
        if not absent:
            return
        whys = sorted({metric_map.notes[w] for w in absent if w in metric_map.notes})
        self.server_metrics_note(
            f"server metrics not reported by {self.engine.name}: {', '.join(absent)} "
            f"(absent, not 0)" + "".join(f"; {why}" for why in whys)
        )

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

    def _probe_features(self, backend: Backend) -> None:
        """For a server of unknown kind: without the fields that force output length,
        say so and measure what it generates."""
        why = rejected_extras(
            backend.base_url, self.profile.model.name, self.completion_extras, backend.headers
        )
        if why:
            self.completion_extras = {}
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
