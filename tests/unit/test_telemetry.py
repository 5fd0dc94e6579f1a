"""GPU telemetry through NVML's documented API (a fake NVML module: no GPU here), its
report columns, and the idle-GPU diagnosis.

FakeNvml implements the calls perfgate makes, with the signatures and units of NVML's
documentation (nvidia-ml-py's ``pynvml``): power in milliwatts, the energy counter in
millijoules, memory in bytes, clocks in MHz. It proves that perfgate reads a module of
that shape, nothing more; ``test_the_fake_names_only_calls_the_real_module_has`` ties its
names to the installed ``pynvml``. A real GPU run is the closing note's business."""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass

import pytest

from perfgate.diagnose.causes import likely_causes
from perfgate.diagnose.measured import gpu_facts
from perfgate.measure.data import Measurement
from perfgate.measure.telemetry import GpuSampler, GpuStats, GpuTelemetry, open_nvml
from perfgate.render.table import gpu_table, render_table
from tests.synthetic import level_run

NVML_CALLS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEnergyConsumption",
    "NVML_CLOCK_SM",
    "NVMLError",
)


class NVMLError(Exception):
    pass


@dataclass
class Utilization:  # nvmlUtilization_t
    gpu: int
    memory: int


@dataclass
class Memory:  # nvmlMemory_t, bytes
    total: int
    free: int
    used: int


