"""Attach to a server that is already running (``--base-url``). Never stops it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from perfgate.engines import Engine
from perfgate.errors import ReadinessTimeout
from perfgate.launch.base import Clock, Sleep, probe_ready, read_log, tail

POLL_INTERVAL_S = 0.5


class AttachedBackend:
    """A server perfgate did not start: no process, read-only. Its log is read only where
    the user names the file (``--server-log``), for diagnosis."""

    owned = False

    def __init__(
        self, base_url: str, *, engine: Engine, model: str, log_path: Path | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.engine = engine
        self.model = model
        self.log_path = log_path
        self.argv: list[str] = []

    def logs(self) -> str:
        return read_log(self.log_path) if self.log_path else ""

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.logs(), lines)

    def alive(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        return None

    def wait_ready(
        self, timeout_s: float, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        deadline = clock() + timeout_s
        with httpx.Client(base_url=self.base_url, timeout=10.0) as client:
            while (why := probe_ready(client, self.engine, self.model)) is not None:
                if clock() >= deadline:
                    raise ReadinessTimeout(
                        f"server at {self.base_url} not ready after {timeout_s:.0f}s: {why}. "
                        "Check the URL given to --base-url.",
                        log_tail="",
                    )
                sleep(POLL_INTERVAL_S)

    def stop(self) -> None:
        """Nothing to do: perfgate does not stop what it did not start."""
