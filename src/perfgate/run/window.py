"""One measured window: what the engine's counters, its own metrics and the GPUs say over
exactly the measured requests of a level run, read the same way for every measurement.
Each source is a :class:`~perfgate.measure.samplers.Sampler`; the window opens them all
as the measured requests start and closes each into its part of the level's data."""

from __future__ import annotations

from collections.abc import Callable

from perfgate.engines import SpecStats
from perfgate.launch import Backend
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData
from perfgate.measure.samplers import (
    Sampler,
    SpecSampler,
    WindowSource,
    plugin_samplers,
    reading,
)
from perfgate.measure.server import ServerSampler, ServerSeries, http_fetch, token_gap
from perfgate.measure.telemetry import GpuTelemetry, SmiSampler
from perfgate.profile import Profile
from perfgate.run.notes import Notes
from perfgate.run.server import ServerControl


class MeasuredWindow:
    """Opened when a level run's measured requests start, closed into its
    :class:`~perfgate.measure.data.LevelData` when they end. Its samplers: the server's
    metrics (:mod:`perfgate.measure.server`, where the engine serves them), the
    speculative-decoding counters (from the same read), the GPUs (where perfgate can
    read them), and each plug-in sampler registered in
    :data:`~perfgate.measure.samplers.SAMPLERS` (its readings in ``LevelData.samples``)."""

    def __init__(
        self,
        server: ServerControl,
        backend: Backend,
        profile: Profile,
        notes: Notes,
    ) -> None:
        self.control = server
        self.engine = engine = server.engine
        self.profile = profile
        self.notes = notes
        clients = server.settings.http
        self.samplers: list[Sampler] = []
        self._close_fetch: Callable[[], None] | None = None
        interval = profile.server.metrics_interval_s
        metrics: ServerSampler | None = None
        if engine.metrics_path and engine.metric_map.names and interval > 0:
            fetch, self._close_fetch = http_fetch(
                backend.base_url, engine.metrics_path, backend.headers, clients
            )
            metrics = ServerSampler(fetch, engine.metric_map, interval)
            self.samplers.append(metrics)
        self.metrics = metrics

        def metrics_text() -> str | None:
            return self.metrics.last_text if self.metrics is not None else None

        spec = SpecSampler(engine, backend.base_url, backend.headers, clients, metrics_text)
        self.samplers.append(spec)
        if (gpu := server.gpu_sampler()) is not None:
            self.samplers.append(gpu)
        source = WindowSource(engine, backend.base_url, backend.headers, clients)
        self.plugins = plugin_samplers(source)  # by name: LevelData.samples[name]

    def open(self) -> None:
        """The measured requests start."""
        for sampler in [*self.samplers, *self.plugins.values()]:
            sampler.open()

    def close(self, run: LevelRun, repeat: int) -> LevelData:
        """The measured requests ended: the level run's data."""
        parts = {sampler.part: sampler.close() for sampler in list(self.samplers)}
        samples = {name: sampler.close() for name, sampler in self.plugins.items()}
        samples = {name: reading(part) for name, part in samples.items() if part is not None}
        server = parts.get("server")
        if isinstance(server, ServerSeries):
            server = self._completed(server, run)
        gpu, spec = parts.get("gpu"), parts.get("spec")
        smi = next((s for s in self.samplers if isinstance(s, SmiSampler)), None)
        if smi is not None and gpu is None:  # the remote loop gave no sample: no more this run
            self.samplers.remove(smi)
            why = smi.problem or "no output"
            self.control.no_gpu_telemetry(f"nvidia-smi on the server's host gave no sample ({why})")
        data = LevelData.from_run(
            run,
            repeat,
            spec=spec if isinstance(spec, SpecStats) else None,
            slo=self.profile.slo,
            gpu=gpu if isinstance(gpu, GpuTelemetry) else None,
            server=server if isinstance(server, ServerSeries) else None,
            samples=samples,
        )
        if isinstance(server, ServerSeries) and (gap := token_gap(server, data.metrics)):
            self.notes.warn(gap)
        return data

    def _completed(self, series: ServerSeries, run: LevelRun) -> ServerSeries | None:
        """The series with the prefix counts responses reported (where /metrics has none);
        None, said once, where the server answered no read."""
        engine = self.engine
        if not series.samples:
            self.notes.say(
                f"no server metrics: {engine.metrics_path} answered no read "
                f"({series.failed_reads} tried){engine.metrics_hint()}"
            )
            self._drop_server()
            return None
        if series.delta("prefix_queries") is None:
            timings = [r.server_timings for r in run.records if r.server_timings]
            if (counts := engine.prefix_counts(timings)) is not None:
                series.prefix_hits, series.prefix_queries = counts
                series.sources["prefix_hits"] = "response timings (cache_n)"
                series.sources["prefix_queries"] = "response timings (cache_n + prompt_n)"
        self.control.server_metrics_absent(series)
        return series

    def _drop_server(self) -> None:
        """No more server metrics this run (the server answered no read)."""
        if self.metrics is not None:
            self.metrics.stop()
            self.samplers.remove(self.metrics)
            self.metrics = None
        if self._close_fetch is not None:
            self._close_fetch()
            self._close_fetch = None

    def stop(self) -> None:
        """Interrupted mid-level, or done: the samplers' threads end."""
        for sampler in [*self.samplers, *self.plugins.values()]:
            sampler.stop()
        self._drop_server()
