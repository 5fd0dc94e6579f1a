"""What hardware a locally launched server runs on (for provenance)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path


def local_gpus() -> list[str]:
    """GPU names from nvidia-smi on this machine ([] where there is none)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def hardware_key(hardware: dict[str, object]) -> str:
    """A short file-name-safe key: ``2x-nvidia-rtx-a6000`` or ``cpu-2x-amd-epyc-avx512``."""
    gpus = hardware.get("gpu_names") or []
    if isinstance(gpus, list) and gpus:
        name, count = str(gpus[0]), len(gpus)
        prefix = ""
    else:
        name, count = str(hardware.get("cpu", "unknown")), hardware.get("cpus", 0)
        name += f" {hardware.get('isa', '')}"  # the same CPU name can hide different SIMD
        prefix = "cpu-"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{prefix}{count}x-{slug}"


def cpu_isa(flags: set[str]) -> str:
    """The widest SIMD level llama.cpp-style kernels would use: avx512, avx2, or ''."""
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else ""


def describe_local_hardware() -> dict[str, object]:
    """CPU model and count, and GPUs, of this machine."""
    model = platform.processor() or "unknown"
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    gpus = local_gpus()
    desc: dict[str, object] = {
        "cpu": model,
        "cpus": os.cpu_count() or 0,
        "gpu_names": gpus,
        "gpus": len(gpus),
        "isa": cpu_isa(flags),
        "machine": platform.machine(),
    }
    desc["key"] = hardware_key(desc)
    return desc