class FakeNvml(types.ModuleType):
    """GPUs with fixed utilisation, memory, clock and power; the energy counter advances
    with power x time (mJ) unless ``energy_counter`` is False (pre-Volta: NotSupported)."""

    NVML_CLOCK_SM = 1
    NVMLError = NVMLError

    def __init__(self, gpus: list[dict], *, energy_counter: bool = True, fail_init=None):
        super().__init__("pynvml")
        self.gpus = gpus
        self.energy_counter = energy_counter
        self.fail_init = fail_init
        self.started = time.perf_counter()

    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError(self.fail_init)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle):
        return handle["name"]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return Utilization(gpu=handle["util"], memory=handle["util"] // 2)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = handle["mem_mib"] * 1024 * 1024
        return Memory(total=141 * 1024**3, free=141 * 1024**3 - used, used=used)

    def nvmlDeviceGetPowerUsage(self, handle):
        return handle["watts"] * 1000

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return handle["sm_mhz"]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy_counter:
            raise NVMLError("Not Supported")
        return int((time.perf_counter() - self.started) * handle["watts"] * 1000)


H200 = {"name": "NVIDIA H200", "util": 12, "mem_mib": 120_000, "watts": 150, "sm_mhz": 1980}
BUSY = {"name": "NVIDIA H200", "util": 90, "mem_mib": 60_000, "watts": 650, "sm_mhz": 1755}


def test_the_fake_names_only_calls_the_real_module_has():
    pynvml = pytest.importorskip("pynvml", reason="pip install nvidia-ml-py (the gpu extra)")
    assert [name for name in NVML_CALLS if not hasattr(pynvml, name)] == []
    assert pynvml.NVML_CLOCK_SM == FakeNvml.NVML_CLOCK_SM


@pytest.mark.parametrize("energy_counter", [True, False], ids=["counter", "power-x-time"])
def test_a_level_reads_every_gpu_and_its_energy(energy_counter):
    sampler = GpuSampler(FakeNvml([H200, BUSY], energy_counter=energy_counter), 0.05)
    sampler.open()
    time.sleep(0.4)
    telemetry = sampler.close()
    assert telemetry is not None and sampler.close() is None  # stopped once
    idle, busy = telemetry.gpus
    assert (idle.name, idle.util_mean_pct, busy.util_mean_pct) == ("NVIDIA H200", 12, 90)
    assert idle.samples >= 5  # every 50 ms over 0.4 s, plus the first and last
    assert (idle.memory_used_max_mib, idle.power_mean_w, idle.sm_clock_mean_mhz) == (
        120_000,
        150,
        1980,
    )
    # energy: 150 W and 650 W over the level's wall time (counter), or its sampled span
    assert idle.energy_j == pytest.approx(150 * telemetry.wall_s, rel=0.15)
    assert telemetry.energy_j == pytest.approx(800 * telemetry.wall_s, rel=0.15)
    assert telemetry.util_mean_pct == 51
    assert telemetry.joules_per_token(1000) == pytest.approx(telemetry.energy_j / 1000)


def test_without_nvml_there_is_no_telemetry_and_a_note_says_why(monkeypatch):
    missing, why = open_nvml("perfgate_no_such_nvml_module")
    assert missing is None and "NVML is not installed" in why and "nvidia-ml-py" in why
    monkeypatch.setitem(
        sys.modules, "fake_nvml_broken", FakeNvml([], fail_init="Driver Not Loaded")
    )
    broken, why = open_nvml("fake_nvml_broken")
    assert broken is None and why == "no GPU telemetry: NVML could not start (Driver Not Loaded)"
    monkeypatch.setitem(sys.modules, "fake_nvml_empty", FakeNvml([]))
    assert open_nvml("fake_nvml_empty")[1] == "no GPU telemetry: NVML sees no GPU on this host"
    monkeypatch.setitem(sys.modules, "fake_nvml_h200", FakeNvml([H200]))
    nvml, why = open_nvml("fake_nvml_h200")
    assert nvml is not None and why == ""


def test_a_session_without_a_gpu_notes_it_once(tmp_path, monkeypatch):
    from tests.helpers import session_for, small_profile

    said = []
    session = session_for(small_profile(), tmp_path, progress=said.append)
    monkeypatch.setattr("perfgate.run.server.open_nvml", lambda: open_nvml("perfgate_no_nvml"))
    assert session.server.gpu_sampler() is None and session.server.gpu_sampler() is None
    notes = [n for n in session.run.notes if n.startswith("no GPU telemetry")]
    assert len(notes) == 1 and "NVML is not installed" in notes[0]
    assert said == [f"perfgate: {notes[0]}"]
    remote = session_for(small_profile(), tmp_path, base_url="http://10.1.2.3:8000")
    assert remote.server.gpu_sampler() is None
    assert any("not on this host" in n for n in remote.run.notes)


def _with_gpu(level, util: float, watts: float = 300.0):
    gpu = GpuStats(
        index=0,
        name="NVIDIA H200",
        samples=20,
        util_mean_pct=util,
        memory_used_max_mib=1000,
        power_mean_w=watts,
        sm_clock_mean_mhz=1980,
        energy_j=watts * level.metrics.wall_s,
    )
    telemetry = GpuTelemetry(wall_s=level.metrics.wall_s, interval_s=0.1, gpus=[gpu])
    return level.model_copy(update={"gpu": telemetry})


def sweep(tok_s: dict[int, float], util: dict[int, float]) -> Measurement:
    """C levels with aggregate tok/s ``tok_s[c]`` and GPU utilisation ``util[c]``."""
    return Measurement(
        levels=[_with_gpu(level_run(c, tok_s[c] / c), util[c]) for c in tok_s for _ in range(3)]
    )


LEVELS = (1, 4, 16, 64)


def test_an_idle_gpu_with_flat_throughput_is_named_as_the_cause():
    """The H200 case: llama.cpp at 12% mean utilisation, throughput flat from C=1 to 64."""
    flat = sweep(
        {c: 100.0 * (1 + 0.02 * i) for i, c in enumerate(LEVELS)}, dict.fromkeys(LEVELS, 12)
    )
    facts = gpu_facts({"sweep": flat})
    assert facts["gpu_util_mean_pct"].value == 12
    causes = [c.text for c in likely_causes(facts, {})]
    assert causes and causes[0].startswith("GPU mostly idle: 12% mean utilisation at sweep C=64")
    assert "flat from C=1 (1.06x the tok/s for 64x the requests in flight)" in causes[0]
    # a busy GPU that stopped scaling is saturated, not idle; an idle one that scales is fine
    busy = sweep({c: 100.0 for c in LEVELS}, dict.fromkeys(LEVELS, 95))
    scaling = sweep({c: 100.0 * c for c in LEVELS}, dict.fromkeys(LEVELS, 12))
    for fine in (busy, scaling):
        assert "gpu_idle_while_flat" not in gpu_facts({"sweep": fine})


def test_the_table_shows_utilisation_and_energy_per_token():
    m = sweep({1: 50.0, 4: 150.0}, {1: 20.0, 4: 60.0})
    table = gpu_table(m)
    titles = [cell.strip() for cell in table.splitlines()[0].split("|")]
    assert titles == ["C", "GPU util%", "Mem(MiB)", "Power(W)", "SM(MHz)", "J/tok"]
    c4 = m.by_concurrency()[4]
    joules = sum(r.gpu.energy_j for r in c4) / sum(r.metrics.output_tokens for r in c4)
    assert table.splitlines()[3].split("|")[1].strip() == "60.0"
    assert table.splitlines()[3].split("|")[-1].strip() == f"{joules:.3f}"
    assert table in render_table("sweep", m, None)
    assert gpu_table(Measurement(levels=[level_run(1, 50.0)])) == ""  # no NVML: no table


def test_nvidia_smi_lines_are_read_with_what_a_gpu_cannot_say_left_out():
    """Lines in nvidia-smi's documented CSV (tests.helpers.FAKE_SMI_SAMPLES, written from
    its documentation: no GPU here)."""
    from perfgate.measure.telemetry import parse_smi_line
    from tests.helpers import FAKE_SMI_SAMPLES

    h100, a100 = (parse_smi_line(line) for line in FAKE_SMI_SAMPLES.splitlines())
    assert h100 == (0, "NVIDIA H100 80GB HBM3", [37.0, 1024.0, 250.0, 1980.0])
    assert a100 == (1, "NVIDIA A100-SXM4-80GB", [None, 2048.0, None, 1410.0])
    assert parse_smi_line("NVIDIA-SMI has failed because it couldn't communicate") is None


def test_the_smi_loop_gives_a_levels_telemetry_and_stops(tmp_path):
    """nvidia-smi's sampling loop (the fake, run here as the ssh launcher runs it there):
    each GPU's means, power integrated into energy, and the loop stopped."""
    from perfgate.measure.telemetry import SmiSampler, smi_command
    from tests.helpers import fake_nvidia_smi

    smi = fake_nvidia_smi(tmp_path / "bin")
    sampler = SmiSampler(["sh", "-c", f"exec {smi.parent}/{smi_command(0.1)}"])
    sampler.open()
    time.sleep(0.6)
    process = sampler._process
    telemetry = sampler.close()
    assert telemetry is not None and process is not None and process.poll() is not None
    h100, a100 = telemetry.gpus
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.samples >= 3
    assert h100.util_mean_pct == 37 and h100.power_mean_w == 250
    assert h100.sm_clock_mean_mhz == 1980 and h100.memory_used_max_mib == 1024
    assert h100.energy_j == pytest.approx(250 * 0.5, rel=0.5)  # ~0.5 s between samples' ends
    assert a100.power_mean_w is None and a100.energy_j is None and telemetry.energy_j is None


def test_an_smi_loop_that_cannot_run_gives_no_telemetry_and_says_why(tmp_path):
    from perfgate.measure.telemetry import SmiSampler

    sampler = SmiSampler(["sh", "-c", "echo 'sh: 1: nvidia-smi: not found'; exit 127"])
    sampler.open()
    time.sleep(0.2)
    assert sampler.close() is None
    assert sampler.problem == "sh: 1: nvidia-smi: not found"
