"""One measured window: what the engine's counters and the GPUs say over exactly the
measured requests of a level run, read the same way for every measurement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfgate.diagnose.observe import SpecWindow
from perfgate.launch import Backend
from perfgate.load.level import LevelRun
from perfgate.measure.data import LevelData

if TYPE_CHECKING:
    from perfgate.run.session import PerfgateSession


class MeasuredWindow:
    """Opened when a level run's measured requests start, closed into its
    :class:`~perfgate.measure.data.LevelData` when they end: the speculative-decoding
    counters' deltas and the GPU telemetry over that window, the output lengths checked."""

    def __init__(self, session: PerfgateSession, backend: Backend) -> None:
        self.session = session
        self.spec = SpecWindow(session.engine, backend.base_url, backend.headers)
        self.gpu = session.gpu_sampler()

    def open(self) -> None:
        """The measured requests start."""
        self.spec.open()
        if self.gpu is not None:
            self.gpu.start()

    def close(self, run: LevelRun, repeat: int) -> LevelData:
        """The measured requests ended: the level run's data (its output lengths checked)."""
        session = self.session
        data = LevelData.from_run(
            run,
            repeat,
            spec=self.spec.close(),
            slo=session.profile.slo,
            gpu=session.gpu_stopped(self.gpu),
        )
        session._check_output_lengths(data)
        return data

    def stop(self) -> None:
        """Interrupted mid-level: the GPU sampler's thread ends."""
        if self.gpu is not None:
            self.gpu.stop()
