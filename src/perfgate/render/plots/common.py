"""What every plot shares: matplotlib (the optional extra), sizes, marks, and a run's
name, title and baseline run."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from perfgate.errors import PerfgateError
from perfgate.results.run import RunRecord, load_run

INSTALL_HINT = "pip install 'perfgate[plots]'"


DPI = 110


SIZE = (11.0, 6.2)  # inches: 1210 x 682 pixels at DPI


WIDE = (13.0, 6.2)  # two panels side by side


BASELINE_RUN_COLOR = "#7f7f7f"


# how a check's verdict is marked (only the verdicts worth a mark)
MARKS: dict[str, dict[str, Any]] = {
    "regressed": {"marker": "X", "color": "#d62728", "s": 120},
    "untrusted": {"marker": "X", "color": "#ff7f0e", "s": 120},
    "too-noisy": {"marker": "P", "color": "#9467bd", "s": 120},
    "missing": {"marker": "s", "facecolors": "none", "edgecolors": "#d62728", "s": 110},
    "improved": {"marker": "^", "facecolors": "none", "edgecolors": "#2ca02c", "s": 150},
}


MARK_LABELS = {
    "regressed": "regressed",
    "untrusted": "untrusted (timing error)",
    "too-noisy": "too noisy to decide",
    "missing": "missing (at baseline value)",
    "improved": "improved",
}


Scale = Literal["log", "linear"]


Nudge = Callable[[int | float], float]


class PlotsUnavailable(PerfgateError):
    """matplotlib is not installed."""


def require_matplotlib() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or a clear error saying
    how to install it."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable(
            f"plots need matplotlib, which is not installed: {INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def concurrency_scale(levels: Iterable[int | float]) -> Scale:
    """Log scale for a concurrency axis spanning a factor of 10 or more, else linear."""
    values = [c for c in levels if c > 0]
    if not values:
        return "linear"
    return "log" if max(values) / min(values) >= 10 else "linear"


def run_stem(path: Path) -> str:
    """A run file's name without ``.json`` or ``.json.gz``."""
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def run_title(run: RunRecord) -> str:
    """Profile, engine and version, hardware key and status of a run, on one line."""
    profile = run.profile.get("name", "unknown profile")
    hardware = run.hardware.get("key") or "unknown hardware"
    return f"{profile} · {run.engine} {run.engine_version} · {hardware} · {run.status.upper()}"


def run_failed(run: RunRecord) -> bool:
    """Whether the run failed: its status, or a check that fails the build."""
    return run.status == "failed" or any(c.failed for c in run.checks)


def load_baseline_run(run: RunRecord, root: Path) -> RunRecord | None:
    """The run the gating baseline was recorded from (``run.baseline.run_json`` relative to
    ``root``); None when the run names none or it is missing or unreadable."""
    if run.baseline is None or not run.baseline.run_json:
        return None
    path = Path(run.baseline.run_json)
    if not path.is_absolute():
        path = root / path
    try:
        return load_run(path)
    except (PerfgateError, OSError, ValueError, EOFError):
        return None
