"""GPU telemetry: NVML (``nvidia-ml-py``, optional) sampled during each level run.

A :class:`GpuSampler` reads every GPU of the host perfgate runs on (the serving host
when the server is local) on a background thread while a level's measured requests
run: utilisation, memory used, power and SM clock, every ``interval_s``. Energy is the
driver's energy counter over the level (``nvmlDeviceGetTotalEnergyConsumption``, Volta and
newer), else power integrated over the samples. Where NVML is absent (no package, no
driver, no GPU), :func:`open_nvml` says why and nothing is sampled.

NVML calls go through ctypes, which releases the GIL: the sampler does not hold up the
event loop that times the streams (its thread wakes ten times a second).
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field

INSTALL_HINT = "pip install 'perfgate[gpu]' (nvidia-ml-py) on a host with an NVIDIA driver"
MIB = 1024 * 1024


class GpuStats(BaseModel):
    """One GPU over one level run."""

    index: int
    name: str
    samples: int
    util_mean_pct: float = Field(description="Mean GPU utilisation (NVML's busy share), %.")
    memory_used_max_mib: float = Field(description="Most device memory used, MiB.")
    power_mean_w: float | None = Field(None, description="Mean power draw, W.")
    sm_clock_mean_mhz: float | None = Field(None, description="Mean SM clock, MHz.")
    energy_j: float | None = Field(
        None, description="Energy over the level: the driver's counter, else power x time."
    )


class GpuTelemetry(BaseModel):
    """Every GPU of the host over one level run."""

    wall_s: float
    interval_s: float
    gpus: list[GpuStats]

    @property
    def util_mean_pct(self) -> float | None:
        """Mean utilisation over the GPUs."""
        if not self.gpus:
            return None
        return sum(g.util_mean_pct for g in self.gpus) / len(self.gpus)

    @property
    def energy_j(self) -> float | None:
        """Energy of all GPUs together (None when one could not say)."""
        if not self.gpus or any(g.energy_j is None for g in self.gpus):
            return None
        return sum(g.energy_j or 0.0 for g in self.gpus)

    def joules_per_token(self, output_tokens: int) -> float | None:
        """Energy per output token of the level."""
        energy = self.energy_j
        return energy / output_tokens if energy is not None and output_tokens else None


def open_nvml(module: str = "pynvml") -> tuple[ModuleType | None, str]:
    """NVML initialised, or None and why not (the note a run without telemetry shows)."""
    try:
        nvml = importlib.import_module(module)
    except ImportError:
        return None, f"no GPU telemetry: NVML is not installed ({INSTALL_HINT})"
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:  # NVMLError: no driver, no library, no permission
        return None, f"no GPU telemetry: NVML could not start ({exc})"
    if count == 0:
        nvml.nvmlShutdown()
        return None, "no GPU telemetry: NVML sees no GPU on this host"
    return nvml, ""


def _optional(read: Any, *args: Any) -> Any:
    """An NVML reading a GPU may not support (NVMLError_NotSupported): None."""
    try:
        return read(*args)
    except Exception:
        return None


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str
    energy_start_mj: float | None = None
    util: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    power: list[tuple[float, float]] = field(default_factory=list)  # (time, watts)
    clock: list[float] = field(default_factory=list)


class GpuSampler:
    """Samples every GPU on a thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, nvml: ModuleType, interval_s: float = 0.1) -> None:
        self.nvml = nvml
        self.interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._gpus: list[_Gpu] = []
        self._started = 0.0

    def start(self) -> None:
        """Begin a level's sampling (a sampling in progress is dropped)."""
        self.stop()
        nvml = self.nvml
        self._gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            energy = _optional(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            self._gpus.append(_Gpu(index, handle, name, energy))
        self._stop.clear()
        self._started = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="perfgate-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        nvml = self.nvml
        now = time.perf_counter()
        for gpu in self._gpus:
            if (util := _optional(nvml.nvmlDeviceGetUtilizationRates, gpu.handle)) is not None:
                gpu.util.append(float(util.gpu))
            if (memory := _optional(nvml.nvmlDeviceGetMemoryInfo, gpu.handle)) is not None:
                gpu.memory.append(memory.used / MIB)
            if (milliwatts := _optional(nvml.nvmlDeviceGetPowerUsage, gpu.handle)) is not None:
                gpu.power.append((now, milliwatts / 1000))
            clock = _optional(nvml.nvmlDeviceGetClockInfo, gpu.handle, nvml.NVML_CLOCK_SM)
            if clock is not None:
                gpu.clock.append(float(clock))

    def stop(self) -> GpuTelemetry | None:
        """End the sampling: the level's telemetry (None when none was started)."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        wall = time.perf_counter() - self._started
        return GpuTelemetry(
            wall_s=wall,
            interval_s=self.interval_s,
            gpus=[self._stats(gpu) for gpu in self._gpus],
        )

    def _stats(self, gpu: _Gpu) -> GpuStats:
        energy_end = _optional(self.nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
        if gpu.energy_start_mj is not None and energy_end is not None:
            energy: float | None = (energy_end - gpu.energy_start_mj) / 1000
        elif len(gpu.power) >= 2:  # trapezoids between samples
            energy = sum(
                (t1 - t0) * (w0 + w1) / 2
                for (t0, w0), (t1, w1) in zip(gpu.power, gpu.power[1:], strict=False)
            )
        else:
            energy = None
        watts = [w for _, w in gpu.power]
        return GpuStats(
            index=gpu.index,
            name=gpu.name,
            samples=max(len(gpu.util), len(watts)),
            util_mean_pct=sum(gpu.util) / len(gpu.util) if gpu.util else 0.0,
            memory_used_max_mib=max(gpu.memory, default=0.0),
            power_mean_w=sum(watts) / len(watts) if watts else None,
            sm_clock_mean_mhz=sum(gpu.clock) / len(gpu.clock) if gpu.clock else None,
            energy_j=energy,
        )
