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

import contextlib
import importlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field

from perfgate.launch.lifeline import lifeline

INSTALL_HINT = "pip install 'perfgate[gpu]' (nvidia-ml-py) on a host with an NVIDIA driver"
MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 0.1  # GPU samples during a level: ten a second


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
    """Samples every GPU on a thread between :meth:`open` and :meth:`close`."""

    def __init__(self, nvml: ModuleType, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.nvml = nvml
        self.interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._gpus: list[_Gpu] = []
        self._started = 0.0

    part = "gpu"  # the level's data it fills (a Sampler: perfgate.measure.samplers)

    def open(self) -> None:
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

    def stop(self) -> None:
        """End the sampling, keeping nothing (interrupted)."""
        self.close()

    def close(self) -> GpuTelemetry | None:
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
        counted = None
        if gpu.energy_start_mj is not None and energy_end is not None:
            counted = (energy_end - gpu.energy_start_mj) / 1000
        return _gpu_stats(gpu, counted)


def _gpu_stats(gpu: _Gpu, counted_energy_j: float | None) -> GpuStats:
    """One GPU's samples as its level figures (energy: the driver's counter where it
    counted, else power integrated over the samples)."""
    if counted_energy_j is not None:
        energy: float | None = counted_energy_j
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


SMI_FIELDS = "index,name,utilization.gpu,memory.used,power.draw,clocks.sm"


def smi_command(interval_s: float) -> str:
    """nvidia-smi's own sampling loop: one CSV line per GPU every ``interval_s``."""
    return (
        f"nvidia-smi --query-gpu={SMI_FIELDS} --format=csv,noheader,nounits "
        f"-lms {max(1, round(interval_s * 1000))}"
    )


def _smi_number(text: str) -> float | None:
    """A number of nvidia-smi's CSV ("[N/A]", "[Not Supported]": None)."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_smi_line(line: str) -> tuple[int, str, list[float | None]] | None:
    """(index, name, [utilisation %, memory MiB, power W, SM clock MHz]) of one line of
    :func:`smi_command`'s output (None: not such a line)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 6 or not fields[0].isdigit():
        return None
    return int(fields[0]), fields[1], [_smi_number(f) for f in fields[2:]]


class SmiSampler:
    """Samples the serving host's GPUs through ``nvidia-smi``'s sampling loop, run by
    ``argv`` (the launcher's way there: the ssh launcher's connection), read on a thread
    between :meth:`open` and :meth:`close`. Energy is power integrated over the samples."""

    def __init__(self, argv: list[str], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.argv = argv
        self.interval_s = interval_s
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._gpus: dict[int, _Gpu] = {}
        self._started = 0.0
        self.problem = ""  # the loop's last words, when it ended on its own

    part = "gpu"  # the level's data it fills (a Sampler: perfgate.measure.samplers)

    def open(self) -> None:
        """Begin a level's sampling (a sampling in progress is dropped)."""
        self.stop()
        self._gpus = {}
        self._started = time.perf_counter()
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=lifeline(),
        )
        self._thread = threading.Thread(
            target=self._read, args=(self._process,), name="perfgate-smi", daemon=True
        )
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            parsed = parse_smi_line(line)
            if parsed is None:
                self.problem = line.strip()[-300:]
                continue
            index, name, (util, memory, power, clock) = parsed
            gpu = self._gpus.setdefault(index, _Gpu(index, None, name))
            if util is not None:
                gpu.util.append(util)
            if memory is not None:
                gpu.memory.append(memory)
            if power is not None:
                gpu.power.append((time.perf_counter(), power))
            if clock is not None:
                gpu.clock.append(clock)

    def stop(self) -> None:
        """End the sampling, keeping nothing (interrupted)."""
        self.close()

    def close(self) -> GpuTelemetry | None:
        """End the sampling: the level's telemetry (None when none was started, or when
        the loop gave no sample: :attr:`problem` says what it said)."""
        process, thread = self._process, self._thread
        if process is None or thread is None:
            return None
        self._process = self._thread = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)  # by its group: the ssh client and all
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        thread.join(timeout=5)
        if not self._gpus:
            return None
        return GpuTelemetry(
            wall_s=time.perf_counter() - self._started,
            interval_s=self.interval_s,
            gpus=[_gpu_stats(gpu, None) for _, gpu in sorted(self._gpus.items())],
        )
