"""A lost gate's output directory is removed by the next gate on that host, and only once
its owner has stopped: gone, or a zombie nobody reaped (a container init that never reaps)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from perfgate.fleet import GATE_DIR_PREFIX, OWNER_FILE, remove_orphaned_gate_dirs
from tests.helpers import process_state


def _gate_dir(parent: Path, name: str, owner: int) -> Path:
    directory = parent / f"{GATE_DIR_PREFIX}{name}"
    directory.mkdir()
    (directory / OWNER_FILE).write_text(str(owner))
    (directory / "gate.log").write_text("...")
    return directory


def test_directories_of_stopped_owners_go_and_of_running_ones_stay(tmp_path: Path) -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for: a zombie
    deadline = time.monotonic() + 30
    while process_state(zombie.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_state(zombie.pid) == "Z"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid no longer exists
    of_zombie = _gate_dir(tmp_path, "zombie", zombie.pid)
    of_gone = _gate_dir(tmp_path, "gone", gone.pid)
    of_running = _gate_dir(tmp_path, "running", os.getpid())
    being_created = tmp_path / f"{GATE_DIR_PREFIX}new"
    being_created.mkdir()  # no owner file yet
    try:
        removed = remove_orphaned_gate_dirs(tmp_path)
    finally:
        zombie.wait()
    assert sorted(removed) == sorted([of_zombie, of_gone])
    assert not of_zombie.exists() and not of_gone.exists()
    assert of_running.exists() and being_created.exists()
