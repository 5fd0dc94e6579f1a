"""What hardware a locally launched server runs on (for provenance)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe_local_hardware() -> dict[str, str | int]:
    """CPU model and count of this machine."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count() or 0,
        "gpus": "none",
        "machine": platform.machine(),
    }
