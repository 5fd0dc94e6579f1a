"""Helpers for tests that start real servers and run pytest as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from perfgate.launch.process import OWNER_ENV

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE_TOML = (ROOT / "profiles" / "llamacpp-gemma3-270m.toml").read_text()


def owned_server_pids() -> set[int]:
    """Pids of live processes that perfgate started (they carry PERFGATE_OWNER)."""
    pids = set()
    marker = f"{OWNER_ENV}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def profile_toml(
    replacements: dict[str, str], directory: Path, name: str = "llamacpp-gemma3-270m"
) -> Path:
    """A copy of the default profile with some lines replaced, written to directory/name.toml."""
    text = DEFAULT_PROFILE_TOML
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def run_pytest(*args: str, timeout: float = 600, **popen: object) -> subprocess.CompletedProcess:
    """Run pytest in the project root as a user would."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
