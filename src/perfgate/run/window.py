"""One measured window: what the engine's counters, its own metrics and the GPUs say over
exactly the measured requests of a level run, read the same way for every measurement."""

from __future__ import annotations

from collections.abc import Callable

from perfgate.diagnose.observe import SpecWindow
from perfgate.launch import Backend
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData
from perfgate.measure.server import ServerSampler, ServerSeries, http_fetch, token_gap
from perfgate.profile import Profile
from perfgate.run.notes import Notes
from perfgate.run.server import ServerControl


class MeasuredWindow:
    """Opened when a level run's measured requests start, closed into its
    :class:`~perfgate.measure.data.LevelData` when they end: the speculative-decoding
    counters' deltas, the server's metrics (:mod:`perfgate.measure.server`) and the GPU
    telemetry over that window, the output lengths and token counts checked."""

    def __init__(
        self, server: ServerControl, backend: Backend, profile: Profile, notes: Notes
    ) -> None:
        self.control = server
        self.engine = engine = server.engine
        self.profile = profile
        self.notes = notes
        clients = server.settings.http
        self.spec = SpecWindow(engine, backend.base_url, backend.headers, clients)
        self.gpu = server.gpu_sampler()
        self.server: ServerSampler | None = None
        self._close_fetch: Callable[[], None] | None = None
        interval = profile.server.metrics_interval_s
        if engine.metrics_path and engine.metric_map.names and interval > 0:
            fetch, self._close_fetch = http_fetch(
                backend.base_url, engine.metrics_path, backend.headers, clients
            )
            self.server = ServerSampler(fetch, engine.metric_map, interval)

    def open(self) -> None:
        """The measured requests start."""
        text = None
        if self.server is not None:
            self.server.open()
            text = self.server.last_text
        self.spec.open(text)
        if self.gpu is not None:
            self.gpu.start()

    def close(self, run: LevelRun, repeat: int) -> LevelData:
        """The measured requests ended: the level run's data."""
        server = self.server.close() if self.server is not None else None
        spec = self.spec.close(self.server.last_text if self.server is not None else None)
        if server is not None:
            server = self._completed(server, run)
        data = LevelData.from_run(
            run,
            repeat,
            spec=spec,
            slo=self.profile.slo,
            gpu=self.control.gpu_stopped(self.gpu),
            server=server,
        )
        if server is not None and (gap := token_gap(server, data.metrics)) is not None:
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
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._close_fetch is not None:
            self._close_fetch()
            self._close_fetch = None

    def stop(self) -> None:
        """Interrupted mid-level, or done: the samplers' threads end."""
        if self.gpu is not None:
            self.gpu.stop()
        self._drop_server()
